#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shimwatch under a real systemd, as an admin runs it. Runs as a unit inside the test
container that tests/systemd/boot.sh boots (systemd 252 as PID 1, dbus, real polkitd,
the real containerd-shim-runc-v2 + runc, the project installed by `meson install`).

Writes TAP to /var/lib/shimwatch-test-out/tap, one line per check, and ends the container
with `systemctl exit`. Each check asserts what a regression would break; the order
matters (the first checks see the service before anything activated it)."""

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

OUT = "/var/lib/shimwatch-test-out"
LIB = "/usr/local/lib/shimwatch-test"
LAYOUT = os.environ.get("SHIMWATCH_TEST_LAYOUT", "hybrid")
BUILD = os.environ.get("SHIMWATCH_BUILD_DIR", "")
RUN_SUITE = os.environ.get("SHIMWATCH_SYSTEMD_RUN_SUITE", "1") == "1"
UNIT = "shimwatch.service"
BUS_NAME = "org.shimwatch.Shimwatch1"
MANAGER_PATH = "/org/shimwatch/Shimwatch1"
MANAGER = BUS_NAME + ".Manager"
SHIM = BUS_NAME + ".Shim"
ERROR = BUS_NAME + ".Error."
NS = "swcheck"
UNPRIVILEGED_UID = 990          # made by make-rootfs.sh
# cases of the integration suite that reproduce another layout than this one, and skip
# here saying so; they run in that layout's boot (any other skip is a failure)
LAYOUT_ONLY_CASES = {}
# cases that count system calls with strace, a test tool the booted root does not have:
# they skip here saying so, and run (without a skip) in the host's run of the same suite
HOST_ONLY_CASES = (
    "__main__.SeedTests.test_death_makes_no_needless_system_calls_on_the_main_thread",
)
CAPS_DROPPED = {"CAP_SYS_BOOT": 22, "CAP_SYS_MODULE": 16, "CAP_SYS_TIME": 25,
                "CAP_SYS_RAWIO": 17, "CAP_MAC_ADMIN": 33, "CAP_BPF": 39}

tap = open(os.path.join(OUT, "tap"), "w", buffering=1)
results = []


def diag(text):
    for line in str(text).rstrip("\n").splitlines():
        tap.write(f"# {line}\n")


def check(description):
    """Run the function as one TAP line; an exception is a failure with its story."""
    def wrap(function):
        started = time.monotonic()
        try:
            note = function()
            ok = True
        except Exception:
            ok, note = False, traceback.format_exc()
        results.append(ok)
        tap.write(f"{'ok' if ok else 'not ok'} {len(results)} - {description}\n")
        if note:
            diag(note)
        diag(f"({time.monotonic() - started:.1f} s)")
        if not ok:
            diag("the service's journal, last lines:")
            diag(run(["journalctl", "--no-pager", "-n", "25", "-u", UNIT], check=False))
        return function
    return wrap


def suite_failure_story(stdout):
    """The failed cases' stories in a TAP output, told as tools/run-tests.sh tells them
    (tools/testlog-summary.py, from the source tree bound into the container); None if
    there is none, or no source tree."""
    path = os.path.join(os.environ.get("SHIMWATCH_SOURCE_DIR", ""), "tools",
                        "testlog-summary.py")
    try:
        spec = importlib.util.spec_from_file_location("testlog_summary", path)
        summary = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(summary)
    except (OSError, ImportError, AttributeError):
        return None
    return summary.failure_story(stdout, before=120, after=40, total=300)


def run(argv, check=True, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stdout}")
    return proc.stdout


def wait_until(predicate, timeout=10.0, what="condition"):
    context = GLib.MainContext.default()
    deadline = time.monotonic() + timeout
    while True:
        while context.pending():
            context.iteration(False)
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def pump(seconds):
    context = GLib.MainContext.default()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        while context.pending():
            context.iteration(False)
        time.sleep(0.01)


def unit_prop(name, unit=UNIT):
    return run(["systemctl", "show", "-p", name, "--value", unit]).strip()


def is_active(unit=UNIT):
    return run(["systemctl", "is-active", unit], check=False).strip()


def main_pid():
    return int(unit_prop("MainPID"))


def process_dead(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def cgroups_of(pid):
    """{hierarchy: path} from /proc/PID/cgroup ('' is cgroup2)."""
    out = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, hierarchy, path = line.rstrip("\n").split(":", 2)
            out[hierarchy] = path
    return out


def cgroup_dirs(cgroups):
    """The directories of a process's cgroups, on this layout."""
    dirs = []
    for hierarchy, path in cgroups.items():
        if hierarchy == "":
            base = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") \
                else "/sys/fs/cgroup"
        elif hierarchy == "name=systemd":
            base = "/sys/fs/cgroup/systemd"
        else:
            base = "/sys/fs/cgroup/" + hierarchy
        if os.path.isdir(base):
            dirs.append(base + path)
    return dirs


