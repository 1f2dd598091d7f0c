#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tests/with-system-bus.sh, the private system bus every integration test runs on: it
leaves nothing behind, neither its directory nor its dbus-daemon, whether the command
succeeds, fails, or the bus cannot even be set up. Output: TAP."""

import os
import re
import subprocess
import sys
import tempfile
import time

from tapcases import case, finish

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "with-system-bus.sh")
DATA = os.path.join(HERE, "..", "data")

def run(command, data=DATA):
    """with-system-bus.sh COMMAND, its directory made in a directory of this test's own:
    (its output, its exit status, what is left in that directory)"""
    with tempfile.TemporaryDirectory(prefix="swharness-") as tmp:
        env = dict(os.environ, PROJECT_DATA=data, SHIMWATCH_TEST_TMPDIR=tmp,
                   SHIMWATCH_POLKIT="none")
        proc = subprocess.run(["bash", SCRIPT] + command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
        return proc.stdout, proc.returncode, os.listdir(tmp)


def gone(pid):
    """the process has ended and was reaped (its parent, the script, waited for it)"""
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.02)
    return not os.path.exists(f"/proc/{pid}")


if os.geteuid() != 0:
    print("1..0 # SKIP a private system bus with the project's policy needs root")
    sys.exit(0)


@case
def the_bus_and_its_directory_go_with_the_command():
    out, status, left = run(["/bin/sh", "-c",
                             'test -S "$SHIMWATCH_TEST_BUS_DIR/system_bus_socket" && '
                             'echo "dir=$SHIMWATCH_TEST_BUS_DIR" && '
                             "gdbus call --system --dest org.freedesktop.DBus "
                             "--object-path /org/freedesktop/DBus --method "
                             "org.freedesktop.DBus.GetConnectionUnixProcessID "
                             "org.freedesktop.DBus"])
    assert status == 0, (status, out)
    bus_pid = int(re.search(r"\(uint32 (\d+),\)", out).group(1))
    bus_dir = re.search(r"dir=(\S+)", out).group(1)
    assert os.path.basename(bus_dir).startswith("shimwatch-bus-"), bus_dir
    assert left == [], left
    assert gone(bus_pid), f"dbus-daemon (pid {bus_pid}) outlived the script"


@case
def a_failing_command_gives_its_status_and_leaves_nothing():
    out, status, left = run(["/bin/sh", "-c", "exit 3"])
    assert status == 3, (status, out)
    assert left == [], left


@case
def no_policy_is_a_clear_error_and_leaves_nothing():
    with tempfile.TemporaryDirectory(prefix="swharness-data-") as empty:
        out, status, left = run(["/bin/true"], data=empty)
    assert status == 1, (status, out)
    assert f"Bail out! no bus policy (*.conf) in {empty}/dbus-1" in out, out
    assert left == [], left


finish()
