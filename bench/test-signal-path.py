#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/signal-path.py's report on a recording written by hand: each step found where it
is, the signal's sendmsg told from another thread's, a preemption and its length named."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "signal-path.py")

# two deaths, killed at 100.000 and 200.000; the second one's gdbus thread is preempted by
# a `sleep` for 0.3 ms inside the filter, and shimwatchd's main thread writes something
# of its own (sendmsg) before GDBus's worker writes the signal
SCRIPT = """\
      shimwatchd   10 [000]   100.001200: probe_shimwatchd:shimwatch_shim_on_disconnected: (55)
      shimwatchd   10 [000]   100.001300: probe_shimwatchd:shimwatch_publisher_emit: (55)
           gdbus   11 [001]   100.001500: probe_shimwatchd:outgoing_filter: (55)
           gdbus   11 [001]   100.002000: syscalls:sys_enter_sendmsg: fd: 0x14, msg: 0x1, flags: 0x4000
     dbus-daemon    5 [000]   100.002400: syscalls:sys_enter_sendmsg: fd: 0x0d, msg: 0x1, flags: 0x4000
      shimwatchd   10 [000]   200.001000: probe_shimwatchd:shimwatch_shim_on_disconnected: (55)
      shimwatchd   10 [000]   200.001100: probe_shimwatchd:shimwatch_publisher_emit: (55)
      shimwatchd   10 [000]   200.001150: syscalls:sys_enter_sendmsg: fd: 0x03, msg: 0x1, flags: 0x4040
           gdbus   11 [001]   200.001400: probe_shimwatchd:outgoing_filter: (55)
           gdbus   11 [001]   200.001600: sched:sched_switch: prev_comm=gdbus prev_pid=11 prev_prio=120 prev_state=R ==> next_comm=sleep next_pid=77 next_prio=120
           sleep   77 [001]   200.001900: sched:sched_switch: prev_comm=sleep prev_pid=77 prev_prio=120 prev_state=Z ==> next_comm=gdbus next_pid=11 next_prio=120
           gdbus   11 [001]   200.002100: syscalls:sys_enter_sendmsg: fd: 0x14, msg: 0x1, flags: 0x4000
     dbus-daemon    5 [000]   200.002500: syscalls:sys_enter_sendmsg: fd: 0x0d, msg: 0x1, flags: 0x4000
"""

FIGURES = {
    "deaths_killed_at": [100.0, 200.0],
    "deaths_eof_ms": [1.0, 0.9],
    "deaths_disconnected_ms": [3.0, 4.0],
}


class ReportTest(unittest.TestCase):
    def report(self):
        with tempfile.TemporaryDirectory(prefix="swsignalpath-") as tmp:
            script = os.path.join(tmp, "script.txt")
            bench = os.path.join(tmp, "bench.json")
            with open(script, "w") as f:
                f.write(SCRIPT)
            with open(bench, "w") as f:
                json.dump({"raw": {"scale": {"figures": FIGURES}}}, f)
            out = subprocess.run([sys.executable, TOOL, "report", bench, "unused.data",
                                  "--script", script], stdout=subprocess.PIPE, text=True,
                                 check=True).stdout
        return out.splitlines()

    def test_steps_and_preemptions(self):
        lines = self.report()
        slowest = lines.index("the 10 slowest:")
        rows = {int(line.split()[0]): line for line in lines[slowest + 2:]}
        # the slowest first
        self.assertEqual([int(line.split()[0]) for line in lines[slowest + 2:]], [1, 0])
        # eof dispatch emit filter written routed received
        self.assertEqual(rows[0].split()[1:8],
                         ["1.00", "1.20", "1.30", "1.50", "2.00", "2.40", "3.00"])
        self.assertTrue(rows[0].endswith("none"), rows[0])
        # the main thread's own sendmsg is not the signal's
        self.assertEqual(rows[1].split()[1:8],
                         ["0.90", "1.00", "1.10", "1.40", "2.10", "2.50", "4.00"])
        self.assertIn("gdbus by sleep at 1.60 for 0.30", rows[1])
        # the summary: median / p90 / max of each step, and how many deaths showed it
        written = next(line for line in lines if line.strip().startswith("written"))
        self.assertEqual(written.split()[1:4], ["2.05", "2.00", "2.10"])
        self.assertIn("(2 seen)", written)


if __name__ == "__main__":
    unittest.main()
