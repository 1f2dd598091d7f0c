#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""po2js.py LANG.po po.LANG.js: one translation of the page as Cockpit loads it.

A Cockpit page asks for "po.js"; the bridge answers with the package's po.LANG.js for the
browser's language, a script that hands the catalogue to cockpit.locale(). msgfmt checks
and compiles the .po file; Python's gettext reads the result, so that the catalogue holds
exactly what msgfmt accepted (no fuzzy or untranslated entries)."""

import gettext
import json
import os
import re
import subprocess
import sys
import tempfile


def main(po_path, js_path):
    language = os.path.splitext(os.path.basename(po_path))[0]
    with tempfile.TemporaryDirectory() as tmp:
        mo_path = os.path.join(tmp, "messages.mo")
        subprocess.run(["msgfmt", "--check", "-o", mo_path, po_path], check=True)
        with open(mo_path, "rb") as mo:
            catalog = gettext.GNUTranslations(mo)
    plural = catalog._info.get("plural-forms", "nplurals=2; plural=(n != 1);")
    if not re.fullmatch(r"[\s\w=;:?()!<>&|%+-]*", plural):
        sys.exit(f"{po_path}: unexpected Plural-Forms: {plural}")

    entries = {}
    for key, text in catalog._catalog.items():
        if key == "" or (isinstance(key, tuple) and key[0] == ""):
            continue
        if isinstance(key, tuple):           # (msgid, n): a plural form
            msgid, index = key
            entry = entries.setdefault(msgid, [None])
            entry.extend([None] * (index + 2 - len(entry)))
            entry[index + 1] = text
        else:
            entries[key] = [None, text]
    body = ",\n".join(f" {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
                      for k, v in sorted(entries.items()))
    header = (f'"": {{"plural-forms": function(n) {{ var nplurals, plural; {plural} return plural; }}, '
              f'"language": {json.dumps(language)}, "language-direction": "ltr"}}')
    with open(js_path, "w", encoding="utf-8") as out:
        out.write(f"cockpit.locale({{{header},\n{body}\n}});\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
