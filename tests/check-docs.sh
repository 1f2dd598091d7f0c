#!/bin/bash
# The documentation and the installation as a distribution ships them: the man pages
# render without a warning, the API reference covers every member of the introspection
# XML, the bash completion parses, the example configuration names every key the loader
# reads and the polkit rules example is inactive, nothing points at a file the repository
# does not have, and the README's install command, run over a build directory configured
# otherwise, installs every file where Debian's packages of udisks2 and bolt put theirs,
# with no crash points compiled in.
# Usage: check-docs.sh SOURCE_DIR BUILD_DIR. Output: TAP.
set -uo pipefail
src=$1; build=$2
n=0; failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check () { local what=$1; shift; if out=$("$@" 2>&1); then ok "$what"; else fail "$what" "$out"; fi; }

echo "1..12"

# man pages: groff's warnings are errors here
for page in shimwatchctl.1 shimwatchd.8 shimwatch.conf.5; do
  warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$build/docs/$page" 2>&1)
  if [ -s "$build/docs/$page" ] && [ -z "$warnings" ] && ! grep -q '@[a-z_]*@' "$build/docs/$page"; then
    ok "man page $page renders without warnings"
  else
    fail "man page $page renders without warnings" "$warnings"
  fi
done

# the API reference is generated from the XML: every method, signal and property is in it.
# docbook-xsl writes the page in ISO-8859-1 (as its <meta> says); a check that cannot read
# it fails, it does not pass for want of output
missing=$(/usr/bin/python3 - "$build/docs/dbus-api.html" "$src"/introspection/*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
html = open(sys.argv[1], encoding="iso-8859-1").read()
for path in sys.argv[2:]:
    for iface in ET.parse(path).getroot().iter("interface"):
        for kind in ("method", "signal", "property"):
            for member in iface.iter(kind):
                name = member.get("name")
                if f"{iface.get('name')}.{name}" not in html and f">{name}<" not in html:
                    print(f"{iface.get('name')} {kind} {name}")
PY
) || missing="the check itself failed: $missing"
[ -s "$build/docs/dbus-api.html" ] && [ -z "$missing" ] &&
  ok "the HTML API reference documents every member of introspection/*.xml" ||
  fail "the HTML API reference documents every member of introspection/*.xml" "missing: $missing"

check "bash -n on the completion script" bash -n "$src/data/bash-completion/shimwatchctl"

# every key the loader reads is in the annotated example, commented out
keys=$(grep -o 'READ_KEY ([a-z_0-9]*, *group, *"[A-Za-z]*"' "$src/service/shimwatch-config.c" |
       sed 's/.*"\(.*\)"/\1/' | sort -u)
absent=$(for k in $keys; do grep -q "^#$k=" "$src/data/shimwatch.conf" || echo "$k"; done)
active=$(grep -vE '^\s*(#|$|\[)' "$src/data/shimwatch.conf")
[ -n "$keys" ] && [ -z "$absent" ] && [ -z "$active" ] &&
  ok "the example configuration has every key, commented out" ||
  fail "the example configuration has every key, commented out" "absent: $absent" "active: $active"

undocumented=$(for k in $keys; do grep -q "^\.BI $k=" "$src/docs/man/shimwatch.conf.5.in" || echo "$k"; done)
[ -z "$undocumented" ] && ok "shimwatch.conf(5) describes every key" ||
  fail "shimwatch.conf(5) describes every key" "not in docs/man/shimwatch.conf.5.in: $undocumented"

active=$(grep -vE '^\s*(//|$)' "$src/data/polkit/50-shimwatch.rules.example")
[ -z "$active" ] && grep -q 'polkit.addRule' "$src/data/polkit/50-shimwatch.rules.example" &&
  ok "the polkit rules example is inactive" || fail "the polkit rules example is inactive" "$active"

# nothing points at documents outside the repository
cd "$src"
outside=$(git grep -InE '(\.\./)?shared/docs|\.\./shared/' -- . ':!tests/check-docs.sh' 2>/dev/null)
tracked=$(git ls-files 2>/dev/null)
dangling=$(git grep -IohE '\b[A-Za-z0-9_-]+\.md\b' -- . ':!NEWS' 2>/dev/null | sort -u |
           while read -r doc; do grep -qE "(^|/)${doc//./\\.}$" <<<"$tracked" || echo "$doc"; done)
cd - >/dev/null
[ -z "$outside" ] && [ -z "$dangling" ] &&
  ok "README, docs and code comments point only at files in the repository" ||
  fail "README, docs and code comments point only at files in the repository" \
    "outside: $outside" "not in the repository: $dangling"

# the README's install command, over a build directory configured for something else
work=$(mktemp -d /tmp/shimwatch-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
install_line=$(grep -m1 '^rm -rf _release && meson setup _release' "$src/README.md")
if [ -z "$install_line" ]; then
  fail "README has its install command" "no line 'rm -rf _release && meson setup _release …'"
  fail "meson install puts every file where Debian puts it"
else
  ok "README has its install command"
  (cd "$src" && meson setup "$work/_release" -Dtest_hooks=true --prefix=/usr/local >/dev/null 2>&1)
  if (cd "$src" && DESTDIR="$work/dest" bash -c "${install_line//_release/$work/_release}") \
       >"$work/install.log" 2>&1; then
    expect=(/usr/libexec/shimwatchd /usr/bin/shimwatchctl
            /usr/share/dbus-1/system.d/org.shimwatch.Shimwatch1.conf
            /usr/share/dbus-1/system-services/org.shimwatch.Shimwatch1.service
            /usr/share/dbus-1/interfaces/org.shimwatch.Shimwatch1.Manager.xml
            /usr/share/dbus-1/interfaces/org.shimwatch.Shimwatch1.Shim.xml
            /usr/share/polkit-1/actions/org.shimwatch.policy
            /lib/systemd/system/shimwatch.service
            /usr/share/bash-completion/completions/shimwatchctl
            /usr/share/man/man1/shimwatchctl.1 /usr/share/man/man8/shimwatchd.8
            /usr/share/man/man5/shimwatch.conf.5
            /usr/share/doc/shimwatch/dbus-api.html /usr/share/doc/shimwatch/protocol.md
            /usr/share/doc/shimwatch/architecture.md /usr/share/doc/shimwatch/installing.md
            /usr/share/doc/shimwatch/examples/shimwatch.conf
            /usr/share/doc/shimwatch/examples/50-shimwatch.rules
            /usr/share/locale/de/LC_MESSAGES/shimwatch.mo
            /usr/share/locale/fr/LC_MESSAGES/shimwatch.mo
            /usr/share/cockpit/shimwatch/manifest.json /usr/share/cockpit/shimwatch/index.html
            /usr/share/cockpit/shimwatch/index.js /usr/share/cockpit/shimwatch/po.de.js
            /usr/share/cockpit/shimwatch/po.fr.js)
    lost=$(for f in "${expect[@]}"; do [ -e "$work/dest$f" ] || echo "$f"; done)
    # and nothing anywhere else: no /usr/local, no /etc/dbus-1, no rules.d that would act
    stray=$(cd "$work/dest" && find . -type f | sed 's|^\.||' | grep -vE \
      '^/usr/(libexec|bin|share/(dbus-1/(system\.d|system-services|interfaces)|polkit-1/actions|bash-completion/completions|man/man[158]|doc/shimwatch|locale/[a-z_A-Z]+/LC_MESSAGES|cockpit/shimwatch))/|^/lib/systemd/system/')
    [ -z "$lost" ] && [ -z "$stray" ] &&
      ok "meson install puts every file where Debian puts it" ||
      fail "meson install puts every file where Debian puts it" "missing: $lost" "elsewhere: $stray"
  else
    fail "meson install puts every file where Debian puts it" "$(tail -20 "$work/install.log")"
  fi
fi
# the installed service has no crash points (test_hooks defaults to false; the command's
# directory had them on before)
if [ -x "$work/dest/usr/libexec/shimwatchd" ] &&
   ! grep -q SHIMWATCH_TEST_CRASH_AT "$work/dest/usr/libexec/shimwatchd"; then
  ok "the installed shimwatchd has no crash points"
else
  fail "the installed shimwatchd has no crash points"
fi
exit $failed
