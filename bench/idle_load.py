#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What does supervising many idle shims cost the service?

Runs shimwatchd on a private bus (tests/with-system-bus.sh) with N tasks (default 1,000) on
tests/shimwatch-test-shim, at the default HealthInterval unless SHIMWATCH_BENCH_HEALTH gives
one (seconds). Once every task is created and the service has settled, it samples for
SHIMWATCH_BENCH_SECONDS (default 30):

  - main-thread wakeups per second: the growth of voluntary + nonvoluntary context switches
    of the service's main thread (/proc/PID/task/PID/status). Every return from poll() that
    had to wait is one voluntary switch, so this counts the main loop's wakeups;
  - idle CPU: utime + stime of the whole process (/proc/PID/stat) over the window, as a
    percentage of one core;
  - RSS.

Targets (issue 13): ≤ 1 % of a core and ≤ 2 wakeups per second with 1,000 tasks.

Everything runs in a temporary directory that tests/cleanup-guard.py removes, with the shims
and their containers (by PID), however the run ends. Take the test lock around it:
    flock /work/wt/test.lock meson compile -C _build bench-idle
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import integration_test as it  # noqa: E402
from integration_test import Gio, GLib  # noqa: E402

N = int(os.environ.get("SHIMWATCH_BENCH_N", "1000"))
SECONDS = float(os.environ.get("SHIMWATCH_BENCH_SECONDS", "30"))
HEALTH = os.environ.get("SHIMWATCH_BENCH_HEALTH", "")
IN_FLIGHT = 8
TARGET_CPU_PERCENT = 1.0
TARGET_WAKEUPS = 2.0


def switches(pid, tid):
    """(voluntary, nonvoluntary) context switches of one thread"""
    counts = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                counts[line.split(":")[0]] = int(line.split()[1])
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def create_all(bus, bundle, n):
    """CreateTask n times, IN_FLIGHT calls at a time; returns the rate per second."""
    loop = GLib.MainLoop()
    state = {"next": 0, "done": 0, "error": None}

    def start_one():
        i = state["next"]
        state["next"] += 1
        bus.call(it.BUS_NAME, it.MANAGER_PATH, it.MANAGER, "CreateTask",
                 GLib.Variant("(sssa{sv})", ("swidle", f"t{i:04d}", bundle,
                                             {"runtime": GLib.Variant("s", it.TEST_RUNTIME)})),
                 None, Gio.DBusCallFlags.NONE, 120000, None, done)

    def done(connection, result):
        try:
            connection.call_finish(result)
        except GLib.Error as e:
            state["error"] = e.message
            loop.quit()
            return
        state["done"] += 1
        if state["next"] < n:
            start_one()
        elif state["done"] == n:
            loop.quit()

    started = time.monotonic()
    for _ in range(min(IN_FLIGHT, n)):
        start_one()
    loop.run()
    if state["error"]:
        raise RuntimeError(f"CreateTask failed: {state['error']}")
    return n / (time.monotonic() - started)


