#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# shimwatch under a real systemd: boot Debian 12's systemd as PID 1 of a systemd-nspawn
# container, with the project installed by `meson install`, and run the checks
# (checks.py) as a unit inside, then the project's integration suite. Output: TAP, one
# line per check, on every cgroup layout asked for.
#
# Usage: boot.sh SOURCE_DIR BUILD_DIR
#   SHIMWATCH_SYSTEMD_LAYOUTS  "hybrid unified" (default; SHIMWATCH_LAND_QUICK=1: hybrid)
#   SHIMWATCH_SYSTEMD_SUITE    0 to leave out the integration suite inside
#   SHIMWATCH_TEST_CACHE       where the root file system is kept (/var/cache/shimwatch-test)
#   SHIMWATCH_SYSTEMD_INSTALL  meson (default): `meson install` into the root; deb: the
#                              Debian packages (build-debs.sh, cached in BUILD_DIR) installed
#                              with apt, the checks against them, then the package's own
#                              (deb-checks.py: upgrade with a task running, purge); one
#                              layout (hybrid) and no integration suite unless asked for
#
# The root file system is built once per machine (make-rootfs.sh) and never modified: each
# boot gets an overlay on top of it, in a private mount namespace, removed afterwards. The
# container is stopped by the PID of its systemd-nspawn; nothing of it is left: no
# process, no mount, no overlay directory, no cgroup.
set -uo pipefail

src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
here=$src/tests/systemd
cache=${SHIMWATCH_TEST_CACHE:-/var/cache/shimwatch-test}
install_mode=${SHIMWATCH_SYSTEMD_INSTALL:-meson}
if [ "${SHIMWATCH_LAND_QUICK:-0}" = 1 ] || [ "$install_mode" = deb ]; then
  layouts=${SHIMWATCH_SYSTEMD_LAYOUTS:-hybrid}
else
  layouts=${SHIMWATCH_SYSTEMD_LAYOUTS:-hybrid unified}
fi
boot_timeout=${SHIMWATCH_SYSTEMD_TIMEOUT:-420}

