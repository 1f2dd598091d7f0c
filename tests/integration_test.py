#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shimwatchd as its users see it: a D-Bus client on a private, policy-enforcing system
bus (tests/with-system-bus.sh), the real containerd-shim-runc-v2 + runc, and
shimwatch-test-shim where a fault is needed. Output is TAP, one line per test."""

import errno
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BUS_NAME = "org.shimwatch.Shimwatch1"
MANAGER_PATH = "/org/shimwatch/Shimwatch1"
MANAGER = BUS_NAME + ".Manager"
SHIM = BUS_NAME + ".Shim"
ERROR = BUS_NAME + ".Error."
TEST_RUNTIME = "io.shimwatch.test.v1"

SHIMWATCHD = os.environ.get("SHIMWATCHD")
TEST_SHIM = os.environ.get("SHIMWATCH_TEST_SHIM")
SOURCE_DIR = os.environ.get("SHIMWATCH_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), ".."))
WRAPPER = os.environ.get("SHIMWATCH_TEST_WRAPPER", "")


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (real shims, runc, a policy-enforcing system bus)"
    for program in ("containerd-shim-runc-v2", "runc", "busybox", "dbus-daemon"):
        if not any(os.access(os.path.join(d, program), os.X_OK)
                   for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/usr/bin"]):
            return f"{program} is not installed"
    if not SHIMWATCHD or not os.environ.get("DBUS_SYSTEM_BUS_ADDRESS"):
        return "run through meson test (SHIMWATCHD and a private bus are needed)"
    return None


def process_dead(pid):
    """Gone or a zombie: nothing of it runs any more."""
    if pid == 0:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def wait_until(predicate, timeout=5.0, what="condition"):
    context = GLib.MainContext.default()
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        while context.pending():
            context.iteration(False)
        time.sleep(0.002)


class Signals:
    """Every signal the service emits, in order, with the time it arrived."""

    def __init__(self, connection):
        self.connection = connection
        self.log = []
        self.id = connection.signal_subscribe(
            BUS_NAME, None, None, None, None, Gio.DBusSignalFlags.NONE, self._on_signal)

    def _on_signal(self, connection, sender, path, interface, member, parameters):
        self.log.append((member, path, parameters.unpack(), time.monotonic()))

    def close(self):
        self.connection.signal_unsubscribe(self.id)

    def named(self, member, **match):
        return [entry for entry in self.log if entry[0] == member and all(
            entry[2][self.ARGS[member].index(k)] == v for k, v in match.items())]

    def for_task(self, namespace, task_id, path=None):
        out = []
        for member, spath, args, when in self.log:
            if member in ("ShimDisconnected", "TaskExit", "TaskDelete", "TaskCreate",
                          "TaskStart", "TaskOOM"):
                if args[1] == namespace and args[2] == task_id:
                    out.append((member, args, when))
            elif member == "InterfacesRemoved" and path is not None and args[0] == path:
                out.append((member, args, when))
        return out

    ARGS = {
        "ShimDisconnected": ["shim", "namespace", "id", "shim_pid"],
        "TaskExit": ["shim", "namespace", "container_id", "id", "pid", "exit_status", "exited_at"],
        "TaskDelete": ["shim", "namespace", "container_id", "id", "pid", "exit_status",
                       "exited_at"],
        "TaskCreate": ["shim", "namespace", "container_id", "bundle", "pid"],
        "TaskStart": ["shim", "namespace", "container_id", "pid"],
        "InterfacesRemoved": ["path", "interfaces"],
        "InterfacesAdded": ["path", "interfaces"],
    }


class ShimwatchTestCase(unittest.TestCase):
    cleanup_timeout = 2

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="swit-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.runtime_dir = os.path.join(self.dir, "run")
        self.runtimes = os.path.join(self.dir, "runtimes")
        os.makedirs(self.runtimes)
        os.symlink(TEST_SHIM, os.path.join(self.runtimes, "containerd-shim-test-v1"))
        self.config = os.path.join(self.dir, "shimwatch.conf")
        with open(self.config, "w") as f:
            f.write("[Service]\n"
                    f"RuntimePath={self.runtimes};/usr/bin;/usr/sbin\n"
                    f"CleanupTimeout={self.cleanup_timeout}\n")
        self.log_path = os.path.join(self.dir, "shimwatchd.log")
        self.daemon = None
        self.start_daemon()
        self.bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
        self.signals = Signals(self.bus)
        self.bundle = self.make_bundle("bundle", ["sleep", "100000"])

    def tearDown(self):
        self.signals.close()
        self.stop_daemon()
        with open(self.log_path, errors="replace") as f:
            self.daemon_log_text = f.read()
        # shims outlive the service by design: kill what the test left behind
        for pid in self.processes_under(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for sock in getattr(self, "sockets", []):
            try:
                os.unlink(sock)
            except OSError:
                pass
        subprocess.run(["rm", "-rf", "--one-file-system", self.dir], check=False)

    # -- the service -------------------------------------------------------------------

    def start_daemon(self):
        argv = WRAPPER.split() + [SHIMWATCHD, "--runtime-dir", self.runtime_dir,
                                  "--config", self.config, "--verbose"]
        env = dict(os.environ, G_DEBUG="fatal-criticals")
        self.daemon = subprocess.Popen(argv, stdout=open(self.log_path, "a"),
                                       stderr=subprocess.STDOUT, env=env)
        bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)

        def owned():
            if self.daemon.poll() is not None:
                raise AssertionError(f"shimwatchd exited with {self.daemon.returncode}")
            reply = bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                  "org.freedesktop.DBus", "NameHasOwner",
                                  GLib.Variant("(s)", (BUS_NAME,)), None,
                                  Gio.DBusCallFlags.NONE, -1, None)
            return reply.unpack()[0]
        wait_until(owned, 10, "shimwatchd to own its name")

    def stop_daemon(self):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None

    # -- helpers -----------------------------------------------------------------------

    def make_bundle(self, name, args, annotations=None):
        path = os.path.join(self.dir, name)
        subprocess.run(["bash", os.path.join(SOURCE_DIR, "tools", "make-bundle.sh"), path] + args,
                       check=True, stdout=subprocess.DEVNULL)
        if annotations:
            import json
            config = os.path.join(path, "config.json")
            with open(config) as f:
                spec = json.load(f)
            spec.setdefault("annotations", {}).update(annotations)
            with open(config, "w") as f:
                json.dump(spec, f)
        return path

    def call(self, path, interface, method, signature=None, args=None, timeout=30000):
        parameters = GLib.Variant(signature, args) if signature else None
        reply = self.bus.call_sync(BUS_NAME, path, interface, method, parameters, None,
                                   Gio.DBusCallFlags.NONE, timeout, None)
        return reply.unpack() if reply is not None else None

    def create_task(self, namespace, task_id, bundle=None, options=None):
        (path,) = self.call(MANAGER_PATH, MANAGER, "CreateTask", "(sssa{sv})",
                            (namespace, task_id, bundle or self.bundle, options or {}))
        return path

    def prop(self, path, name, interface=SHIM):
        return self.call(path, "org.freedesktop.DBus.Properties", "Get", "(ss)",
                         (interface, name))[0]

    def assert_dbus_error(self, name, function, *args, **kwargs):
        with self.assertRaises(GLib.Error) as caught:
            function(*args, **kwargs)
        remote = Gio.DBusError.get_remote_error(caught.exception)
        self.assertEqual(remote, ERROR + name, caught.exception.message)
        return caught.exception

    def task_dir(self, namespace, task_id):
        return os.path.join(self.runtime_dir, "tasks", namespace, task_id)

    def runc_state(self, namespace, task_id):
        return os.path.join(self.runtime_dir, "runc", namespace, task_id)

    def socket_of(self, path):
        address = self.prop(path, "Address")
        self.assertTrue(address.startswith("unix://"), address)
        sock = address[len("unix://"):]
        self.sockets = getattr(self, "sockets", []) + [sock]
        return sock

    @staticmethod
    def processes_under(directory):
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cwd = os.readlink(f"/proc/{entry}/cwd")
                except OSError:
                    continue
                if cwd.startswith(directory + "/") and int(entry) != os.getpid():
                    pids.append(int(entry))
        return pids

    def assert_crash_sequence(self, namespace, task_id, path, shim_pid, task_pid, status,
                              exited_before=False):
        """Exactly one of each, in contract order. exited_before: the task's own TaskExit
        was forwarded before its shim died, so it comes first."""
        events = self.signals.for_task(namespace, task_id, path)
        crash = [e for e in events if e[0] in ("ShimDisconnected", "TaskExit", "TaskDelete",
                                               "InterfacesRemoved")]
        expected = ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"]
        if exited_before:
            expected = ["TaskExit", "ShimDisconnected", "TaskDelete", "InterfacesRemoved"]
        self.assertEqual([e[0] for e in crash], expected, events)
        if exited_before:
            crash = [crash[1], crash[0]] + crash[2:]
        self.assertEqual(crash[0][1], (path, namespace, task_id, shim_pid))
        self.assertEqual(crash[1][1][:6], (path, namespace, task_id, task_id, task_pid, status))
        self.assertEqual(crash[2][1][:6], (path, namespace, task_id, task_id, task_pid, status))
        self.assertGreater(crash[1][1][6], 0)
        self.assertEqual(crash[1][1][6], crash[2][1][6])
        return crash

    def assert_nothing_left(self, namespace, task_id, sock, task_pid):
        self.assertFalse(os.path.exists(self.task_dir(namespace, task_id)))
        self.assertFalse(os.path.exists(self.runc_state(namespace, task_id)))
        self.assertFalse(os.path.exists(sock), sock)
        self.assertTrue(process_dead(task_pid), f"container process {task_pid} still runs")


class SeedTests(ShimwatchTestCase):
    def test_shim_sigkill_cleans_up(self):
        """The regression test of the seed (containerd #13293)."""
        path = self.create_task("default", "web1")
        self.assertEqual(path, MANAGER_PATH + "/shims/default/web1")
        self.assertEqual(self.prop(path, "Status"), "running")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        self.assertTrue(os.path.isdir(self.task_dir("default", "web1")))
        self.assertTrue(os.path.isdir(self.runc_state("default", "web1")))
        self.assertFalse(process_dead(task_pid))

        killed_at = time.monotonic()
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 2.0,
                   "the object to be removed")
        crash = self.assert_crash_sequence("default", "web1", path, shim_pid, task_pid, 137)
        print(f"# SIGKILL -> TaskExit {1000 * (crash[1][2] - killed_at):.1f} ms, "
              f"-> TaskDelete {1000 * (crash[2][2] - killed_at):.1f} ms")
        self.assertLess(crash[2][2] - killed_at, 2.0)
        self.assert_nothing_left("default", "web1", sock, task_pid)
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims"), ([],))
        self.assertEqual(self.prop(MANAGER_PATH, "DisconnectCount", MANAGER), 1)
        self.assertEqual(self.prop(MANAGER_PATH, "ReapCount", MANAGER), 1)
        self.assertEqual(self.prop(MANAGER_PATH, "CleanupFailureCount", MANAGER), 0)
        self.assertEqual(self.prop(MANAGER_PATH, "ShimCount", MANAGER), 0)

    def test_exit_status_kept_when_shim_dies_later(self):
        """A task that exited on its own keeps its status; no second TaskExit."""
        bundle = self.make_bundle("exit3", ["sh", "-c", "sleep 0.3; exit 3"])
        path = self.create_task("default", "exits", bundle)
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        wait_until(lambda: self.signals.named("TaskExit", id="exits"), 5, "TaskExit(3)")
        self.assertEqual(self.prop(path, "Status"), "stopped")
        self.assertEqual(self.prop(path, "ExitStatus"), 3)

        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 3,
                   "the object to be removed")
        self.assert_crash_sequence("default", "exits", path, shim_pid, task_pid, 3,
                                   exited_before=True)
        exits = [e for e in self.signals.for_task("default", "exits") if e[0] == "TaskExit"]
        self.assertEqual(len(exits), 1)
        # the TaskExit came before the shim died, forwarded from the shim
        self.assertLess(exits[0][2], self.signals.named("ShimDisconnected")[0][3])
        self.assert_nothing_left("default", "exits", sock, task_pid)

    def test_cleanup_survives_the_creating_client(self):
        """The caller that created the task vanishes mid-call; cleanup still completes."""
        caller = subprocess.Popen(
            ["gdbus", "call", "--system", "--dest", BUS_NAME, "--object-path", MANAGER_PATH,
             "--method", MANAGER + ".CreateTask", "default", "orphan", self.bundle, "{}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.03)
        caller.kill()
        caller.wait()
        path = MANAGER_PATH + "/shims/default/orphan"
        wait_until(lambda: self.signals.named("InterfacesAdded", path=path), 10,
                   "the task to be created anyway")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 3,
                   "the object to be removed")
        self.assert_crash_sequence("default", "orphan", path, shim_pid, task_pid, 137)
        self.assert_nothing_left("default", "orphan", sock, task_pid)

    def test_twenty_shims_killed_at_once(self):
        ids = [f"many{i}" for i in range(20)]
        pending = {}

        def created(connection, result, task_id):
            try:
                pending[task_id] = connection.call_finish(result).unpack()[0]
            except GLib.Error as e:
                pending[task_id] = e
        for task_id in ids:
            self.bus.call(BUS_NAME, MANAGER_PATH, MANAGER, "CreateTask",
                          GLib.Variant("(sssa{sv})", ("bulk", task_id, self.bundle, {})),
                          None, Gio.DBusCallFlags.NONE, 60000, None, created, task_id)
        wait_until(lambda: len(pending) == len(ids), 60, "20 tasks to be created")
        for task_id, path in pending.items():
            self.assertIsInstance(path, str, f"{task_id}: {path}")
        info = {task_id: (path, self.prop(path, "ShimPid"), self.prop(path, "TaskPid"),
                          self.socket_of(path)) for task_id, path in pending.items()}
        self.assertEqual(self.prop(MANAGER_PATH, "ShimCount", MANAGER), 20)

        for path, shim_pid, task_pid, sock in info.values():
            os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: len(self.signals.named("TaskDelete")) >= 20 and
                   len(self.signals.named("InterfacesRemoved")) >= 20, 20,
                   "20 cleanups")
        for task_id, (path, shim_pid, task_pid, sock) in info.items():
            self.assert_crash_sequence("bulk", task_id, path, shim_pid, task_pid, 137)
            self.assert_nothing_left("bulk", task_id, sock, task_pid)
        for member in ("ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"):
            self.assertEqual(len(self.signals.named(member)), 20, member)
        self.assertEqual(self.prop(MANAGER_PATH, "ReapCount", MANAGER), 20)
        self.assertEqual(os.listdir(os.path.join(self.runtime_dir, "tasks")), [])


