#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The end of tools/run-tests.sh: from meson's testlog.json (one JSON object a line, the
builds' logs concatenated), show what each failed test said, and end with the one line CI
reads, "N passed, N failed, N skipped" (each TAP case counts once).

    testlog-summary.py TESTLOG.json

In CI (CI=true) a skipped test is a failure: the exit status is 1 then.

meson --print-errorlogs shows only stderr, and a TAP test says why it failed on stdout,
on either side of its "not ok" line: GLib's TAP writes the message first, the project's
Python suites write the service's log and the traceback first, and tests/systemd
(checks.py, boot.sh) write their story as "# ..." diagnostics after it. A CI log alone must
explain a failure, so both sides are shown, each bounded.

tests/systemd/checks.py imports failure_story() to tell the story of the integration
suite it runs inside the container."""

import json
import os
import re
import sys

TAP_LINE = re.compile(r"^(not )?ok \d+")
BEFORE_LINES = 200      # of what a failed case wrote before its "not ok" line
AFTER_LINES = 400       # of the "#" diagnostics after it (checks.py's: up to ~350)
TEST_LINES = 2000       # of all the stories of one test
TAIL_LINES = 150        # of the output of a test that failed without a "not ok" line


def _bounded(lines, limit, keep_head):
    """At most limit lines; what is left out is said. keep_head: the first lines matter
    (a story told after "not ok" starts with its reason), else the last."""
    if len(lines) <= limit:
        return lines
    left_out = f"# [testlog-summary: {len(lines) - limit + 1} lines left out]"
    if keep_head:
        head = limit // 4
        return lines[:head] + [left_out] + lines[len(lines) - (limit - head - 1):]
    return [left_out] + lines[len(lines) - (limit - 1):]


def failure_story(stdout, before=BEFORE_LINES, after=AFTER_LINES, total=TEST_LINES):
    """The lines that explain the failed cases of one TAP output: for each "not ok" line,
    what was written since the previous TAP line, the line itself, and the "#"
    diagnostics that follow it up to the next TAP line; None without a "not ok" line."""
    lines = stdout.splitlines()
    tap = [i for i, l in enumerate(lines) if TAP_LINE.match(l)]
    out = []
    shown = set()         # the "#" lines after a "not ok", not to be shown again before the next
    failures = [i for i in tap if lines[i].startswith("not ok")]
    for n, at in enumerate(failures):
        previous = max([i for i in tap if i < at], default=-1)
        following = min([i for i in tap if i > at], default=len(lines))
        story = _bounded([lines[i] for i in range(previous + 1, at) if i not in shown], before,
                         keep_head=False)
        story.append(lines[at])
        diagnostics = [i for i in range(at + 1, following) if lines[i].startswith("#")]
        story += _bounded([lines[i] for i in diagnostics], after, keep_head=True)
        if len(out) + len(story) > total:
            out.append(f"# [testlog-summary: the stories of {len(failures) - n} more failed "
                       f"cases left out; meson-logs/testlog.txt has them]")
            break
        out += story
        shown.update(diagnostics)
    return out if failures else None


def count(entries):
    passed = failed = skipped = 0
    for entry in entries:
        result = entry.get("result")
        tap = [l for l in (entry.get("stdout") or "").splitlines() if TAP_LINE.match(l)]
        said_why = any(l.startswith("not ok") for l in tap)
        if not tap or result == "TIMEOUT" or (result == "ERROR" and not said_why):
            # no per-case output (or it cannot be trusted): count the test as one
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
            continue
        for l in tap:
            if re.search(r"#\s*SKIP", l, re.I):
                skipped += 1
            elif l.startswith("not ok"):
                failed += 1
            else:
                passed += 1
        if result in ("FAIL", "ERROR") and not said_why:
            failed += 1      # crashed after its last TAP line
    return passed, failed, skipped


def main(path):
    with open(path) as log:
        entries = [json.loads(line) for line in log if line.strip()]
    passed, failed, skipped = count(entries)
    for entry in entries:
        if entry.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
            continue
        out = entry.get("stdout") or ""
        print(f"--- {entry.get('name')}: {entry.get('result')} ---")
        story = failure_story(out)
        if story is None:      # failed without a "not ok" line: its last words
            story = out.splitlines()[-TAIL_LINES:]
        print("\n".join(story))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if skipped and os.environ.get("CI") == "true":
        print("CI: skipped tests count as failures (everything is installed and we are root)")
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} TESTLOG.json")
    sys.exit(main(sys.argv[1]))