def tracking_cgroup(pid):
    """The cgroup systemd tracks units in: cgroup2's, or name=systemd on hybrid. (The
    kernel lists the host's v1 hierarchies even where only cgroup2 is mounted.)"""
    cgroups = cgroups_of(pid)
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return cgroups[""]
    return cgroups["name=systemd"]


def journal(*match):
    """The container is booted for these checks only: its whole journal is theirs."""
    argv = ["journalctl", "--no-pager", "-o", "json", *match]
    entries = []
    for line in run(argv, check=False).splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            pass
    return entries


def message_ids():
    ids = {}
    with open(os.path.join(LIB, "shimwatch-names.h")) as f:
        for m in re.finditer(r'#define SHIMWATCH_MESSAGE_ID_(\w+)\s+"([0-9a-f]{32})"', f.read()):
            ids[m.group(1).lower()] = m.group(2)
    return ids


MESSAGE_IDS = message_ids()


class Signals:
    """The service's signals, in order, as a client sees them."""

    def __init__(self, bus):
        self.bus = bus
        self.log = []
        self.id = bus.signal_subscribe(BUS_NAME, None, None, None, None,
                                       Gio.DBusSignalFlags.NONE, self._on_signal)

    def _on_signal(self, connection, sender, path, interface, member, parameters):
        self.log.append((member, path, parameters.unpack()))

    def for_task(self, task_id, path):
        out = []
        for member, _, args in self.log:
            if member in ("ShimDisconnected", "TaskExit", "TaskDelete", "TaskCreate",
                          "TaskStart", "TaskOOM"):
                if args[1] == NS and args[2] == task_id:
                    out.append((member, args))
            elif member == "InterfacesRemoved" and args[0] == path:
                out.append((member, args))
        return out


bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
signals = Signals(bus)


def call(path, interface, method, signature=None, args=None, timeout=60000):
    parameters = GLib.Variant(signature, args) if signature else None
    reply = bus.call_sync(BUS_NAME, path, interface, method, parameters, None,
                          Gio.DBusCallFlags.NONE, timeout, None)
    return reply.unpack()


def prop(path, name, interface=SHIM):
    return call(path, "org.freedesktop.DBus.Properties", "Get", "(ss)", (interface, name))[0]


def make_bundle(name, args, memory_limit=None):
    path = os.path.join("/var/lib/shimwatch-test", name)
    shutil.rmtree(path, ignore_errors=True)
    run(["bash", os.path.join(LIB, "make-bundle.sh"), path] + args)
    if memory_limit:
        with open(os.path.join(path, "config.json")) as f:
            spec = json.load(f)
        resources = spec["linux"].setdefault("resources", {})
        resources["memory"] = {"limit": memory_limit, "swap": memory_limit}
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(spec, f)
    return path


def create_task(task_id, bundle):
    (path,) = call(MANAGER_PATH, MANAGER, "CreateTask", "(sssa{sv})", (NS, task_id, bundle, {}))
    return path


def task_files(task_id, shim_path):
    """What a task leaves on disk while it lives."""
    address = prop(shim_path, "Address")
    return [f"/run/shimwatch/tasks/{NS}/{task_id}", f"/run/shimwatch/runc/{NS}/{task_id}",
            f"/run/shimwatch/records/{NS}/{task_id}.json",
            address[len("unix://"):] if address.startswith("unix://") else None]