class NormalPathTests(ShimwatchTestCase):
    def test_kill_then_delete(self):
        path = self.create_task("default", "normal")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)

        self.assert_dbus_error("BadState", self.call, path, SHIM, "Delete")
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        wait_until(lambda: self.signals.named("TaskExit", id="normal"), 5, "TaskExit")
        wait_until(lambda: self.prop(path, "Status") == "stopped", 2, "Status stopped")
        status, exited_at = self.call(path, SHIM, "Delete")
        self.assertEqual(status, 137)
        self.assertGreater(exited_at, 0)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 3,
                   "the object to be removed")

        events = [e[0] for e in self.signals.for_task("default", "normal", path)]
        self.assertEqual(events, ["TaskCreate", "TaskStart", "TaskExit", "TaskDelete",
                                  "InterfacesRemoved"])
        delete = self.signals.named("TaskDelete")[0][2]
        self.assertEqual(delete[:6], (path, "default", "normal", "normal", task_pid, 137))
        self.assertEqual(self.signals.named("ShimDisconnected"), [])
        wait_until(lambda: process_dead(shim_pid), 3, "the shim to exit")
        self.assert_nothing_left("default", "normal", sock, task_pid)
        self.assertEqual(self.prop(MANAGER_PATH, "ReapCount", MANAGER), 0)

    def test_create_without_start(self):
        path = self.create_task("default", "idle", options={"start": GLib.Variant("b", False)})
        self.assertEqual(self.prop(path, "Status"), "created")
        pid = self.call(path, SHIM, "Start")[0]
        self.assertEqual(pid, self.prop(path, "TaskPid"))
        wait_until(lambda: self.prop(path, "Status") == "running", 2, "running")
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "GetShim", "(ss)", ("default", "idle")),
                         (path,))

    def test_sigterm_leaves_shims_running(self):
        path = self.create_task("default", "survivor")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        self.stop_daemon()
        self.assertIsNone(self.daemon)
        self.assertFalse(process_dead(shim_pid))
        self.assertFalse(process_dead(task_pid))
        self.assertTrue(os.path.isdir(self.task_dir("default", "survivor")))
        self.assertEqual([e for e in self.signals.log if e[0] in ("TaskExit", "TaskDelete")], [])


