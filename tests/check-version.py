#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
#
# One version everywhere: the project version meson knows (meson introspect --projectinfo)
# is the one `shimwatchd --version` and `shimwatchctl --version` print, the one the
# service's Version property reports on the bus, the top entry of NEWS, the version in
# the header of each man page, and the upstream part of debian/changelog's top entry.
# A release that bumps one and forgets another fails here.
# Usage: check-version.py SOURCE_DIR BUILD_DIR. Output: TAP.
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

src, build = sys.argv[1], sys.argv[2]
n = 0
failed = False


def tap(ok, what, diag=""):
    global n, failed
    n += 1
    print(f"{'ok' if ok else 'not ok'} {n} - {what}")
    if not ok:
        failed = True
        for line in str(diag).splitlines():
            print(f"# {line}")


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


info = run("meson", "introspect", "--projectinfo", build)
version = json.loads(info.stdout)["version"] if info.returncode == 0 else None
tap(bool(version) and re.fullmatch(r"\d+\.\d+\.\d+", version) is not None,
    f"meson knows the project version ({version})", info.stderr)
if not version:
    print(f"1..{n}")
    sys.exit(1)

for prog, path in (("shimwatchd", os.path.join(build, "service", "shimwatchd")),
                   ("shimwatchctl", os.path.join(build, "client", "shimwatchctl"))):
    out = run(path, "--version")
    tap(out.returncode == 0 and out.stdout == f"{prog} {version}\n",
        f"{prog} --version prints {version}", f"got: {out.stdout!r} {out.stderr!r}")

# NEWS: the first heading "shimwatch X.Y.Z[ (date)]" names this version, and is released
with open(os.path.join(src, "NEWS"), encoding="utf-8") as f:
    top = next((line.strip() for line in f if line.startswith("shimwatch ")), "")
m = re.fullmatch(r"shimwatch (\S+)(?: \((.*)\))?", top)
tap(m is not None and m.group(1) == version,
    f"the top entry of NEWS is {version}", f"top entry: {top!r}")

for page in ("shimwatchctl.1", "shimwatchd.8", "shimwatch.conf.5"):
    path = os.path.join(build, "docs", page)
    th = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            th = next((line for line in f if line.startswith(".TH ")), "")
    tap(f'"shimwatch {version}"' in th, f"man page {page} says shimwatch {version}",
        f".TH line: {th!r}")

# debian/changelog: "shimwatch (0.2.0-1) ..." (or 0.2.0+something in a test rebuild)
changelog = os.path.join(src, "debian", "changelog")
if os.path.exists(changelog):
    with open(changelog, encoding="utf-8") as f:
        first = f.readline()
    m = re.match(r"shimwatch \(([^)]+)\)", first)
    upstream = re.split(r"[-+~]", m.group(1).split(":")[-1])[0] if m else None
    tap(upstream == version, f"debian/changelog's top entry packages {version}",
        f"first line: {first!r}")
else:
    tap(False, "debian/changelog exists", changelog)

# the Version property, from the service itself on a private session bus
tmp = tempfile.mkdtemp(prefix="shimwatch-version-")
bus = daemon = None
prop = ""
try:
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1",
                            f"--address=unix:dir={tmp}"], stdout=subprocess.PIPE, text=True)
    address = bus.stdout.readline().strip()
    # (no metrics textfile: node_exporter's directory is the host's)
    with open(os.path.join(tmp, "shimwatch.conf"), "w") as f:
        f.write("[Service]\nMetricsDirectory=\n")
    daemon = subprocess.Popen([os.path.join(build, "service", "shimwatchd"),
                               "--address", address,
                               "--config", os.path.join(tmp, "shimwatch.conf"),
                               "--runtime-dir", os.path.join(tmp, "run"),
                               "--state-dir", os.path.join(tmp, "state")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and daemon.poll() is None:
        out = run("gdbus", "call", "--address", address, "--dest", "org.shimwatch.Shimwatch1",
                  "--object-path", "/org/shimwatch/Shimwatch1", "--method",
                  "org.freedesktop.DBus.Properties.Get", "org.shimwatch.Shimwatch1.Manager",
                  "Version")
        if out.returncode == 0:
            prop = out.stdout.strip()
            break
        time.sleep(0.1)
    if not prop and daemon.poll() is not None:
        prop = "shimwatchd exited: " + daemon.stderr.read()
finally:
    for p in (daemon, bus):
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
tap(prop == f"(<'{version}'>,)", f"the service's Version property is {version}",
    f"got: {prop!r}")

print(f"1..{n}")
sys.exit(1 if failed else 0)