def assert_crash_sequence(task_id, path, shim_pid, task_pid):
    crash = [e for e in signals.for_task(task_id, path)
             if e[0] in ("ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved")]
    members = [e[0] for e in crash]
    assert members == ["ShimDisconnected", "TaskExit", "TaskDelete", "InterfacesRemoved"], crash
    assert crash[0][1] == (path, NS, task_id, shim_pid), crash[0]
    assert crash[1][1][4:6] == (task_pid, 137), crash[1]
    assert crash[2][1][4:6] == (task_pid, 137), crash[2]


def assert_nothing_left(files, task_pid, dirs):
    wait_until(lambda: process_dead(task_pid), 10, f"container process {task_pid} to be gone")
    # the record goes through the record committer's thread: gone soon after, not at once
    wait_until(lambda: not [f for f in files if f and os.path.exists(f)], 10,
               f"the task's files to be removed: {[f for f in files if f]}")
    # the task's cgroups: runc removes them at delete (the cgroup cleanup's job)
    wait_until(lambda: not [d for d in dirs if os.path.isdir(d)], 10,
               f"the task's cgroups to be removed: {[d for d in dirs if os.path.isdir(d)]}")


def kill_shim_and_check(task_id, path):
    shim_pid, task_pid = prop(path, "ShimPid"), prop(path, "TaskPid")
    files = task_files(task_id, path)
    daemon = cgroups_of(main_pid())
    # the task's own cgroups: not a hierarchy's root, not the service's (or above it)
    dirs = cgroup_dirs({h: p for h, p in cgroups_of(task_pid).items()
                        if p != "/" and not (daemon.get(h, "") + "/").startswith(p + "/")})
    os.kill(shim_pid, signal.SIGKILL)
    wait_until(lambda: any(e[0] == "InterfacesRemoved" for e in signals.for_task(task_id, path)),
               20, f"{task_id}'s object to be removed")
    pump(0.3)       # a late duplicate would arrive by now
    assert_crash_sequence(task_id, path, shim_pid, task_pid)
    assert_nothing_left(files, task_pid, dirs)
    return shim_pid, task_pid


state = {}


# -- the unit as installed ---------------------------------------------------------------

@check("systemd-analyze verify shimwatch.service is clean")
def _verify():
    out = run(["systemd-analyze", "verify", UNIT])
    assert out.strip() == "", out


@check("systemd-analyze security shimwatch.service is within its recorded exposure")
def _security():
    out = run(["systemd-analyze", "security", "--no-pager", UNIT], check=False)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
    assert m, out
    with open(os.path.join(LIB, "security-exposure")) as f:
        recorded = float(next(l for l in f if l.strip() and not l.startswith("#")))
    score = float(m.group(1))
    assert score <= recorded, f"exposure {score} > recorded {recorded}:\n{out}"
    return f"exposure {score} (recorded limit {recorded})"


@check("the unit carries what a container supervisor needs (limits, delegation, kill mode)")
def _limits():
    expect = {"LimitNOFILE": "1048576", "TasksMax": "infinity", "Delegate": "yes",
              "KillMode": "process", "Type": "dbus", "BusName": BUS_NAME}
    got = {k: unit_prop(k) for k in expect}
    assert got == expect, got


# -- activation ------------------------------------------------------------------------------

@check("nothing runs before first use: shimwatch.service and polkit.service are inactive")
def _inactive():
    assert is_active() == "inactive", is_active()
    assert unit_prop("ActiveEnterTimestampMonotonic") == "0", "it ran already"
    assert is_active("polkit.service") == "inactive", is_active("polkit.service")


@check("a D-Bus call activates shimwatch.service through SystemdService=")
def _activation():
    assert call(MANAGER_PATH, MANAGER, "ListShims") == ([],)
    assert is_active() == "active", is_active()
    pid = main_pid()
    assert os.readlink(f"/proc/{pid}/exe") == "/usr/libexec/shimwatchd", os.readlink(
        f"/proc/{pid}/exe")
    wait_until(lambda: any("Activating via systemd: service name='org.shimwatch.Shimwatch1' "
                           "unit='shimwatch.service'" in e.get("MESSAGE", "")
                           for e in journal()), 5,
               "dbus-daemon's 'Activating via systemd' line")