class FaultTests(ShimwatchTestCase):
    def test_delete_hangs_task_killed(self):
        """delete hangs past the timeout; the task (killed through its pidfd) is removed."""
        bundle = self.make_bundle("hang", ["sleep", "100000"],
                                  {"org.shimwatch.test.mode": "hang-delete"})
        path = self.create_task("faults", "hang", bundle,
                                {"runtime": GLib.Variant("s", TEST_RUNTIME)})
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        self.assertGreater(task_pid, 0)
        started = time.monotonic()
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path),
                   self.cleanup_timeout + 3, "the object to be removed")
        self.assertGreaterEqual(time.monotonic() - started, self.cleanup_timeout - 0.1)
        # the process was really killed, so its real status (SIGKILL) is reported
        self.assert_crash_sequence("faults", "hang", path, shim_pid, task_pid, 137)
        self.assertEqual(self.prop(MANAGER_PATH, "CleanupFailureCount", MANAGER), 1)
        self.assertTrue(process_dead(task_pid))
        self.assertFalse(os.path.exists(self.task_dir("faults", "hang")))

    def test_delete_hangs_exit_unknown(self):
        """delete hangs and no exit can be known: TaskExit/TaskDelete say 255."""
        bundle = self.make_bundle("hang2", ["sleep", "100000"],
                                  {"org.shimwatch.test.mode": "hang-delete-no-pid"})
        path = self.create_task("faults", "blind", bundle,
                                {"runtime": GLib.Variant("s", TEST_RUNTIME)})
        shim_pid = self.prop(path, "ShimPid")
        self.assertEqual(self.prop(path, "TaskPid"), 0)
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path),
                   self.cleanup_timeout + 3, "the object to be removed")
        self.assert_crash_sequence("faults", "blind", path, shim_pid, 0, 255)
        self.assertEqual(self.prop(MANAGER_PATH, "CleanupFailureCount", MANAGER), 1)
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims"), ([],))
        # the container may still run, so what delete needs stays for a later Reap
        self.assertTrue(os.path.isdir(self.task_dir("faults", "blind")))

    def test_failed_create_leaves_nothing(self):
        for mode, expected in (("fail-start", "ShimFailed"), ("hang-connect", "ShimFailed"),
                               ("garbage", "ShimFailed")):
            bundle = self.make_bundle(mode, ["sleep", "100000"],
                                      {"org.shimwatch.test.mode": mode})
            error = self.assert_dbus_error(expected, self.create_task, "faults", mode, bundle,
                                           {"runtime": GLib.Variant("s", TEST_RUNTIME)})
            print(f"# {mode}: {error.message}")
            self.assertFalse(os.path.exists(self.task_dir("faults", mode)), mode)
        wait_until(lambda: not self.processes_under(os.path.join(self.runtime_dir, "tasks")), 5,
                   "the failed shims to be gone")
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims"), ([],))
        self.assertEqual([e for e in self.signals.log if e[0] not in ("PropertiesChanged",)], [])


