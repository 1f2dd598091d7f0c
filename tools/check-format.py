#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check the layout of C code against uncrustify.cfg, the house style (GNU/GLib: 2-space
indent, return type on its own line, one aligned parameter per line, a space before every
parenthesis except after _(), N_() and g_autoptr(), braces on their own lines).

  tools/check-format.py [BASE]       the lines of *.c changed since BASE (default: main);
                                     older code keeps its hand alignment
  tools/check-format.py --all FILE…  whole files

Prints each place uncrustify would change, and exits 1 if there is one. To rewrite a file:
uncrustify -c uncrustify.cfg --no-backup --replace FILE. Needs uncrustify (Debian package)."""

import difflib
import os
import re
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(TOP, "uncrustify.cfg")


def formatted(path):
    return subprocess.run(["uncrustify", "-q", "-c", CONFIG, "-f", path], capture_output=True,
                          text=True, check=True).stdout.splitlines()


def changed_lines(base, path):
    diff = subprocess.run(["git", "-C", TOP, "diff", "-U0", base, "--", path],
                          capture_output=True, text=True, check=True).stdout
    lines = set()
    for start, count in re.findall(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.M):
        start, count = int(start), int(count or 1)
        lines.update(range(start, start + max(count, 1)))
    return lines


def main(argv):
    if argv[:1] == ["--all"]:
        files = [(f, None) for f in argv[1:]]
    else:
        base = argv[0] if argv else "main"
        names = subprocess.run(["git", "-C", TOP, "diff", "--name-only", "--diff-filter=ACMR",
                                base, "--", "*.c"], capture_output=True, text=True,
                               check=True).stdout.split()
        files = [(os.path.join(TOP, n), changed_lines(base, n)) for n in names]
    bad = 0
    for path, lines in files:
        with open(path) as f:
            original = f.read().splitlines()
        new = formatted(path)
        matcher = difflib.SequenceMatcher(None, original, new, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            if lines is not None and not lines & set(range(i1 + 1, max(i2, i1 + 1) + 1)):
                continue
            bad += 1
            print(f"{os.path.relpath(path, TOP)}:{i1 + 1}:")
            for line in original[i1:i2]:
                print(f"-{line}")
            for line in new[j1:j2]:
                print(f"+{line}")
    if bad:
        print(f"check-format: {bad} place(s) not in the house style (uncrustify.cfg)",
              file=sys.stderr)
        return 1
    print("check-format: in the house style")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
