#!/bin/bash
# The documentation and the installation as a distribution ships them: the man pages
# render without a warning, the API reference covers every member of the introspection
# XML, the bash completion parses, the example configuration names every key the loader
# reads and the polkit rules example is inactive, nothing points at a file the repository
# does not have, every relative link of README.md and docs/*.md resolves (file and
# #anchor), the shimwatchctl commands and repository paths they name exist, and the README's install command, run over a build directory configured
# otherwise, installs every file where Debian's packages of udisks2 and bolt put theirs,
# with no crash points compiled in.
# Usage: check-docs.sh SOURCE_DIR BUILD_DIR. Output: TAP.
set -uo pipefail
src=$1; build=$2
n=0; failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check () { local what=$1; shift; if out=$("$@" 2>&1); then ok "$what"; else fail "$what" "$out"; fi; }

echo "1..14"

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
keys=$(grep -o 'READ_KEY ([a-z_0-9]*, *group, *"[A-Za-z]*"' "$src/service/base/shimwatch-config.c" |
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

# every relative link in README.md and docs/*.md resolves: the file (or directory) exists,
# and a #anchor names a heading of that Markdown file (GitHub's anchors: lower case,
# punctuation dropped, spaces as hyphens, a repeated heading with -1, -2, ...)
broken=$(/usr/bin/python3 - "$src" <<'PY'
import glob, os, re, sys
src = sys.argv[1]
pages = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))

def prose(path):
    """The lines of a Markdown file outside fenced code blocks, with their numbers."""
    fenced = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line

def anchors(path):
    found, seen = set(), {}
    for _, line in prose(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found

for page in pages:
    for n, line in prose(page):
        line = re.sub(r"`[^`]*`", lambda m: m.group(0) if "](" in m.group(0) else "``", line)
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):        # https:, mailto:, man: ...
                continue
            where = f"{os.path.relpath(page, src)}:{n}: {target}"
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            if not os.path.exists(path):
                print(f"{where}: no such file")
            elif anchor and path.endswith(".md") and anchor not in anchors(path):
                print(f"{where}: no heading #{anchor} in {os.path.relpath(path, src)}")
PY
) || broken="the check itself failed: $broken"
[ -z "$broken" ] && ok "every relative link in README.md and docs/*.md resolves" ||
  fail "every relative link in README.md and docs/*.md resolves" "$broken"

# what they tell the reader to run exists: every `shimwatchctl COMMAND` (in code) is a
# command of shimwatchctl --help, and every path into the repository they name (tools/...,
# tests/..., data/..., ...) is there, in the sources or built
wrong=$(LC_ALL=C.UTF-8 "$build/client/shimwatchctl" --help 2>&1 | /usr/bin/python3 -c '
import glob, os, re, sys
src, build, help_text = sys.argv[1], sys.argv[2], sys.stdin.read()
commands = set(re.findall(r"^  ([a-z][a-z-]*)\s{2,}\S", help_text.split("Commands:", 1)[-1], re.M))
if not commands:
    print("no commands in shimwatchctl --help:", help_text[:200])
pages = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
for page in pages:
    text = open(page, encoding="utf-8").read()
    fences = re.findall(r"```.*?```", text, re.S)
    spans = re.findall(r"`[^`\n]+`", re.sub(r"```.*?```", "", text, flags=re.S))
    code = fences + spans
    name = os.path.relpath(page, src)
    for block in code:
        for command in re.findall(r"(?<![\w/.-])shimwatchctl(?:\s+--?[\w-]+(?:=\S+)?)*\s+([a-z][\w-]*)", block):
            if command not in commands:
                print(f"{name}: shimwatchctl {command}: not a command of shimwatchctl --help")
    for path in re.findall(r"(?<![\w/.~-])((?:tools|tests|bench|data|service|client|introspection|cockpit|po|docs)/[\w./-]*[\w/])", text):
        if not any(c in path for c in "<>*{}") and not os.path.exists(os.path.join(src, path)) \
                and not os.path.exists(os.path.join(build, path)):     # built: a test shim
            print(f"{name}: {path}: not in the repository")
' "$src" "$build") || wrong="the check itself failed: $wrong"
[ -z "$wrong" ] && ok "the commands and repository paths README.md and docs/*.md name exist" ||
  fail "the commands and repository paths README.md and docs/*.md name exist" "$wrong"

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
            /usr/share/doc/shimwatch/architecture.md /usr/share/doc/shimwatch/usage.md
            /usr/share/doc/shimwatch/dbus-api.md /usr/share/doc/shimwatch/troubleshooting.md
            /usr/share/doc/shimwatch/installing.md /usr/share/doc/shimwatch/metrics.md
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
# the installed service has no test machinery (test_hooks defaults to false; the command's
# directory had them on before): no crash points, counters or injected failures
if [ -x "$work/dest/usr/libexec/shimwatchd" ] &&
   hooks=$("$src/tests/check-test-hooks.sh" "$work/dest/usr/libexec/shimwatchd" absent); then
  ok "the installed shimwatchd has no test machinery"
else
  fail "the installed shimwatchd has no test machinery" "$(grep -v '^ok' <<<"${hooks:-}")"
fi
exit $failed
