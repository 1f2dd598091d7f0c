#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Whether shimwatchd carries the machinery that exists only for the tests (-Dtest_hooks):
# the crash points and their environment variables, the signal ledger's halt before a
# crash point, the counters of the commit queue, the ledger, the record committer and the
# health checks, the commit queue's hold, the health checks' shorter tick, the smaller ttrpc
# output cap, and the failure injected into pidfd_open(2).
#
#   check-test-hooks.sh SHIMWATCHD absent    a default build: none of it (exit 1 if any)
#   check-test-hooks.sh SHIMWATCHD present   a -Dtest_hooks=true build: all of it, so that
#                                            the names looked for are the real ones
#
# TAP on stdout. The symbol table is read with nm(1): a stripped binary fails, since its
# absence of symbols would prove nothing.
set -u
binary=${1:?usage: check-test-hooks.sh SHIMWATCHD absent|present}
mode=${2:?usage: check-test-hooks.sh SHIMWATCHD absent|present}

# functions that exist only for the tests
symbols=(
  shimwatch_spawn_set_pidfd_open_errno_for_tests
  shimwatch_commit_queue_get_n_batches
  shimwatch_commit_queue_get_n_syncs
  shimwatch_commit_queue_set_held
  shimwatch_record_committer_get_n_flushes
  shimwatch_signal_ledger_get_n_wakeups
  shimwatch_signal_ledger_get_n_broadcasts
  shimwatch_signal_ledger_crash_point_after_write
  shimwatch_signal_ledger_crash_point_after_earlier
  shimwatch_health_scheduler_set_min_tick
  shimwatch_health_scheduler_get_n_ticks
  shimwatch_health_scheduler_get_n_checks
  shimwatch_ttrpc_set_output_limit
)
# what the test hooks read or print
texts=(
  SHIMWATCH_TEST_CRASH_AT
  SHIMWATCH_TEST_CRASH_SIGNAL
  SHIMWATCH_TEST_POLKIT_TIMEOUT_MS
  "(test hook)"
)

n=0
failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

if [ ! -x "$binary" ]; then
  fail "$binary is an executable"
  echo "1..$n"
  exit 1
fi
defined=$(nm --defined-only "$binary" 2>/dev/null | awk '{print $NF}')
# a symbol every build has: else the table is gone and proves nothing
if ! grep -qx shimwatch_spawn_start_spawner <<<"$defined"; then
  fail "$binary has a symbol table" "nm finds no shimwatch_spawn_start_spawner (stripped?)"
  echo "1..$n"
  exit 1
fi
ok "$binary has a symbol table"
all_strings=$(strings -a "$binary")

for symbol in "${symbols[@]}"; do
  if grep -qx "$symbol" <<<"$defined"; then has=present; else has=absent; fi
  if [ "$has" = "$mode" ]; then
    ok "$symbol is $mode"
  else
    fail "$symbol is $mode" "found: $has"
  fi
done
for text in "${texts[@]}"; do
  if grep -qF -- "$text" <<<"$all_strings"; then has=present; else has=absent; fi
  if [ "$has" = "$mode" ]; then
    ok "\"$text\" is $mode"
  else
    fail "\"$text\" is $mode" "found: $has"
  fi
done
# and nothing else of the kind, whatever it is called
if [ "$mode" = absent ]; then
  stray=$(grep -E '_for_tests$|crash_point' <<<"$defined"; grep -E 'SHIMWATCH_TEST_' <<<"$all_strings")
  if [ -z "$stray" ]; then
    ok "no other test-only symbol or variable"
  else
    fail "no other test-only symbol or variable" $stray
  fi
fi
echo "1..$n"
exit $failed
