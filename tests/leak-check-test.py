#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tests/leak-check.py judges what the suite started, and only that.

Between a snapshot and a comparison of its own (with a marker of its own), this test
starts what a real run meets, and checks what the comparison names:

- somebody else's `sleep` in a cgroup of its own (a terminal opened meanwhile): not named,
  nor its cgroup;
- another run's process (another marker) in a cgroup named like the suite's: not named;
- a daemon of the suite that double-forked and survived: named;
- an orphaned container of the suite (no marker, its parent gone) in a suite's cgroup:
  named, and its cgroup;
- an empty cgroup left by the suite: named;
- a shim socket somebody else's live process listens on: not named;
- a socket file nobody listens on any more (a dead shim's): named;
- a runc container whose live init is somebody else's: not named;
- a stopped runc container whose state the suite left: named.

Output: TAP."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LEAK_CHECK = os.path.join(HERE, "leak-check.py")
MARKER = "SHIMWATCH_TEST_SUITE"
SOCKET_DIR = "/run/containerd/s"
MAKE_BUNDLE = os.path.join(HERE, "..", "tools", "make-bundle.sh")
LISTENER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
print("listening", flush=True)
time.sleep(600)
"""


def cgroup_root():
    """A cgroup hierarchy this test may make cgroups in: cgroup2 first, else v1 pids or
    memory; None where there is none."""
    points = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, after = line.split(" - ", 1)
            fstype, _source, options = after.split(" ", 2)
            point = before.split(" ")[4]
            if fstype == "cgroup2":
                points.setdefault("cgroup2", point)
            elif fstype == "cgroup":
                for o in options.strip().split(","):
                    points.setdefault(o, point)
    for label in ("cgroup2", "pids", "memory"):
        if label in points and os.access(points[label], os.W_OK):
            return points[label]
    return None


def start(env, session=True):
    return subprocess.Popen(["sleep", "600"], env=env, start_new_session=session)


def orphan(env):
    """A `sleep` whose parent exits at once (a double-forking daemon): its pid."""
    out = subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], env=env,
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def runc(root, *args, env=None):
    """runc's exit status and error output; a detached container gets /dev/null as its
    stdio (it would hold a pipe open for good)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.run(["runc", "--root", root] + list(args), env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                              timeout=60)
        err.seek(0)
        proc.stderr = err.read()
    return proc


def bundle(path, cgroups_path, *argv):
    """A busybox bundle (tools/make-bundle.sh) running argv in cgroups_path."""
    import json
    subprocess.run(["bash", MAKE_BUNDLE, path] + list(argv), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = os.path.join(path, "config.json")
    with open(config) as f:
        spec = json.load(f)
    spec["linux"]["cgroupsPath"] = cgroups_path
    with open(config, "w") as f:
        json.dump(spec, f)
    return path


def move(pid, cgroup):
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def main():
    root = cgroup_root()
    if root is None:
        print("1..0 # SKIP no writable cgroup hierarchy")
        return 0      # (a TAP plan of 0 is the skip; 77 is not, under protocol tap)
    tag = os.getpid()
    ours_marker = f"leak-check-test-{tag}"
    base = {k: v for k, v in os.environ.items() if k != MARKER}
    state = tempfile.NamedTemporaryFile(prefix="leak-check-test-", suffix=".json", delete=False)
    state.close()
    pids, dirs, files, containers = [], [], [], []
    work = tempfile.mkdtemp(prefix="leak-check-test-")        # not a name of the suite's
    results = []
    made = [d for d in (os.path.dirname(SOCKET_DIR), SOCKET_DIR) if not os.path.isdir(d)]
    try:
        os.makedirs(SOCKET_DIR, exist_ok=True)
        env = dict(base, **{MARKER: ours_marker})
        subprocess.run([sys.executable, LEAK_CHECK, "snapshot", state.name], env=env, check=True,
                       stdout=subprocess.DEVNULL)

        names = {"other": f"leak-check-other-{tag}", "another-run": f"swtest-another-run-{tag}",
                 "container": f"swtest-orphan-{tag}", "empty": f"leak-check-empty-{tag}"}
        for name in names.values():
            dirs.append(os.path.join(root, name))
            os.mkdir(dirs[-1])
        somebody = start(base)                                  # no marker at all
        move(somebody.pid, os.path.join(root, names["other"]))
        another_run = start(dict(base, **{MARKER: "/elsewhere/_build"}))
        move(another_run.pid, os.path.join(root, names["another-run"]))
        container = orphan(base)                                # fresh environment, no parent
        move(container, os.path.join(root, names["container"]))
        daemon = orphan(env)                                    # the suite's, double-forked
        pids += [somebody.pid, another_run.pid, container, daemon]
        live_socket = os.path.join(SOCKET_DIR, f"leak-check-live-{tag}")
        dead_socket = os.path.join(SOCKET_DIR, f"leak-check-dead-{tag}")
        files += [live_socket, dead_socket]
        listener = subprocess.Popen([sys.executable, "-c", LISTENER, live_socket], env=base,
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
        pids.append(listener.pid)
        assert listener.stdout.readline() == "listening\n"
        subprocess.run([sys.executable, "-c", LISTENER.replace("time.sleep(600)", ""),
                        dead_socket], env=env, check=True, stdout=subprocess.DEVNULL)
        # runc roots the comparison looks at: a default one (somebody else's container, its
        # init alive in a cgroup of its own) and one in a directory the suite left in /tmp
        # (a stopped container of the suite's, its state left)
        other_root = "/run/runc"
        suite_root = tempfile.mkdtemp(prefix="swleak-", dir="/tmp")
        dirs.append(suite_root)
        other_id, suite_id = f"leak-check-other-{tag}", f"leak-check-stopped-{tag}"
        other_bundle = bundle(os.path.join(work, "other"), f"/leak-check-other-ctr-{tag}",
                              "sleep", "600")
        started = runc(other_root, "run", "-d", "--bundle", other_bundle, other_id, env=base)
        if started.returncode == 0:
            containers.append((other_root, other_id))
        stopped_bundle = bundle(os.path.join(work, "stopped"), f"/swtest-stopped-{tag}", "true")
        ran = runc(suite_root, "run", "-d", "--bundle", stopped_bundle, suite_id, env=env)
        containers.append((suite_root, suite_id))
        deadline = time.monotonic() + 10            # detached: its state stays once it exits
        while ran.returncode == 0 and time.monotonic() < deadline and \
                '"stopped"' not in (subprocess.run(["runc", "--root", suite_root, "state",
                                                   suite_id], capture_output=True,
                                                  text=True).stdout):
            time.sleep(0.05)
        runc_ok = started.returncode == 0 and ran.returncode == 0
        if not runc_ok:
            print(f"# runc could not run the containers: {started.stderr} {ran.stderr}")

        out = subprocess.run([sys.executable, LEAK_CHECK, "compare", state.name],
                             env=dict(env, SHIMWATCH_LEAK_GRACE="0"),
                             capture_output=True, text=True, timeout=120)
        named_pids = {int(p) for p in re.findall(r"^#   pid (\d+):", out.stdout, re.M)}
        named = out.stdout

        def check(ok, what):
            results.append((ok, what))

        check(somebody.pid not in named_pids, "somebody else's process is not named")
        check(f"/{names['other']}" not in named, "nor its cgroup")
        check(another_run.pid not in named_pids and f"/{names['another-run']}" not in named,
              "another run's process in a cgroup named like the suite's is not named")
        check(daemon in named_pids, "the suite's double-forked daemon is named")
        check(container in named_pids, "the suite's orphaned container is named")
        check(re.search(rf"^#   \S+:/{names['container']}$", named, re.M) is not None,
              "and its cgroup")
        check(re.search(rf"^#   \S+:/{names['empty']}$", named, re.M) is not None,
              "an empty cgroup left by the suite is named")
        check(live_socket not in named, "a socket somebody else's process listens on is "
              "not named")
        check(re.search(rf"^#   {re.escape(dead_socket)}$", named, re.M) is not None,
              "a socket file nobody listens on is named")
        if runc_ok:
            check(f"{other_root}:{other_id} " not in named,
                  "a runc container whose live init is somebody else's is not named")
            check(f"{suite_root}:{suite_id} " in named,
                  "a stopped runc container of the suite's is named")
        check(out.returncode == 1 and "not ok 1 - no process started" in named,
              "the comparison fails")
        if not all(ok for ok, _ in results):
            sys.stdout.write("".join(f"# {line}\n" for line in out.stdout.splitlines()))
    finally:
        for root, cid in containers:
            runc(root, "delete", "--force", cid)
        shutil.rmtree(work, ignore_errors=True)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for p in ("somebody", "another_run", "listener"):
            if p in locals():
                locals()[p].wait()
        for path in files:
            if os.path.exists(path):
                os.unlink(path)
        for d in reversed(made):
            os.rmdir(d)
        deadline = time.monotonic() + 10
        for d in dirs:
            while True:
                try:
                    if d.startswith("/tmp/"):
                        shutil.rmtree(d)
                    else:
                        os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:             # the killed processes leave it a moment later
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        if os.path.exists(state.name):
            os.unlink(state.name)

    print(f"1..{len(results)}")
    for n, (ok, what) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {n} - {what}")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
