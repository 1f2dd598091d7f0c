#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shimwatchctl as an admin uses it, against the running service on the private system bus
(tests/with-system-bus.sh) with real containerd-shim-runc-v2 + runc tasks and the real
polkitd: every command's human and --json output (the JSON parsed and its values checked
against the service's own properties), monitor, exit codes, and bash completion of live
task names. Output is TAP."""

import json
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402
from integration_test import (BUS_NAME, MANAGER, MANAGER_PATH, SHIM,  # noqa: E402
                              ShimwatchTestCase, process_dead, wait_until)
from gi.repository import GLib  # noqa: E402

SHIMWATCHCTL = os.environ.get("SHIMWATCHCTL")
COMPLETION = os.environ.get("SHIMWATCH_COMPLETION")
NOBODY, RULE_ALLOWED, RULE_DENIED = 65534, 1, 2


def snake(name):
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


class Lines:
    """A process's output, line by line, as it comes."""

    def __init__(self, stream):
        self.queue = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        for line in self.seen:
            if predicate(line):
                return line
        while True:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None:
                raise AssertionError(f"the output ended before {what}: {self.seen}")
            if line:
                self.seen.append(line)
                if predicate(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}: "
                                     f"{self.seen}")


def shared_ctl(directory):
    """A copy of shimwatchctl that any user may run, in directory (made searchable by all):
    the build directory may be in a private checkout (a clone under /root is 0700), which
    the other users the tests run it as cannot reach."""
    path = os.path.join(directory, "shimwatchctl")
    if not os.path.exists(path):
        os.chmod(directory, 0o755)
        shutil.copy(SHIMWATCHCTL, path)
        os.chmod(path, 0o755)
    return path


class CliTestCase(ShimwatchTestCase):
    def ctl(self, *args, uid=None, env=None, cwd=None, timeout=60):
        argv = [SHIMWATCHCTL] + list(args)
        if uid is not None:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    shared_ctl(self.dir)] + list(args)
        full_env = dict(os.environ, LC_ALL="C.UTF-8")
        full_env.pop("COLUMNS", None)
        full_env.update(env or {})
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=full_env, cwd=cwd)
        # whatever happens, never a raw GError dump
        self.assertNotIn("GDBus.Error", proc.stderr)
        self.assertNotIn("g_dbus", proc.stderr)
        return proc

    def ctl_ok(self, *args, **kwargs):
        proc = self.ctl(*args, **kwargs)
        self.assertEqual(proc.returncode, 0, f"{args}: {proc.stderr}")
        return proc.stdout

    def ctl_json(self, *args, **kwargs):
        return json.loads(self.ctl_ok("--json", *args, **kwargs))

    def all_properties(self, path):
        return self.call(path, "org.freedesktop.DBus.Properties", "GetAll", "(s)", (SHIM,))[0]

    def assert_task_json(self, document, path):
        """Every property of the object is in the document, under its snake_case name,
        with the service's value."""
        properties = self.all_properties(path)
        self.assertEqual(document["object_path"], path)
        for name, value in properties.items():
            if name in ("Responsive",):
                continue          # may change between the two reads
            self.assertIn(snake(name), document, name)
            self.assertEqual(document[snake(name)], value, name)

    def has_method(self, interface, method, path=MANAGER_PATH):
        xml = self.call(path, "org.freedesktop.DBus.Introspectable", "Introspect")[0]
        block = xml.split(f'<interface name="{interface}">', 1)[1].split("</interface>", 1)[0]
        return f'<method name="{method}">' in block or f'<method name="{method}"/>' in block


class ListAndStatusTests(CliTestCase):
    def test_list_and_status(self):
        web = self.create_task("default", "web")
        idle = self.create_task("default", "idle", options={"start": GLib.Variant("b", False)})
        other = self.create_task("other", "db")

        # human table: the default namespace only, one row per task, in order
        lines = self.ctl_ok("list").splitlines()
        self.assertEqual(lines[0].split(), ["NAMESPACE", "ID", "STATUS", "PID", "SHIM", "PID",
                                            "RUNTIME", "AGE", "OWNER"])
        rows = [line.split() for line in lines[1:]]
        self.assertEqual([r[:3] for r in rows], [["default", "idle", "created"],
                                                 ["default", "web", "running"]])
        self.assertEqual(rows[1][3], str(self.prop(web, "TaskPid")))
        self.assertEqual(rows[1][4], str(self.prop(web, "ShimPid")))
        self.assertEqual(rows[1][5], "io.containerd.runc.v2")
        self.assertRegex(rows[1][6], r"^\d+[smhd]$")

        everything = [line.split()[:2] for line in self.ctl_ok("list", "-A").splitlines()[1:]]
        self.assertEqual(everything, [["default", "idle"], ["default", "web"], ["other", "db"]])
        self.assertEqual(self.ctl_ok("list", "--all-namespaces", "--quiet").split(),
                         ["default/idle", "default/web", "other/db"])
        self.assertEqual(self.ctl_ok("list", "-n", "other", "-q").split(), ["other/db"])
        self.assertEqual(self.ctl_ok("list", "-n", "empty"), "No tasks in namespace “empty”.\n")

        # JSON: every property of every task, values as the service has them
        document = self.ctl_json("list", "--all-namespaces")
        self.assertEqual([(t["namespace"], t["id"]) for t in document["tasks"]],
                         [("default", "idle"), ("default", "web"), ("other", "db")])
        for task, path in zip(document["tasks"], (idle, web, other)):
            self.assert_task_json(task, path)
        self.assertEqual(document["tasks"][1]["status"], "running")
        self.assertEqual(document["tasks"][0]["status"], "created")
        self.assertEqual(self.ctl_json("list", "-n", "empty"), {"tasks": []})

        # a narrow terminal: every line fits, the essential columns stay
        for width in (60, 40):
            narrow = self.ctl_ok("list", "-A", env={"COLUMNS": str(width)}).splitlines()
            self.assertTrue(all(len(line) <= width for line in narrow), (width, narrow))
            self.assertEqual(narrow[0].split()[:3], ["NAMESPACE", "ID", "STATUS"])
            self.assertEqual(narrow[2].split()[:3], ["default", "web", "running"])
        # no colour when stdout is not a terminal; on a terminal the status is coloured,
        # unless NO_COLOR says otherwise
        self.assertNotIn("\033[", self.ctl_ok("list", "-A") + self.ctl_ok("status", "web"))
        on_tty = ["script", "-qec", f"{SHIMWATCHCTL} list -A", "/dev/null"]
        env = dict(os.environ, TERM="xterm", LC_ALL="C.UTF-8")
        coloured = subprocess.run(on_tty, capture_output=True, text=True, env=env, timeout=30)
        self.assertIn("\033[32mrunning\033[0m", coloured.stdout)
        self.assertIn("\033[1mNAMESPACE", coloured.stdout)
        plain = subprocess.run(on_tty, capture_output=True, text=True, timeout=30,
                               env=dict(env, NO_COLOR="1"))
        self.assertIn("running", plain.stdout)
        self.assertNotIn("\033[", plain.stdout)

        # status: every property, human and JSON; a bare id is in "default"
        human = self.ctl_ok("status", "default/web")
        # a bare id means "default" (the statistics of a 1.1 service move between calls)
        moving = ("Memory:", "CPU time:", "Processes:", "PIDs:", "Created:", "Started:")
        def steady(text):
            return [l for l in text.splitlines() if not l.strip().startswith(moving)]
        self.assertEqual(steady(human), steady(self.ctl_ok("status", "web")))
        self.assertTrue(human.startswith("● default/web - running\n"), human)
        fields = dict(re.match(r"^\s*([^:]+): (.*)$", line).groups()
                      for line in human.splitlines()[1:])
        self.assertEqual(fields["Object"], web)
        self.assertEqual(fields["Status"], "running")
        self.assertEqual(fields["Task PID"], str(self.prop(web, "TaskPid")))
        self.assertEqual(fields["Shim PID"], str(self.prop(web, "ShimPid")))
        self.assertEqual(fields["Runtime"], "io.containerd.runc.v2")
        self.assertEqual(fields["Task directory"], self.prop(web, "Bundle"))
        self.assertEqual(fields["Shim address"], self.prop(web, "Address"))
        self.assertRegex(fields["Created"], r"^\w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+; \d+s ago$")
        self.assertEqual(fields["Exited"], "never")
        self.assertNotIn("Exit status", fields)          # not before it exited
        document = self.ctl_json("status", "default/web")
        self.assert_task_json(document, web)
        self.assertEqual((document["namespace"], document["id"], document["status"]),
                         ("default", "web", "running"))


