#!/bin/bash
# Install what is missing, build with warnings as errors, run the whole test suite, and
# end with one line "N passed, N failed, N skipped" computed from meson's testlog.json
# (each GTest case counts once). In CI (CI=true) a skipped test is a failure: CI runs as
# root with every package installed, so nothing has a reason to skip there.
#
# Two builds: $BUILD_DIR (default _build: gcc, the default options) and $SANITIZE_DIR
# (default _build-sanitize: clang 14, ASan + UBSan, the libFuzzer harnesses). The whole
# suite runs in both; in the second one, with tests/lsan.supp, it includes the fuzz suite
# (each harness for SHIMWATCH_FUZZ_SECONDS, default 25 s). Both builds' testlog.json count
# into the final line. SHIMWATCH_LAND_QUICK=1 (landings only, never CI) still builds the
# sanitizer build but runs no test there, and the leak check lists but does not judge new
# entries in /tmp (other worktrees' runs share the machine then).
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/_build}
sanitize=${SANITIZE_DIR:-$top/_build-sanitize}
cd "$top"

bash tools/install-deps.sh || exit 1

# the tests need the crash points (-Dtest_hooks=true), which a plain build leaves out; a
# build directory the demo or a person configured without them is reconfigured
with_test_hooks () {
  meson introspect "$1" --buildoptions | /usr/bin/python3 -c 'import json, sys
sys.exit(not any(o["name"] == "test_hooks" and o["value"] for o in json.load(sys.stdin)))' ||
    meson configure "$1" -Dtest_hooks=true
}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --werror --warnlevel 2 -Dtest_hooks=true || exit 1
fi
with_test_hooks "$build" || exit 1
ninja -C "$build" || exit 1
if [ ! -f "$sanitize/build.ninja" ]; then
  CC=clang-14 meson setup "$sanitize" --werror --warnlevel 2 -Db_sanitize=address,undefined \
    -Db_lundef=false -Dfuzzing=true -Dtest_hooks=true || exit 1
fi
with_test_hooks "$sanitize" || exit 1
ninja -C "$sanitize" || exit 1

if [ "${SHIMWATCH_LAND_QUICK:-0}" = 1 ]; then
  export SHIMWATCH_LEAK_SHARED_TMP=1
fi
meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
status=$?
cp "$build/meson-logs/testlog.json" "$build/meson-logs/testlog-all.json"

if [ "${SHIMWATCH_LAND_QUICK:-0}" != 1 ]; then
  # any report fails its test (abort_on_error: meson sees it die; UBSan halts); GLib's
  # one-time allocations are suppressed by tests/lsan.supp
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LSAN_OPTIONS=suppressions=$top/tests/lsan.supp \
    meson test -C "$sanitize" --print-errorlogs --num-processes 2 "$@" || status=1
  cat "$sanitize/meson-logs/testlog.json" >> "$build/meson-logs/testlog-all.json"
else
  echo "run-tests: SHIMWATCH_LAND_QUICK=1: the sanitizer build is built; its suite and the fuzz suite are not run"
fi

# what each failed test said (before and after its "not ok" lines), and the count line
/usr/bin/python3 tools/testlog-summary.py "$build/meson-logs/testlog-all.json"
summary=$?
[ $status -eq 0 ] && [ $summary -eq 0 ]
