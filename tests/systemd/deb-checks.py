#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Debian package's life under a real systemd: what an admin's apt does to a host that
runs containers through shimwatch. Runs inside the test container of tests/systemd/boot.sh
in its deb mode (SHIMWATCH_SYSTEMD_INSTALL=deb), after checks.py has checked the packaged
install the way it checks a `meson install`; boot.sh installed the first package
(PACKAGES/shimwatch_<version>_<arch>.deb) with apt before the boot, and put the rebuilt
one (version +test1) beside it.

Appends TAP to /var/lib/shimwatch-test-out/tap and ends the container with `systemctl
exit`: 0 when checks.py (its status is argv[1]) and these checks passed."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback

import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

OUT = "/var/lib/shimwatch-test-out"
LIB = "/usr/local/lib/shimwatch-test"
PACKAGES = "/var/lib/shimwatch-test-debs"
UNIT = "shimwatch.service"
BUS_NAME = "org.shimwatch.Shimwatch1"
MANAGER_PATH = "/org/shimwatch/Shimwatch1"
MANAGER = BUS_NAME + ".Manager"
SHIM = BUS_NAME + ".Shim"
NS = "swdeb"

tap = open(os.path.join(OUT, "tap"), "a", buffering=1)
results = []
state = {}


def diag(text):
    for line in str(text).rstrip("\n").splitlines():
        tap.write(f"# {line}\n")


def check(description):
    def wrap(function):
        started = time.monotonic()
        try:
            note = function()
            ok = True
        except Exception:
            ok, note = False, traceback.format_exc()
        results.append(ok)
        tap.write(f"{'ok' if ok else 'not ok'} {len(results)} - package: {description}\n")
        if note:
            diag(note)
        diag(f"({time.monotonic() - started:.1f} s)")
        if not ok:
            diag(run(["journalctl", "--no-pager", "-n", "25", "-u", UNIT], check=False))
        return function
    return wrap


def run(argv, check=True, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stdout}")
    return proc.stdout


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def unit_prop(name):
    return run(["systemctl", "show", "-p", name, "--value", UNIT]).strip()


def process_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def readopt_id():
    with open(os.path.join(LIB, "shimwatch-names.h")) as f:
        m = re.search(r'#define SHIMWATCH_MESSAGE_ID_READOPT\s+"([0-9a-f]{32})"', f.read())
    return m.group(1)


def journal(*match):
    entries = []
    for line in run(["journalctl", "--no-pager", "-o", "json", *match], check=False).splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            pass
    return entries


bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)


def call(path, interface, method, signature=None, args=None, timeout=60000):
    parameters = GLib.Variant(signature, args) if signature else None
    return bus.call_sync(BUS_NAME, path, interface, method, parameters, None,
                         Gio.DBusCallFlags.NONE, timeout, None).unpack()


def prop(path, name, interface=SHIM):
    return call(path, "org.freedesktop.DBus.Properties", "Get", "(ss)", (interface, name))[0]


def dpkg_status():
    """'install ok installed VERSION', or '' once dpkg knows nothing of the package."""
    return subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", "shimwatch"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True).stdout.strip()


def package_files():
    """What dpkg -L lists of shimwatch that is a file (or a link), not a directory."""
    return sorted(p for p in run(["dpkg", "-L", "shimwatch"]).splitlines()
                  if p.startswith("/") and not os.path.isdir(p))


def start_task(task_id):
    bundle = os.path.join("/var/lib/shimwatch-test", task_id)
    shutil.rmtree(bundle, ignore_errors=True)
    run(["bash", os.path.join(LIB, "make-bundle.sh"), bundle, "sleep", "100000"])
    (path,) = call(MANAGER_PATH, MANAGER, "CreateTask", "(sssa{sv})", (NS, task_id, bundle, {}))
    wait_until(lambda: prop(path, "Status") == "running", 20, "the task to run")
    return path


def first(pattern):
    found = sorted(glob.glob(os.path.join(PACKAGES, pattern)))
    assert found, f"no {pattern} in {PACKAGES}: {os.listdir(PACKAGES)}"
    return found[0]


# -- as installed ------------------------------------------------------------------------

@check("apt installed shimwatch offline; every file dpkg -L lists is there; the unit is "
       "neither enabled nor started by the package")
def _installed():
    status = dpkg_status()
    assert status.startswith("install ok installed ") and "+test1" not in status, status
    state["version"] = status.split()[-1]
    files = package_files()
    state["files"] = files
    for needed in ("/usr/libexec/shimwatchd", "/usr/bin/shimwatchctl",
                   "/lib/systemd/system/shimwatch.service",
                   "/usr/share/dbus-1/system-services/org.shimwatch.Shimwatch1.service",
                   "/usr/share/polkit-1/actions/org.shimwatch.policy",
                   "/usr/share/man/man8/shimwatchd.8.gz"):
        assert needed in files, f"dpkg -L shimwatch has no {needed}"
    missing = [f for f in files if not os.path.lexists(f)]
    assert not missing, f"listed but missing: {missing}"
    enabled = run(["systemctl", "is-enabled", UNIT], check=False).strip()
    assert enabled == "disabled", f"is-enabled: {enabled}"
    return f"{state['version']}: {len(files)} files"