class LifecycleTests(CliTestCase):
    def test_run_start_kill_delete_reap(self):
        # run --no-start, JSON: the created task with all its properties
        document = self.ctl_json("run", "default/life", self.bundle, "--no-start")
        path = MANAGER_PATH + "/shims/default/life"
        self.assert_task_json(document, path)
        self.assertEqual(document["status"], "created")
        self.assertEqual(self.prop(path, "Status"), "created")
        labels_supported = "Labels" in self.all_properties(path)      # API 1.1

        # start, human
        pid = self.prop(path, "TaskPid")
        self.assertEqual(self.ctl_ok("start", "default/life"), f"Started default/life, pid {pid}.\n")
        self.assertEqual(self.prop(path, "Status"), "running")

        # kill, JSON, by name
        self.assertEqual(self.ctl_json("kill", "default/life", "--signal", "SIGKILL"),
                         {"namespace": "default", "id": "life", "signal": 9, "all": False})
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")
        self.assertTrue(process_dead(pid))
        fields = dict(re.match(r"^\s*([^:]+): (.*)$", line).groups()
                      for line in self.ctl_ok("status", "default/life").splitlines()[1:])
        self.assertEqual(fields["Exit status"], "137 (signal 9, Killed)")
        self.assertEqual(self.ctl_json("status", "default/life")["exit_status"], 137)

        # delete, human: the object goes, with one TaskDelete
        self.assertEqual(self.ctl_ok("delete", "default/life"),
                         "Deleted default/life: exit status 137 (signal 9, Killed).\n")
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 10, "removal")
        self.assertEqual(len(self.signals.named("TaskDelete", container_id="life")), 1)
        self.assertEqual(self.ctl("status", "default/life").returncode, 3)

        # run from a relative bundle path, human; kill with a number; delete, JSON
        labels = ["--label", "tier=web", "-l", "team=ops"] if labels_supported else []
        out = self.ctl_ok("run", "second", "bundle", *labels, cwd=self.dir)
        second = MANAGER_PATH + "/shims/default/second"
        if labels_supported:
            self.assertEqual(self.prop(second, "Labels"), {"tier": "web", "team": "ops"})
        pid = self.prop(second, "TaskPid")
        self.assertEqual(out, f"Created and started default/second, pid {pid}.\n")
        self.assertEqual(self.prop(second, "Status"), "running")
        self.assertEqual(self.ctl_ok("kill", "second", "-s", "9"), "Sent SIGKILL to default/second.\n")
        wait_until(lambda: self.prop(second, "Status") == "stopped", 10, "the task to stop")
        deleted = self.ctl_json("delete", "default/second")
        self.assertEqual((deleted["exit_status"], deleted["id"]), (137, "second"))
        wait_until(lambda: self.signals.named("TaskDelete", container_id="second"), 10,
                   "TaskDelete")
        exited_at = self.signals.named("TaskDelete", container_id="second")[0][2][6]
        self.assertEqual(deleted["exited_at"], exited_at)

        # reap a running task: its shim is killed and everything is cleaned
        third = self.create_task("default", "third")
        shim_pid, task_pid = self.prop(third, "ShimPid"), self.prop(third, "TaskPid")
        sock = self.socket_of(third)
        self.assertEqual(self.ctl_json("reap", "default/third", "--timeout", "5"),
                         {"namespace": "default", "id": "third", "exit_status": 137})
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=third), 10, "removal")
        self.assert_crash_sequence("default", "third", third, shim_pid, task_pid, 137)
        self.assert_nothing_left("default", "third", sock, task_pid)
        fourth = self.create_task("default", "fourth")
        self.assertEqual(self.ctl_ok("reap", "fourth"),
                         "Reaped default/fourth: exit status 137 (signal 9, Killed).\n")
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=fourth), 10, "removal")



