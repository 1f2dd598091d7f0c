#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Companion mode: shimwatchd watching the shims of a real containerd. Each test runs a
private containerd (its own root, state, socket and config.toml under the test's
directory, CRI disabled, a namespace of its own, runc state and FIFOs under the test's
directory too), starts busybox containers with `ctr run -d --rootfs`, and watches
shimwatchd's signals on a private, policy-enforcing system bus with real polkitd, as in
integration_test.py, whose fixtures this file uses. Output is TAP."""

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402
import metrics_test  # noqa: E402
from integration_test import GLib  # noqa: E402

MANAGER_PATH, MANAGER, SHIM, ERROR = it.MANAGER_PATH, it.MANAGER, it.SHIM, it.ERROR
wait_until, process_dead, pump = it.wait_until, it.process_dead, it.pump
TASK_DIR = "io.containerd.runtime.v2.task"
CONTAINERD_PATH = MANAGER_PATH + "/containerd"


def containerd_skip_reason():
    for program in ("containerd", "ctr"):
        if not any(os.access(os.path.join(d, program), os.X_OK)
                   for d in os.environ.get("PATH", "").split(":") + ["/usr/bin", "/usr/sbin"]):
            return f"{program} is not installed (Debian package containerd)"
    return None


class PrivateContainerd:
    """A containerd of the test's own, in DIR/containerd; nothing of it is global but the
    shim sockets in /run/containerd/s, which the test hands to the cleanup guard."""

    def __init__(self, directory, namespace, cleanup_timeout=None):
        self.dir = os.path.join(directory, "containerd")
        self.namespace = namespace
        self.root = os.path.join(self.dir, "root")
        self.state = os.path.join(self.dir, "state")
        self.address = os.path.join(self.dir, "containerd.sock")
        self.config = os.path.join(self.dir, "config.toml")
        self.runc_root = os.path.join(self.dir, "runc")
        self.fifo_dir = os.path.join(self.dir, "fifo")
        self.log_path = os.path.join(self.dir, "containerd.log")
        self.rootfs = os.path.join(directory, "bundle", "rootfs")
        self.process = None
        os.makedirs(self.dir)
        timeouts = ""
        if cleanup_timeout is not None:
            timeouts = ('[timeouts]\n'
                        f'  "io.containerd.timeout.shim.cleanup" = "{cleanup_timeout}"\n')
        with open(self.config, "w") as f:
            f.write("version = 2\n"
                    f'root = "{self.root}"\n'
                    f'state = "{self.state}"\n'
                    'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                    f'[grpc]\n  address = "{self.address}"\n'
                    f'[ttrpc]\n  address = "{self.address}.ttrpc"\n'
                    f'[debug]\n  address = "{self.address}.debug"\n'
                    f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{self.dir}/opt"\n'
                    + timeouts)

    def start(self):
        self.process = subprocess.Popen(["containerd", "--config", self.config],
                                        stdout=open(self.log_path, "a"),
                                        stderr=subprocess.STDOUT)
        it.guard_pid(os.path.dirname(self.dir), self.process.pid)
        wait_until(lambda: self.answers(), 30, "containerd to serve its socket")

    def answers(self):
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"containerd exited with {self.process.returncode}")
        return subprocess.run(["ctr", "-a", self.address, "version"], capture_output=True,
                              timeout=30).returncode == 0

    def kill(self):
        self.process.kill()
        self.process.wait()
        self.process = None

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def ctr(self, *args, check=True):
        proc = subprocess.run(["ctr", "-a", self.address, "-n", self.namespace] + list(args),
                              capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    def run(self, task_id, annotations=()):
        extra = []
        for annotation in annotations:
            extra += ["--annotation", annotation]
        self.ctr("run", "-d", "--rootfs", "--runc-root", self.runc_root,
                 "--fifo-dir", self.fifo_dir, "--env", "PATH=/bin", *extra, self.rootfs,
                 task_id, "/bin/sleep", "100000")

    def socket_path(self, shim_id):
        """/run/containerd/s/<sha256(address/namespace/id)> (runtime/v2/shim SocketAddress)"""
        digest = hashlib.sha256(f"{self.address}/{self.namespace}/{shim_id}".encode())
        return "/run/containerd/s/" + digest.hexdigest()

    def bundle(self, task_id):
        return os.path.join(self.state, TASK_DIR, self.namespace, task_id)

    def work_dir(self, task_id):
        return os.path.join(self.root, TASK_DIR, self.namespace, task_id)

    def runc_state(self, task_id):
        return os.path.join(self.runc_root, self.namespace, task_id)

    def tasks(self):
        """ctr task ls: {id: status}"""
        out = self.ctr("task", "ls").stdout.splitlines()[1:]
        return {line.split()[0]: line.split()[2] for line in out if line.strip()}


class ContainerdTestCase(it.ShimwatchTestCase):
    grace = 2                  # [Containerd] Grace, seconds
    containerd_cleanup = None  # containerd's io.containerd.timeout.shim.cleanup

    def metric(self, name, **labels):
        text = self.call(MANAGER_PATH, MANAGER, "GetMetrics")[0]
        return metrics_test.value(metrics_test.parse(text), name, **labels)

    def setUp(self):
        self.namespace = f"swcd{os.getpid()}x{random.randrange(1 << 30):x}"
        self.shim_ids = []
        super().setUp()

    def start_daemon(self, **extra_env):
        if not hasattr(self, "ctd"):
            self.ctd = PrivateContainerd(self.dir, self.namespace, self.containerd_cleanup)
            self.ctd.start()
            with open(self.config, "a") as f:
                f.write("\n[Containerd]\nEnable=true\n"
                        f"StateDirectory={self.ctd.state}\n"
                        f"Address={self.ctd.address}\n"
                        f"Config={self.ctd.config}\n"
                        f"Namespaces={self.namespace}\n"
                        f"Grace={self.grace}\n")
        super().start_daemon(**extra_env)

    def _cleanup_leftovers(self):
        # the cleanup guard removes the shims' sockets too (they are outside the directory)
        self.sockets = getattr(self, "sockets", []) + [self.ctd.socket_path(i)
                                                       for i in self.shim_ids]
        super()._cleanup_leftovers()
        # runc removed each container's /<namespace>/<id> cgroup; the parent goes now
        it.remove_empty_cgroups("/" + self.namespace)

    # -- helpers -----------------------------------------------------------------------

    def run_task(self, task_id, annotations=(), shim_id=None):
        self.shim_ids.append(shim_id or task_id)
        self.ctd.run(task_id, annotations)

    def path_of(self, task_id):
        return f"{CONTAINERD_PATH}/{self.namespace}/{task_id}"

    def wait_watched(self, task_id, timeout=20):
        """The task's object, once shimwatch reached its shim (ShimPid and TaskPid known)."""
        path = self.path_of(task_id)

        def watched():
            try:
                (found,) = self.call(MANAGER_PATH, MANAGER, "GetShim", "(ss)",
                                     (self.namespace, task_id))
            except GLib.Error:
                return False
            return (found == path and self.prop(path, "ShimPid") > 0 and
                    self.prop(path, "TaskPid") > 0 and self.prop(path, "Status") == "running")
        wait_until(watched, timeout, f"{task_id} to be watched")
        return path

    def run_watched(self, ids, timeout=20):
        """Run the tasks, each once it is watched: {id: (ShimPid, TaskPid)}."""
        for task_id in ids:
            self.run_task(task_id)
        pids = {}
        for task_id in ids:
            path = self.wait_watched(task_id, timeout)
            pids[task_id] = (self.prop(path, "ShimPid"), self.prop(path, "TaskPid"))
        return pids

    def kill_shims(self, pids, timeout):
        """SIGKILL every shim of run_watched()'s pids at once; wait until each task is
        deleted."""
        for shim_pid, _ in pids.values():
            os.kill(shim_pid, signal.SIGKILL)
        for task_id in pids:
            self.wait_deleted(task_id, timeout)

    def sequence(self, task_id):
        return [m for m, _, _ in self.signals.for_task(self.namespace, task_id,
                                                       self.path_of(task_id))]

    def wait_deleted(self, task_id, timeout=30):
        wait_until(lambda: "InterfacesRemoved" in self.sequence(task_id), timeout,
                   f"TaskDelete and InterfacesRemoved of {task_id}")

    def one(self, member, task_id):
        found = [args for m, args, _ in self.signals.for_task(self.namespace, task_id)
                 if m == member]
        self.assertEqual(len(found), 1, f"{member} of {task_id}: {found}")
        return found[0]

    def daemon_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def assert_nothing_left(self, task_id, task_pid, shim_id=None):
        wait_until(lambda: process_dead(task_pid), 10, f"the container of {task_id} to die")
        for path in (self.ctd.bundle(task_id), self.ctd.work_dir(task_id),
                     self.ctd.runc_state(task_id), self.ctd.socket_path(shim_id or task_id)):
            self.assertFalse(os.path.lexists(path), f"{path} is left")
        hidden = os.path.join(os.path.dirname(self.ctd.bundle(task_id)), "." + task_id)
        self.assertFalse(os.path.lexists(hidden), f"{hidden} is left")


