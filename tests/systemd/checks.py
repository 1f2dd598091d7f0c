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
    path = name if os.path.isabs(name) else os.path.join("/var/lib/shimwatch-test", name)
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
    # (the booted root has no man(1) to resolve Documentation=man:…; the pages are
    # checked to be installed instead)
    out = run(["systemd-analyze", "verify", "--man=no", UNIT])
    assert out.strip() == "", out
    docs = [d.strip("\"") for d in unit_prop("Documentation").split()]
    for doc in docs:
        if doc.startswith("man:"):
            page, section = re.match(r"man:([\w.-]+)\((\d)\)", doc).groups()
            assert os.path.exists(f"/usr/share/man/man{section}/{page}.{section}") or \
                os.path.exists(f"/usr/share/man/man{section}/{page}.{section}.gz"), doc
    assert "man:shimwatchd(8)" in docs, docs


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


def inherited_attributes(pid):
    """What a process passes on to everything it starts, as /proc/PID/status says."""
    status = proc_status(pid)
    return {k: status.get(k) for k in ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapBnd")}


@check("the unit confines the service by nothing a container would inherit: its no_new_privs, "
       "seccomp filters, bounding set, mount namespace and umask are an unconfined unit's")
def _not_inherited():
    pid = main_pid()
    mine = inherited_attributes(os.getpid())    # this unit has no sandbox
    assert inherited_attributes(pid) == mine, (inherited_attributes(pid), mine)
    assert os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/1/ns/mnt"), \
        "the service runs in a mount namespace of its own"
    assert proc_status(pid)["Umask"] == "0022", proc_status(pid)["Umask"]
    # what stays: the unit's cgroup-bound settings (checked below, with a container)
    assert unit_prop("IPAddressDeny") != "", "IPAddressDeny= is gone"
    assert unit_prop("DevicePolicy") == "closed", unit_prop("DevicePolicy")


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
    # the shim gets nothing of the service's unit (this unit has no sandbox either)
    shim = inherited_attributes(prop(path, "ShimPid"))
    assert shim == inherited_attributes(os.getpid()), shim
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


# -- container fidelity: the same bundle under plain runc and through the service ---------
#
# Each bundle runs twice in this boot: once by plain `runc run` from this unit, which has
# no sandbox (the baseline: inside nspawn every process carries nspawn's own seccomp filter
# and bounding set, so absolute values prove nothing), and once through CreateTask on the
# service under its unit. What the container reports must be the same.

PLAIN_RUNC_ROOT = "/run/shimwatch-test-plain-runc"
# busybox applets the probes use beyond make-bundle.sh's
PROBE_APPLETS = ("grep", "stat", "chmod", "touch", "linux32", "adjtimex", "rm")
# util-linux's chrt from the host's /usr (busybox has none), run by the host's loader
CHRT = ("/host/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path /host/usr/lib/x86_64-linux-gnu "
        "/host/usr/bin/chrt")

PROBE = f"""
grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters|CapBnd|CapEff|CapPrm):' /proc/self/status
echo "Umask: $(umask)"
if linux32 true; then echo "personality: 32-bit allowed"; else echo "personality: refused"; fi
if {CHRT} -f 1 true; then echo "realtime: SCHED_FIFO allowed"; else echo "realtime: refused"; fi
if adjtimex > /dev/null; then echo "clock: adjtimex allowed"; else echo "clock: refused"; fi
touch /tmp/f && chmod u+s,g+s /tmp/f; echo "setuid: $(stat -c %A /tmp/f)"
grep -E '^Max (open files|processes|core file size) ' /proc/self/limits
"""


def fidelity_bundle(path, script, caps=(), binds=()):
    """A busybox bundle at PATH running SCRIPT, whose output goes to PATH/out/report; it asks
    for no_new_privs off, CAPS on top of runc's defaults, and rw bind mounts BINDS
    ((source, destination) pairs); no seccomp filter and no rlimits of its own."""
    make_bundle(path, ["sh", "-c", "exec > /out/report 2>&1\n" + script])
    for applet in PROBE_APPLETS:
        link = os.path.join(path, "rootfs", "bin", applet)
        if not os.path.lexists(link):
            os.symlink("busybox", link)
    os.makedirs(os.path.join(path, "out"))
    config = os.path.join(path, "config.json")
    with open(config) as f:
        spec = json.load(f)
    process = spec["process"]
    process["noNewPrivileges"] = False
    process.pop("rlimits", None)
    for kind in ("bounding", "effective", "permitted"):
        process["capabilities"][kind] = sorted(set(process["capabilities"][kind]) | set(caps))
    spec["linux"].pop("seccomp", None)
    mounts = [{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=1777"]},
              {"destination": "/out", "type": "bind", "source": os.path.join(path, "out"),
               "options": ["rbind", "rw"]},
              {"destination": "/host/usr", "type": "bind", "source": "/usr",
               "options": ["rbind", "ro"]}]
    mounts += [{"destination": dest, "type": "bind", "source": source, "options": ["rbind", "rw"]}
               for source, dest in binds]
    spec["mounts"] += mounts
    with open(config, "w") as f:
        json.dump(spec, f)
    return path


def take_report(bundle):
    report = os.path.join(bundle, "out", "report")
    with open(report) as f:
        text = f.read()
    os.unlink(report)
    return text


def run_plain(bundle, cid):
    """The bundle by plain runc, from this unsandboxed unit: its report."""
    proc = subprocess.run(["runc", "--root", PLAIN_RUNC_ROOT, "run", "--bundle", bundle, cid],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)
    # (`runc run` deletes the container when it ends; a failed start may leave it created)
    subprocess.run(["runc", "--root", PLAIN_RUNC_ROOT, "delete", "--force", cid],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.returncode == 0, f"plain runc run: exit {proc.returncode}: {proc.stdout}"
    return take_report(bundle)


def run_through_service(bundle, task_id, with_cli=False):
    """The same bundle through the service (CreateTask, or `shimwatchctl run`): its report,
    once the task has exited and is deleted."""
    if with_cli:
        run(["shimwatchctl", "run", f"{NS}/{task_id}", bundle])
        path = next(p for p in call(MANAGER_PATH, MANAGER, "ListShims")[0]
                    if prop(p, "Id") == task_id)
    else:
        path = create_task(task_id, bundle)
    wait_until(lambda: [e for e in signals.for_task(task_id, path) if e[0] == "TaskExit"], 30,
               f"{task_id} to exit")
    call(path, SHIM, "Delete")
    wait_until(lambda: any(e[0] == "InterfacesRemoved" for e in signals.for_task(task_id, path)),
               10, f"{task_id}'s removal")
    return take_report(bundle)


def report_fields(text):
    fields = {}
    for line in text.splitlines():
        # /proc/self/limits: "Max open files   1024   524288   files"
        m = re.match(r"^(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)", line)
        if m:
            fields[m.group(1)] = f"{m.group(2)} {m.group(3)}"
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


fidelity = {}


@check("fidelity: one probe bundle runs under plain runc and through the service")
def _fidelity_probe():
    bundle = fidelity_bundle("/var/lib/shimwatch-test/fidelity-probe", PROBE,
                             caps=("CAP_SYS_NICE",))
    try:
        fidelity["plain"] = report_fields(run_plain(bundle, "fidelity-probe"))
        fidelity["service"] = report_fields(run_through_service(bundle, "fidelity-probe"))
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
    return "plain runc:\n" + "\n".join(f"  {k}: {v}" for k, v in fidelity["plain"].items())


def same_in_both(*keys):
    plain = {k: fidelity["plain"].get(k) for k in keys}
    service = {k: fidelity["service"].get(k) for k in keys}
    assert None not in plain.values(), f"the probe did not report {keys}: {fidelity['plain']}"
    assert service == plain, f"through the service {service}, under plain runc {plain}"
    return plain


@check("fidelity: no_new_privs is what the bundle asks (off), not the service's")
def _fidelity_nnp():
    assert same_in_both("NoNewPrivs") == {"NoNewPrivs": "0"}


@check("fidelity: the container's only seccomp filters are its own (none here) and nspawn's")
def _fidelity_seccomp():
    same_in_both("Seccomp", "Seccomp_filters")


@check("fidelity: capabilities and the bounding set are the bundle's")
def _fidelity_caps():
    same_in_both("CapBnd", "CapEff", "CapPrm")


@check("fidelity: a bundle granting CAP_LINUX_IMMUTABLE and CAP_SYS_BOOT starts, with them")
def _fidelity_extra_caps():
    bundle = fidelity_bundle("/var/lib/shimwatch-test/fidelity-caps",
                             "grep -E '^Cap(Bnd|Eff|Prm):' /proc/self/status",
                             caps=("CAP_LINUX_IMMUTABLE", "CAP_SYS_BOOT"))
    try:
        plain = report_fields(run_plain(bundle, "fidelity-caps"))
        service = report_fields(run_through_service(bundle, "fidelity-caps"))
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
    assert service == plain, (service, plain)
    for bit in (9, 22):     # CAP_LINUX_IMMUTABLE, CAP_SYS_BOOT
        assert int(service["CapEff"], 16) & (1 << bit), service


@check("fidelity: the 32-bit personality is allowed (linux32), as under plain runc")
def _fidelity_personality():
    assert same_in_both("personality") == {"personality": "32-bit allowed"}


@check("fidelity: realtime scheduling (SCHED_FIFO with CAP_SYS_NICE) as under plain runc")
def _fidelity_realtime():
    got = same_in_both("realtime")
    if got["realtime"] != "SCHED_FIFO allowed":
        return ("plain runc is refused SCHED_FIFO on this layout too (no realtime budget in "
                "the container's cgroup v1 cpu controller): compared, not shown to work; "
                f"chrt said: {fidelity['plain'].get('chrt')}")


@check("fidelity: the clock system calls are the bundle's to use (adjtimex), as under plain "
       "runc")
def _fidelity_clock():
    if same_in_both("clock") != {"clock": "adjtimex allowed"}:
        return ("plain runc is refused adjtimex here too (systemd-nspawn keeps CAP_SYS_TIME "
                "and the @clock system calls from its container): compared, not shown to work")


@check("fidelity: setuid and setgid bits can be set on files (chmod u+s,g+s)")
def _fidelity_setuid():
    assert same_in_both("setuid") == {"setuid": "-rwSr-Sr--"}


@check("fidelity: the umask is runc's, as under plain runc")
def _fidelity_umask():
    same_in_both("Umask")


@check("fidelity: resource limits the bundle does not set are the unit's, which are "
       "containerd's unit's")
def _fidelity_limits():
    expect = {"LimitNOFILE": "1048576", "LimitNPROC": "infinity", "LimitCORE": "infinity"}
    got = {k: unit_prop(k) for k in expect}
    assert got == expect, got
    # what systemd could apply of them: inside nspawn, without CAP_SYS_RESOURCE, no more
    # than nspawn's own hard limits
    keys = ("Max open files", "Max processes", "Max core file size")
    with open(f"/proc/{main_pid()}/limits") as f:
        service = {k: v for k, v in report_fields(f.read()).items() if k in keys}
    container = {k: fidelity["service"].get(k) for k in keys}
    assert len(service) == 3 and container == service, (container, service)
    return f"the service's, and so the shims' and the containers': {service}"


# bundles, and the sources of their bind mounts, where root puts them: under plain runc and
# through the service alike, the container reads the host's file and writes one back
LOCATIONS = [("/tmp", "/tmp"), ("/home", "/home"), ("/root", "/root"), ("/srv", "/srv"),
             ("/var/lib", "/var/lib"),
             # bind sources only: bundles are not kept there, but /etc and /usr must be
             # the host's, and writable where the host's are
             ("/var/lib/shimwatch-test", "/etc"), ("/var/lib/shimwatch-test", "/usr/local")]

for bundle_dir, source_dir in LOCATIONS:
    what = (f"a bundle under {bundle_dir} with a bind mount from {source_dir}"
            if bundle_dir == source_dir else f"a bind mount from {source_dir}")
    how = "shimwatchctl run" if bundle_dir == "/tmp" else "CreateTask"

    @check(f"fidelity: {what} runs through {how} as under plain runc: the container reads "
           "and writes the host's files")
    def _fidelity_location(bundle_dir=bundle_dir, source_dir=source_dir, how=how):
        name = "fidelity-" + (bundle_dir + source_dir).strip("/").replace("/", "-")
        bundle = os.path.join(bundle_dir, "shimwatch-" + name)
        source = os.path.join(source_dir, "shimwatch-" + name + "-src")
        shutil.rmtree(source, ignore_errors=True)
        os.makedirs(source)
        try:
            with open(os.path.join(source, "probe"), "w") as f:
                f.write(f"from the host's {source_dir}\n")
            fidelity_bundle(bundle, "cat /mnt/src/probe && echo written > /mnt/src/written",
                            binds=[(source, "/mnt/src")])
            reports = {}
            for mode in ("plain runc", "the service"):
                if mode == "plain runc":
                    reports[mode] = run_plain(bundle, name)
                else:
                    reports[mode] = run_through_service(bundle, name,
                                                        with_cli=how == "shimwatchctl run")
                written = os.path.join(source, "written")
                assert os.path.exists(written), f"{mode}: the container's file is not on the host"
                os.unlink(written)
            assert reports["the service"] == reports["plain runc"] == \
                f"from the host's {source_dir}\n", reports
        finally:
            shutil.rmtree(bundle, ignore_errors=True)
            shutil.rmtree(source, ignore_errors=True)


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
