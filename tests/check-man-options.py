#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every command of shimwatchctl, and every option of each (as its --help lists them), is
in shimwatchctl(1): a command's own options in its entry under COMMANDS, the global ones
under GLOBAL OPTIONS. Output is TAP.
usage: check-man-options.py SHIMWATCHCTL MAN_PAGE_SOURCE"""

import os
import re
import subprocess
import sys

ctl, page = sys.argv[1], sys.argv[2]
env = dict(os.environ, LC_ALL="C.UTF-8", COLUMNS="200")


def help_text(*args):
    return subprocess.run([ctl] + list(args) + ["--help"], capture_output=True, text=True,
                          env=env, check=True, timeout=30).stdout


def options(text):
    """(short or None, long) of every option a --help lists"""
    found = []
    for line in text.splitlines():
        m = re.match(r"^\s+(?:-(\w), )?--([\w-]+)", line)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def mentions(text, short, long):
    missing = []
    if f"\\-\\-{long.replace('-', chr(92) + '-')}" not in text:
        missing.append(f"--{long}")
    # "\-n" but not the "\-n" inside "\-\-no\-start"
    if short is not None and not re.search(r"(?<!\\-)\\-" + short + r"(?!\w)", text):
        missing.append(f"-{short}")
    return missing


with open(page) as f:
    source = f.read()
sections = dict(re.findall(r'^\.SH "?([A-Z ]+?)"?\n(.*?)(?=^\.SH |\Z)', source, re.M | re.S))
# the entries of COMMANDS: each starts with .TP, its first line names the command(s)
entries = re.split(r"^\.TP\n", sections["COMMANDS"], flags=re.M)[1:]

main_help = help_text()
commands = re.findall(r"^  (\w+)\s{2,}", main_help.split("Commands:", 1)[1], re.M)
global_options = options(main_help.split("Commands:", 1)[0])

results = []
missing = [m for s, o in global_options for m in mentions(sections["GLOBAL OPTIONS"], s, o)]
results.append((not missing, "the global options are under GLOBAL OPTIONS", missing))
for command in commands:
    own = [o for o in options(help_text(command)) if o not in global_options]
    entry = "".join(e for e in entries
                    if re.search(r"(?<![\w\\-])" + command + r"(?![\w-])", e.split("\n", 1)[0]))
    if not entry:
        results.append((False, f"{command} has an entry under COMMANDS", [command]))
        continue
    missing = [m for s, o in own for m in mentions(entry, s, o)]
    results.append((not missing, f"every option of {command} is in its entry", missing))

print(f"1..{len(results)}")
for i, (ok, what, missing) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} {what}")
    if not ok:
        print(f"# missing from {os.path.basename(page)}: {' '.join(missing)}")
