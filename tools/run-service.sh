#!/bin/bash
# Run shimwatchd by hand where no system bus and no systemd run (a container, a CI
# machine, a minimal VM): start a private system bus with the project's bus policy and a
# real polkitd that knows the project's actions, then shimwatchd on that bus, in the
# foreground. It prints the line to export in another shell so that shimwatchctl, busctl
# and gdbus talk to it:
#
#     sudo bash tools/run-service.sh [SHIMWATCHD-OPTION...]
#     export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/tmp/shimwatch-bus-XXXXXX/system_bus_socket
#
# Ctrl+C stops the service, polkitd and the bus (shims and containers keep running, as
# with the real service; `shimwatchctl reap` them first if they should go). Nothing on
# the host is changed: the bus and polkitd live in a temporary directory, polkitd in a
# mount namespace of its own. The service uses its normal directories (/run/shimwatch,
# /var/lib/shimwatch) unless --runtime-dir/--state-dir say otherwise.
# Environment: BUILD_DIR (default _build), SHIMWATCHD (a shimwatchd to run instead of the
# built one, e.g. /usr/libexec/shimwatchd).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/_build}

if [ "$(id -u)" -ne 0 ]; then
  echo "run-service: run it as root: only root may own org.shimwatch.Shimwatch1, and shims need root" >&2
  exit 1
fi

if [ -z "${SHIMWATCH_RUN_SERVICE_BUS:-}" ]; then
  if [ -z "${SHIMWATCHD:-}" ]; then
    [ -f "$build/build.ninja" ] || meson setup "$build" >&2
    ninja -C "$build" >&2
  fi
  # polkitd is shown only the project's actions (the built policy, or the installed one)
  policy=${SHIMWATCH_POLICY_FILE:-$build/data/org.shimwatch.policy}
  [ -f "$policy" ] || policy=/usr/share/polkit-1/actions/org.shimwatch.policy
  SHIMWATCH_RUN_SERVICE_BUS=1 SHIMWATCH_POLICY_FILE="$policy" PROJECT_DATA="$top/data" \
    SHIMWATCH_TEST_RULES=/dev/null exec bash "$top/tests/with-system-bus.sh" bash "$0" "$@"
fi

daemon=${SHIMWATCHD:-$build/service/shimwatchd}
"$daemon" "$@" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 200); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run-service: shimwatchd exited" >&2
    exit 1
  fi
  gdbus call --system --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
    --method org.freedesktop.DBus.NameHasOwner org.shimwatch.Shimwatch1 2>/dev/null |
    grep -q true && break
  sleep 0.05
done

echo "run-service: shimwatchd (pid $pid) is on a private system bus; in another shell:" >&2
echo "export DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS"
echo "run-service: then e.g. 'shimwatchctl list -A' or '$build/client/shimwatchctl monitor'. Ctrl+C stops it." >&2
wait "$pid"
