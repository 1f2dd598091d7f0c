# SPDX-License-Identifier: Apache-2.0
"""TAP from plain functions, for the tests that need no unittest: each function decorated
with @case runs at once and prints its "ok" or "not ok" line, a failure's traceback after
it as comments; finish() prints the plan and exits with the outcome."""

import sys
import traceback

results = []


def case(function):
    try:
        function()
        ok, why = True, ""
    except Exception:
        ok, why = False, traceback.format_exc()
    results.append(ok)
    print(f"{'ok' if ok else 'not ok'} {len(results)} - {function.__name__}")
    for line in why.splitlines():
        print(f"# {line}")
    return function


def finish():
    print(f"1..{len(results)}")
    sys.exit(0 if all(results) else 1)
