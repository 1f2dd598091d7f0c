#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""How soon does a restarted service serve, with many tasks recorded?

The call that bus-activates shimwatchd is delivered as soon as the service owns its name,
so by then every recorded task must have its object. The service reads its records and
exports their objects before it takes the name, and reaches the shims only after. This
measures, for N records (default 1,000): the time from exec to the name being owned (a
NameOwnerChanged seen by a bus client), and what the first ListShims after that returns.
Target: the name owned within 200 ms, and the first ListShims listing all N tasks.

Each record is one the service itself would have written for a live task: its shim and
its task process are live processes of this script's own (two a record, started before the
service and stopped by PID at the end, as a supervised shim and its task would be), with
the task's real start time, a shim binary of the runtime directories and a cgroup path. So
the service does for each record what a real restart costs: it reads /proc for both pids,
opens a pidfd on the task and looks its cgroup up. The cgroup path names no cgroup (the
lookup costs the same; a cleanup that ran by mistake would kill nothing but ours), and the
shim binary is a copy of true(1) in a runtime directory of the run's own. The shims are
slow to answer (one socket that accepts and never replies), so nothing is cleaned while we
measure; the service is SIGKILLed afterwards, everything it had is in a temporary
directory that is removed, and every process started here is killed by its PID and reaped
(each also dies with this script: setpriv --pdeathsig).

