#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""How fast does a dead shim's task end on the bus, and what does supervision cost?

Runs shimwatchd on a private bus (tests/with-system-bus.sh) with the real
containerd-shim-runc-v2 + runc. For N tasks, one at a time: SIGKILL the shim and time
ShimDisconnected, TaskExit and TaskDelete as a bus client receives them, checking that the
container is really dead when TaskExit arrives. Then the service's memory: RSS idle and with
N shims supervised. Prints figures and the ratio to containerd 1.6.20, whose TaskExit came
163-216 ms after the SIGKILL on the same kind of machine (docs/protocol.md §6).

Usage: meson compile -C _build bench   (or run this under tests/with-system-bus.sh)
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import integration_test as it  # noqa: E402
from integration_test import Gio, GLib  # noqa: E402

N = int(os.environ.get("SHIMWATCH_BENCH_N", "30"))
CONTAINERD_TASKEXIT_MS = (163, 216)
TARGET_MS = 25


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    reason = it.skip_reason()
    if reason:
        print(f"bench skipped: {reason}")
        return 77
    work = tempfile.mkdtemp(prefix="swbench-", dir="/tmp")
    os.chmod(work, 0o755)
    runtime_dir = os.path.join(work, "run")
    # records and runc state live in the runtime directory, /run/shimwatch: a tmpfs on any
    # systemd host. Measure there, not on whatever disk /tmp is on (its fsyncs would be
    # measured instead of the service).
    os.makedirs(runtime_dir)
    on_tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=256m", "tmpfs",
                               runtime_dir], stderr=subprocess.DEVNULL).returncode == 0
    fs_note = ("a private tmpfs, as /run is in production" if on_tmpfs else
               "the disk under /tmp (mounting a tmpfs failed): fsyncs count in the figures")
    config = os.path.join(work, "shimwatch.conf")
    with open(config, "w") as f:
        f.write("[Service]\nHealthInterval=0\n")
    log = open(os.path.join(work, "shimwatchd.log"), "w")
    daemon = subprocess.Popen([it.SHIMWATCHD, "--runtime-dir", runtime_dir,
                               "--state-dir", os.path.join(work, "state"), "--config", config],
                              stdout=log, stderr=subprocess.STDOUT)
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)

    def call(path, iface, method, sig=None, args=None):
        reply = bus.call_sync(it.BUS_NAME, path, iface, method,
                              GLib.Variant(sig, args) if sig else None, None,
                              Gio.DBusCallFlags.NONE, 30000, None)
        return reply.unpack() if reply is not None else None

    def owned():
        return bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus",
                             "org.freedesktop.DBus", "NameHasOwner",
                             GLib.Variant("(s)", (it.BUS_NAME,)), None,
                             Gio.DBusCallFlags.NONE, -1, None).unpack()[0]
    try:
        it.wait_until(owned, 10, "shimwatchd")
        signals = it.Signals(bus)
        bundle = os.path.join(work, "bundle")
        subprocess.run(["bash", os.path.join(it.SOURCE_DIR, "tools", "make-bundle.sh"), bundle,
                        "sleep", "100000"], check=True, stdout=subprocess.DEVNULL)
        rss_idle = rss_kb(daemon.pid)

        # memory: N shims supervised at once
        paths = [call(it.MANAGER_PATH, it.MANAGER, "CreateTask", "(sssa{sv})",
                      ("mem", f"m{i}", bundle, {}))[0] for i in range(N)]
        time.sleep(0.5)
        rss_busy = rss_kb(daemon.pid)
        for p in paths:
            os.kill(call(p, "org.freedesktop.DBus.Properties", "Get", "(ss)",
                         (it.SHIM, "ShimPid"))[0], signal.SIGKILL)
        it.wait_until(lambda: len(signals.named("TaskDelete")) >= N, 60, "memory round cleanup")

        # latency: one shim at a time, so every figure is a single death
        disconnected, exited, deleted, dead_at_exit = [], [], [], 0
        for i in range(N):
            task = f"b{i}"
            path = call(it.MANAGER_PATH, it.MANAGER, "CreateTask", "(sssa{sv})",
                        ("bench", task, bundle, {}))[0]
            props = {name: call(path, "org.freedesktop.DBus.Properties", "Get", "(ss)",
                                (it.SHIM, name))[0] for name in ("ShimPid", "TaskPid")}
            seen = {}

            def on_signal(connection, sender, spath, iface, member, params, _task=task):
                args = params.unpack()
                if member in ("ShimDisconnected", "TaskExit", "TaskDelete") and args[2] == _task:
                    seen.setdefault(member, time.monotonic())
                    if member == "TaskExit":
                        seen["dead"] = it.process_dead(props["TaskPid"])
            sub = bus.signal_subscribe(it.BUS_NAME, it.MANAGER, None, it.MANAGER_PATH, None,
                                       Gio.DBusSignalFlags.NONE, on_signal)
            killed = time.monotonic()
            os.kill(props["ShimPid"], signal.SIGKILL)
            it.wait_until(lambda: "TaskDelete" in seen, 10, f"{task} cleanup")
            bus.signal_unsubscribe(sub)
            disconnected.append(1000 * (seen["ShimDisconnected"] - killed))
            exited.append(1000 * (seen["TaskExit"] - killed))
            deleted.append(1000 * (seen["TaskDelete"] - killed))
            dead_at_exit += 1 if seen.get("dead") else 0
            time.sleep(0.05)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        if on_tmpfs:
            subprocess.run(["umount", "--lazy", runtime_dir], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", work], check=False)

    def row(name, values):
        return (f"  {name:<17} min {min(values):7.2f}  median {statistics.median(values):7.2f}  "
                f"p95 {percentile(values, 95):7.2f}  max {max(values):7.2f} ms")

    median_exit = statistics.median(exited)
    print(f"SIGKILL of a real containerd-shim-runc-v2 -> signal received by a bus client "
          f"(n={N}; runtime directory on {fs_note}):")
    print(row("ShimDisconnected", disconnected))
    print(row("TaskExit", exited))
    print(row("TaskDelete", deleted))
    print(f"  container process dead when TaskExit arrived: {dead_at_exit}/{N}")
    print(f"  TaskExit median vs containerd 1.6.20 ({CONTAINERD_TASKEXIT_MS[0]}-"
          f"{CONTAINERD_TASKEXIT_MS[1]} ms): {CONTAINERD_TASKEXIT_MS[0] / median_exit:.1f}x-"
          f"{CONTAINERD_TASKEXIT_MS[1] / median_exit:.1f}x faster")
    print(f"  target {TARGET_MS} ms: p95 {percentile(exited, 95):.2f} ms -> "
          f"{'met' if percentile(exited, 95) <= TARGET_MS else 'NOT met'}")
    print(f"shimwatchd RSS: idle {rss_idle} KiB, with {N} shims {rss_busy} KiB "
          f"({(rss_busy - rss_idle) / N:.1f} KiB per supervised shim)")
    return 0 if dead_at_exit == N else 1


if __name__ == "__main__":
    sys.exit(main())
