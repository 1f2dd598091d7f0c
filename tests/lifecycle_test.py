#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What an admin sees of a task and does with it (API 1.1): its description (Owner,
BundleSource, Command, Labels, StartedAt), why it died (ExitReason, also for an OOM kill),
Stop/Pause/Resume, GetStats/ListPids, and the history and counters that outlive the
service. Real runc tasks on a private, policy-enforcing system bus with real polkitd, as in
integration_test.py, whose fixtures this file uses. Output is TAP."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402
from integration_test import GLib, Gio  # noqa: E402

MANAGER_PATH, MANAGER, SHIM, ERROR = it.MANAGER_PATH, it.MANAGER, it.SHIM, it.ERROR
wait_until, process_dead = it.wait_until, it.process_dead

MiB = 1024 * 1024


def proc_cgroup(pid, controller):
    """The v1 path of a controller (or the v2 path for "") of a process."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(",") or controllers == controller:
                return path
    return None


def freezer_state(pid):
    """FROZEN / THAWED from the task's cgroup (v1 freezer or v2 cgroup.freeze)."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        with open(f"/sys/fs/cgroup{proc_cgroup(pid, '')}/cgroup.freeze") as f:
            return "FROZEN" if f.read().strip() == "1" else "THAWED"
    with open(f"/sys/fs/cgroup/freezer{proc_cgroup(pid, 'freezer')}/freezer.state") as f:
        return f.read().strip()


def proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2]


class LifecycleTestCase(it.ShimwatchTestCase):
    def make_bundle(self, name, args, annotations=None, memory_limit=None, applets=()):
        path = super().make_bundle(name, args, annotations)
        for applet in applets:
            os.symlink("busybox", os.path.join(path, "rootfs", "bin", applet))
        if memory_limit:
            config = os.path.join(path, "config.json")
            with open(config) as f:
                spec = json.load(f)
            # no swap either: memory + swap is the same limit
            spec["linux"].setdefault("resources", {})["memory"] = {
                "limit": memory_limit, "swap": memory_limit}
            with open(config, "w") as f:
                json.dump(spec, f)
        return path

    def changes(self, path, name):
        """Every value a PropertiesChanged signal carried for a Shim property, in order."""
        return [e[2][1][name] for e in self.signals.log
                if e[0] == "PropertiesChanged" and e[1] == path and e[2][0] == SHIM
                and name in e[2][1]]

    def history(self, **options):
        variants = {k: GLib.Variant("u" if k == "limit" else "s", v) for k, v in options.items()}
        return self.call(MANAGER_PATH, MANAGER, "GetHistory", "(a{sv})", (variants,))[0]

    def wait_exit(self, task_id, timeout=15):
        wait_until(lambda: self.signals.named("TaskExit", container_id=task_id), timeout,
                   f"TaskExit of {task_id}")
        return self.signals.named("TaskExit", container_id=task_id)

    def delete(self, path):
        return self.call(path, SHIM, "Delete")


