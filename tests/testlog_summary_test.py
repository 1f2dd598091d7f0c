#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tools/testlog-summary.py, the end of tools/run-tests.sh that CI shows: fed crafted
meson testlog.json files, it must tell each failed case's story, on both sides of its
"not ok" line, bounded, and end with the exact count line. Output: TAP."""

import json
import os
import subprocess
import tempfile

from tapcases import case, finish

SUMMARY = os.environ.get("SHIMWATCH_TESTLOG_SUMMARY",
                         os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                      "tools", "testlog-summary.py"))


def summarize(entries, ci=False):
    """Run the summary on these testlog.json entries: (its output's lines, exit status)."""
    with tempfile.NamedTemporaryFile("w", prefix="testlog-", suffix=".json") as log:
        for entry in entries:
            log.write(json.dumps(entry) + "\n")
        log.flush()
        env = dict(os.environ)
        env.pop("CI", None)
        if ci:
            env["CI"] = "true"
        proc = subprocess.run(["/usr/bin/python3", SUMMARY, log.name], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=60)
    return proc.stdout.splitlines(), proc.returncode


# what tests/systemd/boot.sh wrote when the integration suite inside failed: the story
# (checks.py's diagnostics) comes after the "not ok" line
BOOT_STDOUT = """ok 1 - [hybrid] the service is active
# (0.2 s)
ok 2 - [hybrid] integration suite inside: shimwatch:integration / shim-real
# 12 cases passed in 3.5 s
# (0.1 s)
not ok 3 - [hybrid] integration suite inside: shimwatch:integration / dbus-integration
# Traceback (most recent call last):
#   File "/usr/local/lib/shimwatch-test/checks.py", line 67, in wrap
# AssertionError: FAIL, skipped: []
# not ok 17 - __main__.NormalPathTests.test_kill_then_delete
# AssertionError: timed out after 2 s waiting for Status stopped
# (0.0 s)
# the service's journal, last lines:
# -- No entries --
ok 4 - [hybrid] integration suite inside: shimwatch:integration / polkit-hang
# 3 cases passed in 20.1 s
# checks finished: 3 passed, 1 failed
# [hybrid] boot, checks and shutdown took 118 s (shutdown: 2 s)
1..4
"""

# GLib's TAP: the message comes first
GLIB_STDOUT = """# random seed: R02S
1..3
# Start of cgroup tests
ok 1 /cgroup/create
# Bail out! shimwatch:ERROR:../tests/test-cgroup.c:88:test_kill: assertion failed (n == 3): (2 == 3)
not ok 2 /cgroup/kill
ok 3 /cgroup/remove
# End of cgroup tests
"""

def assert_in_order(lines, wanted):
    """wanted appear in lines, each once, in this order."""
    at = -1
    for w in wanted:
        assert lines.count(w) == 1, f"{w!r} shown {lines.count(w)} times:\n" + "\n".join(lines)
        assert lines.index(w) > at, f"{w!r} out of order:\n" + "\n".join(lines)
        at = lines.index(w)


@case
def the_story_after_not_ok_is_shown():
    """boot.sh and checks.py tell why after the "not ok" line: all of it is shown, and
    nothing of the cases that passed."""
    lines, status = summarize([
        {"name": "shimwatch:systemd / systemd-boot", "result": "ERROR", "stdout": BOOT_STDOUT}])
    assert status == 0, status
    story = BOOT_STDOUT.splitlines()[5:14]
    assert_in_order(lines, ["--- shimwatch:systemd / systemd-boot: ERROR ---"] + story +
                    ["3 passed, 1 failed, 0 skipped"])
    for passed in ("# 3 cases passed in 20.1 s", "# checks finished: 3 passed, 1 failed",
                   "ok 4 - [hybrid] integration suite inside: shimwatch:integration / polkit-hang"):
        assert passed not in lines, f"{passed!r} shown:\n" + "\n".join(lines)
    assert lines[-1] == "3 passed, 1 failed, 0 skipped", lines[-1]


@case
def the_story_before_not_ok_is_shown():
    """GLib's TAP tells why before the "not ok" line."""
    lines, _ = summarize([
        {"name": "shimwatch:unit / cgroup", "result": "FAIL", "stdout": GLIB_STDOUT}])
    assert_in_order(lines, ["--- shimwatch:unit / cgroup: FAIL ---",
                            GLIB_STDOUT.splitlines()[4], "not ok 2 /cgroup/kill",
                            "2 passed, 1 failed, 0 skipped"])
    assert "ok 1 /cgroup/create" not in lines and "# Start of cgroup tests" not in lines, lines


@case
def diagnostics_between_two_failures_are_shown_once():
    stdout = "ok 1 - a\nnot ok 2 - b\n# why b\n# why c, or more of b\nnot ok 3 - c\n# after c\n"
    lines, _ = summarize([{"name": "t", "result": "FAIL", "stdout": stdout}])
    assert_in_order(lines, ["not ok 2 - b", "# why b", "# why c, or more of b", "not ok 3 - c",
                            "# after c", "1 passed, 2 failed, 0 skipped"])


@case
def a_long_story_is_bounded_with_its_reason_and_its_end():
    stdout = ("ok 1 - a\n" + "".join(f"noise {i}\n" for i in range(5000)) + "not ok 2 - b\n"
              "# the reason\n" + "".join(f"# detail {i}\n" for i in range(5000)) +
              "# the end\nok 3 - c\n")
    lines, _ = summarize([{"name": "t", "result": "FAIL", "stdout": stdout}])
    assert len(lines) < 700, len(lines)
    assert_in_order(lines, ["noise 4999", "not ok 2 - b", "# the reason", "# the end",
                            "2 passed, 1 failed, 0 skipped"])
    assert "noise 0" not in lines and "# detail 2500" not in lines, "not bounded"
    assert any("lines left out" in l for l in lines), "the cut is not said"


@case
def many_failures_are_bounded():
    stdout = "".join(f"not ok {i} - c{i}\n" + "# why\n" * 50 for i in range(1, 1001))
    lines, _ = summarize([{"name": "t", "result": "FAIL", "stdout": stdout}])
    assert len(lines) < 2200, len(lines)
    assert "not ok 1 - c1" in lines and "not ok 1000 - c1000" not in lines
    assert any("more failed cases left out" in l for l in lines), "the cut is not said"
    assert lines[-1] == "0 passed, 1000 failed, 0 skipped", lines[-1]


@case
def the_count_line_is_exact():
    """Each TAP case counts once; a test without TAP, or that cannot be trusted, as one."""
    lines, status = summarize([
        {"name": "a", "result": "OK", "stdout": "1..3\nok 1 x\nok 2 y # SKIP no strace\nok 3 z\n"},
        {"name": "b", "result": "OK", "stdout": ""},                          # no TAP: 1 passed
        {"name": "c", "result": "SKIP", "stdout": "1..0 # SKIP not root\n"},  # 1 skipped
        {"name": "d", "result": "FAIL", "stdout": "ok 1 x\nnot ok 2 y\n# why\n"},
        {"name": "e", "result": "FAIL", "stdout": "ok 1 v\nok 2 w\n"},        # failed after
        {"name": "f", "result": "TIMEOUT", "stdout": "ok 1 x\n"},             # one failure
        {"name": "g", "result": "ERROR", "stdout": "ok 1 x\n"},               # untrusted: 1
    ])
    assert status == 0, status
    assert lines[-1] == "6 passed, 4 failed, 2 skipped", lines[-1]
    # a test that failed without a "not ok" line: its last words
    assert_in_order(lines, ["--- e: FAIL ---", "ok 1 v", "ok 2 w", "--- f: TIMEOUT ---"])


@case
def a_skip_fails_in_ci():
    entries = [{"name": "a", "result": "OK", "stdout": "ok 1 x # SKIP no strace\n"}]
    lines, status = summarize(entries, ci=True)
    assert status == 1 and lines[-2] == "0 passed, 0 failed, 1 skipped", (status, lines)
    assert summarize(entries)[1] == 0


finish()