@check("the sandbox is applied: NoNewPrivs, a seccomp filter, capabilities dropped")
def _sandbox():
    status = proc_status(main_pid())
    assert status["NoNewPrivs"] == "1", status["NoNewPrivs"]
    assert status["Seccomp"] == "2", f"Seccomp: {status['Seccomp']} (2 is a filter)"
    bounding = int(status["CapBnd"], 16)
    kept = [name for name, bit in CAPS_DROPPED.items() if bounding & (1 << bit)]
    assert not kept, f"still in the bounding set: {kept}"
    assert bounding & (1 << 21), "CAP_SYS_ADMIN is gone: runc cannot work"


@check("a real runc task runs (CreateTask), polkit bus-activated to authorize it")
def _create():
    bundle = make_bundle("web", ["sleep", "100000"])
    path = create_task("web", bundle)
    assert prop(path, "Status") == "running", prop(path, "Status")
    task_pid = prop(path, "TaskPid")
    assert not process_dead(task_pid)
    assert is_active("polkit.service") == "active", is_active("polkit.service")
    wait_until(lambda: any("service name='org.freedesktop.PolicyKit1' unit='polkit.service'"
                           in e.get("MESSAGE", "") for e in journal()),
               5, "polkit's activation by dbus-daemon")
    # the sandbox is inherited by what the service starts, and runc lives with it
    shim = proc_status(prop(path, "ShimPid"))
    assert shim["NoNewPrivs"] == "1" and shim["Seccomp"] == "2", shim
    state["web"] = path


@check("the task runs in a transient scope of its own with Delegate=yes, made through "
       "systemd; the service's own cgroup stays a leaf with only the daemon")
def _placement():
    path = state["web"]
    task_pid = prop(path, "TaskPid")
    scope = f"shimwatch-{NS}-web.scope"
    service = unit_prop("ControlGroup")
    task = tracking_cgroup(task_pid)
    assert tracking_cgroup(main_pid()) == service, (tracking_cgroup(main_pid()), service)
    assert unit_prop("ActiveState", scope) == "active", f"{scope}: " + unit_prop(
        "ActiveState", scope)
    assert unit_prop("Delegate", scope) == "yes"
    assert unit_prop("ControlGroup", scope) == task, (unit_prop("ControlGroup", scope), task)
    assert prop(path, "CgroupPath") == task, (prop(path, "CgroupPath"), task)
    assert task != service and not task.startswith(service + "/"), (task, service)
    # in every hierarchy with a controller too (hybrid: memory, pids, ...), not just systemd's
    others = {h: p for h, p in cgroups_of(task_pid).items()
              if h not in ("", "name=systemd") and os.path.isdir("/sys/fs/cgroup/" + h)}
    assert all(p == task for p in others.values()), others
    state["web_scope"] = scope
    return f"service {service}, task {task} ({scope})"


