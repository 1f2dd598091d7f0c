#!/bin/bash
# The data files as a distribution would ship them: the polkit policy validates against
# polkit's DTD and carries the translations, every translation is complete and compiles,
# every file with translatable strings is in POTFILES.in, the bus policy is well-formed,
# the systemd unit keeps the settings a supervisor depends on and does not lose sandboxing,
# and `meson install` puts every file where the distribution expects it.
# Usage: check-data.sh SOURCE_DIR BUILD_DIR. Output: TAP.
set -uo pipefail
src=$1; build=$2
n=0; failed=0
ok () { n=$((n + 1)); echo "ok $n - $1"; }
fail () { n=$((n + 1)); failed=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check () { local what=$1; shift; if out=$("$@" 2>&1); then ok "$what"; else fail "$what" "$out"; fi; }

echo "1..11"
policy=$build/data/org.shimwatch.policy
check "polkit policy validates against policyconfig-1.dtd" \
  xmllint --noout --nonet --dtdvalid /usr/share/polkit-1/policyconfig-1.dtd "$policy"
langs=$(grep -o 'xml:lang="[a-z_A-Z]*"' "$policy" | sort -u | tr '\n' ' ')
if [ "$langs" = 'xml:lang="de" xml:lang="fr" ' ]; then ok "policy carries de and fr"
else fail "policy carries de and fr" "found: $langs"; fi
check "bus policy is well-formed" xmllint --noout --nonet "$src/data/dbus-1/org.shimwatch.Shimwatch1.conf"

po_ok=1; po_out=()
for po in "$src"/po/*.po; do
  stats=$(msgfmt --check --statistics -o /dev/null "$po" 2>&1) || { po_ok=0; po_out+=("$po: $stats"); }
  case "$stats" in *untranslated*|*fuzzy*) po_ok=0; po_out+=("$po: $stats");; esac
done
[ $po_ok = 1 ] && ok "translations compile (msgfmt --check) and are complete" ||
  fail "translations compile (msgfmt --check) and are complete" "${po_out[@]}"

# the template must be current: every msgid in the sources is in de.po and fr.po
pot=$(mktemp)
GETTEXTDATADIRS=$src/po xgettext --from-code=UTF-8 --keyword=_ --keyword=N_ -D "$src" \
  -f "$src/po/POTFILES.in" -o "$pot" 2>/dev/null
missing=$(for po in "$src"/po/*.po; do msgcmp "$po" "$pot" 2>&1 | grep -v '^$'; done)
rm -f "$pot"
[ -z "$missing" ] && ok "every translatable string is translated" ||
  fail "every translatable string is translated" "$missing"

unlisted=$(cd "$src" && grep -lE '\b_\(|\bN_\(|TRANSLATORS' service/*/*.c client/*.c data/polkit/*.in 2>/dev/null |
  while read -r f; do grep -qx "$f" po/POTFILES.in || echo "$f"; done)
[ -z "$unlisted" ] && ok "POTFILES.in lists every file with translatable strings" ||
  fail "POTFILES.in lists every file with translatable strings" "$unlisted"

unit=$build/data/shimwatch.service
need=(Type=dbus BusName=org.shimwatch.Shimwatch1 KillMode=process Delegate=yes
      RuntimeDirectoryPreserve=yes Restart=on-failure IPAddressDeny=any DevicePolicy=closed)
absent=$(for d in "${need[@]}"; do grep -qx "$d" "$unit" || echo "$d"; done)
[ -z "$absent" ] && ok "unit keeps what a supervisor needs (${#need[@]} settings)" ||
  fail "unit keeps what a supervisor needs" "missing: $absent"

# what a process gets from its unit at exec time reaches every shim, runc and container:
# none of it may be in the unit (docs/architecture.md, "What confines the service"); the
# systemd boot test shows what each did to a container
inherited='^(NoNewPrivileges|SystemCallFilter|SystemCallArchitectures|SystemCallErrorNumber|LockPersonality|RestrictRealtime|RestrictSUIDSGID|ProtectClock|ProtectKernelModules|ProtectKernelLogs|ProtectKernelTunables|MemoryDenyWriteExecute|RestrictNamespaces|RestrictAddressFamilies|CapabilityBoundingSet|AmbientCapabilities|SecureBits|ProtectSystem|ProtectHome|PrivateTmp|PrivateDevices|PrivateNetwork|PrivateUsers|PrivateMounts|ProtectHostname|ProtectProc|ProcSubset|ProtectControlGroups|ReadWritePaths|ReadOnlyPaths|InaccessiblePaths|TemporaryFileSystem|BindPaths|BindReadOnlyPaths|RootDirectory|RootImage|UMask|Personality|KeyringMode|Environment|EnvironmentFile|PassEnvironment)='
found=$(grep -E "$inherited" "$unit")
[ -z "$found" ] && ok "unit sets nothing shims and containers would inherit" ||
  fail "unit sets nothing shims and containers would inherit" "$found"

# the unit confines nothing a container inherits, so its exposure is high on purpose (see
# tests/systemd/security-exposure); guard the level recorded there
if command -v systemd-analyze >/dev/null; then
  recorded=$(grep -v '^#' "$src/tests/systemd/security-exposure" | grep -m1 .)
  level=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null |
          sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
  if [ -n "$level" ] && awk "BEGIN { exit !($level <= $recorded) }"; then
    ok "systemd-analyze security --offline: exposure $level (<= $recorded)"
  else
    fail "systemd-analyze security --offline: exposure ${level:-?} (<= $recorded)"
  fi
else
  fail "systemd-analyze is installed" "package systemd"
fi

dest=$(mktemp -d)
if meson install -C "$build" --destdir "$dest" --no-rebuild >/dev/null 2>&1; then
  prefix=$(meson introspect "$build" --buildoptions |
           /usr/bin/python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
  expect=(libexec/shimwatchd share/dbus-1/system.d/org.shimwatch.Shimwatch1.conf
          share/dbus-1/system-services/org.shimwatch.Shimwatch1.service
          share/dbus-1/interfaces/org.shimwatch.Shimwatch1.Manager.xml
          share/dbus-1/interfaces/org.shimwatch.Shimwatch1.Shim.xml
          share/locale/de/LC_MESSAGES/shimwatch.mo share/locale/fr/LC_MESSAGES/shimwatch.mo)
  lost=$(for f in "${expect[@]}"; do [ -e "$dest$prefix/$f" ] || echo "$prefix/$f"; done
         [ -e "$dest/usr/share/polkit-1/actions/org.shimwatch.policy" ] ||
           [ -e "$dest$prefix/share/polkit-1/actions/org.shimwatch.policy" ] || echo "org.shimwatch.policy"
         find "$dest" -name shimwatch.service | grep -q . || echo "shimwatch.service")
  [ -z "$lost" ] && ok "meson install puts every file in place" ||
    fail "meson install puts every file in place" "missing: $lost" "$(cd "$dest" && find . -type f)"
  grep -q "SystemdService=shimwatch.service" \
    "$dest$prefix/share/dbus-1/system-services/org.shimwatch.Shimwatch1.service" &&
    ok "bus activation goes through systemd" || fail "bus activation goes through systemd"
else
  fail "meson install puts every file in place" "meson install failed"
  fail "bus activation goes through systemd"
fi
rm -rf "$dest"
exit $failed