class BadInputTests(ShimwatchTestCase):
    def test_bad_input_changes_nothing(self):
        good = self.create_task("default", "keep")
        cases = [
            ("InvalidArgument", ("default", "a/b", self.bundle, {})),
            ("InvalidArgument", ("default", "..", self.bundle, {})),
            ("InvalidArgument", ("../etc", "x", self.bundle, {})),
            ("InvalidArgument", ("default", "", self.bundle, {})),
            ("InvalidArgument", ("default", "x" * 77, self.bundle, {})),
            ("InvalidArgument", ("default", "rel", "relative/bundle", {})),
            ("InvalidArgument", ("default", "nocfg", self.dir, {})),
            ("InvalidArgument", ("default", "rt", self.bundle,
                                 {"runtime": GLib.Variant("s", "io.containerd.nope.v9")})),
            ("InvalidArgument", ("default", "rtpath", self.bundle,
                                 {"runtime": GLib.Variant("s", "/bin/sh")})),
            ("InvalidArgument", ("default", "type1", self.bundle,
                                 {"start": GLib.Variant("s", "yes")})),
            ("InvalidArgument", ("default", "type2", self.bundle,
                                 {"runtime": GLib.Variant("u", 5)})),
            ("InvalidArgument", ("default", "unknown", self.bundle,
                                 {"privileged": GLib.Variant("b", True)})),
            ("AlreadyExists", ("default", "keep", self.bundle, {})),
        ]
        for name, args in cases:
            self.assert_dbus_error(name, self.call, MANAGER_PATH, MANAGER, "CreateTask",
                                   "(sssa{sv})", args)
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims"), ([good],))
        self.assertEqual(os.listdir(os.path.join(self.runtime_dir, "tasks")), ["default"])
        self.assertEqual(os.listdir(os.path.join(self.runtime_dir, "tasks", "default")), ["keep"])
        self.assertEqual(self.prop(good, "Status"), "running")

        self.assert_dbus_error("NotFound", self.call, MANAGER_PATH, MANAGER, "GetShim", "(ss)",
                               ("default", "nope"))
        self.assert_dbus_error("InvalidArgument", self.call, MANAGER_PATH, MANAGER, "GetShim",
                               "(ss)", ("default", "a/../b"))
        self.assert_dbus_error("NotFound", self.call, MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})",
                               ("default", "nope", {}))
        self.assert_dbus_error("InvalidArgument", self.call, MANAGER_PATH, MANAGER, "Reap",
                               "(ssa{sv})", ("default", "keep", {"timeout": GLib.Variant("s", "1")}))
        self.assert_dbus_error("InvalidArgument", self.call, good, SHIM, "Kill", "(ub)", (0, False))
        self.assert_dbus_error("InvalidArgument", self.call, good, SHIM, "Kill", "(ub)", (99, False))
        self.assertEqual(self.prop(good, "Status"), "running")
        self.assertEqual([e[0] for e in self.signals.log
                          if e[0] in ("ShimDisconnected", "TaskExit", "TaskDelete")], [])


