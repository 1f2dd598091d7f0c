#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Build the Debian packages of a source tree twice, for the package test of boot.sh (deb
# mode): as debian/changelog says (e.g. 0.2.0-1), and rebuilt as the next version
# (<version>+test1), the upgrade an admin's apt would install over it. Each build is
# `dpkg-buildpackage -us -uc -b` in a copy of the tree, as a packager runs it.
#
# Usage: build-debs.sh SOURCE_DIR CACHE_DIR
# Prints the directory holding both builds' .deb files and their .changes. Kept in
# CACHE_DIR by a hash of the sources (git's tracked and untracked, not ignored, files), so
# that a second run over the same sources builds nothing. tests/ and bench/ are left out
# of the hash and the copy: the packages are built with -Dtests=false (debian/rules), so
# an edit of a test does not cost a rebuild. Build logs: DIR/*.log.
set -euo pipefail

src=$(cd "$1" && pwd)
cache=$2
mkdir -p "$cache"

list_sources () {
  if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git -C "$src" ls-files -co --exclude-standard
  else
    (cd "$src" && find . -path ./_build -prune -o -type f -print | sed 's|^\./||')
  fi | grep -v -e '^_build' -e '/_build/' -e '^tests/' -e '^bench/' | sort
}
files=$(list_sources)
key=$( (cd "$src" && tr '\n' '\0' <<< "$files" | xargs -0 sha256sum) | sha256sum | cut -c1-16)
out=$cache/debs-$key
exec 9> "$cache/.lock"
flock 9
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"

build () {   # build NAME [VERSION SUFFIX]: one dpkg-buildpackage in a copy of the tree
  local name=$1 suffix=${2:-} tree=$out/$1/shimwatch
  mkdir -p "$tree"
  (cd "$src" && tr '\n' '\0' <<< "$files" | xargs -0 cp --parents -t "$tree")
  if [ -n "$suffix" ]; then
    # a new top entry, as dch would write it
    local version
    version=$(dpkg-parsechangelog -l "$tree/debian/changelog" -S Version)
    {
      echo "shimwatch ($version$suffix) unstable; urgency=medium"
      echo
      echo "  * Rebuilt for the package test's upgrade."
      echo
      echo " -- $(dpkg-parsechangelog -l "$tree/debian/changelog" -S Maintainer)  $(date -R)"
      echo
      cat "$tree/debian/changelog"
    } > "$tree/debian/changelog.new"
    mv "$tree/debian/changelog.new" "$tree/debian/changelog"
  fi
  if ! (cd "$tree" && nice -n 10 dpkg-buildpackage -us -uc -b) > "$out/$name.log" 2>&1; then
    echo "build-debs: dpkg-buildpackage ($name) failed; the end of $out/$name.log:" >&2
    tail -n 30 "$out/$name.log" >&2
    return 1
  fi
  mv "$out/$name"/*.deb "$out/$name"/*.changes "$out/$name"/*.buildinfo "$out/"
  rm -rf "$out/$name"
}

start=$(date +%s)
build release
build upgrade +test1
touch "$out/.complete"
# builds of other sources
for old in "$cache"/debs-*; do
  [ "$old" = "$out" ] || rm -rf --one-file-system "$old"
done
echo "build-debs: both builds took $(( $(date +%s) - start )) s" >&2
echo "$out"
