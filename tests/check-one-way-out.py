#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every Manager signal leaves through the publisher (shimwatch-publisher.c), where the
signal ledger and the records expect it: nothing else in service/ calls the generated
shimwatch_dbus_manager_emit_*() or emits a signal on the connection itself. TAP on stdout.

  check-one-way-out.py SERVICE_DIR"""

import glob
import os
import re
import sys

service = sys.argv[1]
found = []
n_files = 0
for path in sorted(glob.glob(os.path.join(service, "*.c"))):
    name = os.path.basename(path)
    n_files += 1
    if name == "shimwatch-publisher.c":
        continue
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if re.search(r"\bshimwatch_dbus_manager_emit_\w+\s*\(|\bg_dbus_connection_emit_signal\s*\(",
                     line):
            found.append(f"{name}:{number}: {line.strip()}")

print(f"{'ok' if n_files > 0 else 'not ok'} 1 - service/ has C files")
print(f"{'not ok' if found else 'ok'} 2 - every Manager signal leaves through the publisher")
for line in found:
    print(f"# {line}")
print("1..2")
sys.exit(1 if found or n_files == 0 else 0)