class DeathTests(ContainerdTestCase):
    def test_1_shim_killed_containerd_cleans_up(self):
        """containerd runs: it cleans up; shimwatch reports, exactly once, and runs no
        delete of its own."""
        self.run_task("web1")
        path = self.wait_watched("web1")
        self.assertEqual(self.prop(path, "Owner"), "containerd")
        self.assertEqual(self.prop(path, "Bundle"), self.ctd.bundle("web1"))
        self.assertEqual(self.metric("shimwatch_tasks_supervised", namespace=self.namespace,
                                     owner="containerd"), 1)
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        os.kill(shim_pid, signal.SIGKILL)
        self.wait_deleted("web1")
        # containerd's own cleanup is in the histogram, and is no takeover
        self.assertEqual(self.metric("shimwatch_task_delete_delay_seconds_count"), 1)
        self.assertEqual(self.metric("shimwatch_containerd_takeovers_total"), 0)
        self.assertEqual(self.metric("shimwatch_tasks_supervised", namespace=self.namespace,
                                     owner="containerd"), 0)
        pump(1.0)   # a late duplicate would show
        self.assertEqual(self.sequence("web1"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.one("ShimDisconnected", "web1"),
                         (path, self.namespace, "web1", shim_pid))
        exit_args = self.one("TaskExit", "web1")
        self.assertEqual(exit_args[:6], (path, self.namespace, "web1", "web1", task_pid, 137))
        self.assertEqual(self.one("TaskDelete", "web1")[5], 137)
        self.assert_nothing_left("web1", task_pid)
        log = self.daemon_log()
        self.assertIn("containerd cleaned up after the dead shim; no delete of ours ran", log)
        self.assertNotIn("taking over containerd's cleanup", log)
        self.assertNotIn("web1", self.ctd.tasks())
        self.ctd.ctr("container", "rm", "web1")

    def test_5_normal_task_rm_is_one_task_delete(self):
        """ctr task kill + ctr task rm: TaskExit and one TaskDelete, no ShimDisconnected,
        no takeover."""
        self.run_task("plain")
        path = self.wait_watched("plain")
        task_pid = self.prop(path, "TaskPid")
        self.ctd.ctr("task", "kill", "-s", "KILL", "plain")
        wait_until(lambda: "TaskExit" in self.sequence("plain"), 20, "TaskExit")
        self.assertEqual(self.prop(path, "Status"), "stopped")
        self.ctd.ctr("task", "rm", "plain")
        self.wait_deleted("plain")
        pump(1.0)
        self.assertEqual(self.sequence("plain"), ["TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.one("TaskExit", "plain")[4:6], (task_pid, 137))
        self.assertEqual(self.one("TaskDelete", "plain")[5], 137)
        self.assertNotIn("taking over", self.daemon_log())
        self.ctd.ctr("container", "rm", "plain")
        self.assert_nothing_left("plain", task_pid)


class TakeoverTests(ContainerdTestCase):
    def test_2_containerd_down_shimwatch_cleans_up(self):
        """containerd SIGKILLed, then the shim: shimwatch cleans up within Grace, and
        containerd restarts cleanly afterwards."""
        self.run_task("orphan")
        path = self.wait_watched("orphan")
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        self.ctd.kill()
        os.kill(shim_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        self.wait_deleted("orphan", timeout=30)
        self.assertLess(self.signals.named("TaskDelete", container_id="orphan")[0][3] - killed_at,
                        self.grace + 5)
        pump(0.5)
        self.assertEqual(self.sequence("orphan"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.one("TaskExit", "orphan")[4:6], (task_pid, 137))
        self.assert_nothing_left("orphan", task_pid)
        self.assertIn("taking over containerd's cleanup: containerd does not answer",
                      self.daemon_log())
        self.assertEqual(self.metric("shimwatch_containerd_takeovers_total"), 1)
        self.assertEqual(self.metric("shimwatch_reaps_total"), 1)
        # containerd comes back to a state it can load, and the container record goes
        self.ctd.start()
        self.assertNotIn("orphan", self.ctd.tasks())
        self.ctd.ctr("container", "rm", "orphan")
        self.assertNotIn("orphan", self.ctd.ctr("container", "ls", "-q").stdout.split())


# a `shim delete` that notes when it began and ended (one line each, appended) and takes a
# second, so that deletes running at once overlap for sure; anything else is the real shim
DELETE_SPY = """#!/bin/sh
for last; do :; done
[ "$last" = delete ] || exec {real} "$@"
echo "begin $$" >> {log}
sleep 1
{real} "$@"
status=$?
echo "end $$" >> {log}
exit $status
"""


class TakeoverLimitTests(ContainerdTestCase):
    extra_config = "CleanupConcurrency=1\n"
    cleanup_timeout = 10       # the spy's second and the real delete, on a busy machine

    def test_2_takeovers_wait_their_turn(self):
        """containerd down and three shims SIGKILLed: shimwatch takes over all three, but
        runs no more `shim delete` at once than CleanupConcurrency (1) allows."""
        ids = ["q1", "q2", "q3"]
        pids = self.run_watched(ids)
        self.ctd.kill()
        # the deletes go through the spy: it lies in RuntimePath, and the bundles name it
        # (containerd, which wrote them, is down)
        spy, spy_log = os.path.join(self.runtimes, "containerd-shim-runc-v2"), \
            os.path.join(self.dir, "deletes")
        for task_id in ids:
            binary_file = os.path.join(self.ctd.bundle(task_id), "shim-binary-path")
            with open(binary_file) as f:
                real = f.read().strip()
            with open(spy, "w") as f:
                f.write(DELETE_SPY.format(real=real, log=spy_log))
            os.chmod(spy, 0o755)
            with open(binary_file, "w") as f:
                f.write(spy)
        self.kill_shims(pids, timeout=60)
        pump(0.5)
        for task_id in ids:
            self.assertEqual(self.sequence(task_id), ["ShimDisconnected", "TaskExit", "TaskDelete",
                                                      "InterfacesRemoved"], task_id)
            self.assertEqual(self.one("TaskExit", task_id)[4:6], (pids[task_id][1], 137))
            self.assert_nothing_left(task_id, pids[task_id][1])
        with open(spy_log) as f:
            lines = f.read().split()[0::2]
        self.assertEqual(lines.count("begin"), 3, lines)
        running, most = 0, 0
        for what in lines:
            running += 1 if what == "begin" else -1
            most = max(most, running)
        self.assertEqual(most, 1, f"shim deletes at once: {most} ({lines})")
        self.assertEqual(self.daemon_log().count(
            "taking over containerd's cleanup: containerd does not answer"), 3)


class DeadlineTests(ContainerdTestCase):
    containerd_cleanup = "1ms"
    grace = 1

    def test_3_containerd_misses_its_deadline(self):
        """containerd's cleanup times out (1ms): it publishes 255 and leaks; shimwatch
        finishes the job after the deadline plus Grace."""
        self.run_task("late")
        path = self.wait_watched("late")
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        os.kill(shim_pid, signal.SIGKILL)
        self.wait_deleted("late", timeout=30)
        pump(0.5)
        self.assertEqual(self.sequence("late"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.one("TaskExit", "late")[4:6], (task_pid, 137))
        self.assert_nothing_left("late", task_pid)
        self.assertIn("taking over containerd's cleanup: the bundle is still there",
                      self.daemon_log())
        self.ctd.ctr("container", "rm", "late")


class ScaleTests(ContainerdTestCase):
    def test_4_fifty_shims_killed_at_once(self):
        """50 containerd shims SIGKILLed at once: 50 of each signal, nothing left, whoever
        cleaned up (containerd, or shimwatch where containerd missed its deadline)."""
        ids = [f"m{i}" for i in range(50)]
        pids = self.run_watched(ids, timeout=60)
        self.kill_shims(pids, timeout=120)
        pump(1.0)
        for task_id in ids:
            self.log_focus = f"{self.namespace}/{task_id}"
            self.assertEqual(self.sequence(task_id), ["ShimDisconnected", "TaskExit", "TaskDelete",
                                                      "InterfacesRemoved"], task_id)
            self.assertEqual(self.one("ShimDisconnected", task_id)[3], pids[task_id][0])
        for member in ("ShimDisconnected", "TaskExit", "TaskDelete"):
            self.assertEqual(len([e for e in self.signals.named(member)
                                  if e[2][1] == self.namespace]), 50, member)
        for task_id in ids:
            self.assert_nothing_left(task_id, pids[task_id][1])
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims")[0], [])


class GroupTests(ContainerdTestCase):
    def test_6_grouped_shim_reports_every_task(self):
        """Two tasks in one shim (io.containerd.runc.v2.group): one socket; killing the
        shim reports both."""
        group = "io.containerd.runc.v2.group=pod1"
        self.run_task("g1", [group], shim_id="pod1")
        self.run_task("g2", [group], shim_id="pod1")
        first, second = self.wait_watched("g1"), self.wait_watched("g2")
        shim_pid = self.prop(first, "ShimPid")
        self.assertEqual(self.prop(second, "ShimPid"), shim_pid)
        self.assertEqual(self.prop(first, "Address"), self.prop(second, "Address"))
        self.assertEqual(self.prop(first, "Address"), "unix://" + self.ctd.socket_path("pod1"))
        task_pids = {t: self.prop(p, "TaskPid") for t, p in (("g1", first), ("g2", second))}
        os.kill(shim_pid, signal.SIGKILL)
        for task_id in ("g1", "g2"):
            self.wait_deleted(task_id)
        pump(1.0)
        for task_id in ("g1", "g2"):
            self.assertEqual(self.sequence(task_id), ["ShimDisconnected", "TaskExit", "TaskDelete",
                                                      "InterfacesRemoved"], task_id)
            self.assertEqual(self.one("ShimDisconnected", task_id)[3], shim_pid)
            self.assertEqual(self.one("TaskExit", task_id)[4:6], (task_pids[task_id], 137))
            self.assert_nothing_left(task_id, task_pids[task_id], shim_id="pod1")


class RestartTests(ContainerdTestCase):
    def test_7_restart_rediscovers_without_duplicates(self):
        """shimwatchd SIGKILLed and started again while containerd's shims run: the tasks
        are found again with no signal; an exit while it was down is reported once, and a
        later death too."""
        for task_id in ("r1", "r2"):
            self.run_task(task_id)
        paths = {t: self.wait_watched(t) for t in ("r1", "r2")}
        shim_pid = self.prop(paths["r1"], "ShimPid")
        r2_pid = self.prop(paths["r2"], "TaskPid")
        self.kill_daemon()
        self.ctd.ctr("task", "kill", "-s", "KILL", "r2")
        wait_until(lambda: process_dead(r2_pid), 10, "r2 to exit")
        self.start_daemon()
        self.wait_watched("r1")
        wait_until(lambda: "TaskExit" in self.sequence("r2"), 20, "r2's TaskExit")
        self.assertEqual(self.prop(paths["r2"], "Status"), "stopped")
        self.assertEqual(self.sequence("r1"), [])
        self.assertEqual(self.one("TaskExit", "r2")[4:6], (r2_pid, 137))
        # once more: nothing sent twice
        self.stop_daemon()
        self.start_daemon()
        self.wait_watched("r1")
        pump(1.5)
        self.assertEqual(self.sequence("r1"), [])
        self.assertEqual(self.sequence("r2"), ["TaskExit"])
        os.kill(shim_pid, signal.SIGKILL)
        self.wait_deleted("r1")
        self.ctd.ctr("task", "rm", "r2")
        self.wait_deleted("r2")
        pump(1.0)
        self.assertEqual(self.sequence("r1"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.sequence("r2"), ["TaskExit", "TaskDelete", "InterfacesRemoved"])


class RestartDuringCleanupTests(ContainerdTestCase):
    containerd_cleanup = "1ms"
    grace = 4

    def test_7_restart_between_disconnect_and_takeover(self):
        """shimwatchd SIGKILLed after ShimDisconnected, while it waits out containerd's
        deadline: the restarted service finishes the takeover and sends TaskExit and
        TaskDelete once, and no second ShimDisconnected."""
        self.run_task("crash1")
        path = self.wait_watched("crash1")
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: "ShimDisconnected" in self.sequence("crash1"), 15, "ShimDisconnected")
        self.kill_daemon()
        # containerd missed its 1ms deadline and leaked; nothing has taken over yet
        self.assertTrue(os.path.isdir(self.ctd.bundle("crash1")))
        self.assertFalse(process_dead(task_pid))
        self.start_daemon()
        self.wait_deleted("crash1", timeout=30)
        pump(1.0)
        self.assertEqual(self.sequence("crash1"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(self.one("TaskExit", "crash1")[4:6], (task_pid, 137))
        self.assert_nothing_left("crash1", task_pid)
        self.ctd.ctr("container", "rm", "crash1")

class OwnershipTests(ContainerdTestCase):
    NOBODY, RULE_DENIED = 65534, 2

    def test_8_read_only_and_polkit_gated_reap(self):
        """Mutating methods give BadState, logs NotSupported; Reap needs org.shimwatch.reap,
        kills the shim and lets containerd clean up."""
        self.run_task("owned")
        path = self.wait_watched("owned")
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        for method, signature, args in (("Start", None, None), ("Kill", "(ub)", (9, False)),
                                        ("Delete", None, None), ("Stop", "(u)", (1,)),
                                        ("Pause", None, None), ("Resume", None, None),
                                        ("SetLabels", "(a{ss})", ({"a": "b"},))):
            error = self.assert_dbus_error("BadState", self.call, path, SHIM, method, signature,
                                           args)
            self.assertIn("owned by containerd", error.message)
        for method in ("ReadLog", "OpenLog"):
            self.assert_dbus_error("NotSupported", self.call, path, SHIM, method, "(a{sv})", ({},))
        pids = self.call(path, SHIM, "ListPids")[0]
        self.assertIn(task_pid, pids)
        (stats,) = self.call(path, SHIM, "GetStats")
        self.assertGreaterEqual(stats["pids_current"], 1)
        self.assertGreater(stats["memory_current"], 0)
        self.assertTrue(self.prop(path, "CgroupPath").endswith(f"/{self.namespace}/owned"),
                        self.prop(path, "CgroupPath"))
        # nobody may reap it without authorization; nothing changes
        for uid, name in ((self.NOBODY, "NotAuthorizedCanObtain"),
                          (self.RULE_DENIED, "NotAuthorized")):
            _, _, error = it.call_as(uid, MANAGER_PATH, MANAGER + ".Reap", self.namespace,
                                     "owned", "{}")
            self.assertEqual(error, ERROR + name)
        self.assertFalse(process_dead(shim_pid))
        self.assertEqual(self.prop(path, "Status"), "running")
        # root may: the shim is killed and containerd cleans up, shimwatch reports
        status = self.call(MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})",
                           (self.namespace, "owned", {"owner": GLib.Variant("s", "containerd")}))
        self.assertEqual(status, (137,))
        wait_until(lambda: "InterfacesRemoved" in self.sequence("owned"), 10, "signals")
        self.assertEqual(self.sequence("owned"),
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assert_nothing_left("owned", task_pid)
        log = self.daemon_log()
        self.assertIn("Reap: killed the shim; containerd is left to clean up", log)
        self.assertNotIn("taking over", log)
        self.assert_dbus_error("NotFound", self.call, MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})",
                               (self.namespace, "owned", {"owner": GLib.Variant("s", "containerd")}))

if __name__ == "__main__":
    reason = containerd_skip_reason()
    if reason is not None:
        print(f"1..0 # SKIP {reason}")
        sys.exit(0)
    sys.exit(it.run_tests(sys.modules[__name__]))