def main():
    reason = it.skip_reason()
    if reason:
        print(f"bench skipped: {reason}")
        return 77
    work = tempfile.mkdtemp(prefix="swidle-", dir="/tmp")
    os.chmod(work, 0o755)
    guard = it.start_cleanup_guard(work)
    runtime_dir = os.path.join(work, "run")
    os.makedirs(runtime_dir)
    on_tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=512m", "tmpfs",
                               runtime_dir], stderr=subprocess.DEVNULL).returncode == 0
    runtimes = os.path.join(work, "runtimes")
    os.makedirs(runtimes)
    os.symlink(it.TEST_SHIM, os.path.join(runtimes, "containerd-shim-test-v1"))
    config = os.path.join(work, "shimwatch.conf")
    with open(config, "w") as f:
        f.write(f"[Service]\nRuntimePath={runtimes};/usr/bin;/usr/sbin\n")
        if HEALTH:
            f.write(f"HealthInterval={HEALTH}\n")
    log = open(os.path.join(work, "shimwatchd.log"), "w")
    daemon = subprocess.Popen([it.SHIMWATCHD, "--runtime-dir", runtime_dir,
                               "--state-dir", os.path.join(work, "state"), "--config", config],
                              stdout=log, stderr=subprocess.STDOUT)
    it.guard_pid(work, daemon.pid)
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)

    def owned():
        return bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus",
                             "org.freedesktop.DBus", "NameHasOwner",
                             GLib.Variant("(s)", (it.BUS_NAME,)), None,
                             Gio.DBusCallFlags.NONE, -1, None).unpack()[0]
    result = {}
    try:
        it.wait_until(owned, 10, "shimwatchd")
        bundle = os.path.join(work, "bundle")
        subprocess.run(["bash", os.path.join(it.SOURCE_DIR, "tools", "make-bundle.sh"), bundle,
                        "sleep", "100000"], check=True, stdout=subprocess.DEVNULL)
        result["create_rate"] = create_all(bus, bundle, N)
        time.sleep(3)        # the last creates' records and signals settle
        pid = daemon.pid
        s0, c0, t0 = switches(pid, pid), cpu_ticks(pid), time.monotonic()
        time.sleep(SECONDS)
        s1, c1, t1 = switches(pid, pid), cpu_ticks(pid), time.monotonic()
        elapsed = t1 - t0
        result.update({
            "tasks": N,
            "health_interval": HEALTH or "default",
            "seconds": round(elapsed, 1),
            "wakeups_per_s": round((sum(s1) - sum(s0)) / elapsed, 2),
            "voluntary_per_s": round((s1[0] - s0[0]) / elapsed, 2),
            "nonvoluntary_per_s": round((s1[1] - s0[1]) / elapsed, 2),
            "cpu_percent": round(100 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / elapsed, 2),
            "rss_kib": rss_kb(pid),
            "threads": len(os.listdir(f"/proc/{pid}/task")),
        })
        if daemon.poll() is not None:
            raise RuntimeError(f"shimwatchd exited with {daemon.returncode}")
        if os.environ.get("SHIMWATCH_BENCH_TRACE"):
            # what wakes the main thread: its system calls for a few seconds
            trace = subprocess.run(["timeout", "-s", "INT", os.environ["SHIMWATCH_BENCH_TRACE"],
                                    "strace", "-tt", "-p", str(pid)],
                                   capture_output=True, text=True)
            result["trace"] = trace.stderr.splitlines()
    finally:
        # the shims outlive the service by design: the guard kills them and their
        # containers by PID (they work in the task directories under work), then removes
        # their sockets and the directory
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
        if on_tmpfs:
            # the guard finds the shims by their working directory under the tmpfs
            pass
        it.finish_cleanup_guard(guard)
        if on_tmpfs and os.path.ismount(runtime_dir):
            subprocess.run(["umount", "--lazy", runtime_dir], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", work], check=False)
        it.remove_empty_cgroups("/shimwatch/swidle")
    print(f"{N} idle test-shim tasks, HealthInterval {result['health_interval']}, "
          f"{result['seconds']} s sampled:")
    print(f"  main-thread wakeups  {result['wakeups_per_s']:8.2f} /s   "
          f"(target <= {TARGET_WAKEUPS}; {result['voluntary_per_s']} waits in poll() or a "
          f"lock, {result['nonvoluntary_per_s']} preemptions)")
    print(f"  CPU                  {result['cpu_percent']:8.2f} % of a core   "
          f"(target <= {TARGET_CPU_PERCENT})")
    print(f"  RSS                  {result['rss_kib']:8d} KiB, {result['threads']} threads")
    print(f"  create rate          {result['create_rate']:8.1f} tasks/s")
    for line in result.pop("trace", []):
        print("  trace: " + line)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
