#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""cleanup-guard.py DIR [CGROUP...]: remove everything a test started under DIR, when the
test is over, however it ended.

A test starts the guard when it creates its directory, with the guard's stdin on a pipe
whose other end only the test holds, and closes that end in its teardown. The guard waits
for end-of-file there: a teardown closing it, or the test dying (a failed g_assert aborts,
a timeout kills), both give it. Then it cleans, in the order that leaves nothing:

0. the cgroups given as arguments that a cgroup v1 freezer holds frozen (a test's process
   that no SIGKILL ends) are thawed, in every hierarchy, so that what was killed dies;
1. the processes named in DIR/guard.pids ("PID STARTTIME" lines: the service under test),
   when that PID is still the same process;
2. every container of every runc root under DIR, by runc's own list: `runc delete --force`
   kills it and removes its cgroups;
3. every process whose working directory or root is under DIR (shims run in their task
   directory; the fault-injecting shim's container too), by PID;
4. the shim sockets named by the `address` files of the task directories and by
   DIR/guard.sockets (never anything outside /run/containerd/s and /tmp);
5. DIR itself, and the cgroups given as arguments (with their parent) in every hierarchy,
   once empty.

Never by a broad name: only what runc lists under the test's own roots and processes that
live in the test's own directory. The guard runs in a session of its own (meson kills a
timed-out test's process group) with / as its working directory."""

import json
import os
import signal
import subprocess
import sys
import time


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def starttime(pid):
    stat = read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in "ZX" else fields[19]


def kill_and_wait(pids, timeout=10):
    pids = [p for p in pids if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    while any(starttime(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def under(path, directory):
    return path is not None and (path == directory or path.startswith(directory + "/"))


def processes_in(directory):
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for link in ("cwd", "root"):
            try:
                target = os.readlink(f"/proc/{entry}/{link}")
            except OSError:
                continue
            if under(target, directory):
                pids.append(int(entry))
                break
    return pids


def runc_roots(directory):
    roots = set()
    for dirpath, dirnames, filenames in os.walk(directory):
        if "state.json" in filenames:
            roots.add(os.path.dirname(dirpath))
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if d != "rootfs"]
    return sorted(roots)


def delete_containers(directory):
    for root in runc_roots(directory):
        try:
            out = subprocess.run(["runc", "--root", root, "list", "--format", "json"],
                                 capture_output=True, text=True, timeout=30).stdout
            containers = json.loads(out or "null") or []
        except (OSError, subprocess.TimeoutExpired, ValueError):
            containers = []
        for c in containers:
            subprocess.run(["runc", "--root", root, "delete", "--force", c["id"]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                           check=False)
            if c.get("pid"):
                kill_and_wait([c["pid"]])     # delete failed half-way: by its own PID


def shim_sockets(directory):
    names = set((read(os.path.join(directory, "guard.sockets")) or "").split())
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = [d for d in dirnames if d != "rootfs"]
        if "address" in filenames:
            address = (read(os.path.join(dirpath, "address")) or "").strip()
            if address.startswith("unix://"):
                names.add(address[len("unix://"):])
    return sorted(n for n in names
                  if os.path.dirname(n) in ("/run/containerd/s", "/tmp"))


def cgroup_points():
    points = []
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        before, after = line.split(" - ", 1)
        if after.split(" ")[0] in ("cgroup", "cgroup2"):
            points.append(before.split(" ")[4])
    return points


def remove_cgroup(path):
    for point in cgroup_points():
        leaf = os.path.join(point, path.lstrip("/"))
        for d in (leaf, os.path.dirname(leaf)):
            if d != point and os.path.isdir(d):
                for _ in range(50):           # a process just killed may still be leaving
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)


def thaw_cgroup(path):
    for point in cgroup_points():
        leaf = os.path.join(point, path.lstrip("/"))
        for d in (leaf, os.path.dirname(leaf)):
            state = os.path.join(d, "freezer.state")
            if d != point and (read(state) or "THAWED").strip() != "THAWED":
                try:
                    with open(state, "w") as f:
                        f.write("THAWED")
                except OSError:
                    pass


def clean(directory, cgroups):
    for cg in cgroups:
        thaw_cgroup(cg)
    for line in (read(os.path.join(directory, "guard.pids")) or "").splitlines():
        pid, start = line.split()
        if starttime(int(pid)) == start:
            kill_and_wait([int(pid)], 30)
    delete_containers(directory)
    kill_and_wait(processes_in(directory))
    for sock in shim_sockets(directory):
        try:
            os.unlink(sock)
        except OSError:
            pass
    subprocess.run(["rm", "-rf", "--one-file-system", directory], check=False)
    for cg in cgroups:
        remove_cgroup(cg)


def main():
    directory = os.path.realpath(sys.argv[1])
    if not directory.startswith("/tmp/") or len(directory) < 8:
        print(f"cleanup-guard: refusing to clean {directory}", file=sys.stderr)
        return 2
    os.chdir("/")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    clean(directory, sys.argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
