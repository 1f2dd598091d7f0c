#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Build, once per machine, a minimal Debian 12 root file system in which systemd boots as
# PID 1 under systemd-nspawn, with what shimwatch runs against: dbus, polkitd, the
# containerd runc shim, runc, busybox, and the libraries shimwatchd links. Runs never
# modify it: boot.sh mounts an overlay on top.
#
# Usage: make-rootfs.sh [CACHE_DIR]   (default /var/cache/shimwatch-test)
# Prints the directory of the root file system. The cache key is a hash of this script:
# change the package list or the adjustments and the next run builds a new root.
set -euo pipefail

cache=${1:-/var/cache/shimwatch-test}
packages=(
  systemd systemd-sysv dbus dbus-bin libpam-systemd polkitd
  containerd runc busybox-static
  # shimwatchd's own libraries (the binary is installed by boot.sh)
  libglib2.0-0 libglib2.0-bin libjson-glib-1.0-0 libprotobuf-c1 libpolkit-gobject-1-0
  # the checks, and the project's integration suite (meson test), run inside
  python3 python3-gi python3-dbus python3-dbusmock procps util-linux meson ninja-build
)

key=$(cat "$0" | sha256sum | cut -c1-12)
root=$cache/rootfs-$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$root/.complete" ]; then
  echo "$root"
  exit 0
fi

mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
         true)
mirror=${mirror:-http://deb.debian.org/debian}
tmp=$root.tmp
rm -rf "$tmp"
start=$(date +%s)
echo "make-rootfs: debootstrap bookworm from $mirror into $tmp" >&2
if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
       bookworm "$tmp" "$mirror" > "$cache/debootstrap.log" 2>&1; then
  echo "make-rootfs: debootstrap failed; the end of $cache/debootstrap.log:" >&2
  tail -n 30 "$cache/debootstrap.log" >&2
  rm -rf "$tmp"
  exit 1
fi

# what must not run in a test boot: containerd itself (only its shim is used), timers
# that would start apt or scrubbing mid-test, and a getty on the console
chroot "$tmp" systemctl disable containerd.service >/dev/null 2>&1 || true
for unit in containerd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
            e2scrub_reap.service fstrim.timer systemd-tmpfiles-clean.timer \
            console-getty.service getty@.service systemd-timesyncd.service; do
  ln -sf /dev/null "$tmp/etc/systemd/system/$unit"
done
echo shimwatch-test > "$tmp/etc/hostname"
# an unprivileged user for the refused-caller check
chroot "$tmp" useradd --system --uid 990 --no-create-home --shell /usr/sbin/nologin swuser
rm -rf "$tmp/var/cache/apt/archives"/*.deb "$tmp/var/lib/apt/lists"/*
touch "$tmp/.complete"
mv "$tmp" "$root"
# roots built from an older version of this script
for old in "$cache"/rootfs-*; do
  [ "$old" = "$root" ] || [ ! -d "$old" ] || rm -rf --one-file-system "$old"
done
echo "make-rootfs: built in $(( $(date +%s) - start )) s" >&2
echo "$root"
