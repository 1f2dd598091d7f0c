#!/bin/bash
# Check that the C you changed follows the house style in .clang-format (GNU/GLib layout,
# 2-space indent, 100 columns). The existing code's hand alignment is kept, so only the
# lines that differ from BASE are checked, as git-clang-format does.
# Usage: tools/check-format.sh [--fix] [BASE]   (BASE defaults to main)
# Needs git-clang-format (Debian package clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
if [ "${1:-}" = --fix ]; then fix=1; shift; fi
base=${1:-main}
if ! command -v git-clang-format >/dev/null; then
  echo "check-format: git-clang-format is not installed (apt-get install clang-format)" >&2
  exit 1
fi
if [ $fix = 1 ]; then
  exec git clang-format --extensions c,h "$base" -- client service tests bench
fi
out=$(git clang-format --diff --extensions c,h "$base" -- client service tests bench)
case $out in
  "" | *"no modified files to format"* | *"did not modify any files"*)
    echo "check-format: the C changed since $base follows .clang-format"
    ;;
  *)
    printf '%s\n' "$out"
    echo "check-format: not in the house style; tools/check-format.sh --fix $base rewrites it" >&2
    exit 1
    ;;
esac