def run_in_service_cgroup(code):
    """Python code run by a process moved into the service's own cgroups, as the daemon,
    the shims and runc are: cgroup2's, where systemd attaches its IP and device filters as
    BPF programs, and on hybrid also the v1 devices controller's. Returns the output and
    whether the cgroup2 one exists (on hybrid systemd may keep units out of cgroup2)."""
    service = unit_prop("ControlGroup")
    unified = "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") \
        else "/sys/fs/cgroup/unified"
    procs = [d + service + "/cgroup.procs" for d in (unified, "/sys/fs/cgroup/devices")
             if os.path.exists(d + service + "/cgroup.procs")]
    moves = "".join(f"open({p!r}, 'w').write(str(os.getpid()))\n" for p in procs)
    proc = subprocess.run(["/usr/bin/python3", "-c", "import os\n" + moves + code],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.stdout, os.path.exists(unified + service + "/cgroup.procs")


@check("the service's cgroup-bound sandbox (IPAddressDeny=any, DevicePolicy=closed) holds "
       "for the service and not for a container in its scope, which keeps its network")
def _cgroup_sandbox():
    bundle = make_bundle("netsrv", ["nc", "-l", "-p", "18080", "-e", "echo", "hello"])
    os.symlink("busybox", os.path.join(bundle, "rootfs", "bin", "nc"))
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    # the host's network (here the container's): its sockets are the container's own
    spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"]
                                   if n["type"] != "network"]
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    path = create_task("netsrv", bundle)

    def answer():
        try:
            with socket.create_connection(("127.0.0.1", 18080), timeout=2) as s:
                return s.recv(16) or None
        except OSError:
            return None
    got = wait_until(answer, 10, "the container to answer on 127.0.0.1:18080")
    assert got.startswith(b"hello"), got
    wait_until(lambda: [e for e in signals.for_task("netsrv", path) if e[0] == "TaskExit"], 10,
               "the container's exit")
    call(path, SHIM, "Delete")
    # the same in the service's cgroup: refused, as is a device outside the closed policy
    # the same from the service's cgroup: filtered (a dropped SYN times out, where nothing
    # listening would refuse at once), as is a device outside the closed policy
    out, bpf = run_in_service_cgroup(
        "import socket\n"
        "try:\n socket.create_connection(('127.0.0.1', 9), timeout=2); print('ip:open')\n"
        "except (PermissionError, socket.timeout): print('ip:filtered')\n"
        "except OSError as e: print('ip:open', e.errno)\n"
        "try:\n open('/dev/net/tun', 'rb'); print('dev:open')\n"
        "except PermissionError: print('dev:refused')\n")
    assert "dev:refused" in out.split(), out
    if bpf:
        assert "ip:filtered" in out.split(), out
        return out
    return (out + "IPAddressDeny= is not enforced on this layout: systemd keeps no cgroup2 "
            "cgroup for the unit here, and its IP filter is a cgroup2 BPF program")


@check("SIGKILL of the shim: ShimDisconnected, TaskExit(137), TaskDelete, InterfacesRemoved; "
       "nothing left, cgroups included")
def _sigkill():
    kill_shim_and_check("web", state["web"])
    scope = state.get("web_scope", f"shimwatch-{NS}-web.scope")
    wait_until(lambda: unit_prop("ActiveState", scope) == "inactive", 10,
               f"{scope} to be gone")


@check("journald holds every lifecycle MESSAGE_ID of the task with the SHIMWATCH_* fields")
def _journal():
    wanted = ["create", "start", "disconnected", "exit", "cleaned", "delete"]

    def entries():
        found = {}
        for e in journal("_SYSTEMD_UNIT=" + UNIT, f"SHIMWATCH_TASK_ID=web"):
            found.setdefault(e.get("MESSAGE_ID"), e)
        return found if all(MESSAGE_IDS[w] in found for w in wanted) else None
    found = wait_until(entries, 10, "the task's journal entries")
    for w in wanted:
        e = found[MESSAGE_IDS[w]]
        for field in ("SHIMWATCH_NAMESPACE", "SHIMWATCH_TASK_ID", "SHIMWATCH_SHIM_PID",
                      "SHIMWATCH_TASK_PID", "SHIMWATCH_EVENT"):
            assert field in e, (w, field, e)
        assert e["SHIMWATCH_NAMESPACE"] == NS and e["SHIMWATCH_EVENT"] == w, e
    auth = [e for e in journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + MESSAGE_IDS["auth"])
            if e.get("SHIMWATCH_TASK_ID") == "web"]
    assert auth and auth[0].get("SHIMWATCH_CALLER_UID") == "0", [
        {k: v for k, v in e.items() if k.startswith(("SHIMWATCH", "MESSAGE"))}
        for e in journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + MESSAGE_IDS["auth"])]


# -- restarts ----------------------------------------------------------------------------

@check("systemctl restart with a live task: it survives, is taken over by the new process, "
       "and a later shim death is handled")
