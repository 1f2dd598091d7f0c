#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""service/ logs through one family (shimwatch-logging.h) and spells its log domains one
way: every G_LOG_DOMAIN is Shimwatch<Part>, and no file keeps a logging macro of its own
over shimwatch_log_task() (the LOG_* field macros of shimwatch-logging.h say which task a
line is about). TAP on stdout.

  check-log-family.py SERVICE_DIR"""

import glob
import os
import re
import sys

service = sys.argv[1]
n = 0
failed = False


def result(ok, what, details=()):
    global n, failed
    n += 1
    print(("ok" if ok else "not ok") + f" {n} - {what}")
    for line in details:
        print(f"# {line}")
    failed |= not ok


domains = {}
macros = []
for path in sorted(glob.glob(os.path.join(service, "**", "*.[ch]"), recursive=True)):
    name = os.path.basename(path)
    text = open(path, encoding="utf-8").read()
    for domain in re.findall(r'^#define G_LOG_DOMAIN "([^"]*)"', text, re.M):
        domains.setdefault(domain, []).append(name)
    if name == "shimwatch-logging.h":
        continue
    # a macro whose body (its continuation lines) calls into the family
    for match in re.finditer(r"^#define (\w+)\(.*?(?<!\\)$", text, re.M | re.S):
        if re.search(r"shimwatch_log_task|g_log_structured|g_log\b", match.group(0)):
            macros.append(f"{name}: {match.group(1)}")

result(len(domains) > 0, "service/ has log domains")
odd = [f"{domain} ({', '.join(files)})" for domain, files in sorted(domains.items())
       if not re.fullmatch(r"Shimwatch[A-Z][A-Za-z]*", domain)]
result(not odd, "every log domain is spelled Shimwatch<Part>", odd)
result(not macros, "no file-local logging macro beside shimwatch-logging.h", macros)
print(f"1..{n}")
sys.exit(1 if failed else 0)
