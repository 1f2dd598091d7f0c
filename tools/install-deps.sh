#!/bin/bash
# Install what shimwatch needs to build, test and run on Debian 12, and nothing that is
# already there. Run as root. (docs/test-harness.md §1: no policykit-1, no polkitd-pkla,
# never dbus-broker.)
set -euo pipefail

packages=(
  gcc pkg-config meson ninja-build gettext
  libglib2.0-dev libglib2.0-bin libjson-glib-dev libprotobuf-c-dev protobuf-c-compiler
  libpolkit-gobject-1-dev polkitd dbus-daemon dbus-bin
  python3 python3-gi python3-dbus python3-dbusmock
  containerd runc busybox-static
  libxml2-utils valgrind util-linux procps coreutils systemd
  clang-14 libclang-rt-14-dev
  # the systemd boot test (tests/systemd): a Debian 12 root booted with systemd-nspawn
  systemd-container debootstrap
  # shimwatchctl's bash completion test sources bash-completion's helpers; the docs are
  # rendered with xsltproc and docbook-xsl, the man pages checked with groff
  bash-completion groff-base xsltproc docbook-xsl docbook-xml
  # the C layout check (tools/check-format.py, uncrustify.cfg)
  uncrustify
  # the Cockpit page's test: Cockpit itself (no recommends: they pull systemd-sysv), a
  # headless Chromium driven over the DevTools protocol from Python, and the page's linter
  cockpit-ws cockpit-bridge cockpit-system chromium-headless-shell python3-websocket eslint
  # the benchmark (bench/shimbench.py): the main loop's poll() calls are counted with
  # `perf stat`, and --perf profiles the service
  linux-perf
  # the Debian packages (debian/) and their test (tests/systemd/boot.sh with
  # SHIMWATCH_SYSTEMD_INSTALL=deb): dpkg-buildpackage, dh with the meson build system, lintian
  dpkg-dev debhelper lintian
  # the spawner's system calls per spawn are counted with strace (tests/test-spawn.c)
  strace
  # the metrics test (tests/metrics_test.py): promtool lints the text and the documented
  # alert rules; node_exporter's textfile collector scrapes what the service writes (run
  # by the test on a loopback port; its Debian service is not needed)
  prometheus prometheus-node-exporter
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# prometheus (for promtool) and prometheus-node-exporter are test tools here, but their
# packages enable and start services (a Prometheus server on :9090, node_exporter on
# :9100) where systemd runs: the ones this run installed are stopped and disabled again,
# so that the machine runs no daemon for the tests (the tests start their own exporter)
if [ -d /run/systemd/system ]; then
  for p in "${missing[@]}"; do
    case $p in
      prometheus|prometheus-node-exporter) systemctl disable --now "$p.service" >/dev/null 2>&1 || true ;;
    esac
  done
fi