def _restart():
    path = create_task("survivor", make_bundle("survivor", ["sleep", "100000"]))
    shim_pid, task_pid = prop(path, "ShimPid"), prop(path, "TaskPid")
    old = main_pid()
    run(["systemctl", "restart", UNIT])
    new = main_pid()
    assert new != old and new != 0, (old, new)
    assert not process_dead(shim_pid) and not process_dead(task_pid)
    wait_until(lambda: [e for e in journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + MESSAGE_IDS["readopt"],
                                           "SHIMWATCH_TASK_ID=survivor", f"_PID={new}")],
               10, f"the readopt entry of PID {new}")
    wait_until(lambda: prop(path, "Responsive"), 10, "the shim to answer the new process")
    assert prop(path, "Status") == "running"
    kill_shim_and_check("survivor", path)


@check("systemctl stop leaves the task running; the call that activates the service again "
       "already sees it")
def _stop():
    path = create_task("sleeper", make_bundle("sleeper", ["sleep", "100000"]))
    shim_pid, task_pid = prop(path, "ShimPid"), prop(path, "TaskPid")
    run(["systemctl", "stop", UNIT])
    assert is_active() == "inactive", is_active()
    assert not process_dead(shim_pid) and not process_dead(task_pid), "stop killed the task"
    # the very first calls, the first of which starts the service
    listed = call(MANAGER_PATH, MANAGER, "ListShims")
    status = prop(path, "Status")
    assert listed == ([path],), f"the activating call got {listed}"
    assert status == "running", status
    assert is_active() == "active"
    state["sleeper"] = path


@check("an unprivileged caller is refused by the real polkitd, and the decision is in the "
       "journal with its uid")
def _refused():
    path = state["sleeper"]
    for argv in (["--object-path", MANAGER_PATH, "--method", MANAGER + ".Reap", NS, "sleeper",
                  "{}"],
                 ["--object-path", path, "--method", SHIM + ".Kill", "9", "false"],
                 ["--object-path", MANAGER_PATH, "--method", MANAGER + ".CreateTask", NS,
                  "intruder", "/var/lib/shimwatch-test/web", "{}"]):
        proc = subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED_UID}",
                               f"--regid={UNPRIVILEGED_UID}", "--clear-groups", "gdbus", "call",
                               "--system", "--dest", BUS_NAME] + argv,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.returncode != 0 and re.search(ERROR + r"NotAuthorized", proc.stdout), (
            argv, proc.stdout)
    assert prop(path, "Status") == "running", "a refused call changed the task"
    wait_until(lambda: [e for e in journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + MESSAGE_IDS["auth"],
                                           f"SHIMWATCH_CALLER_UID={UNPRIVILEGED_UID}")],
               15, f"the polkit decision for uid {UNPRIVILEGED_UID} in the journal")
    # root may: the task is reaped, and nothing of it is left
    shim_pid, task_pid = prop(path, "ShimPid"), prop(path, "TaskPid")
    files = task_files("sleeper", path)
    assert call(MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})", (NS, "sleeper", {})) == (137,)
    wait_until(lambda: process_dead(shim_pid), 10, "the reaped shim to be gone")
    assert_nothing_left(files, task_pid, [])


if LAYOUT == "hybrid":
    @check("an OOM-killed task gives TaskOOM, TaskExit(137) and its journal entry")
    def _oom():
        bundle = make_bundle("hog", ["dd", "if=/dev/zero", "of=/dev/null", "bs=256M",
                                     "count=1"], memory_limit=32 * 1024 * 1024)
        # dd is a busybox applet make-bundle.sh does not link
        os.symlink("busybox", os.path.join(bundle, "rootfs", "bin", "dd"))
        path = create_task("hog", bundle)
        wait_until(lambda: [e for e in signals.for_task("hog", path) if e[0] == "TaskExit"], 20,
                   "the task to be OOM-killed")
        members = [e[0] for e in signals.for_task("hog", path)]
        assert "TaskOOM" in members, members
        exit_args = [e[1] for e in signals.for_task("hog", path) if e[0] == "TaskExit"][0]
        assert exit_args[5] == 137, exit_args
        wait_until(lambda: journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + MESSAGE_IDS["oom"],
                                   "SHIMWATCH_TASK_ID=hog"), 5, "the OOM journal entry")
        call(path, SHIM, "Delete")
        wait_until(lambda: any(e[0] == "InterfacesRemoved" for e in signals.for_task("hog", path)),
                   10, "the deleted task's removal")
