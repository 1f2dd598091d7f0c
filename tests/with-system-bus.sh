#!/bin/bash
# Run a command against a private, policy-enforcing system bus that loads the project's
# own data/dbus-1/*.conf (docs/test-harness.md §2). DBUS_SYSTEM_BUS_ADDRESS points at it.
# Usage: with-system-bus.sh COMMAND [ARGS...]; PROJECT_DATA names the data/ directory.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "1..0 # SKIP a private system bus with the project's policy needs root"
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
data=${PROJECT_DATA:-$here/../data}

# (SHIMWATCH_TEST_TMPDIR: where the bus's directory goes; its own test's, not /tmp)
run=$(mktemp -d "${SHIMWATCH_TEST_TMPDIR:-/tmp}/shimwatch-bus-XXXXXX")
bus_pid=
# set before anything else can fail: however the script ends, the directory goes
cleanup () {
  if [ -n "$bus_pid" ]; then
    kill "$bus_pid" 2>/dev/null || true
    wait "$bus_pid" 2>/dev/null || true
  fi
  rm -rf "$run"
}
trap cleanup EXIT
trap "exit 143" TERM INT HUP

if ! compgen -G "$data/dbus-1/*.conf" >/dev/null; then
  echo "Bail out! no bus policy (*.conf) in $data/dbus-1: PROJECT_DATA names the project's data/ directory"
  exit 1
fi
chmod 755 "$run"
mkdir -p "$run/policy" "$run/services"
cp "$data"/dbus-1/*.conf "$run/policy/"
sed -e "s|@RUNDIR@|$run|" -e "s|@SERVICEDIR@|$run/services|" -e "s|@POLICYDIR@|$run/policy|" \
  "$here/system-bus.conf.in" > "$run/bus.conf"

dbus-daemon --config-file="$run/bus.conf" --nofork --print-address=3 \
  3>"$run/address" >"$run/bus.log" 2>&1 &
bus_pid=$!

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

name_has_owner () {
  gdbus call --system --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
    --method org.freedesktop.DBus.NameHasOwner "$1" 2>/dev/null | grep -q true
}

# polkit: SHIMWATCH_POLKIT=real (default) runs the real polkitd, isolated in a mount
# namespace that shows it only the project's policy and the test rules (docs/test-harness.md
# §3); =mock runs python-dbusmock's polkitd template (for a hanging authority).
case "${SHIMWATCH_POLKIT:-real}" in
  real)
    policy=${SHIMWATCH_POLICY_FILE:?SHIMWATCH_POLICY_FILE names the built org.shimwatch.policy}
    rules=${SHIMWATCH_TEST_RULES:-$here/50-test-shimwatch.rules}
    pk=$run/polkit
    mkdir -p "$pk/actions" "$pk/rules.d" "$pk/empty"
    cp "$policy" "$pk/actions/"
    cp "$rules" "$pk/rules.d/"
    chmod -R a+rX "$pk"
    unshare --mount --propagation private sh -c "
      mount --bind '$pk/actions' /usr/share/polkit-1/actions &&
      mount --bind '$pk/rules.d' /etc/polkit-1/rules.d &&
      mount --bind '$pk/empty' /usr/share/polkit-1/rules.d &&
      exec /usr/lib/polkit-1/polkitd --no-debug" >"$run/polkitd.log" 2>&1 &
    polkit_pid=$!
    ;;
  mock)
    install -d -o polkitd "$run/mock"
    # in /: the polkitd user may not reach the directory this runs in (a private checkout)
    (cd / && exec setpriv --reuid=polkitd --regid=polkitd --init-groups /usr/bin/python3 -m \
      dbusmock --template polkitd -l "$run/mock/dbusmock.log") >/dev/null 2>&1 &
    polkit_pid=$!
    ;;
  *)
    polkit_pid=
    ;;
esac
if [ -n "$polkit_pid" ]; then
  trap 'kill $polkit_pid 2>/dev/null || true; wait $polkit_pid 2>/dev/null || true; cleanup' EXIT
  for _ in $(seq 200); do
    name_has_owner org.freedesktop.PolicyKit1 && break
    sleep 0.05
  done
  if ! name_has_owner org.freedesktop.PolicyKit1; then
    echo "Bail out! polkitd did not start:"
    sed 's/^/# /' "$run/polkitd.log" 2>/dev/null || true
    exit 1
  fi
fi
"$@"
