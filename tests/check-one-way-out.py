#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every Manager signal leaves through the publisher (shimwatch-publisher.c), where the
signal ledger and the records expect it: nothing else in service/ calls the generated
shimwatch_dbus_manager_emit_*() or emits a signal on the connection itself; and a
lifecycle signal's mark is made only by the publisher, with its signal (nothing else
hands the record committer a signal, or emits a bare member). TAP on stdout.

  check-one-way-out.py SERVICE_DIR"""

import glob
import os
import re
import sys

service = sys.argv[1]
found = []
marks = []
n_files = 0
for path in sorted(glob.glob(os.path.join(service, "**", "*.c"), recursive=True)):
    name = os.path.basename(path)
    n_files += 1
    if name == "shimwatch-publisher.c":
        continue
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if re.search(r"\bshimwatch_dbus_manager_emit_\w+\s*\(|\bg_dbus_connection_emit_signal\s*\(",
                     line):
            found.append(f"{name}:{number}: {line.strip()}")
        # a call, not the definition (which starts its line)
        if re.search(r"(?<=\W)(shimwatch_publisher_emit|shimwatch_record_committer_expect"
                     r"|shimwatch_signal_ledger_crash_point_after_earlier)\s*\(", line):
            marks.append(f"{name}:{number}: {line.strip()}")

print(f"{'ok' if n_files > 0 else 'not ok'} 1 - service/ has C files")
print(f"{'not ok' if found else 'ok'} 2 - every Manager signal leaves through the publisher")
for line in found:
    print(f"# {line}")
print(f"{'not ok' if marks else 'ok'} 3 - a lifecycle signal's mark is made by the publisher, with its signal")
for line in marks:
    print(f"# {line}")
print("1..3")
sys.exit(1 if found or marks or n_files == 0 else 0)