class DescriptionTests(LifecycleTestCase):
    def test_description_properties(self):
        path = self.create_task("default", "described",
                                options={"labels": GLib.Variant("a{ss}", {"app": "web",
                                                                          "tier": "front"})})
        self.assertEqual(self.prop(path, "Owner"), "shimwatch")
        self.assertEqual(self.prop(path, "BundleSource"), self.bundle)
        self.assertNotEqual(self.prop(path, "Bundle"), self.bundle)
        self.assertEqual(self.prop(path, "Command"), ["sleep", "100000"])
        self.assertEqual(self.prop(path, "Labels"), {"app": "web", "tier": "front"})
        self.assertEqual(self.prop(path, "ExitReason"), "")
        started = self.prop(path, "StartedAt")
        self.assertGreaterEqual(started, self.prop(path, "CreatedAt"))
        self.assertLess(abs(started - time.time() * 1e6), 60e6)

        # SetLabels replaces all, and says so through PropertiesChanged
        self.call(path, SHIM, "SetLabels", "(a{ss})", ({"app": "db"},))
        self.assertEqual(self.prop(path, "Labels"), {"app": "db"})
        wait_until(lambda: {"app": "db"} in self.changes(path, "Labels"), 10,
                   "PropertiesChanged with the new labels")
        # bad labels change nothing
        self.assert_dbus_error("InvalidArgument", self.call, path, SHIM, "SetLabels",
                               "(a{ss})", ({"": "x"},))
        self.assert_dbus_error("InvalidArgument", self.call, path, SHIM, "SetLabels",
                               "(a{ss})", ({"k": "v" * 5000},))
        self.assert_dbus_error("InvalidArgument", self.create_task, "default", "badlabels",
                               options={"labels": GLib.Variant("as", ["a"])})
        self.assertFalse(os.path.exists(self.task_dir("default", "badlabels")))
        self.assertEqual(self.prop(path, "Labels"), {"app": "db"})

        # all of it is in the task record: a restarted service shows the same
        before = {n: self.prop(path, n) for n in ("Owner", "BundleSource", "Command", "Labels",
                                                  "StartedAt", "ExitReason")}
        self.stop_daemon()
        self.start_daemon()
        wait_until(lambda: self.call(MANAGER_PATH, MANAGER, "ListShims")[0] == [path], 15,
                   "the task after the restart")
        self.assertEqual({n: self.prop(path, n) for n in before}, before)
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        self.wait_exit("described")
        self.delete(path)

    def test_created_task_has_no_start_time(self):
        path = self.create_task("default", "notyet",
                                options={"start": GLib.Variant("b", False)})
        self.assertEqual(self.prop(path, "StartedAt"), 0)
        (pid,) = self.call(path, SHIM, "Start")
        self.assertGreater(self.prop(path, "StartedAt"), 0)
        self.assertEqual(self.prop(path, "TaskPid"), pid)
        # a running task cannot be started again: BadState, not the runtime's words
        err = self.assert_dbus_error("BadState", self.call, path, SHIM, "Start")
        self.assertIn("running", err.message)
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        self.wait_exit("notyet")
        self.delete(path)


class ExitReasonTests(LifecycleTestCase):
    def test_own_exit(self):
        bundle = self.make_bundle("exit3", ["sh", "-c", "exit 3"])
        path = self.create_task("default", "exit3", bundle)
        (exit_event,) = self.wait_exit("exit3")
        self.assertEqual(exit_event[2][5], 3)
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "stopped")
        self.assertEqual(self.prop(path, "ExitReason"), "exited")
        self.assertEqual(self.prop(path, "ExitStatus"), 3)
        self.assertEqual(self.call(path, SHIM, "ListPids"), ([],))
        self.assert_dbus_error("BadState", self.call, path, SHIM, "GetStats")
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Kill", "(ub)", (9, False))
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Pause")
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Stop", "(u)", (1,))
        self.delete(path)

    def test_oom_kill(self):
        bundle = self.make_bundle("hog", ["dd", "if=/dev/zero", "of=/dev/null", f"bs={64 * MiB}",
                                          "count=1"], memory_limit=16 * MiB, applets=("dd",))
        path = self.create_task("default", "hog", bundle)
        (exit_event,) = self.wait_exit("hog")
        self.assertEqual(exit_event[2][5], 137)
        wait_until(lambda: [e for e in self.signals.log
                            if e[0] == "TaskOOM" and e[2][1:] == ("default", "hog")], 10,
                   "TaskOOM")
        wait_until(lambda: self.prop(path, "ExitReason") == "oom-killed", 10,
                   "ExitReason oom-killed")
        self.assertEqual(self.prop(path, "ExitStatus"), 137)
        self.assertIn("oom-killed", self.changes(path, "ExitReason"))
        events = [e["event"] for e in self.history(id="hog")]
        self.assertIn("oom", events)
        (exit_entry,) = [e for e in self.history(id="hog") if e["event"] == "exit"]
        self.assertEqual(exit_entry["exit_status"], 137)
        self.delete(path)

    def test_memory_limit_in_stats(self):
        bundle = self.make_bundle("limited", ["sleep", "100000"], memory_limit=16 * MiB)
        path = self.create_task("default", "limited", bundle)
        (stats,) = self.call(path, SHIM, "GetStats")
        self.assertEqual(stats["memory_max"], 16 * MiB)
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        self.wait_exit("limited")
        self.assertEqual(self.prop(path, "ExitReason"), "signaled")
        self.delete(path)

    def test_shim_died(self):
        path = self.create_task("default", "orphaned")
        shim_pid = self.prop(path, "ShimPid")
        os.kill(shim_pid, signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 15,
                   "the object to be removed")
        # the property changed before TaskExit went out, and the history says why
        reasons = [(i, e) for i, e in enumerate(self.signals.log)
                   if e[0] == "PropertiesChanged" and e[1] == path and "ExitReason" in e[2][1]]
        self.assertEqual([e[2][1]["ExitReason"] for _, e in reasons], ["shim-died"])
        exit_index = next(i for i, e in enumerate(self.signals.log) if e[0] == "TaskExit")
        self.assertLess(reasons[0][0], exit_index)
        entries = self.history(id="orphaned")
        self.assertEqual([e["event"] for e in entries],
                         ["create", "start", "disconnected", "exit", "delete", "reap"])
        self.assertEqual(entries[3]["reason"], "shim-died")
        self.assertEqual(entries[3]["exit_status"], 137)


