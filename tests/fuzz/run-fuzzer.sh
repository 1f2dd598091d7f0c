#!/bin/bash
# run-fuzzer.sh FUZZER SEED_DIR WORK_DIR: run a libFuzzer harness for a bounded time
# (SHIMWATCH_FUZZ_SECONDS, default 25 s), starting from the repository's seed corpus and
# from what earlier runs in this build directory found (WORK_DIR/corpus). A crash, a leak
# or a sanitizer report fails the test; the input is kept in WORK_DIR/artifacts and its
# path printed, to be replayed with `FUZZER INPUT`. libFuzzer exits 77 on a crash by
# default, which meson would count as a skip: every failure exits 1 here.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
seconds=${SHIMWATCH_FUZZ_SECONDS:-25}
mkdir -p "$work/corpus" "$work/artifacts"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
