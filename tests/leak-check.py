#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The suite leaves the machine as it found it.

    leak-check.py snapshot STATE    (the first test of the suite)
    leak-check.py compare STATE     (the last one)

`snapshot` records what exists: processes, shim sockets in /run/containerd/s, every cgroup
of every hierarchy (each cgroup v1 hierarchy and cgroup2, whole trees, not fixed names),
mounts, runc containers under the roots the tests and the shims use, the suite's own
temporary directories, and what is in the service's default state directory
(/var/lib/shimwatch: every test gives the service a state directory of its own).
`compare` waits a while for what the suite started to go away, then fails naming
everything new that is still there. Output: TAP, one case per kind of thing.

Only what the suite itself started is judged:

- a process counts as the suite's when it was started after the snapshot and carries the
  suite's marker in its environment (SHIMWATCH_TEST_SUITE=<build dir>, set by meson for
  every test and inherited by the daemons, shims and servers the tests start, also when
  they double-fork), or descends from such a process, or sits in one of the suite's
  cgroups (a container whose shim died: runc gives it a fresh environment and the kernel
  a new parent);
- a cgroup created during the suite is the suite's unless it holds live processes and
  none of them is the suite's: a terminal opened meanwhile, with a shell and a `sleep` in
  a cgroup of its own, is somebody else's. A cgroup named as the service and the tests
  name theirs (shimwatch*, swtest*) stays the suite's while it holds a process that is
  not known to be another run's (one carrying a different marker, or its child): an
  orphaned container of the suite is still found. An empty new cgroup is judged;