class StopPauseTests(LifecycleTestCase):
    def test_stop_escalates_to_sigkill(self):
        # sleep as PID 1 ignores SIGTERM
        path = self.create_task("default", "stubborn")
        started = time.monotonic()
        (status,) = self.call(path, SHIM, "Stop", "(u)", (2,))
        took = time.monotonic() - started
        self.assertEqual(status, 137)
        self.assertGreaterEqual(took, 1.9)
        self.assertLess(took, 10)
        self.assertEqual(self.prop(path, "Status"), "stopped")
        self.assertEqual(self.prop(path, "ExitReason"), "signaled")
        self.assertEqual(self.wait_exit("stubborn")[0][2][5], 137)
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Stop", "(u)", (2,))
        self.delete(path)

    def test_stop_of_a_task_that_exits_on_sigterm(self):
        bundle = self.make_bundle("polite", ["sh", "-c",
                                             "trap 'exit 143' TERM; sleep 100000 & wait"])
        path = self.create_task("default", "polite", bundle)
        # the shell sets its trap before it forks the sleep
        wait_until(lambda: len(self.call(path, SHIM, "ListPids")[0]) == 2, 10,
                   "the shell's child")
        started = time.monotonic()
        (status,) = self.call(path, SHIM, "Stop", "(u)", (30,))
        self.assertEqual(status, 143)
        self.assertLess(time.monotonic() - started, 5)
        self.delete(path)

    def test_pause_resume(self):
        path = self.create_task("default", "freezable")
        pid = self.prop(path, "TaskPid")
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Resume")
        self.call(path, SHIM, "Pause")
        self.assertEqual(self.prop(path, "Status"), "paused")
        self.assertEqual(freezer_state(pid), "FROZEN")
        self.assertIn(proc_state(pid), "DT")
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Pause")
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Stop", "(u)", (1,))
        self.assert_dbus_error("BadState", self.call, path, SHIM, "Delete")
        self.call(path, SHIM, "Resume")
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertEqual(freezer_state(pid), "THAWED")
        self.assertEqual(proc_state(pid), "S")
        wait_until(lambda: self.changes(path, "Status")[-2:] == ["paused", "running"], 10,
                   "PropertiesChanged paused, running")
        (status,) = self.call(path, SHIM, "Stop", "(u)", (1,))
        self.assertEqual(status, 137)
        self.delete(path)


class StatsTests(LifecycleTestCase):
    def test_stats_of_a_busy_task(self):
        bundle = self.make_bundle("busy", ["sh", "-c", "while :; do :; done"])
        path = self.create_task("default", "busy", bundle)
        time.sleep(1)
        (stats,) = self.call(path, SHIM, "GetStats")
        self.assertEqual(set(stats), {"memory_current", "memory_max", "cpu_usage_usec",
                                      "pids_current"})
        self.assertGreater(stats["memory_current"], 0)
        self.assertEqual(stats["memory_max"], 0)
        self.assertGreater(stats["cpu_usage_usec"], 100000)
        self.assertGreaterEqual(stats["pids_current"], 1)
        self.call(path, SHIM, "Stop", "(u)", (1,))
        self.delete(path)

    def test_list_pids_sees_a_forked_child(self):
        bundle = self.make_bundle("forker", ["sh", "-c", "sleep 100000 & wait"])
        path = self.create_task("default", "forker", bundle)
        pid = self.prop(path, "TaskPid")

        def children():
            (pids,) = self.call(path, SHIM, "ListPids")
            return [p for p in pids if p != pid]
        wait_until(lambda: children(), 10, "the forked child")
        (pids,) = self.call(path, SHIM, "ListPids")
        self.assertIn(pid, pids)
        (child,) = children()
        with open(f"/proc/{child}/stat") as f:
            self.assertEqual(int(f.read().rsplit(")", 1)[1].split()[1]), pid)
        self.call(path, SHIM, "Stop", "(u)", (1,))
        self.delete(path)


