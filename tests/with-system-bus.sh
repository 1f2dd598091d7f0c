#!/bin/bash
# Run a command against a private, policy-enforcing system bus that loads the project's
# own data/dbus-1/*.conf (test-harness.md §2). DBUS_SYSTEM_BUS_ADDRESS points at it.
# Usage: with-system-bus.sh COMMAND [ARGS...]; PROJECT_DATA names the data/ directory.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "1..0 # SKIP a private system bus with the project's policy needs root"
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
data=${PROJECT_DATA:-$here/../data}

run=$(mktemp -d /tmp/shimwatch-bus-XXXXXX)
chmod 755 "$run"
mkdir -p "$run/policy" "$run/services"
cp "$data"/dbus-1/*.conf "$run/policy/"
sed -e "s|@RUNDIR@|$run|" -e "s|@SERVICEDIR@|$run/services|" -e "s|@POLICYDIR@|$run/policy|" \
  "$here/system-bus.conf.in" > "$run/bus.conf"

dbus-daemon --config-file="$run/bus.conf" --nofork --print-address=3 \
  3>"$run/address" >"$run/bus.log" 2>&1 &
bus_pid=$!
cleanup () {
  kill "$bus_pid" 2>/dev/null || true
  wait "$bus_pid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT

for _ in $(seq 100); do
  [ -s "$run/address" ] && break
  sleep 0.05
done
if [ ! -s "$run/address" ]; then
  echo "Bail out! dbus-daemon did not start:"; sed 's/^/# /' "$run/bus.log"
  exit 1
fi
export DBUS_SYSTEM_BUS_ADDRESS=$(head -n 1 "$run/address")
export SHIMWATCH_TEST_BUS_DIR=$run
"$@"
