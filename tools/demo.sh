#!/bin/bash
# The main job, live: shimwatchd supervises a real busybox container under the real
# containerd-shim-runc-v2; the shim is SIGKILLed; the signals appear as they are emitted
# and nothing of the task is left on disk. Run as root on Debian 12.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/_build}
cd "$top"
bash tools/install-deps.sh
[ -f "$build/build.ninja" ] || meson setup "$build" --werror >/dev/null
ninja -C "$build" >/dev/null

say () { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# A private system bus with the project's bus policy and a real polkitd that knows only
# the project's policy (tests/with-system-bus.sh): nothing on the host is changed.
if [ -z "${SHIMWATCH_DEMO_BUS:-}" ]; then
  say "starting a private system bus (data/dbus-1 policy) and an isolated polkitd"
  SHIMWATCH_DEMO_BUS=1 SHIMWATCH_POLICY_FILE="$build/data/org.shimwatch.policy" \
    PROJECT_DATA="$top/data" exec bash tests/with-system-bus.sh bash "$0" "$@"
fi

# made after the exec above, so that the run that removes it is the one that made it
work=$(mktemp -d /tmp/shimwatch-demo-XXXXXX)
runtime_dir=$work/run
pids=()
finish () {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap finish EXIT

say "starting shimwatchd (runtime directory $runtime_dir)"
# settings of its own: nothing of the host's configuration, and its metrics textfile in
# the demo's directory rather than node_exporter's
mkdir -p "$work/metrics"
printf '[Service]\nMetricsDirectory=%s\n' "$work/metrics" > "$work/shimwatch.conf"
"$build/service/shimwatchd" --runtime-dir "$runtime_dir" --state-dir "$work/state" \
  --config "$work/shimwatch.conf" >"$work/shimwatchd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  gdbus call --system --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
    --method org.freedesktop.DBus.NameHasOwner org.shimwatch.Shimwatch1 2>/dev/null | grep -q true && break
  sleep 0.05
done

say "watching the bus: gdbus monitor --system --dest org.shimwatch.Shimwatch1"
stdbuf -oL gdbus monitor --system --dest org.shimwatch.Shimwatch1 > >(sed -u 's/^/  [bus] /') &
pids+=($!)
sleep 0.5

say "making a busybox bundle and calling CreateTask"
bash tools/make-bundle.sh "$work/bundle" sleep 100000
shim=$(gdbus call --system --dest org.shimwatch.Shimwatch1 --object-path /org/shimwatch/Shimwatch1 \
  --method org.shimwatch.Shimwatch1.Manager.CreateTask demo web1 "$work/bundle" '{}')
echo "  CreateTask -> $shim"
path=$(echo "$shim" | sed -E "s/^\(objectpath '([^']*)',\)$/\1/")
prop () {
  gdbus call --system --dest org.shimwatch.Shimwatch1 --object-path "$path" \
    --method org.freedesktop.DBus.Properties.Get org.shimwatch.Shimwatch1.Shim "$1" |
    sed -E 's/^\(<(uint32 )?(.*)>,\)$/\2/'
}
shim_pid=$(prop ShimPid); task_pid=$(prop TaskPid); task_dir=$(prop Bundle | tr -d "'")
address=$(prop Address | tr -d "'")
echo "  Status=$(prop Status) ShimPid=$shim_pid TaskPid=$task_pid"
echo "  container: $(ps -o pid=,comm=,args= -p "$task_pid")"
echo "  task dir:  $task_dir"
echo "  socket:    ${address#unix://}"
echo "  runc state: $runtime_dir/runc/demo/web1"
sleep 0.5

say "kill -9 $shim_pid   (the shim dies under a running container)"
kill -9 "$shim_pid"
sleep 1.5

say "afterwards"
gone () { if [ -e "$1" ]; then echo "  STILL THERE: $1"; return 1; else echo "  gone: $1"; fi; }
ok=0
gone "$task_dir" || ok=1
gone "${address#unix://}" || ok=1
gone "$runtime_dir/runc/demo/web1" || ok=1
state=$(ps -o stat= -p "$task_pid" 2>/dev/null || true)
if [ -z "$state" ] || [[ "$state" == Z* ]]; then echo "  gone: container process $task_pid"
else echo "  STILL RUNNING: container process $task_pid"; ok=1; fi
echo "  ListShims -> $(gdbus call --system --dest org.shimwatch.Shimwatch1 \
  --object-path /org/shimwatch/Shimwatch1 --method org.shimwatch.Shimwatch1.Manager.ListShims)"

say "shimwatchd's log"
sed 's/^/  /' "$work/shimwatchd.log"
exit $ok