class HistoryTests(LifecycleTestCase):
    def test_history_and_counters_survive_a_restart(self):
        path = self.create_task("default", "remembered")
        task_pid = self.prop(path, "TaskPid")
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        self.wait_exit("remembered")
        self.delete(path)
        doomed = self.create_task("default", "doomed")
        os.kill(self.prop(doomed, "ShimPid"), signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=doomed), 15,
                   "the dead shim's object to go")
        counters = {n: self.prop(MANAGER_PATH, n, MANAGER)
                    for n in ("DisconnectCount", "ReapCount", "CleanupFailureCount")}
        self.assertEqual(counters, {"DisconnectCount": 1, "ReapCount": 1,
                                    "CleanupFailureCount": 0})
        before = self.history()

        self.stop_daemon()
        self.start_daemon()
        self.assertEqual({n: self.prop(MANAGER_PATH, n, MANAGER) for n in counters}, counters)
        self.assertEqual(self.history(), before)
        entries = self.history(namespace="default", id="remembered")
        self.assertEqual([e["event"] for e in entries], ["create", "start", "exit", "delete"])
        for e in entries:
            self.assertEqual((e["namespace"], e["id"]), ("default", "remembered"))
            self.assertEqual(e["pid"], task_pid)
        self.assertEqual(entries[2]["exit_status"], 137)
        self.assertEqual(entries[2]["reason"], "signaled")
        times = [e["time"] for e in before]
        self.assertEqual(times, sorted(times))
        self.assertEqual(len(self.history(limit=2)), 2)
        self.assertEqual(self.history(limit=2), before[-2:])
        for bad in ({"limit": GLib.Variant("u", 0)}, {"id": GLib.Variant("s", "a/b")},
                    {"nope": GLib.Variant("s", "x")}, {"limit": GLib.Variant("s", "1")}):
            self.assert_dbus_error("InvalidArgument", self.call, MANAGER_PATH, MANAGER,
                                   "GetHistory", "(a{sv})", (bad,))

        # a broken line costs that line only
        with open(os.path.join(self.state_dir, "history"), "a") as f:
            f.write("{'time': <'garbage\n[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n")
        self.stop_daemon()
        self.start_daemon()
        self.assertEqual(self.history(), before)

    def test_history_is_bounded_on_disk(self):
        # many tasks' worth of events keep the files under twice the rotation size
        with open(os.path.join(self.state_dir, "history"), "w") as f:
            line = ("{'time': <uint64 1>, 'event': <'create'>, 'namespace': <'default'>, "
                    "'id': <'filler'>, 'pid': <uint32 1>}\n")
            f.write(line * (1024 * 1024 // len(line) + 10))
        self.stop_daemon()
        self.start_daemon()
        self.assertEqual(len(self.history(limit=4096)), 4096)
        path = self.create_task("default", "rotated")
        self.call(path, SHIM, "Stop", "(u)", (1,))
        self.delete(path)
        wait_until(lambda: os.path.exists(os.path.join(self.state_dir, "history.1")), 10,
                   "rotation")
        self.stop_daemon()
        sizes = [os.path.getsize(os.path.join(self.state_dir, n)) for n in ("history",
                                                                            "history.1")]
        self.assertLess(sum(sizes), 2 * 1024 * 1024 + 4096)
        self.start_daemon()
        self.assertEqual([e["event"] for e in self.history(id="rotated")],
                         ["create", "start", "exit", "delete"])


class AuthorizationTests(LifecycleTestCase):
    NOBODY, RULE_DENIED = 65534, 2

    def test_mutating_methods_need_manage_and_reading_does_not(self):
        path = self.create_task("default", "guarded")
        for uid in (self.NOBODY, self.RULE_DENIED):
            for method, args in (("Stop", ("1",)), ("Pause", ()), ("Resume", ()),
                                 ("SetLabels", ("{'a': 'b'}",))):
                _, _, name = it.call_as(uid, path, SHIM + "." + method, *args)
                self.assertIn(name, (ERROR + "NotAuthorized", ERROR + "NotAuthorizedCanObtain"),
                              method)
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertEqual(self.prop(path, "Labels"), {})
        for target, method in ((path, SHIM + ".GetStats"), (path, SHIM + ".ListPids"),
                               (MANAGER_PATH, MANAGER + ".GetHistory")):
            args = ("{}",) if method.endswith("GetHistory") else ()
            rc, out, name = it.call_as(self.NOBODY, target, method, *args)
            self.assertEqual((rc, name), (0, None), method)
        self.call(path, SHIM, "Stop", "(u)", (1,))
        self.delete(path)


class ListingTests(LifecycleTestCase):
    """GetManagedObjects serves each object's properties from a dictionary kept until one
    of them changes: what it returns must always be what Properties.GetAll says now."""

    def managed(self):
        (objects,) = self.call(MANAGER_PATH, "org.freedesktop.DBus.ObjectManager",
                               "GetManagedObjects")
        return {path: interfaces[SHIM] for path, interfaces in objects.items()}

    def assert_listing_is_current(self, expected_paths):
        managed = self.managed()
        self.assertEqual(sorted(managed), sorted(expected_paths))
        self.assertEqual(sorted(self.call(MANAGER_PATH, MANAGER, "ListShims")[0]),
                         sorted(expected_paths))
        for path in expected_paths:
            (current,) = self.call(path, "org.freedesktop.DBus.Properties", "GetAll", "(s)",
                                   (SHIM,))
            self.assertEqual(managed[path], current, path)
        return managed

    def test_managed_objects_follow_every_change(self):
        one = self.create_task("default", "listed1")
        two = self.create_task("default", "listed2")
        managed = self.assert_listing_is_current([one, two])
        self.assertEqual(managed[one]["Status"], "running")
        self.assertEqual(managed[one]["Labels"], {})

        # each change shows in the very next call, before its PropertiesChanged is awaited
        self.call(one, SHIM, "SetLabels", "(a{ss})", ({"app": "db"},))
        self.assertEqual(self.assert_listing_is_current([one, two])[one]["Labels"],
                         {"app": "db"})
        self.call(one, SHIM, "Pause")
        self.assertEqual(self.assert_listing_is_current([one, two])[one]["Status"], "paused")
        self.call(one, SHIM, "Resume")
        self.assertEqual(self.assert_listing_is_current([one, two])[one]["Status"], "running")
        (status,) = self.call(two, SHIM, "Stop", "(u)", (1,))
        managed = self.assert_listing_is_current([one, two])
        self.assertEqual((managed[two]["Status"], managed[two]["ExitStatus"]),
                         ("stopped", status))
        self.assertEqual(managed[one]["Status"], "running")

        # a deleted task is gone from both listings once its object is removed
        self.delete(two)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=two), 15,
                   "the deleted task's object to be removed")
        self.assert_listing_is_current([one])

        # a restarted service lists the task as it took it over again
        self.stop_daemon()
        self.start_daemon()
        wait_until(lambda: self.call(MANAGER_PATH, MANAGER, "ListShims")[0] == [one], 15,
                   "the task after the restart")
        wait_until(lambda: self.prop(one, "Responsive"), 15, "the shim to be reached again")
        self.assertEqual(self.assert_listing_is_current([one])[one]["Labels"], {"app": "db"})

        # and a task whose shim died is gone from both once its object is removed
        os.kill(self.prop(one, "ShimPid"), signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=one), 15,
                   "the dead shim's object to be removed")
        self.assert_listing_is_current([])


if __name__ == "__main__":
    sys.exit(it.run_tests(sys.modules[__name__]))