class ReapTests(ShimwatchTestCase):
    def test_reap_live_task(self):
        path = self.create_task("default", "reaped")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        status = self.call(MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})", ("default", "reaped", {}))
        self.assertEqual(status, (137,))
        # the signals were sent before the reply; let them be dispatched
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 2, "signals")
        self.assert_crash_sequence("default", "reaped", path, shim_pid, task_pid, 137)
        self.assert_nothing_left("default", "reaped", sock, task_pid)


def call_as(uid, path, method, *args, interactive=False):
    """gdbus call as another user; returns (returncode, stdout, D-Bus error name or None)."""
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "gdbus", "call", "--system", "--dest", BUS_NAME, "--object-path", path,
            "--method", method] + list(args)
    if interactive:
        argv.insert(argv.index("call") + 1, "--interactive")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    name = None
    if proc.returncode != 0 and "GDBus.Error:" in proc.stderr:
        name = proc.stderr.split("GDBus.Error:", 1)[1].split(":", 1)[0].strip()
    return proc.returncode, proc.stdout, name


class PolkitTests(ShimwatchTestCase):
    """Real polkitd with the project's policy and tests/50-test-shimwatch.rules:
    daemon (uid 1) is allowed by rule, bin (uid 2) refused, nobody gets the defaults."""

    NOBODY, RULE_ALLOWED, RULE_DENIED = 65534, 1, 2

    def test_unprivileged_reap_is_refused_and_changes_nothing(self):
        path = self.create_task("default", "guarded")
        shim_pid = self.prop(path, "ShimPid")
        _, _, name = call_as(self.NOBODY, MANAGER_PATH, MANAGER + ".Reap", "default", "guarded",
                             "{}")
        self.assertEqual(name, ERROR + "NotAuthorizedCanObtain")
        _, _, name = call_as(self.RULE_DENIED, MANAGER_PATH, MANAGER + ".Reap", "default",
                             "guarded", "{}")
        self.assertEqual(name, ERROR + "NotAuthorized")
        for uid in (self.NOBODY, self.RULE_DENIED):
            _, _, name = call_as(uid, path, SHIM + ".Kill", "9", "false")
            self.assertIn(name, (ERROR + "NotAuthorized", ERROR + "NotAuthorizedCanObtain"))
            _, _, name = call_as(uid, MANAGER_PATH, MANAGER + ".CreateTask", "default", "sneaky",
                                 self.bundle, "{}")
            self.assertIn(name, (ERROR + "NotAuthorized", ERROR + "NotAuthorizedCanObtain"))
        # nothing changed: the shim runs, its object stays, nothing new exists
        self.assertFalse(process_dead(shim_pid))
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims"), ([path],))
        self.assertFalse(os.path.exists(self.task_dir("default", "sneaky")))
        self.assertEqual([e for e in self.signals.log
                          if e[0] in ("ShimDisconnected", "TaskExit", "TaskDelete")], [])

    def test_rule_allowed_user_may_reap(self):
        path = self.create_task("default", "byrule")
        shim_pid = self.prop(path, "ShimPid")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        rc, out, name = call_as(self.RULE_ALLOWED, MANAGER_PATH, MANAGER + ".Reap", "default",
                                "byrule", "{}")
        self.assertEqual((rc, name), (0, None), out)
        self.assertEqual(out.strip(), "(uint32 137,)")
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 2, "signals")
        self.assert_crash_sequence("default", "byrule", path, shim_pid, task_pid, 137)
        self.assert_nothing_left("default", "byrule", sock, task_pid)

    def test_read_only_access_is_open(self):
        path = self.create_task("default", "visible")
        for method, args in ((MANAGER + ".ListShims", ()),
                             (MANAGER + ".GetShim", ("default", "visible")),
                             ("org.freedesktop.DBus.ObjectManager.GetManagedObjects", ()),
                             ("org.freedesktop.DBus.Properties.GetAll", (MANAGER,)),
                             ("org.freedesktop.DBus.Introspectable.Introspect", ()),
                             ("org.freedesktop.DBus.Peer.Ping", ())):
            rc, out, name = call_as(self.NOBODY, MANAGER_PATH, method, *args)
            self.assertEqual((rc, name), (0, None), method)
        rc, out, _ = call_as(self.NOBODY, path, "org.freedesktop.DBus.Properties.Get", SHIM,
                             "Status")
        self.assertEqual(rc, 0)
        self.assertIn("running", out)

    def test_unprivileged_process_cannot_own_the_name(self):
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "gdbus", "call", "--system", "--dest", "org.freedesktop.DBus",
                               "--object-path", "/org/freedesktop/DBus", "--method",
                               "org.freedesktop.DBus.RequestName", BUS_NAME, "0"],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("org.freedesktop.DBus.Error.AccessDenied", proc.stderr)

    def test_other_interfaces_are_not_reachable(self):
        rc, _, name = call_as(self.NOBODY, MANAGER_PATH, "org.example.Nope.Method")
        self.assertNotEqual(rc, 0)
        self.assertEqual(name, "org.freedesktop.DBus.Error.AccessDenied")


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.number = 0

    def _line(self, test, ok, extra=""):
        self.number += 1
        print(f"{'ok' if ok else 'not ok'} {self.number} - {test.id()}{extra}", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(test, True)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(test, True, f" # SKIP {reason}")

    def _fail(self, test, err):
        for line in "".join(traceback.format_exception(*err)).splitlines():
            print(f"# {line}")
        log = getattr(test, "daemon_log_text", None)
        if log:
            print("# --- shimwatchd log ---")
            for line in log.splitlines()[-80:]:
                print(f"# {line}")
        self._line(test, False)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)


def run_tests(module):
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromModule(module)
    tests = []

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                flatten(t)
            else:
                tests.append(t)
    flatten(suite)
    if len(sys.argv) > 1:
        tests = [t for t in tests if any(a in t.id() for a in sys.argv[1:])]
    reason = skip_reason()
    print(f"1..{len(tests)}", flush=True)
    result = TapResult()
    for test in tests:
        if reason:
            result.addSkip(test, reason)
            continue
        test.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(run_tests(sys.modules[__name__]))
