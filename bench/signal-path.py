#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Where a ShimDisconnected spends its time, death by death.

The scale scenario of shimbench.py kills shims one at a time while 1,000 are supervised
and writes, for each death, when it killed the shim (CLOCK_MONOTONIC), when its own raw
connection to the shim's socket saw the EOF and when the signal reached a raw bus client.
This lays a `perf record -k CLOCK_MONOTONIC` of that phase over those figures and prints,
for each death, when each step of the signal's path came:

  eof       the bench's raw connection saw the EOF (the floor)
  dispatch  shimwatch_shim_on_disconnected() began (the main thread heard of it)
  emit      shimwatch_publisher_emit() began (the signal handed to GDBus)
  filter    the signal ledger's filter began in GDBus's worker
  written   that thread's next sendmsg(2) (the message to dbus-daemon)
  routed    dbus-daemon's next sendmsg(2) (to the first of its receivers)
  received  the bench's raw bus client read it

and, for the slowest deaths, every time a thread of the service was preempted on the way
(`sched_switch` with the thread still runnable): by whom and for how long.

  bench/signal-path.py probe _build-bench/service/shimwatchd     # once per build (root)
  SHIMBENCH_PERF_CMD="perf record -a -k CLOCK_MONOTONIC -e sched:sched_switch \\
      -e sched:sched_wakeup -e probe_shimwatchd:* -e syscalls:sys_enter_sendmsg -o {out}" \\
      bench/shimbench.py --only scale --perf DIR --json DIR/bench.json
  bench/signal-path.py report DIR/bench.json DIR/scale-deaths-while-1000-supervised.data

The filter's probe does not see which message it filters: the first filter and sendmsg
after the emit are taken as the signal's, which they are unless GDBus had older messages
queued (then the step shows late, never early).
"""

import argparse
import bisect
import json
import re
import statistics
import subprocess
import sys

PROBES = [
    ("shimwatch_shim_on_disconnected", "dispatch"),
    ("shimwatch_publisher_emit", "emit"),
    ("outgoing_filter", "filter"),
]
SERVICE_THREADS = ("shimwatchd", "gdbus")
LINE = re.compile(r"\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+?):?\s+(.*)")
SWITCH = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> "
                    r"next_comm=(.*?) next_pid=(\d+)")


def probe(args):
    for function, _ in PROBES:
        subprocess.run(["perf", "probe", "-q", "-d", f"probe_shimwatchd:{function}"],
                       stderr=subprocess.DEVNULL)
        subprocess.run(["perf", "probe", "-q", "-x", args.binary, "-a", function], check=True)
    print("probes added:", ", ".join(f for f, _ in PROBES))


def read_events(path, script=None):
    """The recording's events, by time. @script: the text `perf script -F
    comm,tid,cpu,time,event,trace` printed for it, instead of running perf."""
    if script is not None:
        with open(script) as f:
            out = f.read()
    else:
        out = subprocess.run(["perf", "script", "-i", path, "-F",
                              "comm,tid,cpu,time,event,trace"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             check=True).stdout
    events = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            comm, tid, _cpu, t, event, rest = m.groups()
            events.append((float(t), comm, int(tid), event, rest))
    events.sort(key=lambda e: e[0])
    return events


def first(window, start, test):
    for e in window:
        if e[0] >= start and test(e):
            return e
    return None


def report(args):
    with open(args.json) as f:
        figures = json.load(f)["raw"]["scale"]["figures"]
    killed = figures["deaths_killed_at"]
    eofs, received = figures["deaths_eof_ms"], figures["deaths_disconnected_ms"]
    events = read_events(args.perf_data, args.script)
    times = [e[0] for e in events]
    steps = ["eof", "dispatch", "emit", "filter", "written", "routed", "received"]
    rows = []
    for i, k in enumerate(killed):
        end = k + received[i] / 1000
        window = events[bisect.bisect_left(times, k):bisect.bisect_right(times, end + 0.001)]
        at = {"eof": eofs[i], "received": received[i]}
        start = k
        for function, step in PROBES:
            e = first(window, start, lambda e, f=function: e[3].endswith(":" + f))
            if e is None:
                break
            at[step] = 1000 * (e[0] - k)
            start = e[0]
        else:
            # the last step found, the filter: the signal's sendmsg is its thread's next one
            sent = first(window, start, lambda x, tid=e[2]:
                         x[3] == "syscalls:sys_enter_sendmsg" and x[2] == tid)
            if sent is not None:
                at["written"] = 1000 * (sent[0] - k)
                routed = first(window, sent[0], lambda e: e[1] == "dbus-daemon" and
                               e[3] == "syscalls:sys_enter_sendmsg")
                if routed is not None:
                    at["routed"] = 1000 * (routed[0] - k)
        # preemptions of the service's threads in the window: by whom, until when
        preempted = []
        for j, e in enumerate(window):
            m = SWITCH.search(e[4]) if e[3] == "sched:sched_switch" else None
            if not m or m.group(1) not in SERVICE_THREADS or not m.group(3).startswith("R"):
                continue
            back = first(window[j + 1:], e[0], lambda x, tid=m.group(2):
                         x[3] == "sched:sched_switch" and f"next_pid={tid} " in x[4])
            back_ms = 1000 * ((back[0] if back else end) - e[0])
            preempted.append((1000 * (e[0] - k), m.group(1), m.group(4), back_ms))
        rows.append((received[i], i, at, preempted))
    if not rows:
        sys.exit("no deaths in the bench's JSON")

    print(f"{len(rows)} deaths; ms after the kill (median / p90 / max of each step):")
    for step in steps:
        values = sorted(r[2][step] for r in rows if step in r[2])
        if values:
            print(f"  {step:9} {statistics.median(values):7.2f} "
                  f"{values[int(0.9 * (len(values) - 1))]:7.2f} {values[-1]:7.2f}"
                  f"   ({len(values)} seen)")
    rows.sort(key=lambda r: r[0], reverse=True)
    print(f"\nthe {args.worst} slowest:")
    print("  death " + " ".join(f"{s:>9}" for s in steps) + "   preemptions of the service")
    for _, i, at, preempted in rows[:args.worst]:
        cells = " ".join(f"{at[s]:9.2f}" if s in at else f"{'-':>9}" for s in steps)
        taken = "; ".join(f"{who} by {by} at {t:.2f} for {d:.2f}"
                          for t, who, by, d in preempted if d >= args.min_preemption_ms)
        print(f"  {i:5} {cells}   {taken or 'none'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="add the uprobes to a shimwatchd binary (root)")
    p.add_argument("binary")
    p.set_defaults(run=probe)
    r = sub.add_parser("report", help="per-death steps from a bench JSON and a perf recording")
    r.add_argument("json", help="shimbench.py --json output of a scale run")
    r.add_argument("perf_data", help="the recording of scale-deaths-while-N-supervised")
    r.add_argument("--script", metavar="FILE",
                   help="read this `perf script -F comm,tid,cpu,time,event,trace` output "
                        "instead of running perf on PERF_DATA")
    r.add_argument("--worst", type=int, default=10, help="deaths shown in full (10)")
    r.add_argument("--min-preemption-ms", type=float, default=0.2,
                   help="shorter preemptions are not listed (0.2)")
    r.set_defaults(run=report)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