skip () { echo "1..0 # SKIP $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "booting systemd in a container needs root"
for tool in systemd-nspawn debootstrap $([ "$install_mode" = deb ] && echo dpkg-buildpackage lintian); do
  command -v "$tool" > /dev/null ||
    skip "$tool is not installed (tools/install-deps.sh installs systemd-container and debootstrap)"
done
[ -d /sys/fs/cgroup ] || skip "no cgroup file system"

# everything below runs in a private mount namespace: our overlay mounts cannot outlive us
if [ -z "${SHIMWATCH_BOOT_UNSHARED:-}" ]; then
  # systemd-nspawn makes /run/systemd/nspawn/{locks,propagate}: gone again afterwards if
  # they were not there before
  [ -e /run/systemd/nspawn ] || export SHIMWATCH_BOOT_RM_NSPAWN_RUN=1
  SHIMWATCH_BOOT_UNSHARED=1 exec unshare --mount --propagation private -- "$0" "$@"
fi

n=0
failed=0
tap () {   # tap OK|FAIL DESCRIPTION [DIAGNOSTIC FILE]
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2"; else failed=1; echo "not ok $n - $2"; fi
  if [ $# -gt 2 ] && [ -s "$3" ]; then sed 's/^/# /' "$3"; fi
}

work=$(mktemp -d /var/tmp/shimwatch-boot-XXXXXX)
cgroups=()
nspawn_pid=
cleanup () {
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2> /dev/null; then
    kill -TERM "$nspawn_pid" 2> /dev/null
    for _ in $(seq 100); do kill -0 "$nspawn_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2> /dev/null
    wait "$nspawn_pid" 2> /dev/null
  fi
  umount -R "$work/root" 2> /dev/null
  # the cgroups made for the container, deepest first (their processes died with it)
  for cg in "${cgroups[@]}"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2> /dev/null
  done
  rm -rf --one-file-system "$work"
  if [ -n "${SHIMWATCH_BOOT_RM_NSPAWN_RUN:-}" ]; then
    rmdir /run/systemd/nspawn/locks /run/systemd/nspawn/propagate /run/systemd/nspawn \
      2> /dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# -- the root file system and the project installed on top of it ------------------------

log=$work/prepare.log
if ! rootfs=$(bash "$here/make-rootfs.sh" "$cache" 2> "$log"); then
  tap FAIL "a Debian 12 root file system is built (make-rootfs.sh)" "$log"
  echo "1..$n"; exit 1
fi

# the packages, built once per source tree (deb mode), checked by lintian
finished_marker='^# checks finished'
if [ "$install_mode" = deb ]; then
  finished_marker='^# package checks finished'
  : "${SHIMWATCH_SYSTEMD_SUITE:=0}"
  started=$SECONDS
  if debs=$(bash "$here/build-debs.sh" "$src" "$build/systemd-debs" 2> "$log"); then
    tap OK "dpkg-buildpackage -us -uc -b builds both packages, and a rebuilt +test1 ($((SECONDS - started)) s; cached by the sources' hash)"
  else
    tap FAIL "dpkg-buildpackage -us -uc -b builds both packages, and a rebuilt +test1" "$log"
    echo "1..$n"; exit 1
  fi
  changes=$(ls "$debs"/shimwatch_*.changes | grep -v '+test1' | head -n 1)
  lintian --tag-display-limit 0 "$changes" > "$log" 2>&1
  # every override says why, in the comment right above it
  awk 'FNR == 1 { prev = "" } !/^#/ && NF && prev !~ /^#/ { print FILENAME ": " $0 " has no reason above it" }
       { prev = $0 }' "$src"/debian/*.lintian-overrides >> "$log"
  if ! grep -qE '^[EW]: |has no reason above it' "$log" && [ -n "$changes" ]; then
    tap OK "lintian reports no error and no warning on shimwatch and cockpit-shimwatch; every override has its reason"
  else
    tap FAIL "lintian reports no error and no warning on shimwatch and cockpit-shimwatch; every override has its reason" "$log"
  fi
  page=$(ls "$debs"/cockpit-shimwatch_*_all.deb | grep -v '+test1' | head -n 1)
  service=$(ls "$debs"/shimwatch_*.deb | grep -v -e '+test1' -e dbgsym | head -n 1)
  # (listings in variables: grep -q would end dpkg-deb with SIGPIPE, a failure under pipefail)
  page_files=$(dpkg-deb -c "$page"); service_files=$(dpkg-deb -c "$service")
  if dpkg-deb -f "$page" Depends | grep -q 'cockpit-bridge' &&
     grep -q './usr/share/cockpit/shimwatch/manifest.json' <<< "$page_files" &&
     grep -q './usr/libexec/shimwatchd' <<< "$service_files" &&
     ! grep -q 'usr/share/cockpit' <<< "$service_files"; then
    tap OK "cockpit-shimwatch holds the Cockpit page and depends on cockpit-bridge; shimwatch has no page"
  else
    tap FAIL "cockpit-shimwatch holds the Cockpit page and depends on cockpit-bridge; shimwatch has no page"
  fi
fi

# the project as a distribution installs it: --prefix=/usr, no test hooks
inst=$build/systemd-install
if [ "$install_mode" = deb ]; then
  :
elif [ ! -f "$inst/build.ninja" ]; then
  meson setup "$inst" "$src" --prefix=/usr --sysconfdir=/etc --localstatedir=/var \
    -Dtest_hooks=false --werror --warnlevel 2 > "$log" 2>&1 ||
    { tap FAIL "meson setup --prefix=/usr" "$log"; echo "1..$n"; exit 1; }
fi
[ "$install_mode" = deb ] || ninja -C "$inst" > "$log" 2>&1 ||
  { tap FAIL "the project builds with --prefix=/usr" "$log"; echo "1..$n"; exit 1; }

boot () {   # boot LAYOUT: one container, its results in $work/out-LAYOUT
  local layout=$1 root=$work/root out=$work/out-$layout console=$work/console-$layout
  local upper=$work/upper-$layout lower=$work/work-$layout status cg hier rel unified

  mkdir -p "$root" "$upper" "$lower" "$out"
  mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$upper,workdir=$lower" "$root" ||
    return 1
  if [ "$install_mode" = deb ]; then
    # apt, offline: what the package depends on is in the root already
    install -d "$root/var/lib/shimwatch-test-debs"
    cp "$debs"/*.deb "$root/var/lib/shimwatch-test-debs/"
    local release
    release=$(cd "$root/var/lib/shimwatch-test-debs" && ls shimwatch_*.deb | grep -v -e '+test1' -e dbgsym)
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y \
      "/var/lib/shimwatch-test-debs/$release" > "$out/install.log" 2>&1 ||
      { cp "$out/install.log" "$out/failure"; umount "$root"; return 1; }
  else
    DESTDIR=$root meson install -C "$inst" --no-rebuild --quiet > "$out/install.log" 2>&1 ||
      { cp "$out/install.log" "$out/failure"; umount "$root"; return 1; }
  fi

  # the checks, as a unit that starts once the system is up
  install -d "$root/usr/local/lib/shimwatch-test"
  install -m 0755 "$here/checks.py" "$here/preinit" "$src/tools/make-bundle.sh" \
    "$root/usr/local/lib/shimwatch-test/"
  install -m 0644 "$here/security-exposure" "$src/service/base/shimwatch-names.h" \
    "$root/usr/local/lib/shimwatch-test/"
  sed -e "s|@LAYOUT@|$layout|" -e "s|@BUILD@|$build|" -e "s|@SUITE@|${SHIMWATCH_SYSTEMD_SUITE:-1}|" -e "s|@SOURCE@|$src|" \
    "$here/shimwatch-checks.service.in" > "$root/etc/systemd/system/shimwatch-checks.service"
  # what is left running when the checks end (a container's init ignores SIGTERM) must not
  # hold the shutdown for systemd's default 90 s
  install -d "$root/etc/systemd/system.conf.d"
  printf '[Manager]\nDefaultTimeoutStopSec=10s\n' \
    > "$root/etc/systemd/system.conf.d/shimwatch-test.conf"
  if [ "$install_mode" = deb ]; then
    install -m 0755 "$here/deb-checks.py" "$root/usr/local/lib/shimwatch-test/"
    install -d "$root/etc/systemd/system/shimwatch-checks.service.d"
    printf '[Service]\nEnvironment=SHIMWATCH_CHECKS_THEN=/usr/local/lib/shimwatch-test/deb-checks.py\n' \
      > "$root/etc/systemd/system/shimwatch-checks.service.d/deb.conf"
  fi
  ln -sf ../shimwatch-checks.service \
    "$root/etc/systemd/system/multi-user.target.wants/shimwatch-checks.service"

  # a fresh cgroup of every hierarchy for the container (test-harness.md, appendix)
  cgroups=()
  while IFS=: read -r _ hier rel; do
    case $hier in
      "") if [ -d /sys/fs/cgroup/unified ]; then cg=/sys/fs/cgroup/unified; else cg=/sys/fs/cgroup; fi ;;
      name=systemd) cg=/sys/fs/cgroup/systemd ;;
      name=*) continue ;;
      *) cg=/sys/fs/cgroup/${hier%%,*} ;;
    esac
    [ -d "$cg" ] || continue
    cg=$cg${rel%/}/shimwatch-boot-$$-$layout
    mkdir -p "$cg" || continue
    case $hier in
      *cpuset*) cat "$(dirname "$cg")/cpuset.cpus" > "$cg/cpuset.cpus"
                cat "$(dirname "$cg")/cpuset.mems" > "$cg/cpuset.mems" ;;
    esac
    cgroups+=("$cg")
  done < /proc/self/cgroup

  unified=0
  [ "$layout" = unified ] && unified=1
  (
    for cg in "${cgroups[@]}"; do echo "$BASHPID" > "$cg/cgroup.procs"; done
    SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=$unified exec systemd-nspawn --quiet \
      --register=no --keep-unit --console=read-only \
      --machine="shimwatch-$$-$layout" --directory="$root" \
      --system-call-filter='@keyring bpf' --private-network \
      --bind="$out:/var/lib/shimwatch-test-out" \
      --bind-ro="$src" --bind="$build" \
      /usr/local/lib/shimwatch-test/preinit
  ) > "$console" 2>&1 &
  nspawn_pid=$!
  local deadline=$((SECONDS + boot_timeout))
  local finished=
  while kill -0 "$nspawn_pid" 2> /dev/null && [ $SECONDS -lt $deadline ]; do
    [ -z "$finished" ] && grep -q "$finished_marker" "$out/tap" 2> /dev/null && finished=$SECONDS
    sleep 0.2
  done
  [ -n "$finished" ] && echo "$((SECONDS - finished))" > "$out/shutdown-seconds"
  if kill -0 "$nspawn_pid" 2> /dev/null; then
    echo "the container did not finish within $boot_timeout s; stopped it" >> "$out/failure"
  fi
  cleanup_container
  [ -n "${SHIMWATCH_SYSTEMD_CONSOLE_DIR:-}" ] && cp "$console" "$SHIMWATCH_SYSTEMD_CONSOLE_DIR/"
  wait "$nspawn_pid" 2> /dev/null
  status=$?
  nspawn_pid=
  echo "$status" > "$out/status"
  umount -R "$root"
  for cg in "${cgroups[@]}"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2> /dev/null
  done
  cgroups=()
  rm -rf --one-file-system "$upper" "$lower"
  return 0
}

cleanup_container () {
  kill -0 "$nspawn_pid" 2> /dev/null || return 0
  kill -TERM "$nspawn_pid"       # systemd-nspawn asks the container's systemd to halt
  for _ in $(seq 150); do kill -0 "$nspawn_pid" 2> /dev/null || return 0; sleep 0.1; done
  kill -KILL "$nspawn_pid"
}

for layout in $layouts; do
  started=$SECONDS
  out=$work/out-$layout
  if ! boot "$layout"; then
    tap FAIL "[$layout] the project is installed into an overlay and the container starts" \
      "$out/failure"
    continue
  fi
  if [ ! -s "$out/tap" ]; then
    {
      cat "$out/failure" 2> /dev/null
      echo "systemd-nspawn exited with $(cat "$out/status"); the end of the console:"
      tail -n 60 "$work/console-$layout"
    } > "$work/diag"
    tap FAIL "[$layout] systemd boots and runs the checks" "$work/diag"
    continue
  fi
  # renumber the checks' TAP lines into ours, keeping their diagnostics
  while IFS= read -r line; do
    case $line in
      "ok "*) n=$((n + 1)); echo "ok $n - [$layout] ${line#ok * - }" ;;
      "not ok "*) n=$((n + 1)); failed=1; echo "not ok $n - [$layout] ${line#not ok * - }" ;;
      *) echo "$line" ;;
    esac
  done < "$out/tap"
  if ! grep -q '^# checks finished' "$out/tap" || ! grep -q "$finished_marker" "$out/tap"; then
    {
      cat "$out/failure" 2> /dev/null
      echo "the checks did not finish; the end of the console:"
      tail -n 60 "$work/console-$layout"
    } > "$work/diag"
    tap FAIL "[$layout] the checks run to their end" "$work/diag"
  fi
  echo "# [$layout] boot, checks and shutdown took $((SECONDS - started)) s" \
    "(shutdown: $(cat "$out/shutdown-seconds" 2> /dev/null || echo ?) s)"
done
echo "1..$n"
exit $failed
