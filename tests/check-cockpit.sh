#!/bin/bash
# The Cockpit page's sources (cockpit/): ESLint over its JavaScript, a manifest Cockpit
# reads, a translation template that is current with complete de/fr translations, and
# every file of the page installed and listed for translation. Output is TAP.
# Usage: check-cockpit.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
page=$src/cockpit
n=0 failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; printf '# %s\n' "$@"; }

echo "1..6"

# Debian's eslint; with a Node.js of another origin its modules are found through NODE_PATH
if command -v eslint >/dev/null; then
  if out=$(cd "$src" && NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH} \
             eslint --no-eslintrc -c cockpit/.eslintrc.json -f unix cockpit/*.js 2>&1); then
    ok "eslint: cockpit/*.js"
  else
    fail "eslint: cockpit/*.js" "$out"
  fi
else
  n=$((n + 1)); echo "ok $n - eslint: cockpit/*.js # SKIP eslint is not installed (package eslint)"
fi

if out=$(/usr/bin/python3 - "$page/manifest.json" 2>&1 <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1]))
entry = manifest["tools"]["index"]
assert isinstance(entry["label"], str) and entry["label"], "tools.index.label"
PY
); then ok "manifest.json: a Tools menu entry"; else fail "manifest.json: a Tools menu entry" "$out"; fi

# the template is current: every string of the page's JavaScript is in it, and in de/fr
pot=$(mktemp)
(cd "$src" && xgettext --language=JavaScript --from-code=UTF-8 --keyword=_ --keyword=N_ \
   --keyword=cockpit.gettext --keyword=cockpit.ngettext:1,2 -f cockpit/po/POTFILES -o "$pot")
missing=$(for po in "$page"/po/*.po "$page"/po/shimwatch-cockpit.pot; do msgcmp --use-untranslated "$po" "$pot" 2>&1 | grep -v '^$'; done)
rm -f "$pot"
[ -z "$missing" ] && ok "the page's translation template and de/fr hold every string" ||
  fail "the page's translation template and de/fr hold every string" "$missing"

po_out=()
for po in "$page"/po/*.po; do
  stats=$(msgfmt --check --statistics -o /dev/null "$po" 2>&1) || po_out+=("$po: $stats")
  case "$stats" in *untranslated*|*fuzzy*) po_out+=("$po: $stats");; esac
done
[ ${#po_out[@]} -eq 0 ] && ok "the page's translations compile and are complete" ||
  fail "the page's translations compile and are complete" "${po_out[@]}"

# every module is listed for translation and installed; each language has its po.LANG.js
unlisted=$(cd "$src" && for f in cockpit/*.js; do
  grep -qx "$f" cockpit/po/POTFILES || echo "not in cockpit/po/POTFILES: $f"
  grep -q "'$(basename "$f")'" cockpit/meson.build || echo "not installed by cockpit/meson.build: $f"
done)
[ -z "$unlisted" ] && ok "every module is listed for translation and installed" ||
  fail "every module is listed for translation and installed" "$unlisted"

absent=$(for lang in $(cat "$page/po/LINGUAS"); do
  js=$build/cockpit/po.$lang.js
  grep -q "^cockpit.locale({\"\": {.*\"language\": \"$lang\"" "$js" 2>/dev/null || echo "$js"
done)
[ -z "$absent" ] && ok "po.LANG.js built for every language of cockpit/po/LINGUAS" ||
  fail "po.LANG.js built for every language of cockpit/po/LINGUAS" "$absent"
exit $failed