class MonitorTests(CliTestCase):
    def start_monitor(self, *args):
        proc = subprocess.Popen([SHIMWATCHCTL, "monitor"] + list(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.addCleanup(self.stop_monitor, proc)
        err = Lines(proc.stderr)
        err.wait_for(lambda l: l.startswith("Monitoring"), 10, "monitor to be subscribed")
        return proc, Lines(proc.stdout)

    def stop_monitor(self, proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            self.assertEqual(proc.wait(10), 0, "monitor exits 0 when interrupted")

    def test_monitor_of_one_namespace(self):
        proc, out = self.start_monitor("-n", "other")
        self.create_task("default", "elsewhere")
        self.create_task("other", "here")
        out.wait_for(lambda l: "TaskStart" in l and "other/here" in l, 20, "other/here")
        self.stop_monitor(proc)
        self.assertTrue(all(" other/here" in l for l in out.seen), out.seen)

    def test_monitor_sees_the_crash_sequence(self):
        proc, out = self.start_monitor("--json")
        human, human_out = self.start_monitor("default/mon")
        bystander = self.create_task("default", "bystander")
        path = self.create_task("default", "mon")
        shim_pid, task_pid = self.prop(path, "ShimPid"), self.prop(path, "TaskPid")
        out.wait_for(lambda l: json.loads(l)["signal"] == "InterfacesAdded" and
                     json.loads(l)["object_path"] == path, 10, "InterfacesAdded")
        os.kill(shim_pid, signal.SIGKILL)
        out.wait_for(lambda l: json.loads(l)["signal"] == "InterfacesRemoved" and
                     json.loads(l)["object_path"] == path, 15, "InterfacesRemoved")
        events = [json.loads(l) for l in out.seen]
        for e in events:
            self.assertIsInstance(e["time"], int)
        mine = [e for e in events if e.get("id") == "mon" and e["signal"] != "PropertiesChanged"]
        kinds = [e["signal"] for e in mine]
        for kind in ("ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved",
                     "InterfacesAdded"):
            self.assertEqual(kinds.count(kind), 1, kinds)
        self.assertLess(kinds.index("InterfacesAdded"), kinds.index("ShimDisconnected"))
        crash = mine[-4:]
        self.assertEqual([e["signal"] for e in crash],
                         ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"])
        self.assertEqual(crash[0], dict(crash[0], object_path=path, namespace="default", id="mon",
                                        shim_pid=shim_pid))
        for e in crash[1:3]:
            self.assertEqual((e["object_path"], e["namespace"], e["container_id"], e["id"],
                              e["pid"], e["exit_status"]),
                             (path, "default", "mon", "mon", task_pid, 137))
        self.assertEqual(crash[1]["exited_at"], crash[2]["exited_at"])
        self.assertGreater(crash[1]["exited_at"], 0)
        changed = [e for e in events if e["signal"] == "PropertiesChanged" and e.get("id") == "mon"]
        self.assertTrue({"disconnected", "cleaning"} & {e.get("status") for e in changed}, changed)

        # human, filtered to one task: the same story, nothing about the bystander
        human_out.wait_for(lambda l: "InterfacesRemoved" in l, 15, "the human InterfacesRemoved")
        lines = [l for l in human_out.seen if "PropertiesChanged" not in l]
        for line in lines:
            self.assertRegex(line, r"^\d\d:\d\d:\d\d\.\d{3}  \S+\s+default/mon( |$)")
            self.assertNotIn("bystander", line)
        names = [l.split()[1] for l in lines]
        self.assertEqual(names[-4:], ["ShimDisconnected", "TaskExit", "TaskDelete",
                                      "InterfacesRemoved"])
        self.assertIn(f"shim_pid={shim_pid}", lines[-4])
        self.assertIn(f"pid={task_pid} exit_status=137", lines[-3])
        self.assertIsNone(human.poll())
        self.assertFalse(process_dead(self.prop(bystander, "TaskPid")))


class ExitCodeTests(CliTestCase):
    def test_unknown_task_and_bad_arguments(self):
        # 3: no such task, for every command that names one
        for args in (["status", "default/ghost"], ["start", "ghost"], ["stop", "ghost"],
                     ["kill", "ghost"], ["pause", "ghost"], ["resume", "ghost"],
                     ["delete", "ghost"], ["reap", "default/ghost"], ["logs", "ghost"],
                     ["--json", "status", "ghost"]):
            proc = self.ctl(*args)
            self.assertEqual(proc.returncode, 3, (args, proc.stderr))
            self.assertEqual(proc.stdout, "")
            self.assertIn(proc.stderr, ("shimwatchctl: no task default/ghost\n",
                                        "shimwatchctl: cannot reap default/ghost: no such task\n"),
                          args)

        # 2: usage errors, before anything is sent
        for args in (["frobnicate"], ["status"], ["status", "a", "b"], ["list", "--bogus"],
                     ["status", "bad id!"], ["status", "ns/"], ["kill", "--signal", "BOGUS", "x"],
                     ["run", "default/x"], ["stop", "--timeout", "-1", "x"],
                     ["run", "x", "bundle", "--label", "novalue"],
                     ["list", "-A", "-n", "default"], ["--address", "unix:path=/x", "--session"],
                     ["history", "-n", "-5"]):
            proc = self.ctl(*args)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertEqual(proc.stdout, "")
            self.assertTrue(proc.stderr.startswith("shimwatchctl"), proc.stderr)
            self.assertIn("--help", proc.stderr)
        # the service refuses an argument: a usage error too, with its reason
        proc = self.ctl("run", "default/nobundle", os.path.join(self.dir, "missing"))
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertTrue(proc.stderr.startswith(
            "shimwatchctl: cannot create default/nobundle: the service refused an argument: "),
            proc.stderr)
        self.assertEqual(len(proc.stderr.splitlines()), 1)

        # 1: anything else, in one sentence
        self.create_task("default", "busy")
        proc = self.ctl("run", "busy", self.bundle)
        self.assertEqual((proc.returncode, proc.stderr), (1, "shimwatchctl: cannot create "
                         "default/busy: a task with this namespace and id already exists\n"))
        proc = self.ctl("delete", "busy")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(proc.stderr.startswith("shimwatchctl: cannot delete default/busy: not "
                                               "possible in the task’s current state ("),
                        proc.stderr)
        self.assertEqual(self.prop(MANAGER_PATH + "/shims/default/busy", "Status"), "running")

        # help and version need no service
        self.assertEqual(self.ctl_ok("--version"), self.ctl_ok("list", "--version"))
        self.assertRegex(self.ctl_ok("--version"), r"^shimwatchctl \d+\.\d+\.\d+\n$")

        # the service is not running
        self.stop_daemon()
        proc = self.ctl("list")
        self.assertEqual((proc.returncode, proc.stderr), (1, "shimwatchctl: cannot list tasks: "
                         "shimwatchd is not running and could not be started\n"))

    def test_methods_of_a_newer_service(self):
        """Against a service without a 1.1 member, the command says so in one sentence."""
        path = self.create_task("default", "old")
        checks = [(SHIM, "Stop", ["stop", "old"], "cannot stop default/old"),
                  (SHIM, "Pause", ["pause", "old"], "cannot pause default/old"),
                  (SHIM, "Resume", ["resume", "old"], "cannot resume default/old"),
                  (SHIM, "OpenLog", ["logs", "old"], "cannot read the output of default/old"),
                  (MANAGER, "GetHistory", ["history"], "cannot read the history"),
                  (MANAGER, "GetMetrics", ["metrics"], "cannot read the metrics")]
        tried = 0
        for interface, method, args, what in checks:
            if self.has_method(interface, method, path if interface == SHIM else MANAGER_PATH):
                continue              # implemented: tested with the real thing
            tried += 1
            proc = self.ctl(*args)
            self.assertEqual((proc.returncode, proc.stderr),
                             (1, f"shimwatchctl: {what}: the service does not support {method} "
                                 "(too old?)\n"))
        print(f"# {tried} of {len(checks)} members not implemented by this service")
        self.assertEqual(self.prop(path, "Status"), "running")


class AuthorizationTests(CliTestCase):
    """Real polkitd with tests/50-test-shimwatch.rules: daemon (uid 1) is allowed by rule,
    bin (uid 2) is refused, nobody gets the policy's defaults (authentication)."""

    def test_not_authorized(self):
        path = self.create_task("default", "guarded")
        shim_pid = self.prop(path, "ShimPid")

        # nobody may authenticate, but no agent runs to ask: say so
        proc = self.ctl("kill", "default/guarded", uid=NOBODY)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertEqual(proc.stderr, "shimwatchctl: cannot signal default/guarded: "
                         "authentication is required, but no polkit authentication agent is "
                         "running to ask for a password. Run it as root, or start an agent "
                         "(for example pkttyagent) in this session\n")
        proc = self.ctl("--no-ask-password", "reap", "guarded", uid=NOBODY)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertIn("authentication is required: run it without --no-ask-password", proc.stderr)
        proc = self.ctl("run", "default/sneaky", self.bundle, uid=NOBODY)
        self.assertEqual(proc.returncode, 4, proc.stderr)

        # refused by a rule: not authorized, and no talk of agents
        for args in (["reap", "guarded"], ["kill", "guarded"], ["delete", "guarded"]):
            proc = self.ctl(*args, uid=RULE_DENIED)
            self.assertEqual(proc.returncode, 4, proc.stderr)
            self.assertTrue(proc.stderr.endswith(": not authorized: polkit does not allow it\n"),
                            proc.stderr)

        # nothing changed
        self.assertFalse(process_dead(shim_pid))
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertFalse(os.path.exists(self.task_dir("default", "sneaky")))

        # reading is open to everyone
        self.assertEqual(self.ctl_ok("list", "-q", uid=NOBODY), "default/guarded\n")
        self.assertEqual(self.ctl_json("status", "guarded", uid=NOBODY)["status"], "running")

        # allowed by a rule: works without any password
        self.assertEqual(self.ctl_ok("kill", "guarded", "--signal", "KILL", uid=RULE_ALLOWED),
                         "Sent SIGKILL to default/guarded.\n")
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")


class CompletionTests(CliTestCase):
    def complete(self, *words):
        """Run the completion function for a command line whose last word is being typed."""
        script = (
            "source /usr/share/bash-completion/bash_completion 2>/dev/null\n"
            f"source {COMPLETION}\n"
            f"PATH={os.path.dirname(SHIMWATCHCTL)}:$PATH\n"
            "COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 ))\n"
            "COMP_LINE=\"$*\"; COMP_POINT=${#COMP_LINE}\n"
            "_shimwatchctl shimwatchctl \"${COMP_WORDS[COMP_CWORD]}\" "
            "\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
            "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
        proc = subprocess.run(["bash", "-c", script, "bash", "shimwatchctl"] + list(words),
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return sorted(w for w in proc.stdout.split("\n") if w)

    def test_completion(self):
        self.create_task("default", "alpha")
        self.create_task("other", "beta")
        self.assertEqual(self.complete("st"), ["start", "status", "stop"])
        self.assertEqual(self.complete(""), sorted(
            ["list", "status", "monitor", "run", "start", "stop", "kill", "pause", "resume",
             "delete", "reap", "logs", "history", "label", "wait", "version", "help",
             "metrics"]))
        self.assertEqual(self.complete("help", "st"), ["start", "status", "stop"])
        self.assertEqual(self.complete("logs", "--t"), ["--tail=", "--timestamps"])
        self.assertEqual(self.complete("history", "-"), sorted(
            ["--lines=", "-N", "--json", "--system", "--session", "--address=", "--namespace=",
             "-n", "--no-ask-password", "--version", "--help"]))
        self.assertEqual(self.complete("wait", ""), ["default/alpha", "other/beta"])
        self.assertEqual(self.complete("label", "oth"), ["other/beta"])
        self.assertEqual(self.complete("-n", ""), ["default", "other"])
        self.assertEqual(self.complete("status", "-n", "o"), ["other"])
        self.assertEqual(self.complete("kill", "--s"), ["--session", "--signal=", "--system"])
        self.assertIn("KILL", self.complete("kill", "--signal", ""))
        # live task names from the running service
        self.assertEqual(self.complete("status", ""), ["default/alpha", "other/beta"])
        self.assertEqual(self.complete("--json", "reap", "oth"), ["other/beta"])
        self.assertEqual(self.complete("list", "-n", ""), ["default", "other"])
        self.assertEqual(self.complete("status", "default/alpha", ""), [])


class NewerApiTests(CliTestCase):
    """The commands that use the 1.1 members: stop, pause, resume, history."""

    def test_stop_pause_resume(self):
        path = self.create_task("default", "svc")
        pid = self.prop(path, "TaskPid")
        self.assertEqual(self.ctl_ok("pause", "svc"), "Paused default/svc.\n")
        self.assertEqual(self.prop(path, "Status"), "paused")
        self.assertEqual(self.ctl_json("status", "svc")["status"], "paused")
        self.assertEqual(self.ctl_json("resume", "default/svc"),
                         {"namespace": "default", "id": "svc", "status": "running"})
        self.assertEqual(self.prop(path, "Status"), "running")
        # resume of a running task: the service says BadState, the command one sentence
        proc = self.ctl("resume", "svc")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(proc.stderr.startswith("shimwatchctl: cannot resume default/svc: not "
                                               "possible in the task’s current state ("),
                        proc.stderr)
        self.assertEqual(self.ctl_json("pause", "svc"),
                         {"namespace": "default", "id": "svc", "status": "paused"})
        self.assertEqual(self.ctl_ok("resume", "svc"), "Resumed default/svc.\n")

        # sleep as a container's init ignores SIGTERM: SIGKILL after the timeout
        started = time.monotonic()
        self.assertEqual(self.ctl_ok("stop", "svc", "--timeout", "1"),
                         "Stopped default/svc: exit status 137 (signal 9, Killed).\n")
        self.assertGreaterEqual(time.monotonic() - started, 0.9)
        self.assertEqual(self.prop(path, "Status"), "stopped")
        self.assertTrue(process_dead(pid))

        # a task that exits on SIGTERM: its own status, at once
        polite = self.make_bundle("polite", ["sh", "-c", "trap 'exit 7' TERM; while :; do "
                                             "sleep 0.1; done"])
        self.create_task("default", "polite", polite)
        self.assertEqual(self.ctl_json("stop", "polite", "--timeout", "30"),
                         {"namespace": "default", "id": "polite", "exit_status": 7})
        self.assertEqual(self.ctl("stop", "ghost").returncode, 3)

    def test_history(self):
        path = self.create_task("default", "hist")
        pid = self.prop(path, "TaskPid")
        self.ctl_ok("kill", "hist", "--signal", "KILL")
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")
        self.ctl_ok("delete", "hist")
        self.create_task("default", "other")

        events = self.ctl_json("history", "default/hist")["events"]
        kinds = [e["event"] for e in events]
        self.assertEqual([k for k in kinds if k in ("create", "start", "exit", "delete")],
                         ["create", "start", "exit", "delete"], events)
        for e in events:
            self.assertEqual((e["namespace"], e["id"]), ("default", "hist"))
            self.assertIsInstance(e["time"], int)
        exit_event = next(e for e in events if e["event"] == "exit")
        self.assertEqual((exit_event["pid"], exit_event["exit_status"]), (pid, 137))
        self.assertEqual([e["time"] for e in events], sorted(e["time"] for e in events))

        everything = self.ctl_json("history")["events"]
        self.assertIn(("default", "other"), [(e["namespace"], e["id"]) for e in everything])
        self.assertEqual(len(self.ctl_json("history", "-N", "2")["events"]), 2)
        self.assertEqual(len(self.ctl_json("history", "--lines", "2")["events"]), 2)

        lines = self.ctl_ok("history", "hist").splitlines()
        self.assertEqual(lines[0].split(), ["TIME", "EVENT", "TASK", "PID", "STATUS", "REASON"])
        rows = [l for l in lines[1:] if " delete " in l]
        self.assertEqual(len(rows), 1, lines)
        self.assertIn("default/hist", rows[0])
        self.assertIn(f" {pid} ", rows[0])
        self.assertEqual(self.ctl_ok("history", "never/seen"), "No events.\n")


class LogsTests(CliTestCase):
    def test_logs_and_follow(self):
        script = ("i=0; while [ $i -lt 100000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); "
                  "sleep 0.2; done")
        bundle = self.make_bundle("chatty", ["sh", "-c", script])
        path = self.create_task("default", "chatty", bundle)

        follower = subprocess.Popen([SHIMWATCHCTL, "--json", "logs", "-f", "chatty"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.addCleanup(lambda: follower.poll() is None and follower.kill())
        out = Lines(follower.stdout)
        out.wait_for(lambda l: json.loads(l)["text"] == "out2", 20, "out2")
        # following: lines written after the command started keep coming
        out.wait_for(lambda l: json.loads(l)["text"] == "out6", 20, "out6")
        lines = [json.loads(l) for l in out.seen]
        for line in lines:
            self.assertEqual(set(line), {"time", "stream", "text"})
            self.assertRegex(line["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
            self.assertEqual(line["stream"], "stdout" if line["text"].startswith("out")
                             else "stderr")
        self.assertIn("err3", [l["text"] for l in lines])
        outs = [int(l["text"][3:]) for l in lines if l["stream"] == "stdout"]
        self.assertEqual(outs, list(range(outs[0], outs[-1] + 1)))

        # without -f: what was logged so far, stdout to stdout and stderr to stderr
        proc = self.ctl("logs", "chatty", "--tail", "4")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        shown = proc.stdout.splitlines() + proc.stderr.splitlines()
        self.assertEqual(len(shown), 4, shown)
        self.assertTrue(all(l.startswith("out") for l in proc.stdout.splitlines()))
        self.assertTrue(all(l.startswith("err") for l in proc.stderr.splitlines()))
        document = self.ctl_json("logs", "default/chatty", "--tail", "2")
        self.assertEqual((document["namespace"], document["id"], len(document["lines"])),
                         ("default", "chatty", 2))
        stamped = self.ctl_ok("logs", "chatty", "-N", "1", "--timestamps")
        self.assertRegex(stamped, r"^\d{4}-\d\d-\d\dT\S+ out\d+\n$|^$")

        # reading output needs authorization: nobody is refused
        proc = self.ctl("--no-ask-password", "logs", "chatty", uid=NOBODY)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertEqual(proc.stdout, "")

        # the task goes: the follower ends by itself
        self.ctl_ok("kill", "chatty", "--signal", "KILL")
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")
        self.ctl_ok("delete", "chatty")
        self.assertEqual(follower.wait(20), 0)


def on_pty(argv, until, timeout=20, env=None):
    """Run argv with stdout and stderr on a pseudo-terminal, as in an admin's terminal;
    return what the terminal got once `until` (a string, or a tuple of strings that must
    all be there) is in it (the process is then stopped)."""
    wanted = [w.encode() for w in ((until,) if isinstance(until, str) else until)]
    import pty
    master, slave = pty.openpty()
    full_env = dict(os.environ, LC_ALL="C.UTF-8", TERM="xterm", NO_COLOR="1")
    full_env.update(env or {})
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env=full_env)
    os.close(slave)
    got = b""
    deadline = time.monotonic() + timeout
    try:
        while not all(w in got for w in wanted) and time.monotonic() < deadline:
            import select
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:       # the process ended and closed the terminal
                    break
                if not chunk:
                    break
                got += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        os.close(master)
    return got.decode("utf-8", "replace")


class TextIsTextTests(CliTestCase):
    """Control characters in what the service says and in a task's output never reach the
    terminal as such: a label, a command argument, an error message or an output line
    that sets the window title, clears the screen or moves the cursor is shown escaped.
    Task output is passed through raw when it goes to a pipe."""

    TITLE = "\x1b]0;pwned\x07"
    OUTPUT = "before" + TITLE + "\x1b[2J\x1b[H\rafter\ttab"

    def hostile_task(self):
        script = ("printf 'before\\033]0;pwned\\007\\033[2J\\033[H\\rafter\\ttab\\n'; "
                  "printf 'err\\033[31mred\\n' >&2; exec sleep 1000")
        bundle = self.make_bundle("hostile", ["sh", "-c", script])
        config = os.path.join(bundle, "config.json")
        with open(config) as f:
            spec = json.load(f)
        spec["process"]["args"].append("arg\x1b[1mbold")      # $0 of the script
        with open(config, "w") as f:
            json.dump(spec, f)
        labels = {"title": self.TITLE, "multi": "line1\nline2\r"}
        path = self.create_task("default", "hostile", bundle,
                                {"labels": GLib.Variant("a{ss}", labels)})
        wait_until(lambda: b"after" in subprocess.run(
            [SHIMWATCHCTL, "logs", "hostile"], capture_output=True).stdout, 20, "the output")
        return path

    def assert_no_control(self, text):
        self.assertIsNone(re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text.replace("\r\n", "\n")),
                          repr(text))

    def test_status_and_label_escaped(self):
        self.hostile_task()
        for shown in (self.ctl_ok("status", "hostile"),
                      on_pty([SHIMWATCHCTL, "status", "hostile"], "PIDs")):
            self.assert_no_control(shown)
            self.assertIn("title=\\e]0;pwned\\a", shown)
            self.assertIn("multi=line1\\nline2\\r", shown)
            self.assertIn("arg\\e[1mbold", shown)
        # --json escapes as JSON does, and gives the very values
        document = self.ctl_json("status", "hostile")
        self.assertEqual(document["labels"]["title"], self.TITLE)

        out = self.ctl_ok("label", "hostile", "blink=\x1b[5m!", "multi-")
        self.assert_no_control(out)
        self.assertEqual(out, "Labels of default/hostile: blink=\\e[5m! title=\\e]0;pwned\\a\n")
        self.assertEqual(self.ctl_json("label", "hostile", "x=1")["labels"],
                         {"blink": "\x1b[5m!", "title": self.TITLE, "x": "1"})

        # the service's error quotes the key: shown escaped too
        proc = self.ctl("label", "hostile", "\x1b]0;key\x07=" + "v" * 5000)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assert_no_control(proc.stderr)
        self.assertIn("\\e]0;key\\a", proc.stderr)

    def test_logs_escaped_on_a_terminal_raw_through_a_pipe(self):
        self.hostile_task()
        # through a pipe: byte for byte, stdout and stderr alike
        proc = subprocess.run([SHIMWATCHCTL, "logs", "hostile"], capture_output=True,
                              timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, self.OUTPUT.encode() + b"\n")
        self.assertEqual(proc.stderr, b"err\x1b[31mred\n")
        # on a terminal: escaped, a tab still a tab; logs and logs -f alike
        for args in (["logs", "hostile"], ["logs", "-f", "hostile"]):
            # (the task's stdout and stderr reach the log through two pipes, in either
            # order: both lines are waited for)
            shown = on_pty([SHIMWATCHCTL] + args, ("red", "tab\r\n"))
            self.assert_no_control(shown.replace("\t", " "))
            self.assertIn("before\\e]0;pwned\\a\\e[2J\\e[H\\rafter\ttab\r\n", shown)
            self.assertIn("err\\e[31mred", shown)
        # stdout to a terminal, stderr to a pipe: each as its own stream wants
        import pty
        master, slave = pty.openpty()
        proc = subprocess.run([SHIMWATCHCTL, "logs", "hostile"], stdout=slave,
                              stderr=subprocess.PIPE, timeout=30)
        os.close(slave)
        shown = os.read(master, 65536).decode()
        os.close(master)
        self.assertIn("\\e]0;pwned\\a", shown)
        self.assertEqual(proc.stderr, b"err\x1b[31mred\n")


class NewCommandTests(CliTestCase):
    """label, wait, version, help, and -n as the namespace of every command."""

    def test_version(self):
        properties = self.call(MANAGER_PATH, "org.freedesktop.DBus.Properties", "GetAll",
                               "(s)", (MANAGER,))[0]
        fields = dict(re.match(r"^\s*([^:]+): (.*)$", line).groups()
                      for line in self.ctl_ok("version").splitlines())
        self.assertEqual(fields["Client"], fields["Service"])     # one build
        self.assertEqual(fields["Service"], properties["Version"])
        self.assertEqual(fields["Tasks"], str(properties["ShimCount"]))
        self.assertEqual(fields["Disconnects"], str(properties["DisconnectCount"]))
        self.assertEqual(fields["Cleanups"], str(properties["ReapCount"]))
        self.assertEqual(fields["Failed cleanups"], str(properties["CleanupFailureCount"]))
        # the settings in force, by "Section.Key" as in shimwatch.conf(5)
        self.assertEqual(fields["Service.RuntimeDirectory"], self.runtime_dir)
        self.assertEqual(fields["Service.CleanupTimeout"], str(self.cleanup_timeout))
        self.assertEqual(fields["Service.RuntimePath"], f"{self.runtimes};/usr/bin;/usr/sbin")
        self.assertEqual(fields["Service.MetricsDirectory"], self.metrics_dir)
        self.assertEqual(fields["Containerd.Enable"], "false")
        self.assertNotIn("Containerd.Address", fields)
        document = self.ctl_json("version")
        self.assertEqual(document["client_version"], properties["Version"])
        self.assertEqual(document["service"], {snake(k): v for k, v in properties.items()})
        self.create_task("default", "counted")
        self.assertEqual(self.ctl_json("version")["service"]["shim_count"],
                         properties["ShimCount"] + 1)
        # without a service: the client's version, and the failure
        proc = self.ctl("--address=unix:path=/nonexistent", "version")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(proc.stdout.strip().startswith("Client: "), proc.stdout)

    def test_label(self):
        path = self.create_task("default", "tagged", options={
            "labels": GLib.Variant("a{ss}", {"a": "1", "b": "2"})})
        self.assertEqual(self.ctl_ok("label", "tagged", "c=3", "a-", "b=x=y"),
                         "Labels of default/tagged: b=x=y c=3\n")
        self.assertEqual(self.prop(path, "Labels"), {"b": "x=y", "c": "3"})
        # in the order given; removing a key that is not there is no error
        self.assertEqual(self.ctl_json("label", "default/tagged", "d=4", "d-", "zz-"),
                         {"namespace": "default", "id": "tagged",
                          "labels": {"b": "x=y", "c": "3"}})
        self.assertEqual(self.ctl_ok("label", "tagged", "b-", "c-"),
                         "default/tagged has no labels.\n")
        self.assertEqual(self.prop(path, "Labels"), {})
        # bad input: a usage error, and nothing changes
        self.ctl_ok("label", "tagged", "keep=1")
        for args in (["tagged", "=v"], ["tagged", "ok=1", "novalue"], ["tagged", "-"],
                     ["tagged"]):
            proc = self.ctl("label", *args)
            self.assertEqual(proc.returncode, 2, (args, proc.stderr))
            self.assertIn("Run “shimwatchctl label --help”", proc.stderr)
        self.assertEqual(self.prop(path, "Labels"), {"keep": "1"})
        self.assertEqual(self.ctl("label", "ghost", "a=1").returncode, 3)
        proc = self.ctl("--no-ask-password", "label", "tagged", "a=1", uid=NOBODY)
        self.assertEqual(proc.returncode, 4, proc.stderr)
        self.assertEqual(self.prop(path, "Labels"), {"keep": "1"})

    def start_wait(self, *args):
        proc = subprocess.Popen([SHIMWATCHCTL] + list(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def test_wait(self):
        path = self.create_task("default", "waited")
        waiter = self.start_wait("wait", "waited")
        json_waiter = self.start_wait("--json", "wait", "waited")
        time.sleep(1)
        self.assertIsNone(waiter.poll(), waiter.stderr.read() if waiter.poll() else "")
        self.ctl_ok("kill", "waited", "--signal", "KILL")
        out, err = waiter.communicate(timeout=20)
        self.assertEqual((waiter.returncode, out, err),
                         (137, "default/waited exited: exit status 137 (signal 9, Killed).\n",
                          ""))
        document = json.loads(json_waiter.communicate(timeout=20)[0])
        self.assertEqual(document["exit_status"], 137)
        self.assertEqual(document["exited_at"], self.prop(path, "ExitedAt"))
        # exited already: at once
        started = time.monotonic()
        self.assertEqual(self.ctl("wait", "waited").returncode, 137)
        self.assertLess(time.monotonic() - started, 5)

        # its own exit status, 0 included
        for status in (7, 0):
            bundle = self.make_bundle(f"exits{status}", ["sh", "-c", f"sleep 1; exit {status}"])
            self.create_task("default", f"exits{status}", bundle)
            proc = self.ctl("wait", f"exits{status}")
            self.assertEqual(proc.returncode, status, proc.stderr)

        # deleted while waited for: the status it had, and it says so
        self.create_task("default", "doomed", options={"start": GLib.Variant("b", False)})
        waiter = self.start_wait("wait", "doomed")
        time.sleep(1)
        self.assertIsNone(waiter.poll())
        deleted = self.ctl_json("delete", "doomed")
        out, err = waiter.communicate(timeout=20)
        self.assertEqual(waiter.returncode, min(deleted["exit_status"], 255), err)
        self.assertIn("default/doomed exited", out)

        proc = self.ctl("wait", "ghost")
        self.assertEqual((proc.returncode, proc.stderr), (3, "shimwatchctl: no task default/ghost\n"))

    def test_wait_across_a_restart(self):
        path = self.create_task("default", "patient")
        waiter = self.start_wait("wait", "patient")
        time.sleep(1)
        # the service stops and comes back, the task lives on: the wait too
        self.stop_daemon()
        time.sleep(0.5)
        self.assertIsNone(waiter.poll())
        self.start_daemon()
        wait_until(lambda: self.call(MANAGER_PATH, MANAGER, "ListShims")[0] == [path], 15,
                   "the task after the restart")
        time.sleep(1)
        self.assertIsNone(waiter.poll())
        self.ctl_ok("kill", "patient", "--signal", "KILL")
        out, err = waiter.communicate(timeout=20)
        self.assertEqual((waiter.returncode, err), (137, ""))

    def test_namespace_option(self):
        self.create_task("default", "web")
        other = self.create_task("other", "db")
        pid = str(self.prop(other, "TaskPid"))
        # -n NS: the namespace of a bare id, before or after the command
        for args in (["status", "-n", "other", "db"], ["-n", "other", "status", "db"],
                     ["status", "--namespace=other", "other/db"]):
            self.assertIn(f"Task PID: {pid}", self.ctl_ok(*args), args)
        proc = self.ctl("status", "-n", "default", "other/db")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("“other/db” is in namespace “other”, but -n says “default”", proc.stderr)
        self.assertEqual(self.ctl("status", "-n", "bad/ns", "db").returncode, 2)
        self.assertEqual(self.ctl_ok("-n", "other", "list", "-q"), "other/db\n")
        events = self.ctl_json("history", "-n", "other")["events"]
        self.assertTrue(events)
        self.assertEqual({e["namespace"] for e in events}, {"other"})
        # the old tail: -n 5 names namespace "5" now, and the error says what became of it
        proc = self.ctl("logs", "-n", "5", "web")
        self.assertEqual(proc.returncode, 3)
        self.assertEqual(proc.stderr, "shimwatchctl: no task 5/web\n"
                                      "(-n names the namespace; the number of lines is -N)\n")

    def test_help(self):
        self.assertEqual(self.ctl_ok("help"), self.ctl_ok("--help"))
        commands = re.findall(r"^  (\w+)\s{2,}", self.ctl_ok("--help").split("Commands:")[1],
                              re.M)
        self.assertIn("wait", commands)
        for command in commands:
            self.assertEqual(self.ctl_ok("help", command), self.ctl_ok(command, "--help"))
        proc = self.ctl("help", "nope")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("unknown command “nope”", proc.stderr)


class BusyTests(CliTestCase):
    def test_busy_names_the_limit(self):
        """A limit that is hit is named, with its value (issue 29: 'the service is busy')."""
        path = self.create_task("default", "watched")
        fds = []
        self.addCleanup(lambda: [os.close(fd) for fd in fds])
        for _ in range(16):
            reply, fd_list = self.bus.call_with_unix_fd_list_sync(
                BUS_NAME, path, SHIM, "OpenLog",
                GLib.Variant("(a{sv})", ({"follow": GLib.Variant("b", True)},)),
                GLib.VariantType("(h)"), it.Gio.DBusCallFlags.NONE, 30000, None, None)
            fds.append(fd_list.get(reply.unpack()[0]))
        proc = self.ctl("logs", "-f", "watched")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("16 readers already, the limit of readers per task", proc.stderr)
        self.call(MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})", ("default", "watched", {}))


class FloodTests(CliTestCase):
    """`logs -f` on a task that writes as fast as it can (issue 29): the follower keeps up
    for as long as the task runs; one that does not read is dropped and told so."""

    LINE = "y" * 200

    def tearDown(self):
        try:
            self.reap_every_task()
        finally:
            super().tearDown()

    def start_flood(self):
        bundle = self.make_bundle("flood", ["busybox", "yes", self.LINE])
        return self.create_task("default", "flood", bundle)

    def follower(self, *args):
        proc = subprocess.Popen([SHIMWATCHCTL, "logs", "-f"] + list(args) + ["flood"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def test_follow_keeps_up_with_a_flood(self):
        path = self.start_flood()
        proc = self.follower("-N", "10")
        fd = proc.stdout.fileno()
        line = self.LINE.encode() + b"\n"
        left = b""
        total = 0
        per_second = []
        start = time.monotonic()
        while time.monotonic() - start < 6:
            second_end = min(start + len(per_second) + 1, start + 6)
            got = 0
            while time.monotonic() < second_end:
                ready, _, _ = select.select([fd], [], [], max(0, second_end - time.monotonic()))
                if not ready:
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.fail(f"logs -f ended while the task ran, exit status {proc.wait()}, "
                              f"after {total} bytes: {proc.stderr.read()!r}")
                got += len(chunk)
                # whole lines of the task's output, nothing else, nothing cut
                data = left + chunk
                cut = data.rfind(b"\n") + 1
                self.assertEqual(data[:cut], line * (cut // len(line)), data[:cut][-500:])
                left = data[cut:]
            per_second.append(got)
            total += got
        # it is still read: whatever comes next does not wait for the checks
        rest = threading.Thread(target=proc.stdout.read, daemon=True)
        rest.start()
        self.assertIsNone(proc.poll())
        # output all along, not a burst and then silence
        self.assertTrue(all(n > 0 for n in per_second), per_second)
        self.assertGreater(total, 1 << 20, per_second)
        # the task goes: the follower ends by itself, successfully
        self.call(path, SHIM, "Kill", "(ub)", (9, True))
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")
        self.call(path, SHIM, "Delete")
        self.assertEqual(proc.wait(20), 0, proc.stderr.read())
        rest.join(20)

    def test_a_follower_that_does_not_read_is_told(self):
        self.start_flood()
        proc = self.follower("-N", "1")
        # it does not read: its pipe, its buffer in the service, then it is dropped
        time.sleep(5)
        out = proc.stdout.read()
        self.assertEqual(proc.wait(20), 1)
        self.assertIn("stopped following default/flood", proc.stderr.read().decode())
        self.assertTrue(out.endswith(self.LINE.encode() + b"\n"), out[-300:])


class RunServiceTests(unittest.TestCase):
    """tools/run-service.sh: the service by hand on a private bus, for machines without a
    system bus or systemd."""

    def test_run_service_script(self):
        work = tempfile.mkdtemp(prefix="swrs-", dir="/tmp")
        self.addCleanup(shutil.rmtree, work, True)
        proc = subprocess.Popen(
            ["bash", os.path.join(it.SOURCE_DIR, "tools", "run-service.sh"),
             "--runtime-dir", os.path.join(work, "run"), "--state-dir", os.path.join(work, "state")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            env=dict(os.environ, SHIMWATCHD=it.SHIMWATCHD, LC_ALL="C.UTF-8",
                     SHIMWATCH_POLICY_FILE=os.environ["SHIMWATCH_POLICY_FILE"]))
        self.addCleanup(self._stop, proc)
        out = Lines(proc.stdout)
        err = Lines(proc.stderr)
        line = out.wait_for(lambda l: l.startswith("export DBUS_SYSTEM_BUS_ADDRESS="), 60,
                            "the address to export")
        address = line.split("=", 1)[1]
        self.assertNotEqual(address, os.environ["DBUS_SYSTEM_BUS_ADDRESS"])
        err.wait_for(lambda l: "Ctrl+C stops it" in l, 10, "the hint")

        # the service answers there, and the bus enforces the project's policy
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=address, LC_ALL="C.UTF-8")
        listed = subprocess.run([SHIMWATCHCTL, "--json", "list", "-A"], capture_output=True,
                                text=True, env=env, timeout=30)
        self.assertEqual((listed.returncode, json.loads(listed.stdout or "{}")),
                         (0, {"tasks": []}), listed.stderr)
        owned = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                "--clear-groups", "gdbus", "call", "--system", "--dest",
                                "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
                                "--method", "org.freedesktop.DBus.RequestName", BUS_NAME, "0"],
                               capture_output=True, text=True, env=env, timeout=30)
        self.assertIn("AccessDenied", owned.stderr)
        # polkit runs there: an unprivileged caller is asked for authentication
        refused = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                  "--clear-groups", shared_ctl(work), "--no-ask-password", "reap",
                                  "x"], capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(refused.returncode, 4, refused.stderr)

        # Ctrl+C stops the service, polkitd and the bus
        os.killpg(proc.pid, signal.SIGINT)
        self.assertIsNotNone(proc.wait(30))
        socket_path = address.split("unix:path=", 1)[1].split(",", 1)[0]
        wait_until(lambda: not os.path.exists(socket_path), 10, "the private bus to go")
        again = subprocess.run([SHIMWATCHCTL, "list"], capture_output=True, text=True, env=env,
                               timeout=30)
        self.assertEqual(again.returncode, 1)

    def _stop(self, proc):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    if not SHIMWATCHCTL:
        print("1..0 # SKIP run through meson test (SHIMWATCHCTL is not set)")
        sys.exit(0)
    sys.exit(it.run_tests(sys.modules[__name__]))
