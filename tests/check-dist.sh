#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The release tarball as a packager gets it: `meson dist` makes shimwatch-VERSION.tar.xz
# from the committed tree; unpacked elsewhere, it configures, builds and passes the suite
# 'unit' as an unprivileged user (nobody, when run as root); configured with -Dtests=false
# -Dcockpit=false it builds the service alone, has no test, and installs no Cockpit page;
# and no configuration installs documents meant for developers.
# Usage: check-dist.sh SOURCE_DIR BUILD_DIR. Output: TAP.
# SHIMWATCH_DIST_UNIT=0 leaves out the tarball's own unit suite (about 2 minutes).
set -uo pipefail
src=$1; build=$2
n=0; failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; [ $# -gt 1 ] && [ -s "$2" ] && tail -n 40 "$2" | sed 's/^/# /'; }

# meson dist packs a git checkout; an unpacked tarball has nothing to pack
git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1 ||
  { echo "1..0 # SKIP not a git checkout: meson dist has nothing to pack"; exit 0; }

version=$(meson introspect --projectinfo "$build" |
          /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
work=$(mktemp -d /var/tmp/shimwatch-dist-XXXXXX)
chmod 755 "$work"
trap 'rm -rf --one-file-system "$work"' EXIT
trap 'exit 143' TERM INT

# as root, everything from the tarball on runs as nobody: a unit test that needs root
# must skip, not pass because it happened to have it
as_user=()
if [ "$(id -u)" = 0 ]; then
  as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$work")
fi
# nobody must not need the checkout, which may sit in a private directory (a clone under
# /root): meson goes back to the directory it was started in
cd "$work" || exit 1

# meson dist packs what git has committed (HEAD), whatever the working tree holds; it
# writes into BUILD_DIR/meson-dist, which nobody else uses
if (cd "$src" && git diff --quiet HEAD 2> /dev/null); then
  echo "# the working tree is committed: the tarball is what it holds"
else
  echo "# the working tree has uncommitted changes: the tarball holds HEAD, not them"
fi
tarball=$build/meson-dist/shimwatch-$version.tar.xz
rm -f "$tarball"
if meson dist -C "$build" --no-tests --allow-dirty --formats xztar > "$work/dist.log" 2>&1 &&
   [ -s "$tarball" ]; then
  ok "meson dist makes shimwatch-$version.tar.xz"
else
  fail "meson dist makes shimwatch-$version.tar.xz" "$work/dist.log"
  echo "1..$n"; exit 1
fi

mkdir "$work/unpacked"
tar -C "$work/unpacked" -xf "$tarball" && [ -f "$work/unpacked/shimwatch-$version/meson.build" ] &&
  ok "the tarball unpacks into shimwatch-$version/" ||
  fail "the tarball unpacks into shimwatch-$version/"
tree=$work/unpacked/shimwatch-$version
missing=$(for f in LICENSE NOTICE AUTHORS NEWS README.md docs/installing.md debian/control; do
            [ -s "$tree/$f" ] || echo "$f"; done)
[ -z "$missing" ] && ok "the tarball has the licence, NEWS, the install notes and debian/" ||
  { echo "missing: $missing" > "$work/missing"; fail "the tarball has the licence, NEWS, the install notes and debian/" "$work/missing"; }
mkdir "$work/full" "$work/min"
[ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$work/unpacked" "$work/full" "$work/min"

# the default configuration: builds, passes the unit suite, installs only user documents
if "${as_user[@]}" meson setup "$work/full" "$tree" --prefix=/usr --werror > "$work/full.log" 2>&1 &&
   "${as_user[@]}" ninja -C "$work/full" >> "$work/full.log" 2>&1; then
  ok "the tarball configures and builds (default options)"
else
  fail "the tarball configures and builds (default options)" "$work/full.log"
fi
if [ "${SHIMWATCH_DIST_UNIT:-1}" = 0 ]; then
  ok "the tarball's unit suite # SKIP SHIMWATCH_DIST_UNIT=0"
elif "${as_user[@]}" meson test -C "$work/full" --suite unit --num-processes 2 --print-errorlogs \
       > "$work/unit.log" 2>&1; then
  ok "the tarball passes the suite 'unit'${as_user:+ as nobody} ($(grep -c ' OK ' "$work/unit.log") tests OK)"
else
  fail "the tarball passes the suite 'unit'${as_user:+ as nobody}" "$work/unit.log"
fi
DESTDIR=$work/dest-full meson install -C "$work/full" --no-rebuild --quiet > "$work/inst.log" 2>&1 ||
  fail "meson install (default options)" "$work/inst.log"
dev_docs=$(cd "$work/dest-full" 2> /dev/null &&
           find . -name test-harness.md -o -name benchmarks.md -o -name CONTRIBUTING.md)
[ -d "$work/dest-full/usr/share/doc/shimwatch" ] && [ -z "$dev_docs" ] &&
  [ -f "$work/dest-full/usr/share/doc/shimwatch/installing.md" ] &&
  ok "only user documentation is installed (installing.md, not test-harness.md)" ||
  { echo "developer documents installed: $dev_docs" > "$work/docs"
    fail "only user documentation is installed (installing.md, not test-harness.md)" "$work/docs"; }

# -Dtests=false -Dcockpit=false: the service alone
if "${as_user[@]}" meson setup "$work/min" "$tree" --prefix=/usr --werror -Dtests=false \
     -Dcockpit=false -Ddocs=false > "$work/min.log" 2>&1 &&
   "${as_user[@]}" ninja -C "$work/min" >> "$work/min.log" 2>&1; then
  ok "the tarball builds with -Dtests=false -Dcockpit=false"
else
  fail "the tarball builds with -Dtests=false -Dcockpit=false" "$work/min.log"
fi
tests=$(meson introspect "$work/min" --tests 2> /dev/null)
built=$(find "$work/min" -name 'test-*' -type f -o -name 'shimwatch-test-shim' -type f | head -3)
[ "$tests" = "[]" ] && [ -z "$built" ] && ok "-Dtests=false: no test is defined or built" ||
  { echo "tests: ${tests:0:300}; built: $built" > "$work/t"; fail "-Dtests=false: no test is defined or built" "$work/t"; }
DESTDIR=$work/dest-min meson install -C "$work/min" --no-rebuild --quiet > "$work/inst.log" 2>&1
if [ -x "$work/dest-min/usr/libexec/shimwatchd" ] && [ -x "$work/dest-min/usr/bin/shimwatchctl" ] &&
   [ ! -e "$work/dest-min/usr/share/cockpit" ] && [ -d "$work/dest-full/usr/share/cockpit/shimwatch" ]; then
  ok "-Dcockpit=false installs the service and no Cockpit page (the default installs it)"
else
  (cd "$work" && find dest-min -type f; cat inst.log) > "$work/t"
  fail "-Dcockpit=false installs the service and no Cockpit page (the default installs it)" "$work/t"
fi

echo "1..$n"
exit $failed