- a new shim socket is the suite's unless a live process that is not the suite's
  listens on it (somebody else's running shim); a new runc container is the suite's
  unless its live init is somebody else's process.

Other people's processes on a shared machine are not ours to report.

On a shared machine whose own tooling makes a cgroup for each command it runs (a sandbox),
SHIMWATCH_LEAK_FOREIGN_CGROUPS names those cgroups (a regular expression matched against
the path, e.g. "^/process_api/"): they, and the processes in them that carry no marker, are
not the suite's. Nothing sets it by default: CI runs on a machine of its own."""

import json
import os
import re
import subprocess
import sys
import time

MARKER = "SHIMWATCH_TEST_SUITE"
SOCKET_DIR = "/run/containerd/s"
# runc's default root, and the shims' own default (containerd's /run/containerd/runc/<ns>)
RUNC_ROOTS = ["/run/runc", "/run/containerd/runc"]
# shimwatchd's state directory when given none (task output, history)
STATE_DIR = "/var/lib/shimwatch"
# node_exporter's textfile directory: the service's default MetricsDirectory
METRICS_DIR = "/var/lib/prometheus/node-exporter"
# what the tests' temporary entries in /tmp are called: g_dir_make_tmp / mkdtemp / mktemp
# names ("swreal-3KQ2Z1", "shimwatch-bus-Ab3xYz") and the test shim's sockets; anything
# else in /tmp (someone's scratch files on a shared machine) is not the suite's
TMP_NAME = re.compile(r"^(sw[a-z]+|shimwatch-[a-z]+(-[a-z]+)*)-[A-Za-z0-9_]{6,8}$|"
                      r"^shimwatch-test-shim-[0-9a-f]{32}\.sock$")


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def processes():
    """{pid: (starttime, state, ppid)} of every process (kernel threads included)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read(f"/proc/{entry}/stat")
        if stat is None:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[19]), fields[0], int(fields[1]))
    return out


def cgroup_mounts():
    """[(label, mount point)] for every cgroup hierarchy: the v1 controllers by their
    options ("cpu", "name=systemd"), cgroup2 as "cgroup2"."""
    mounts, seen = [], set()
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        before, after = line.split(" - ", 1)
        fstype, _source, options = after.split(" ", 2)
        point = before.split(" ")[4]
        if fstype == "cgroup2":
            label = "cgroup2"
        elif fstype == "cgroup":
            known = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls",
                     "net_prio", "blkio", "perf_event", "hugetlb", "pids", "rdma", "misc")
            label = ",".join(o for o in options.split(",") if o in known or o.startswith("name="))
        else:
            continue
        if label not in seen:             # the same hierarchy mounted twice: walk it once
            seen.add(label)
            mounts.append((label, point))
    return mounts


def cgroups():
    out = set()
    for label, point in cgroup_mounts():
        for dirpath, dirnames, _ in os.walk(point):
            for d in dirnames:
                rel = os.path.relpath(os.path.join(dirpath, d), point)
                out.add(f"{label}:/{rel}")
    return out


def mounts():
    out = set()
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        before, after = line.split(" - ", 1)
        fields = before.split(" ")
        fstype, source = after.split(" ")[:2]
        out.add(f"{fields[4]} ({fstype} from {source})")
    return out


def sockets():
    try:
        return {os.path.join(SOCKET_DIR, n) for n in os.listdir(SOCKET_DIR)}
    except OSError:
        return set()


def tmp_entries():
    try:
        return {os.path.join("/tmp", n) for n in os.listdir("/tmp") if TMP_NAME.match(n)}
    except OSError:
        return set()


def service_state():
    """What is in the service's default state directory: the tests, benchmarks and demo
    give the service one of their own, so a run must not create or add to this one."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(STATE_DIR):
        found.add(dirpath)
        found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
        if len(found) > 10000:
            break
    # and the service's metrics in node_exporter's directory, written or rewritten
    try:
        for name in os.listdir(METRICS_DIR):
            if name.startswith("shimwatch"):
                path = os.path.join(METRICS_DIR, name)
                found.add(f"{path} (written at {os.stat(path).st_mtime_ns} ns)")
    except OSError:
        pass
    return found


def runc_roots(extra_dirs=()):
    """Every runc root: the defaults, each namespace's root below them, and any runc root
    inside directories the suite left behind (a root is a directory of <id>/state.json)."""
    candidates = set()
    for base in list(RUNC_ROOTS) + list(extra_dirs):
        for dirpath, dirnames, filenames in os.walk(base):
            if dirpath.count("/") - base.count("/") > 6:
                dirnames[:] = []
                continue
            if "state.json" in filenames:
                candidates.add(os.path.dirname(dirpath))
                dirnames[:] = []
    return sorted(candidates | {r for r in RUNC_ROOTS if os.path.isdir(r)})


def runc_containers(extra_dirs=()):
    out = {}
    for root in runc_roots(extra_dirs):
        try:
            proc = subprocess.run(["runc", "--root", root, "list", "--format", "json"],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            out[f"{root}: runc list failed: {e}"] = ""
            continue
        for c in json.loads(proc.stdout or "null") or []:
            out[f"{root}:{c['id']}"] = (f"pid {c.get('pid')}, {c.get('status')}, "
                                        f"bundle {c.get('bundle')}")
    return out


def somebody_elses_container(description, ours):
    """Whether a container runc lists runs a live process that is not the suite's (one in a
    root of another run, or of containerd): a stopped one whose state is left is judged."""
    m = re.match(r"pid (\d+),", description)
    pid = int(m.group(1)) if m else 0
    return pid > 0 and pid not in ours and os.path.exists(f"/proc/{pid}")


def snapshot():
    return {
        "processes": {str(pid): info[0] for pid, info in processes().items()},
        "sockets": sorted(sockets()),
        "cgroups": sorted(cgroups()),
        "mounts": sorted(mounts()),
        "runc": sorted(runc_containers()),
        "tmp": sorted(tmp_entries()),
        "state": sorted(service_state()),
    }


def describe(pid):
    cmdline = (read(f"/proc/{pid}/cmdline") or "").replace("\0", " ").strip()
    cgroup = [l.split(":", 2)[2] for l in (read(f"/proc/{pid}/cgroup") or "").splitlines()]
    cgroup = sorted(set(c for c in cgroup if c != "/"))
    return f"pid {pid}: {cmdline or '?'} (cgroup {', '.join(cgroup) or '/'})"


def fresh_processes(before):
    """{pid: (starttime, state, ppid)} of the live processes started after the snapshot."""
    me = os.getpid()
    return {pid: info for pid, info in processes().items()
            if before.get(str(pid)) != info[0] and info[1] not in "ZX" and pid != me}


def marker_of(pid):
    """The value of the suite's marker in pid's environment: None without one."""
    for entry in (read(f"/proc/{pid}/environ", "rb") or b"").split(b"\0"):
        if entry.startswith(MARKER.encode() + b"="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def with_descendants(seed, fresh):
    """seed and every fresh process below one of them."""
    found = set(seed)
    changed = True
    while changed:
        changed = False
        for pid, info in fresh.items():
            if pid not in found and info[2] in found:
                found.add(pid)
                changed = True
    return found


def processes_by_marker(fresh, marker):
    """(ours, another run's): fresh processes carrying this run's marker or another one's,
    each with whatever they started."""
    marks = {pid: marker_of(pid) for pid in fresh}
    ours = {pid for pid, m in marks.items() if marker and m == marker}
    theirs = {pid for pid, m in marks.items() if m is not None and m != marker}
    ours = with_descendants(ours, fresh)
    return ours, with_descendants(theirs, fresh) - ours


def cgroup_of(pid):
    """The paths of pid's cgroups, one per hierarchy ("/" left out)."""
    return {line.split(":", 2)[2] for line in (read(f"/proc/{pid}/cgroup") or "").splitlines()
            if line.count(":") >= 2} - {"/"}


SUITE_CGROUP = re.compile(r"(^|/)(shimwatch|swtest)[^/]*(/|$)")


def inside(path, cgroup):
    return path == cgroup or path.startswith(cgroup.rstrip("/") + "/")


def suite_cgroups(new_cgroups, fresh, ours, theirs):
    """The new cgroups that are the suite's (see the module's doc)."""
    members = {pid: cgroup_of(pid) for pid in processes()}
    judged = []
    for c in new_cgroups:
        path = c.split(":", 1)[1]
        inhabitants = {pid for pid, paths in members.items()
                       if any(inside(p, path) for p in paths)}
        if not inhabitants or inhabitants & ours:
            judged.append(c)
        elif SUITE_CGROUP.search(path) and inhabitants - theirs:
            judged.append(c)
    return judged


def new_processes(fresh, ours, cgroups_of_suite):
    """The suite's processes started after the snapshot that still run."""
    paths = {c.split(":", 1)[1] for c in cgroups_of_suite}
    in_cgroups = {pid for pid in fresh if cgroup_of(pid) & paths}
    return sorted(with_descendants(ours | in_cgroups, fresh))


def listeners(paths):
    """{path: pids of the live processes holding a listening unix socket bound to it}, for
    each of paths: /proc/net/unix once, every process's descriptors once."""
    inodes = {}
    for line in (read("/proc/net/unix") or "").splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 is __SO_ACCEPTCON
        if len(fields) >= 8 and fields[7] in paths and int(fields[3], 16) & 0x10000:
            inodes[f"socket:[{fields[6]}]"] = fields[7]
    found = {path: set() for path in paths}
    if not inodes:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                path = inodes.get(os.readlink(f"/proc/{entry}/fd/{fd}"))
            except OSError:
                continue
            if path is not None:
                found[path].add(int(entry))
    return found


def suite_sockets(new_sockets, ours):
    """New shim sockets, but for those somebody else's live process listens on."""
    holders = listeners(set(new_sockets))
    return [path for path in new_sockets if not holders[path] or holders[path] & ours]


# Under systemd, once one unit of a slice asks for a controller (runc's task scopes ask for
# CPU and IO accounting), systemd realizes it for the slice and its other units too: those
# cgroups are systemd's own, not the suite's. A task's scope still counts.
SYSTEMD_UNIT = re.compile(r"^.+\.(slice|service|scope|mount|socket|swap)$")
SUITE_SCOPE = re.compile(r"^(shimwatch|swtest)-.+\.scope$")


def realized_by_systemd(cgroup):
    parts = cgroup.split(":", 1)[1].strip("/").split("/")
    return (os.path.isdir("/run/systemd/system") and
            all(SYSTEMD_UNIT.match(p) for p in parts) and
            not any(SUITE_SCOPE.match(p) for p in parts))


def foreign(cgroup):
    pattern = os.environ.get("SHIMWATCH_LEAK_FOREIGN_CGROUPS")
    return bool(pattern) and re.search(pattern, cgroup.split(":", 1)[1]) is not None


def leftovers(state, marker):
    new_cgroups = sorted(c for c in cgroups() - set(state["cgroups"])
                         if not realized_by_systemd(c) and not foreign(c))
    fresh = fresh_processes(state["processes"])
    ours, theirs = processes_by_marker(fresh, marker)
    cg = suite_cgroups(new_cgroups, fresh, ours, theirs)
    procs = new_processes(fresh, ours, cg)
    tmp = sorted(tmp_entries() - set(state["tmp"]))
    containers = runc_containers(tmp)
    return {
        "processes": [describe(p) for p in procs],
        "sockets": suite_sockets(sorted(sockets() - set(state["sockets"])), set(procs)),
        "cgroups": cg,
        "mounts": sorted(mounts() - set(state["mounts"])),
        "runc": [f"{k} ({v})" for k, v in sorted(containers.items())
                 if k not in state["runc"] and not somebody_elses_container(v, set(procs))],
        "tmp": tmp,
        "state": sorted(service_state() - set(state.get("state", []))),
    }


CASES = [
    ("processes", "no process started by the suite still runs"),
    ("sockets", f"no shim socket left in {SOCKET_DIR}"),
    ("cgroups", "no cgroup left in any hierarchy"),
    ("mounts", "no mount left"),
    ("runc", "no runc container left"),
    ("tmp", "no temporary directory of the suite left in /tmp"),
    ("state", f"nothing written to the service's default state directory {STATE_DIR} "
              f"or metrics directory {METRICS_DIR}"),
]


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "snapshot":
        state = snapshot()
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        print("1..1")
        print(f"ok 1 - machine state recorded: {len(state['processes'])} processes, "
              f"{len(state['sockets'])} shim sockets, {len(state['cgroups'])} cgroups, "
              f"{len(state['mounts'])} mounts, {len(state['runc'])} runc containers")
        return 0

    try:
        with open(path) as f:
            state = json.load(f)
    except OSError:
        print("1..0 # SKIP no snapshot from this run: run the whole suite (or --suite leaks)")
        return 77
    os.unlink(path)                 # one snapshot, one comparison
    marker = os.environ.get(MARKER)
    # what the last tests stopped may take a moment to go (shims exit, runc deletes)
    deadline = time.monotonic() + float(os.environ.get("SHIMWATCH_LEAK_GRACE", "15"))
    while True:
        left = leftovers(state, marker)
        if not any(left.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)

    # Where other runs of the suite use the same machine at the same time (a landing queue
    # of several worktrees), their /tmp entries cannot be told from this run's: listed, not
    # judged. A CI run (one suite per machine) never sets this.
    if os.environ.get("SHIMWATCH_LEAK_SHARED_TMP") == "1" and left["tmp"]:
        print(f"# in /tmp, not judged (SHIMWATCH_LEAK_SHARED_TMP=1): {' '.join(left['tmp'])}")
        left["tmp"] = []

    print(f"1..{len(CASES)}")
    for n, (key, what) in enumerate(CASES, 1):
        if left[key]:
            print(f"# left behind by the suite ({len(left[key])}):")
            for item in left[key]:
                print(f"#   {item}")
            print(f"not ok {n} - {what}")
        else:
            print(f"ok {n} - {what}")
    return 1 if any(left.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
