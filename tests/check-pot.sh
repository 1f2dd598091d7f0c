#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# po/shimwatch.pot has every message of the sources in po/POTFILES.in, and no other: it
# fails when a string was added, changed or removed without `ninja shimwatch-pot`. Only
# the messages count (msgid, msgctxt, plural), not the dates or the source lines.
# usage: check-pot.sh SOURCE_DIR
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "1..1"
grep -v -e '^#' -e '^[[:space:]]*$' "$src/po/POTFILES.in" >"$tmp/files"
# the keywords of meson's i18n.gettext(preset: 'glib'); po/its for the polkit policy
GETTEXTDATADIRS="$src/po" xgettext --package-name=shimwatch --from-code=UTF-8 \
    --directory="$src" --files-from="$tmp/files" --output="$tmp/fresh.pot" \
    --keyword=_ --keyword=N_ --keyword=C_:1c,2 --keyword=NC_:1c,2 --keyword=g_dcgettext:2 \
    --keyword=g_dngettext:2,3 --keyword=g_dpgettext2:2c,3
# msgcmp DEF REF: every message of REF is in DEF; both ways round make the sets equal
if msgcmp --use-untranslated "$src/po/shimwatch.pot" "$tmp/fresh.pot" 2>"$tmp/missing" &&
    msgcmp --use-untranslated "$tmp/fresh.pot" "$src/po/shimwatch.pot" 2>"$tmp/stale"; then
    echo "ok 1 po/shimwatch.pot has exactly the messages of the sources"
else
    sed 's/^/# /' "$tmp/missing" "$tmp/stale" 2>/dev/null || true
    echo "not ok 1 po/shimwatch.pot is stale: run ninja -C BUILDDIR shimwatch-pot and commit it"
fi