else:
    diag("OOM: checked on the hybrid layout only; this host's cgroup2 hierarchy has no "
         "controllers (they are all bound to v1), so no memory limit exists here")


@check("systemd tracks nothing of the checks' tasks any more")
def _clean():
    assert call(MANAGER_PATH, MANAGER, "ListShims") == ([],)
    left = run(["runc", "--root", f"/run/shimwatch/runc/{NS}", "list", "-q"], check=False).split()
    assert not left, f"runc still lists {left}"
    assert not os.listdir(f"/run/shimwatch/tasks") or not os.listdir(
        f"/run/shimwatch/tasks/{NS}") if os.path.isdir(f"/run/shimwatch/tasks/{NS}") else True


# -- the project's own integration suite, inside ------------------------------------------

if RUN_SUITE and BUILD:
    run(["systemctl", "stop", UNIT], check=False)
    started = time.monotonic()
    logbase = f"systemd-{LAYOUT}"
    leak_check = os.path.join(os.environ.get("SHIMWATCH_SOURCE_DIR", ""), "tests",
                              "leak-check.py")
    leak_state = "/run/shimwatch-test-leaks.json"
    env = dict(os.environ, SHIMWATCH_TEST_SUITE=BUILD)
    run(["/usr/bin/python3", leak_check, "snapshot", leak_state], env=env)
    # every test of the integration suite by name: its leak tests would write the outer
    # run's snapshot in the build directory; the leak check runs here with its own
    tests = ["shim-real", "shim-faults", "dbus-integration", "polkit-hang"]
    proc = subprocess.run(["meson", "test", "-C", BUILD, "--no-rebuild", "--logbase", logbase,
                           "--num-processes", "1"] + tests,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed = time.monotonic() - started
    entries = []
    try:
        with open(os.path.join(BUILD, "meson-logs", logbase + ".json")) as f:
            entries = [json.loads(l) for l in f]
    except OSError:
        pass
    for name in ("json", "txt"):
        try:
            os.unlink(os.path.join(BUILD, "meson-logs", f"{logbase}.{name}"))
        except OSError:
            pass

    @check("the integration suite runs inside the booted container, every test of it")
    def _suite():
        names = sorted(e["name"].split(" / ")[-1] for e in entries)
        assert names == sorted(tests), f"ran {names}:\n{proc.stdout[-4000:]}"
        return f"{elapsed:.0f} s"

    for entry in entries:
        @check(f"integration suite inside: {entry['name']}")
        def _suite_entry(entry=entry):
            out = entry.get("stdout") or ""
            cases = [l for l in out.splitlines() if re.match(r"^(not )?ok \d+", l)]
            skipped = [l for l in cases if re.search(r"#\s*SKIP", l, re.I) and
                       not any(f" {case} " in l for case in LAYOUT_ONLY_CASES.get(LAYOUT, ())) and
                       not any(f" {case} # SKIP strace is not installed" in l
                               for case in HOST_ONLY_CASES)]
            if entry["result"] not in ("OK", "EXPECTEDFAIL") or skipped:
                # a failed case of the suite says why before its "not ok" line (the
                # service's log, the traceback), however early in the run it failed
                story = suite_failure_story(out) or out.splitlines()[-80:]
                raise AssertionError(f"{entry['result']}, skipped: {skipped}\n" +
                                     "\n".join(story))
            return f"{len(cases)} cases passed in {entry.get('duration', 0):.1f} s"

    @check("the integration suite leaves the booted system as it found it (leak-check.py)")
    def _leaks():
        out = run(["/usr/bin/python3", leak_check, "compare", leak_state], check=False, env=env)
        assert not re.search(r"^not ok", out, re.M), out

tap.write(f"# checks finished: {results.count(True)} passed, {results.count(False)} failed\n")
tap.close()
# boot.sh's deb mode: the package's own checks (upgrade, purge) follow in this unit, and
# end the container themselves
then = os.environ.get("SHIMWATCH_CHECKS_THEN")
if then:
    os.execv(sys.executable, [sys.executable, then, "0" if all(results) else "1"])
subprocess.run(["systemctl", "--no-block", "exit", "0" if all(results) else "1"])