Usage: meson compile -C _build bench-startup   (or run this under tests/with-system-bus.sh)
"""

import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import integration_test as it  # noqa: E402
from integration_test import Gio, GLib  # noqa: E402

N = int(os.environ.get("SHIMWATCH_BENCH_RECORDS", "1000"))
ROUNDS = int(os.environ.get("SHIMWATCH_BENCH_ROUNDS", "5"))
TARGET_MS = 200


def start_time(pid):
    """field 22 of /proc/PID/stat, as the service reads it to tell a pid reused"""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


class Processes:
    """Live processes standing in for the records' shims and task processes. Started
    before the service, stopped by PID (SIGKILL, then reaped) at the end; one the service
    killed (as it would a dead shim's) is started again before the next round."""

    def __init__(self):
        self.procs = []

    def ensure(self, n):
        for i in range(n):
            if i < len(self.procs) and self.procs[i].poll() is None:
                continue
            proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "sleep", "infinity"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            if i < len(self.procs):
                self.procs[i] = proc
            else:
                self.procs.append(proc)
        return [(p.pid, start_time(p.pid)) for p in self.procs[:n]]

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs = []


def write_records(runtime_dir, n, address, shim_binary, processes, cgroup_base):
    now = int(time.time() * 1e6)
    pids = processes.ensure(2 * n)
    for i in range(n):
        namespace, task_id = "bench", f"task{i:04d}"
        directory = os.path.join(runtime_dir, "records", namespace)
        os.makedirs(directory, exist_ok=True)
        (shim_pid, _), (task_pid, task_start_time) = pids[2 * i], pids[2 * i + 1]
        record = {
            "version": 1, "namespace": namespace, "id": task_id,
            "runtime": "io.containerd.runc.v2", "shim_binary": shim_binary,
            "task_dir": os.path.join(runtime_dir, "tasks", namespace, task_id),
            "address": address, "shim_pid": shim_pid, "task_pid": task_pid,
            "task_start_time": task_start_time, "created_at": now, "status": "running",
            "cgroup_path": f"{cgroup_base}/{namespace}/{task_id}",
            "exit_known": False, "exit_pid": 0, "exit_status": 0, "exited_at": 0,
            "exit_emitted": False, "disconnected": False, "deleted": False,
            "delete_emitted": False, "owner": "", "bundle_source": "",
            "command": ["/bin/sh", "-c", "sleep infinity"], "labels": {"bench": "startup"},
            "started_at": now, "exit_reason": "", "oom": False, "pending_signal": "",
            "pending_sent": 0,
        }
        with open(os.path.join(directory, task_id + ".json"), "w") as f:
            json.dump(record, f, indent=2)
        # the task directory, as the shim leaves it: the service believes a record's
        # address only if the shim wrote the same one there
        os.makedirs(record["task_dir"], exist_ok=True)
        with open(os.path.join(record["task_dir"], "address"), "w") as f:
            f.write(address)


def one_round(bus, work, n, processes):
    runtime_dir = os.path.join(work, f"run{n}-{time.monotonic_ns()}")
    os.makedirs(runtime_dir)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0711,size=256m", "tmpfs",
                              runtime_dir], stderr=subprocess.DEVNULL).returncode == 0
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent_path = os.path.join(work, "silent.sock")
    if os.path.exists(silent_path):
        os.unlink(silent_path)
    silent.bind(silent_path)
    silent.listen(4096)
    # a shim binary as trusted_shim_binary() wants one: a containerd-shim-* in a runtime
    # directory; never run while we measure (nothing is cleaned), and harmless if it were
    shim_dir = os.path.join(work, "bin")
    shim_binary = os.path.join(shim_dir, "containerd-shim-bench-v2")
    if not os.path.exists(shim_binary):
        os.makedirs(shim_dir, mode=0o755, exist_ok=True)
        shutil.copy(shutil.which("true"), shim_binary)
    write_records(runtime_dir, n, "unix://" + silent_path, shim_binary, processes,
                  f"/shimwatch-bench-{os.getpid()}")
    config = os.path.join(work, "shimwatch.conf")
    with open(config, "w") as f:
        f.write(f"[Service]\nHealthInterval=0\nRuntimePath={shim_dir}\n"
                f"MetricsDirectory={os.path.join(work, 'metrics')}\n")
    os.makedirs(os.path.join(work, "metrics"), exist_ok=True)
    owned_at = []

    def owner_changed(connection, sender, path, interface, member, parameters):
        if parameters.unpack()[2] and not owned_at:
            owned_at.append(time.monotonic())
    sub = bus.signal_subscribe("org.freedesktop.DBus", "org.freedesktop.DBus",
                               "NameOwnerChanged", "/org/freedesktop/DBus", it.BUS_NAME,
                               Gio.DBusSignalFlags.NONE, owner_changed)
    log_path = os.path.join(work, "shimwatchd.log")
    log = open(log_path, "a")
    log_start = log.tell()
    started = time.monotonic()
    daemon = subprocess.Popen([it.SHIMWATCHD, "--runtime-dir", runtime_dir,
                               "--state-dir", os.path.join(work, "state"), "--config", config],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        it.wait_until(lambda: owned_at or daemon.poll() is not None, 30, "the name")
        if not owned_at:
            raise AssertionError(f"shimwatchd exited with {daemon.returncode}")
        reply = bus.call_sync(it.BUS_NAME, it.MANAGER_PATH, it.MANAGER, "ListShims", None,
                              None, Gio.DBusCallFlags.NONE, 30000, None)
        listed = len(reply.unpack()[0])
        answered_at = time.monotonic()
    finally:
        bus.signal_unsubscribe(sub)
        daemon.kill()
        daemon.wait()
        log.close()
        silent.close()
        if mounted:
            subprocess.run(["umount", runtime_dir])
        shutil.rmtree(runtime_dir, ignore_errors=True)
    # the service's own account of the part that reads the records (the rest of the time
    # to the name is its start and the bus)
    with open(log_path) as f:
        f.seek(log_start)
        loaded = re.search(r"recorded tasks loaded in ([0-9.]+) ms \(([0-9.]+) ms of CPU\)",
                           f.read())
    load_ms = (float(loaded.group(1)), float(loaded.group(2))) if loaded else (math.nan,) * 2
    return (owned_at[0] - started) * 1000, (answered_at - started) * 1000, listed, load_ms


def main():
    reason = it.skip_reason()
    if reason:
        print(f"bench skipped: {reason}")
        return 77
    work = tempfile.mkdtemp(prefix="swbench-start-", dir="/tmp")
    os.chmod(work, 0o755)
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    processes = Processes()
    try:
        results = {}
        for n in (0, N):
            rounds = [one_round(bus, work, n, processes) for _ in range(ROUNDS)]
            results[n] = rounds
            owned = [r[0] for r in rounds]
            first = [r[1] for r in rounds]
            print(f"{n:5d} records: name owned after {statistics.median(owned):6.1f} ms "
                  f"(min {min(owned):.1f}, max {max(owned):.1f}); first ListShims answered "
                  f"after {statistics.median(first):6.1f} ms with "
                  f"{sorted(set(r[2] for r in rounds))} objects")
            print(f"{'':13} of which loading the records: "
                  f"{statistics.median(r[3][0] for r in rounds):6.1f} ms "
                  f"({statistics.median(r[3][1] for r in rounds):.1f} ms of CPU)")
        worst = max(r[0] for r in results[N])
        complete = all(r[2] == N for r in results[N])
        print(f"target: name owned <= {TARGET_MS} ms with {N} records, all of them listed by "
              f"the first call: {'met' if worst <= TARGET_MS and complete else 'NOT met'} "
              f"(worst {worst:.1f} ms over {ROUNDS} runs)")
        return 0 if complete else 1
    finally:
        processes.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