@check("shimwatchctl from the package talks to the packaged service (version, list)")
def _client():
    out = run(["shimwatchctl", "--version"]).strip()
    assert re.fullmatch(r"shimwatchctl \d+\.\d+\.\d+", out), out
    version = call(MANAGER_PATH, "org.freedesktop.DBus.Properties", "Get", "(ss)",
                   (MANAGER, "Version"))[0]
    assert out.endswith(" " + version), (out, version)
    run(["shimwatchctl", "list"])


# -- upgrade with a task running ---------------------------------------------------------

@check("apt upgrades to the rebuilt package with a task running: the service is restarted "
       "into the new binary, the container survives and the new process re-adopts it")
def _upgrade():
    path = start_task("upgraded")
    shim_pid, task_pid = prop(path, "ShimPid"), prop(path, "TaskPid")
    old_pid = int(unit_prop("MainPID"))
    assert old_pid > 0, "the service does not run before the upgrade"
    started = time.monotonic()
    out = run(["apt-get", "install", "-y", first("shimwatch_*+test1_*.deb")],
              env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    took = time.monotonic() - started
    status = dpkg_status()
    assert status.startswith("install ok installed ") and status.endswith("+test1"), \
        f"{status}\n{out}"
    new_pid = int(unit_prop("MainPID"))
    assert new_pid not in (0, old_pid), f"not restarted: MainPID {old_pid} -> {new_pid}"
    exe = os.readlink(f"/proc/{new_pid}/exe")
    assert exe == "/usr/libexec/shimwatchd", f"the new process runs {exe}"
    assert process_alive(shim_pid) and process_alive(task_pid), "the upgrade killed the task"
    wait_until(lambda: journal("_SYSTEMD_UNIT=" + UNIT, "MESSAGE_ID=" + readopt_id(),
                               "SHIMWATCH_TASK_ID=upgraded", f"_PID={new_pid}"),
               10, f"the readopt entry of PID {new_pid}")
    wait_until(lambda: prop(path, "Responsive"), 10, "the shim to answer the new process")
    assert prop(path, "Status") == "running"
    assert prop(path, "ShimPid") == shim_pid and prop(path, "TaskPid") == task_pid
    state.update(path=path, shim_pid=shim_pid, task_pid=task_pid)
    return f"apt-get install took {took:.1f} s; MainPID {old_pid} -> {new_pid}"


# -- purge with the task still running ---------------------------------------------------

@check("apt purge with the task running: the service stops, the container keeps running, "
       "/var/lib/shimwatch and every packaged file are gone, the task's runtime state is kept")
def _purge_running():
    files = package_files()
    assert os.path.isdir("/var/lib/shimwatch"), "no state directory before the purge"
    run(["apt-get", "purge", "-y", "shimwatch"],
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert dpkg_status() == "", f"dpkg still knows shimwatch: {dpkg_status()}"
    assert run(["systemctl", "is-active", UNIT], check=False).strip() in ("inactive", "unknown")
    assert process_alive(state["shim_pid"]) and process_alive(state["task_pid"]), \
        "the purge killed the task"
    left = [f for f in files if os.path.lexists(f)]
    assert not left, f"left after purge: {left}"
    assert not os.path.exists("/var/lib/shimwatch"), os.listdir("/var/lib/shimwatch")
    assert os.path.isdir(f"/run/shimwatch/runc/{NS}/upgraded"), \
        "the running task's runc state went with the purge"


@check("the package installed again takes the left task over; once it is deleted, a purge "
       "leaves nothing: no file, no state, no runtime directory, no unit, no bus name")
def _reinstall_and_purge():
    run(["apt-get", "install", "-y", first("shimwatch_*[0-9]_*.deb")],
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    path = state["path"]
    wait_until(lambda: prop(path, "Status") == "running", 20, "the left task, taken over")
    assert prop(path, "TaskPid") == state["task_pid"]
    call(path, SHIM, "Kill", "(ub)", (9, True))
    wait_until(lambda: prop(path, "Status") == "stopped", 20, "the task to stop")
    call(path, SHIM, "Delete")
    wait_until(lambda: not process_alive(state["task_pid"]) and not process_alive(state["shim_pid"]),
               20, "the container and its shim to be gone")
    files = package_files()
    run(["apt-get", "purge", "-y", "shimwatch"],
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert dpkg_status() == "", dpkg_status()
    listed = subprocess.run(["dpkg", "-L", "shimwatch"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert listed.returncode != 0 and not listed.stdout.strip(), listed.stdout
    left = [f for f in files if os.path.lexists(f)]
    left += [d for d in ("/var/lib/shimwatch", "/run/shimwatch", "/etc/shimwatch",
                         "/usr/share/doc/shimwatch", "/etc/systemd/system/shimwatch.service",
                         "/var/lib/systemd/deb-systemd-helper-enabled/shimwatch.service.dsh-also")
             if os.path.lexists(d)]
    assert not left, f"left after purge: {left}"
    assert run(["systemctl", "list-unit-files", UNIT], check=False).find(UNIT) < 0
    names = bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                          "ListActivatableNames", None, None, Gio.DBusCallFlags.NONE, 10000,
                          None).unpack()[0]
    assert BUS_NAME not in names, "the bus still activates the service"
    running = run(["pgrep", "-a", "shimwatchd"], check=False).strip()
    assert not running, f"still running: {running}"


tap.write(f"# package checks finished: {results.count(True)} passed, "
          f"{results.count(False)} failed\n")
tap.close()
status = "0" if all(results) and sys.argv[1:2] == ["0"] else "1"
subprocess.run(["systemctl", "--no-block", "exit", status])
