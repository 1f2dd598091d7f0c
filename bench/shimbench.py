#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shimwatch beside containerd 1.6.20, measured in the same run: one table, also as JSON.

    meson compile -C _build bench                       # the full run (docs/benchmarks.md)
    SHIMWATCH_BENCH_ARGS="--smoke" meson compile -C _build bench

Three scenarios (docs/benchmarks.md says what each figure means and how it is taken):

  single   one SIGKILLed shim at a time, n times, shimwatch and containerd taking turns:
           the raw EOF on a connection of our own to the same shim socket (the floor),
           ShimDisconnected, TaskExit, TaskDelete as a raw bus socket receives them (and
           ShimDisconnected as a Gio client does); containerd's
           "shim disconnected" log line and /tasks/exit, /tasks/delete as `ctr events`
           receives them.
  mass     N real runc shims SIGKILLed at once: last TaskExit, last TaskDelete, what is left,
           CPU-seconds used in the window; the same for containerd, as configured by default
           (a `shim delete` is killed after 5 s) and again with a cleanup timeout long enough
           for every delete to finish (the same work as shimwatch's). Also the idle CPU and
           memory of both with N tasks.
  scale    N tasks on tests/shimwatch-test-shim: RSS, idle CPU, main-thread wakeups and
           preemptions, context switches of all threads, GetManagedObjects and ListShims
           latency, create rate at 100 and at N, restart until every shim is taken over
           again, N deaths until the last TaskDelete, ShimDisconnected p99 while N are
           supervised.

The driver (this script without --unit) runs each scenario as a child of its own: under
tests/with-system-bus.sh (a private system bus with the project's policy and polkitd), and
under `flock LOCK` when --lock is given, so that a shared machine's test lock is held for one
scenario at a time. Each scenario works in its own directory under /tmp, watched by
tests/cleanup-guard.py, and stops everything it started by PID; it then checks that no
process, socket, cgroup, mount or runc container of its own is left, and fails otherwise.

--smoke runs every scenario with a few tasks (seconds): the test suite's `bench-smoke`
checks that way that every figure is produced and nothing is left behind. Targets are
judged only in a full run: timing on a shared machine is no pass/fail test.
"""

import argparse
import collections
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SHIMWATCH_SOURCE_DIR", os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests"))
import integration_test as it  # noqa: E402
from integration_test import Gio, GLib  # noqa: E402

NAMESPACE = "swbench"
TICK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def log(*args):
    print("bench:", *args, file=sys.stderr, flush=True)


# -- processes -----------------------------------------------------------------------------

def proc_stat(pid):
    """(state, ppid, own CPU s, reaped children's CPU s, starttime) of pid, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (fields[0], int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK,
            (int(fields[13]) + int(fields[14])) / TICK, fields[19])


# shimwatchd forks a spawner process at start-up that starts `shim start` and `shim delete`
# for it (docs/architecture.md): its work is the service's work
SPAWNER_COMM = "shimwatch-spawn"


def helpers_of(pid):
    """The pids of the service's own helper processes: its children named SPAWNER_COMM."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == SPAWNER_COMM and int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            found.append(int(entry))
    return found


def helpers_cpu_seconds(pid):
    """CPU seconds of the service's helper processes alone (in cpu_seconds too)."""
    return sum(st[2] for st in map(proc_stat, helpers_of(pid)) if st is not None)


def cpu_seconds(pid, children=False):
    """CPU seconds of pid and of its helper processes (the spawner: see helpers_of), with
    those of their reaped children if asked: what `shim start` and `shim delete` used is
    counted in the spawner's, not in the service's, until the spawner itself is reaped."""
    total = 0.0
    for p in [pid] + helpers_of(pid):
        st = proc_stat(p)
        if st is not None:
            total += st[2] + (st[3] if children else 0.0)
    return total


def rss_kib(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE_KIB


def context_switches(pid, tid=None):
    """(voluntary, nonvoluntary) context switches of one thread (the main one by default):
    the sleeps it ended, and the times it was preempted."""
    counts = {}
    with open(f"/proc/{pid}/task/{tid or pid}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                counts[line.split(":")[0]] = int(line.split()[1])
    return counts["voluntary_ctxt_switches"], counts["nonvoluntary_ctxt_switches"]


def threads_switches(pid):
    """{tid: context switches of both kinds} for every thread of pid."""
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            counts[tid] = sum(context_switches(pid, tid))
        except (OSError, KeyError):     # the thread ended meanwhile
            pass
    return counts


def thread_names(pid):
    """{tid: comm} for every thread of pid."""
    names = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names[tid] = f.read().strip()
        except OSError:
            pass
    return names


def switches_by_name(pid, before):
    """Context switches of pid's threads since threads_switches() gave before, summed by
    thread name (pool threads that ended took their count with them)."""
    after, names = threads_switches(pid), thread_names(pid)
    by_name = collections.Counter()
    for tid, n in after.items():
        by_name[names.get(tid, "?")] += n - before.get(tid, 0)
    return dict(by_name)


def threads_runtime(pid):
    """{(pid, tid): (comm, ns on a CPU)} for every thread of pid and of its helper processes,
    from schedstat: the scheduler's nanosecond clock, not the tick's 10 ms steps."""
    times = {}
    for p in [pid] + helpers_of(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    ns = int(f.read().split()[0])
                with open(f"/proc/{p}/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except (OSError, ValueError, IndexError):
                continue
            times[(p, tid)] = (comm, ns)
    return times


def runtime_by_name(pid, before):
    """ms on a CPU of pid's threads and helpers since threads_runtime() gave before, by name
    (threads that ended are missing: their time is in the tick figures only)."""
    by_name = collections.Counter()
    for key, (comm, ns) in threads_runtime(pid).items():
        by_name[comm] += (ns - before.get(key, (comm, 0))[1]) / 1e6
    return dict(by_name)


def switches_since(pid, before):
    """Context switches of pid's threads since threads_switches() gave before, and how many
    threads there are now. A thread that ended meanwhile took its count with it."""
    after = threads_switches(pid)
    return sum(n - before.get(tid, 0) for tid, n in after.items()), len(after)


def trace_mounts():
    """The mount points of tracefs and debugfs: perf mounts tracefs on /sys/kernel/tracing
    (and debugfs, on older kernels) to read tracepoints, and leaves it mounted."""
    points = set()
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                before, after = line.split(" - ", 1)
                if after.split(" ", 1)[0] in ("tracefs", "debugfs"):
                    points.add(before.split(" ")[4])
    except OSError:
        pass
    return points


class PerfMounts:
    """Around a run of perf: unmount the tracefs and debugfs mounts that appeared during it,
    so that the bench (and the bench-smoke test) leaves no mount behind. A mount that was
    there before stays; a mount below another one goes first."""

    def __enter__(self):
        self.before = trace_mounts()
        return self

    def __exit__(self, *exc):
        for point in sorted(trace_mounts() - self.before, key=len, reverse=True):
            subprocess.run(["umount", point], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


POLL_EVENTS = ["syscalls:sys_enter_" + name for name in
               ("poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2")]


def main_thread_polls(pid, seconds):
    """Sleep for seconds, counting the poll()/epoll_wait() calls of pid's main thread (its
    main-loop iterations) with `perf stat`; None where perf cannot count them."""
    try:
        with PerfMounts():
            out = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(POLL_EVENTS), "-t",
                                  str(pid), "--", "sleep", str(seconds)], capture_output=True,
                                 text=True, timeout=seconds + 60)
    except (OSError, subprocess.TimeoutExpired):
        time.sleep(seconds)
        return None
    # "<not counted>": the thread never ran in the window, so it made no such call
    counts = [line.split(",")[0].replace("<not counted>", "0")
              for line in out.stderr.splitlines() if any(event in line for event in POLL_EVENTS)]
    if out.returncode != 0 or not counts or not all(c.isdigit() for c in counts):
        return None
    return sum(int(c) for c in counts)


def alive(pid):
    return pid > 0 and not it.process_dead(pid)


def kill_by_pid(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def stop_process(proc, timeout=60):
    """SIGTERM, then SIGKILL after timeout; always reaped."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def median(values):
    return statistics.median(values) if values else None


class RawBusClient:
    """A D-Bus client that sends a method call and reads its reply's bytes off the socket
    without decoding them: the time until the whole reply has arrived is the service's and
    the bus's, not the client library's. (GLib's client spends about as long decoding a
    reply of 19,000 values into a GVariant tree as the service does encoding it.)"""

    def __init__(self, address):
        path = dict(kv.split("=", 1) for kv in address.split(":", 1)[1].split(","))["path"]
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""
        self.serial = 0
        self.sock.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() +
                          b"\r\n")
        if not self._line().startswith(b"OK "):
            raise AssertionError("the bus refused EXTERNAL authentication")
        self.sock.sendall(b"BEGIN\r\n")
        self.call("/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello",
                  destination="org.freedesktop.DBus")

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise AssertionError("the bus closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def call(self, path, interface, method, destination=None, body=None):
        """Sends the call; returns the reply's size once all of it has arrived."""
        message = Gio.DBusMessage.new_method_call(destination or it.BUS_NAME, path, interface,
                                                  method)
        if body is not None:
            message.set_body(body)
        self.serial += 1
        message.set_serial(self.serial)
        self.sock.sendall(message.to_blob(Gio.DBusCapabilityFlags.NONE))
        while True:     # signals addressed to us (NameAcquired) may come first
            header = self._read(16)
            order = "<" if header[0:1] == b"l" else ">"
            kind = header[1]
            body_len, _, fields_len = struct.unpack(order + "III", header[4:16])
            rest = (fields_len + 7) // 8 * 8 + body_len
            self._read(rest)
            if kind == 3:
                raise AssertionError(f"{method} failed")
            if kind == 2:     # calls are sequential: the only return is this call's
                return 16 + rest

    def add_match(self, rule):
        self.call("/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
                  destination="org.freedesktop.DBus", body=GLib.Variant("(s)", (rule,)))

    def receive(self, on_message):
        """Once the calls are done: reads the socket until it closes, in a thread blocked in
        recv() like raw_connection()'s. Each recv() return is stamped at once, before any
        parsing; then the messages it completed are split off and decoded, and each is
        passed to on_message(message, stamp) with that stamp."""
        stamp = time.monotonic()       # for what arrived with the last call's reply
        while True:
            if len(self.buf) >= 16:
                size = Gio.DBusMessage.bytes_needed(self.buf[:16])
                if len(self.buf) >= size:
                    blob, self.buf = self.buf[:size], self.buf[size:]
                    on_message(Gio.DBusMessage.new_from_blob(blob, Gio.DBusCapabilityFlags.NONE),
                               stamp)
                    continue
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return
            stamp = time.monotonic()
            if not chunk:
                return
            self.buf += chunk

    def close(self):
        self.sock.close()


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Profile:
    """`perf record --call-graph dwarf -p PID` for a phase when --perf DIR is given
    (DIR/NAME.data), else nothing. Profiled runs are for finding where the time goes, not
    for the figures."""

    def __init__(self, args, pid, name):
        self.path = os.path.join(args.perf, name + ".data") if args.perf else None
        self.freq = getattr(args, "perf_freq", None) or 499
        self.pid, self.proc = pid, None

    def __enter__(self):
        self.mounts = PerfMounts().__enter__()
        if self.path:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # DWARF unwinding: Debian's GLib and libc have no frame pointers
            # the service and its spawner (helpers_of)
            pids = ",".join(str(p) for p in [self.pid] + helpers_of(self.pid))
            cmd = ["perf", "record", "--call-graph", "dwarf,16384",
                   "-F", str(self.freq), "-p", pids, "-o", self.path]
            # SHIMBENCH_PERF_CMD replaces the command, e.g. "perf trace -s -p {pids} -o {out}"
            if os.environ.get("SHIMBENCH_PERF_CMD"):
                cmd = [a.replace("{pids}", pids).replace("{out}", self.path)
                       for a in os.environ["SHIMBENCH_PERF_CMD"].split()]
            self.proc = subprocess.Popen(cmd,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)          # perf attaches to every thread first
        return self

    def __exit__(self, *exc):
        if self.proc:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.mounts.__exit__(*exc)


def cgroup_exists(path):
    return any(os.path.isdir(os.path.join(m, path.lstrip("/"))) for m in it.cgroup_mounts())


def raw_connection(path):
    """A connection of our own to a shim's socket, and the time its EOF arrives: the floor
    for any supervisor of that shim (the kernel closes every connection at once)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    box = {}

    def wait_eof():
        try:
            while sock.recv(4096):
                pass
        except OSError:
            pass
        box["eof"] = time.monotonic()
    thread = threading.Thread(target=wait_eof, daemon=True)
    thread.start()
    return sock, thread, box


def kill_watched(socket_path, shim_pid, settle, wait_deleted):
    """Connect to a shim's socket (raw_connection), let settle seconds pass, SIGKILL the
    shim and wait_deleted(); returns the kill's CLOCK_MONOTONIC and wall-clock times and the
    EOF's CLOCK_MONOTONIC time."""
    sock, thread, box = raw_connection(socket_path)
    time.sleep(settle)
    killed_wall, killed = time.time(), time.monotonic()
    os.kill(shim_pid, signal.SIGKILL)
    wait_deleted()
    thread.join(5)
    sock.close()
    return killed, killed_wall, box["eof"]


# -- a scenario's directory ----------------------------------------------------------------

class Workspace:
    """/tmp/swbench-XXXXXXXX with a private tmpfs at run/ (what lives in /run in production:
    shimwatch's runtime directory, containerd's state), watched by tests/cleanup-guard.py."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="swbench-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.guard = subprocess.Popen(["/usr/bin/python3", it.GUARD, self.dir,
                                       "/" + NAMESPACE],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, cwd="/",
                                      start_new_session=True)
        self.run = os.path.join(self.dir, "run")
        os.makedirs(self.run)
        self.tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1g",
                                     "swbench", self.run],
                                    stderr=subprocess.DEVNULL).returncode == 0
        self.sockets = set()
        self.pids = []           # everything started, to check at the end
        self.bundle = os.path.join(self.dir, "bundle")
        subprocess.run(["bash", os.path.join(SOURCE_DIR, "tools", "make-bundle.sh"),
                        self.bundle, "sleep", "100000"], check=True, stdout=subprocess.DEVNULL)

    def watch_pid(self, pid):
        self.pids.append(pid)
        it.guard_pid(self.dir, pid)

    def add_socket(self, path):
        if path not in self.sockets:
            self.sockets.add(path)
            with open(os.path.join(self.dir, "guard.sockets"), "a") as f:
                f.write(path + "\n")

    def close(self):
        """Remove everything, then say what could not be removed."""
        it.finish_cleanup_guard(self.guard)
        if self.tmpfs:
            subprocess.run(["umount", self.run], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", self.dir], check=False)
        left = []
        left += [f"process {p}" for p in self.pids if alive(p)]
        left += [f"socket {s}" for s in sorted(self.sockets) if os.path.lexists(s)]
        if os.path.exists(self.dir):
            left.append(f"directory {self.dir}")
        with open("/proc/self/mountinfo") as f:
            if any(self.dir in line for line in f):
                left.append(f"mount under {self.dir}")
        for parent in ("/" + NAMESPACE, "/shimwatch/" + NAMESPACE):
            if cgroup_exists(parent):
                it.remove_empty_cgroups(parent)
            if cgroup_exists(parent):
                left.append(f"cgroup {parent}")
        return left


# -- shimwatch -----------------------------------------------------------------------------

class BusWatch:
    """The service's lifecycle signals with their arrival times, received two ways, each by a
    bus connection and a thread of its own:

    * raw (the figures): a RawBusClient with a match for the manager's signals, read by a
      thread blocked in recv() and stamped when recv() returns, as raw_connection() stamps
      the EOF; the messages are split and decoded after the stamp. Both sides of the
      comparison pay one wake-up of one Python thread, so the figure is the service's and
      the bus's time.
    * Gio (shown beside them): a GDBusConnection whose worker thread reads the message and
      dispatches it through a GMainContext to a thread that takes the GIL and runs the
      callback, stamped there: what a Python GLib client sees, two thread hops later.

    Both count every signal, so that exactly-once is checked on each. The single-shim
    scenario turns the Gio client off (set_gio) for the deaths whose raw figures it judges:
    the Gio client's two threads, woken by the same message as the raw reader, would compete
    with it for the GIL and for the two CPUs, a cost the raw EOF it is compared with does
    not pay."""
    MEMBERS = ("ShimDisconnected", "TaskExit", "TaskDelete")

    def __init__(self):
        self.cond = threading.Condition()
        self.seen = {m: {} for m in self.MEMBERS}     # member -> {id: [raw times]}
        self.gio_seen = {m: {} for m in self.MEMBERS}     # the same, as the Gio client saw them
        self.task_pids = {}          # id -> container pid, to check at TaskExit
        self.dead_at_exit = {}
        self.raw = RawBusClient(os.environ["DBUS_SYSTEM_BUS_ADDRESS"])
        self.raw.add_match(f"type='signal',interface='{it.MANAGER}',path='{it.MANAGER_PATH}'")
        self.raw_thread = threading.Thread(target=self.raw.receive, args=(self._on_raw,),
                                           daemon=True)
        self.raw_thread.start()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready):
        context = GLib.MainContext.new()
        context.push_thread_default()
        self.connection = Gio.DBusConnection.new_for_address_sync(
            os.environ["DBUS_SYSTEM_BUS_ADDRESS"],
            Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT |
            Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
        self.context = context
        self.subscription = self._subscribe()
        self.loop = GLib.MainLoop.new(context, False)
        ready.set()            # what arrives before run() waits in the context
        self.loop.run()

    def _subscribe(self):
        return self.connection.signal_subscribe(None, it.MANAGER, None, it.MANAGER_PATH, None,
                                                Gio.DBusSignalFlags.NONE, self._on_signal)

    def set_gio(self, on):
        """Whether the Gio client receives the next signals. Once this returns, the bus has
        the match rule added (or removed): a later call's reply came back."""
        done = threading.Event()

        def apply():
            if on and self.subscription is None:
                self.subscription = self._subscribe()
            elif not on and self.subscription is not None:
                self.connection.signal_unsubscribe(self.subscription)
                self.subscription = None
            done.set()
            return False
        self.context.invoke_full(GLib.PRIORITY_DEFAULT, apply)
        done.wait(10)
        self.connection.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                  "org.freedesktop.DBus", "GetId", None, None,
                                  Gio.DBusCallFlags.NONE, -1, None)

    def _task_id(self, member, parameters):
        if member not in self.MEMBERS or parameters is None:
            return None
        if parameters.get_child_value(1).get_string() != NAMESPACE:
            return None
        return parameters.get_child_value(2).get_string()

    def _on_raw(self, message, stamp):
        if message.get_message_type() != Gio.DBusMessageType.SIGNAL or \
                message.get_interface() != it.MANAGER:
            return
        member = message.get_member()
        task_id = self._task_id(member, message.get_body())
        if task_id is None:
            return
        if member == "TaskExit" and task_id in self.task_pids:
            self.dead_at_exit.setdefault(task_id, it.process_dead(self.task_pids[task_id]))
        with self.cond:
            self.seen[member].setdefault(task_id, []).append(stamp)
            self.cond.notify_all()

    def _on_signal(self, connection, sender, path, interface, member, parameters):
        now = time.monotonic()
        task_id = self._task_id(member, parameters)
        if task_id is None:
            return
        with self.cond:
            self.gio_seen[member].setdefault(task_id, []).append(now)
            self.cond.notify_all()

    def first(self, member, task_id, gio=False):
        with self.cond:
            times = (self.gio_seen if gio else self.seen)[member].get(task_id)
            return times[0] if times else None

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
                self.cond.wait(min(left, 0.5))

    def wait_deleted(self, ids, timeout, gio=True):
        """Until both receivers (or the raw one alone) have seen each TaskDelete."""
        ids = list(ids)
        self.wait(lambda: all(i in self.seen["TaskDelete"] and
                              (not gio or i in self.gio_seen["TaskDelete"]) for i in ids),
                  timeout, f"TaskDelete of {len(ids)} task(s)")

    def counts(self, task_id):
        """How often each member arrived for task_id: [raw..., Gio...]."""
        with self.cond:
            return [len(seen[m].get(task_id, [])) for seen in (self.seen, self.gio_seen)
                    for m in self.MEMBERS]

    def close(self):
        self.loop.quit()
        self.thread.join(5)
        self.raw.sock.shutdown(socket.SHUT_RDWR)
        self.raw_thread.join(5)
        self.raw.close()


class Shimwatch:
    """shimwatchd with its default settings (only RuntimePath adds the test shim)."""

    def __init__(self, ws):
        self.ws = ws
        self.runtime_dir = os.path.join(ws.run, "shimwatch")
        self.state_dir = os.path.join(ws.dir, "shimwatch-state")
        runtimes = os.path.join(ws.dir, "runtimes")
        os.makedirs(runtimes, exist_ok=True)
        os.symlink(it.TEST_SHIM, os.path.join(runtimes, "containerd-shim-test-v1"))
        self.config = os.path.join(ws.dir, "shimwatch.conf")
        # the metrics textfile is written as by default, into the scenario's directory
        metrics = os.path.join(ws.dir, "metrics")
        os.makedirs(metrics, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(f"[Service]\nRuntimePath={runtimes};/usr/bin;/usr/sbin\n"
                    f"MetricsDirectory={metrics}\n")
            if os.environ.get("SHIMBENCH_CONCURRENCY"):
                f.write(f"CleanupConcurrency={os.environ['SHIMBENCH_CONCURRENCY']}\n")
        self.log = open(os.path.join(ws.dir, "shimwatchd.log"), "a")
        self.bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
        self.proc = None
        self.readopted = []
        self.lock = threading.Lock()

    def start(self):
        self.readopted = []
        started = time.monotonic()
        self.proc = subprocess.Popen([it.SHIMWATCHD, "--runtime-dir", self.runtime_dir,
                                      "--state-dir", self.state_dir, "--config", self.config],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.ws.watch_pid(self.proc.pid)
        threading.Thread(target=self._read_log, args=(self.proc.stdout,), daemon=True).start()

        def owned():
            if self.proc.poll() is not None:
                raise AssertionError(f"shimwatchd exited with {self.proc.returncode}")
            try:
                reply = self.bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                           "org.freedesktop.DBus", "GetConnectionUnixProcessID",
                                           GLib.Variant("(s)", (it.BUS_NAME,)), None,
                                           Gio.DBusCallFlags.NONE, -1, None)
            except GLib.Error:
                return False
            return reply.unpack()[0] == self.proc.pid
        deadline = time.monotonic() + 30
        while not owned():
            if time.monotonic() > deadline:
                raise AssertionError("shimwatchd did not own its name within 30 s")
            time.sleep(0.005)
        return started

    def _read_log(self, stream):
        # a shim is re-adopted when the service logs "shim N taken over again" (the restart
        # figure; bench-smoke fails, with that figure missing, if the line is reworded)
        for line in iter(stream.readline, b""):
            if b"taken over again" in line:
                with self.lock:
                    self.readopted.append(time.monotonic())
            self.log.write(line.decode(errors="replace"))
        self.log.flush()

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        stop_process(self.proc)

    def call(self, path, interface, method, signature=None, args=None, timeout=60000):
        parameters = GLib.Variant(signature, args) if signature else None
        return self.bus.call_sync(it.BUS_NAME, path, interface, method, parameters, None,
                                  Gio.DBusCallFlags.NONE, timeout, None)

    def create(self, task_id, runtime=None):
        options = {"runtime": GLib.Variant("s", runtime)} if runtime else {}
        reply = self.call(it.MANAGER_PATH, it.MANAGER, "CreateTask", "(sssa{sv})",
                          (NAMESPACE, task_id, self.ws.bundle, options))
        return reply.unpack()[0]

    def tasks(self):
        """{id: {ShimPid, TaskPid, Address, CgroupPath, ...}} from one GetManagedObjects."""
        reply = self.call(it.MANAGER_PATH, "org.freedesktop.DBus.ObjectManager",
                          "GetManagedObjects").unpack()[0]
        out = {}
        for interfaces in reply.values():
            props = interfaces.get(it.SHIM)
            if props and props.get("Namespace") == NAMESPACE:
                out[props["Id"]] = props
        for props in out.values():
            if props["Address"].startswith("unix://"):
                self.ws.add_socket(props["Address"][len("unix://"):])
        return out

    def leftovers(self, tasks):
        """What is left of these tasks: processes, runc state, task directories, records,
        sockets, cgroups."""
        left = {"processes": 0, "runc state": 0, "task dirs": 0, "records": 0, "sockets": 0,
                "cgroups": 0}
        for task_id, p in tasks.items():
            left["processes"] += alive(p["ShimPid"]) + alive(p["TaskPid"])
            left["runc state"] += os.path.exists(os.path.join(self.runtime_dir, "runc",
                                                              NAMESPACE, task_id))
            left["task dirs"] += os.path.exists(os.path.join(self.runtime_dir, "tasks",
                                                             NAMESPACE, task_id))
            for suffix in (".json", ".marks"):      # the record and its signal marks
                left["records"] += os.path.exists(os.path.join(self.runtime_dir, "records",
                                                               NAMESPACE, task_id + suffix))
            address = p["Address"][len("unix://"):]
            left["sockets"] += bool(address) and os.path.lexists(address)
            left["cgroups"] += bool(p["CgroupPath"]) and cgroup_exists(p["CgroupPath"])
        return left


def bus_daemon_pid():
    bus_dir = os.environ.get("SHIMWATCH_TEST_BUS_DIR", "")
    needle = f"--config-file={bus_dir}/bus.conf".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if bus_dir and needle in f.read().split(b"\0"):
                        return int(entry)
            except OSError:
                pass
    return None


# -- containerd ----------------------------------------------------------------------------

class Containerd:
    """A private containerd 1.6.20: its own root, state, addresses and config under the
    scenario's directory, CRI disabled; tasks made with `ctr run -d --rootfs` from the same
    busybox rootfs; events from `ctr events` with their arrival times. With cleanup_timeout
    (a Go duration), `io.containerd.timeout.shim.cleanup` replaces the default 5 s after
    which containerd kills a `shim delete` it runs for a dead shim; name keeps a second
    instance's directories apart from the first's."""

    def __init__(self, ws, name="containerd", cleanup_timeout=None):
        self.ws = ws
        d = os.path.join(ws.dir, name)
        os.makedirs(d)
        self.state = os.path.join(ws.run, name)                  # /run/containerd's role
        self.runc_root = os.path.join(ws.run, name + "-runc")
        os.makedirs(self.runc_root)
        self.address = os.path.join(d, "containerd.sock")
        self.config = os.path.join(d, "config.toml")
        with open(self.config, "w") as f:
            f.write(f"""version = 2
root = "{d}/root"
state = "{self.state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", \
"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", \
"io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.address}"
[ttrpc]
  address = "{self.address}.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
""")
            if cleanup_timeout:
                f.write("[timeouts]\n"
                        f'  "io.containerd.timeout.shim.cleanup" = "{cleanup_timeout}"\n')
        self.log_path = os.path.join(d, "containerd.log")
        self.cond = threading.Condition()
        self.events = {}             # (topic, id) -> [arrival times]
        self.task_pids = {}          # id -> container pid, to check at /tasks/exit
        self.dead_at_exit = {}
        self.proc = self.events_proc = None
        self.ids = []

    def start(self):
        self.proc = subprocess.Popen(["containerd", "--config", self.config],
                                     stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        self.ws.watch_pid(self.proc.pid)
        deadline = time.monotonic() + 30
        while subprocess.run(["ctr", "--address", self.address, "version"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("containerd did not start; see " + self.log_path)
            time.sleep(0.05)
        self.events_proc = subprocess.Popen(["ctr", "--address", self.address, "events"],
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.ws.watch_pid(self.events_proc.pid)
        threading.Thread(target=self._read_events, daemon=True).start()

    def _read_events(self):
        # "2026-12-03 02:50:01.1 +0000 UTC swbench /tasks/exit {"container_id":"c1",...}"
        for line in iter(self.events_proc.stdout.readline, b""):
            now = time.monotonic()
            text = line.decode(errors="replace")
            match = re.search(r" (/tasks/[a-z-]+) (\{.*\})\s*$", text)
            if not match:
                continue
            try:
                task_id = json.loads(match.group(2)).get("container_id", "")
            except ValueError:
                continue
            if match.group(1) == "/tasks/exit" and task_id in self.task_pids:
                self.dead_at_exit.setdefault(task_id, it.process_dead(self.task_pids[task_id]))
            with self.cond:
                self.events.setdefault((match.group(1), task_id), []).append(now)
                self.cond.notify_all()

    @property
    def pid(self):
        return self.proc.pid

    def ctr(self, *args, check=True):
        return subprocess.run(["ctr", "--address", self.address, "-n", NAMESPACE] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              check=check)

    def run(self, task_id):
        self.ids.append(task_id)
        self.ctr("run", "-d", "--null-io", "--runc-root", self.runc_root, "--env", "PATH=/bin",
                 "--rootfs", os.path.join(self.ws.bundle, "rootfs"), task_id,
                 "sleep", "100000")
        self.ws.add_socket(self.socket_of(task_id))
        return self.task(task_id)

    def bundle(self, task_id):
        return os.path.join(self.state, "io.containerd.runtime.v2.task", NAMESPACE, task_id)

    def socket_of(self, task_id):
        # 1.6 names shim sockets sha256(<containerd address>/<namespace>/<id>), hard-coded
        # under /run/containerd/s
        digest = hashlib.sha256(f"{self.address}/{NAMESPACE}/{task_id}".encode()).hexdigest()
        return "/run/containerd/s/" + digest

    def task(self, task_id):
        with open(os.path.join(self.bundle(task_id), "init.pid")) as f:
            task_pid = int(f.read())
        shim_pid = proc_stat(task_pid)[1]        # the shim reaps its container: its parent
        return {"ShimPid": shim_pid, "TaskPid": task_pid, "socket": self.socket_of(task_id)}

    def first(self, topic, task_id):
        with self.cond:
            times = self.events.get((topic, task_id))
            return times[0] if times else None

    def wait_deleted(self, ids, timeout):
        ids = list(ids)
        deadline = time.monotonic() + timeout
        with self.cond:
            while not all(("/tasks/delete", i) in self.events for i in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout} s waiting for containerd's "
                                         f"/tasks/delete of {len(ids)} task(s)")
                self.cond.wait(min(left, 0.5))

    def disconnect_logged(self):
        """{id: wall-clock time of containerd's "shim disconnected" log line}"""
        out = {}
        pattern = re.compile(r'time="([0-9T:.-]+)Z" level=info msg="shim disconnected" id=(\S+)')
        with open(self.log_path, errors="replace") as f:
            for line in f:
                m = pattern.search(line)
                if m:
                    stamp, frac = (m.group(1).split(".") + ["0"])[:2]
                    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").replace(
                        tzinfo=datetime.timezone.utc).timestamp() + float("0." + frac)
                    out.setdefault(m.group(2).strip('"'), when)
        return out

    def leftovers(self, tasks):
        left = {"processes": 0, "runc state": 0, "bundles": 0, "sockets": 0, "cgroups": 0}
        for task_id, p in tasks.items():
            left["processes"] += alive(p["ShimPid"]) + alive(p["TaskPid"])
            left["runc state"] += os.path.exists(os.path.join(self.runc_root, NAMESPACE,
                                                              task_id))
            left["bundles"] += os.path.exists(self.bundle(task_id))
            left["sockets"] += os.path.lexists(p["socket"])
            left["cgroups"] += cgroup_exists(f"/{NAMESPACE}/{task_id}")
        return left

    def stop(self):
        stop_process(self.events_proc, 5)
        stop_process(self.proc)
        # what 1.6 leaks for every dead shim: its socket file (removed here, counted before)
        for task_id in self.ids:
            try:
                os.unlink(self.socket_of(task_id))
            except OSError:
                pass


def version_of(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return ""


# -- scenario 1: one SIGKILLed shim at a time ----------------------------------------------

def unit_single(ws, args):
    n = args.single_n
    sw, ctd = Shimwatch(ws), Containerd(ws)
    watch = None
    figures = {"n": n, "shimwatch": {"eof": [], "disconnected": [], "disconnected_gio": [],
                                     "gio_eof": [], "exit": [], "delete": []},
               "containerd": {"eof": [], "disconnected": [], "exit": [], "delete": []}}
    try:
        sw.start()
        ctd.start()
        watch = BusWatch()
        kills = {}
        for i in range(n):
            # shimwatch and containerd take turns, so that a busy moment of a shared machine
            # lands on both
            # alternately: the raw figures alone, then the Gio client's
            gio = i % 2 == 1
            watch.set_gio(gio)
            task_id = f"s{i}"
            sw.create(task_id)
            props = sw.tasks()[task_id]
            watch.task_pids[task_id] = props["TaskPid"]
            killed, _, eof = kill_watched(props["Address"][len("unix://"):], props["ShimPid"], 0.2,
                                          lambda: watch.wait_deleted([task_id], 30, gio=gio))
            f = figures["shimwatch"]
            if gio:
                f["disconnected_gio"].append(
                    1000 * (watch.first("ShimDisconnected", task_id, gio=True) - killed))
                f["gio_eof"].append(1000 * (eof - killed))
            else:
                f["eof"].append(1000 * (eof - killed))
                f["disconnected"].append(
                    1000 * (watch.first("ShimDisconnected", task_id) - killed))
                f["exit"].append(1000 * (watch.first("TaskExit", task_id) - killed))
                f["delete"].append(1000 * (watch.first("TaskDelete", task_id) - killed))

            task_id = f"c{i}"
            task = ctd.run(task_id)
            ctd.task_pids[task_id] = task["TaskPid"]
            killed, kills[task_id], eof = kill_watched(
                task["socket"], task["ShimPid"], 0.2, lambda: ctd.wait_deleted([task_id], 30))
            f = figures["containerd"]
            f["eof"].append(1000 * (eof - killed))
            f["exit"].append(1000 * (ctd.first("/tasks/exit", task_id) - killed))
            f["delete"].append(1000 * (ctd.first("/tasks/delete", task_id) - killed))
            sw_f = figures["shimwatch"]
            if gio:
                log(f"single {i + 1}/{n}: shimwatch EOF {sw_f['gio_eof'][-1]:.2f} ms, "
                    f"ShimDisconnected by Gio {sw_f['disconnected_gio'][-1]:.2f} ms, "
                    f"containerd /tasks/delete {f['delete'][-1]:.1f} ms")
            else:
                log(f"single {i + 1}/{n}: shimwatch EOF {sw_f['eof'][-1]:.2f} ms, "
                    f"ShimDisconnected {sw_f['disconnected'][-1]:.2f} ms, TaskDelete "
                    f"{sw_f['delete'][-1]:.1f} ms, containerd /tasks/delete "
                    f"{f['delete'][-1]:.1f} ms")
        figures["shimwatch"]["dead_at_exit"] = sum(watch.dead_at_exit.values())
        figures["containerd"]["dead_at_exit"] = sum(ctd.dead_at_exit.values())
        logged = ctd.disconnect_logged()
        figures["containerd"]["disconnected"] = [1000 * (logged[i] - t) for i, t in kills.items()
                                                 if i in logged]
    finally:
        if watch:
            watch.close()
        sw.stop()
        ctd.stop()
    return figures


# -- scenario 2: N real runc shims SIGKILLed at once ---------------------------------------

def idle_window(pid, seconds):
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0), rss_kib(pid)


# containerd's cleanup timeout in the mass scenario's second containerd run: long enough
# for every `shim delete` of 200 dead shims to finish on two CPUs
FULL_CLEANUP_TIMEOUT = "120s"


def mass_kill(system, pid, n, idle_seconds, create, tasks_of, wait_deleted, first_exit,
              first_delete, leftovers, extra_pids=(), profile=None, prefix="m"):
    """Create n tasks, measure idle, SIGKILL every shim at once, time the last exit and
    delete, the CPU used meanwhile, and what is left. Returns the figures."""
    ids = [f"{prefix}{i}" for i in range(n)]
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(create, ids))
    log(f"mass {system}: {n} tasks created in {time.monotonic() - t0:.1f} s")
    tasks = tasks_of(ids)
    time.sleep(2)
    idle_cpu, rss = idle_window(pid, idle_seconds)
    cpu_before = {"own": cpu_seconds(pid), "helpers": helpers_cpu_seconds(pid),
                  "tree": cpu_seconds(pid, children=True) +
                  sum(cpu_seconds(p, children=True) for p in extra_pids)}
    switches_before, main_before = threads_switches(pid), context_switches(pid)
    runtime_before = threads_runtime(pid)
    with profile or Profile(argparse.Namespace(perf=None), 0, ""):
        killed = time.monotonic()
        kill_by_pid([t["ShimPid"] for t in tasks.values()])
        wait_deleted(ids, 300)
        done = time.monotonic()
    # the service's thread wake-ups in the window (threads that ended took theirs along)
    switches, _ = switches_since(pid, switches_before)
    by_name = switches_by_name(pid, switches_before)
    runtime = runtime_by_name(pid, runtime_before)
    main_sleeps = context_switches(pid)[0] - main_before[0]
    cpu_after = {"own": cpu_seconds(pid), "helpers": helpers_cpu_seconds(pid),
                 "tree": cpu_seconds(pid, children=True) +
                 sum(cpu_seconds(p, children=True) for p in extra_pids)}
    last_exit = max(first_exit(i) for i in ids) - killed
    last_delete = max(first_delete(i) for i in ids) - killed
    time.sleep(1)
    left = leftovers(tasks)
    log(f"mass {system}: last exit {last_exit:.2f} s, last delete {last_delete:.2f} s, "
        f"left {left}; per death: {switches / n:.1f} context switches of its threads, "
        f"{main_sleeps / n:.1f} sleeps of its main thread ended; by thread: "
        f"{ {k: round(v / n, 1) for k, v in by_name.items()} }; ms on a CPU per death "
        f"(schedstat, live threads): { {k: round(v / n, 3) for k, v in runtime.items()} }")
    return {"n": n, "last_exit_s": last_exit, "last_delete_s": last_delete,
            "window_s": done - killed, "leftovers": sum(left.values()), "leftover_kinds": left,
            "cpu_total_s": cpu_after["tree"] - cpu_before["tree"],
            "cpu_own_s": cpu_after["own"] - cpu_before["own"],
            # the spawner's part of cpu_own_s
            "cpu_spawner_s": cpu_after["helpers"] - cpu_before["helpers"],
            "idle_cpu_percent": idle_cpu, "rss_kib": rss, "cpus": os.cpu_count(),
            "context_switches": switches, "main_thread_sleeps": main_sleeps,
            "context_switches_by_thread": by_name, "cpu_ms_by_thread": runtime}


def unit_mass(ws, args):
    n = args.mass_n
    figures = {}
    sw = Shimwatch(ws)
    watch = None
    try:
        sw.start()
        watch = BusWatch()
        bus_pid = bus_daemon_pid()

        def sw_tasks(ids):
            every = sw.tasks()
            return {i: every[i] for i in ids}
        figures["shimwatch"] = mass_kill(
            "shimwatch", sw.pid, n, args.idle_seconds, sw.create, sw_tasks, watch.wait_deleted,
            lambda i: watch.first("TaskExit", i), lambda i: watch.first("TaskDelete", i),
            sw.leftovers, extra_pids=[bus_pid] if bus_pid else [],
            profile=Profile(args, sw.pid, f"mass-{n}-deaths"))
        figures["shimwatch"]["bus_counted"] = bool(bus_pid)
    finally:
        if watch:
            watch.close()
        sw.stop()
    figures["containerd"] = containerd_mass_kill(ws, args, "containerd", "m")
    # The same work as shimwatch's: with its default 5 s, containerd kills the `shim delete`
    # runs that have not finished (hundreds of things were left in every 200-shim run on a
    # 2-core VM), so its last /tasks/delete above is that of fewer deletes. Its own task ids
    # ("f...") and directories: the first instance's leftovers are still there, removed with
    # the scenario's directory.
    figures["containerd_full"] = containerd_mass_kill(ws, args, "containerd-full", "f",
                                                      FULL_CLEANUP_TIMEOUT)
    figures["containerd_full"]["cleanup_timeout"] = FULL_CLEANUP_TIMEOUT
    return figures


def containerd_mass_kill(ws, args, name, prefix, cleanup_timeout=None):
    """mass_kill() on a containerd instance of its own (see Containerd)."""
    ctd = Containerd(ws, name, cleanup_timeout)
    system = f"containerd (cleanup timeout {cleanup_timeout})" if cleanup_timeout else "containerd"
    try:
        ctd.start()
        return mass_kill(
            system, ctd.pid, args.mass_n, args.idle_seconds, ctd.run,
            lambda ids: {i: ctd.task(i) for i in ids}, ctd.wait_deleted,
            lambda i: ctd.first("/tasks/exit", i), lambda i: ctd.first("/tasks/delete", i),
            ctd.leftovers, prefix=prefix)
    finally:
        ctd.stop()


# -- scenario 3: N tasks on the test shim --------------------------------------------------

def unit_scale(ws, args):
    n, k = args.scale_n, args.scale_kills
    window = min(100, n // 2)
    sw = Shimwatch(ws)
    watch = None
    f = {"n": n, "kills": k}
    try:
        sw.start()
        rss_empty = rss_kib(sw.pid)
        watch = BusWatch()

        # create rate: 4 calls in flight; the rate of the first `window` and of the last
        done = []
        done_lock = threading.Lock()

        def create(task_id):
            sw.create(task_id, it.TEST_RUNTIME)
            with done_lock:
                done.append(time.monotonic())
        ids = [f"t{i}" for i in range(n)]
        with Profile(args, sw.pid, f"scale-create-{n}"):
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                list(pool.map(create, ids))
        done.sort()
        f["create_rate_first"] = window / (done[window - 1] - t0)
        f["create_rate_last"] = window / (done[-1] - done[-window - 1])
        f["create_window"] = window
        log(f"scale: {n} created in {done[-1] - t0:.1f} s; rate {f['create_rate_first']:.0f}/s "
            f"for the first {window}, {f['create_rate_last']:.0f}/s for the last {window}")

        # idle: whole-process CPU, the main thread's wake-ups and preemptions, every
        # thread's context switches, memory
        time.sleep(args.settle_seconds)
        with Profile(args, sw.pid, f"scale-idle-{n}"):
            main0, threads0, cpu0 = (context_switches(sw.pid), threads_switches(sw.pid),
                                     cpu_seconds(sw.pid))
            t0 = time.monotonic()
            polls = main_thread_polls(sw.pid, args.idle_seconds)
            elapsed = time.monotonic() - t0
        main1, (switches, threads) = context_switches(sw.pid), switches_since(sw.pid, threads0)
        f["idle_cpu_percent"] = 100 * (cpu_seconds(sw.pid) - cpu0) / elapsed
        f["wakeups_per_s"] = (main1[0] - main0[0]) / elapsed
        f["preemptions_per_s"] = (main1[1] - main0[1]) / elapsed
        f["switches_per_s"] = switches / elapsed
        f["threads"] = threads
        f["polls_per_s"] = polls / args.idle_seconds if polls is not None else None
        f["rss_kib"] = rss_kib(sw.pid)
        f["rss_per_shim_kib"] = (f["rss_kib"] - rss_empty) / n
        log(f"scale: idle {f['idle_cpu_percent']:.2f} % CPU, {f['wakeups_per_s']:.1f} "
            f"wakeups/s and {f['preemptions_per_s']:.1f} preemptions/s of the main thread, "
            f"{f['switches_per_s']:.1f} context switches/s in {threads} threads, "
            f"{f['polls_per_s']} polls/s, RSS {f['rss_kib']} KiB")

        # listing: until the whole reply has arrived (the service and the bus), and as a
        # GLib client sees it (that plus decoding the reply into a GVariant, not unpacked)
        raw = RawBusClient(os.environ["DBUS_SYSTEM_BUS_ADDRESS"])
        for method, interface in (("GetManagedObjects", "org.freedesktop.DBus.ObjectManager"),
                                  ("ListShims", it.MANAGER)):
            times, gio_times = [], []
            profile = Profile(args, sw.pid, f"scale-{method}-{n}")
            profile.__enter__()
            for _ in range(args.listing_calls):
                t = time.monotonic()
                f[method + "_bytes"] = raw.call(it.MANAGER_PATH, interface, method)
                times.append(1000 * (time.monotonic() - t))
                t = time.monotonic()
                sw.call(it.MANAGER_PATH, interface, method)
                gio_times.append(1000 * (time.monotonic() - t))
            profile.__exit__()
            f[method + "_ms"] = median(times)
            f[method + "_ms_all"] = times
            f[method + "_gio_ms"] = median(gio_times)
            f[method + "_gio_ms_all"] = gio_times
        raw.close()
        log(f"scale: GetManagedObjects {f['GetManagedObjects_ms']:.1f} ms "
            f"({f['GetManagedObjects_gio_ms']:.1f} ms decoded by Gio, "
            f"{f['GetManagedObjects_bytes']} bytes), ListShims {f['ListShims_ms']:.1f} ms "
            f"({f['ListShims_gio_ms']:.1f} ms decoded)")

        # single deaths while n are supervised: k judged on the raw figures alone, with the
        # Gio client off (as the single-shim scenario does, and for the same reason: its two
        # threads, woken by the same message, would hold the GIL the raw reader needs; a
        # profile showed the raw reader's stamp up to 8 ms after dbus-daemon had sent the
        # signal), and every sixth death, g more, for the Gio client's figure
        g = min(max(2, k // 5), n - k)
        tasks = sw.tasks()
        eofs, discs, gio_discs, killed_at, raw_with_gio = [], [], [], [], []
        with Profile(args, sw.pid, f"scale-deaths-while-{n}-supervised"):
            for j, task_id in enumerate(ids[:k + g]):
                gio = len(gio_discs) < g and (j % 6 == 5 or len(discs) == k)
                watch.set_gio(gio)
                props = tasks[task_id]
                killed, _, eof_at = kill_watched(
                    props["Address"][len("unix://"):], props["ShimPid"], 0.05,
                    lambda: watch.wait_deleted([task_id], 30, gio=gio))
                eof = 1000 * (eof_at - killed)
                disc = 1000 * (watch.first("ShimDisconnected", task_id) - killed)
                if gio:
                    gio_discs.append(1000 * (watch.first("ShimDisconnected", task_id, gio=True) -
                                             killed))
                    # (the raw reader's figures with the Gio client on, for comparison)
                    raw_with_gio.append((eof, disc))
                    continue
                killed_at.append(killed)
                eofs.append(eof)
                discs.append(disc)
        watch.set_gio(True)
        f["eof_p99_ms"], f["disconnected_p99_ms"] = percentile(eofs, 99), percentile(discs, 99)
        # each death's figures, and when it was killed (CLOCK_MONOTONIC, as `perf record -k
        # CLOCK_MONOTONIC` stamps its samples): the worst ones can be found in a profile
        f["deaths_killed_at"], f["deaths_eof_ms"] = killed_at, eofs
        f["deaths_disconnected_ms"], f["deaths_disconnected_gio_ms"] = discs, gio_discs
        f["eof_median_ms"], f["disconnected_median_ms"] = median(eofs), median(discs)
        f["disconnected_gio_p99_ms"] = percentile(gio_discs, 99)
        f["disconnected_gio_n"] = g
        f["deaths_with_gio_eof_and_raw_disconnected_ms"] = raw_with_gio
        log(f"scale: ShimDisconnected p99 {f['disconnected_p99_ms']:.2f} ms (raw EOF p99 "
            f"{f['eof_p99_ms']:.2f} ms) over {k} deaths; decoded by Gio, p99 "
            f"{f['disconnected_gio_p99_ms']:.2f} ms over {g} others")
        ids = ids[k + g:] + [f"r{i}" for i in range(k + g)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: sw.create(i, it.TEST_RUNTIME), ids[-(k + g):]))
        tasks = sw.tasks()

        # restart: SIGTERM leaves the shims running; time from exec until every shim is taken
        # over again
        sw.stop()
        started = sw.start()
        deadline = time.monotonic() + 120
        while len(sw.readopted) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        f["restart_readopted"] = len(sw.readopted)
        f["restart_s"] = (max(sw.readopted) - started) if len(sw.readopted) >= n else None
        log(f"scale: restart: {len(sw.readopted)}/{n} taken over again, last after "
            f"{f['restart_s']} s")
        time.sleep(args.settle_seconds)

        # n deaths at once
        tasks = sw.tasks()
        with Profile(args, sw.pid, f"scale-{n}-deaths"):
            cpu0, spawner0 = cpu_seconds(sw.pid), helpers_cpu_seconds(sw.pid)
            killed = time.monotonic()
            kill_by_pid([tasks[i]["ShimPid"] for i in ids])
            watch.wait_deleted(ids, 300)
        f["mass_last_delete_s"] = max(watch.first("TaskDelete", i) for i in ids) - killed
        f["mass_cpu_own_s"] = cpu_seconds(sw.pid) - cpu0
        f["mass_cpu_spawner_s"] = helpers_cpu_seconds(sw.pid) - spawner0   # part of the above
        time.sleep(2)          # late duplicates would show
        left = sw.leftovers({i: tasks[i] for i in ids})
        f["mass_leftovers"], f["mass_leftover_kinds"] = sum(left.values()), left
        counts = [watch.counts(i) for i in ids]
        f["exactly_once"] = all(c == [1] * 6 for c in counts)
        f["signal_counts_off"] = sum(c != [1] * 6 for c in counts)
        log(f"scale: {n} deaths: last TaskDelete {f['mass_last_delete_s']:.2f} s, left {left}, "
            f"exactly once: {f['exactly_once']}")
    finally:
        if watch:
            watch.close()
        sw.stop()
    return f


UNITS = {"single": unit_single, "mass": unit_mass, "scale": unit_scale}


def keep_service_log(ws, args):
    """The service's log of this scenario, kept as <DIR>/<scenario>-shimwatchd.log (the
    workspace it was written in goes at the end of the scenario)."""
    source = os.path.join(ws.dir, "shimwatchd.log")
    if not os.path.exists(source):
        return
    os.makedirs(args.keep_log, exist_ok=True)
    target = os.path.join(args.keep_log, f"{args.unit}-shimwatchd.log")
    shutil.copyfile(source, target)
    log(f"{args.unit}: the service's log is kept in {target}")


def run_unit(args):
    reason = it.skip_reason()
    if reason is None and not any(os.access(os.path.join(d, "containerd"), os.X_OK)
                                  for d in ("/usr/bin", "/usr/sbin", "/usr/local/bin")):
        reason = "containerd is not installed (tools/install-deps.sh installs it)"
    if reason:
        print(json.dumps({"skipped": reason}), file=open(args.out, "w"))
        return 77
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ws = Workspace()
    figures, error = None, None
    try:
        figures = UNITS[args.unit](ws, args)
    except Exception as e:     # the figures are lost, the clean-up is not
        import traceback
        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
    finally:
        if args.keep_log:
            keep_service_log(ws, args)
        left = ws.close()
    with open(args.out, "w") as f:
        json.dump({"figures": figures, "error": error, "left_behind": left}, f, indent=1)
    if left:
        log(f"{args.unit}: LEFT BEHIND: {', '.join(left)}")
    return 1 if error or left else 0


# -- the driver: one table -----------------------------------------------------------------

def rows_of(results, smoke):
    rows = []

    def row(scenario, figure, unit, sw, ctd=None, target=None, check=None, fmt="{:.2f}"):
        """target: (text, passed) judged on check; ratio = shimwatch / containerd."""
        ratio = sw / ctd if isinstance(sw, (int, float)) and isinstance(ctd, (int, float)) \
            and ctd and fmt != "{}" else None       # no ratio of counts
        rows.append({"scenario": scenario, "figure": figure, "unit": unit, "shimwatch": sw,
                     "containerd": ctd, "ratio": ratio,
                     "target": target[0] if target else None,
                     "measured": check[0] if check else None,
                     "result": None if not target else ("pass" if target[1] else "MISS"),
                     "format": fmt})

    s = results.get("single", {}).get("figures")
    if s:
        sw, cd = s["shimwatch"], s["containerd"]
        n_gio = len(sw.get("disconnected_gio", []))
        name = (f"1 SIGKILLed shim (n={s['n']}, the Gio client's figure from {n_gio} of them)"
                if "gio_eof" in sw else f"1 SIGKILLed shim (n={s['n']})")
        eof = median(sw["eof"])
        row(name, "raw EOF on the same socket (floor), median", "ms", eof, median(cd["eof"]))
        disc = median(sw["disconnected"])
        row(name, "ShimDisconnected (containerd: log line), median", "ms", disc,
            median(cd["disconnected"]), ("≤ 1.5 × raw EOF", disc <= 1.5 * eof),
            (f"{disc / eof:.2f} × EOF",))
        gio = median(sw.get("disconnected_gio", []))
        gio_eof = median(sw.get("gio_eof") or sw["eof"])
        row(name, "ShimDisconnected, decoded by a Gio client, median", "ms", gio,
            check=(f"{gio / gio_eof:.2f} × EOF",) if gio else None)
        row(name, "TaskExit (containerd: /tasks/exit), median", "ms", median(sw["exit"]),
            median(cd["exit"]))
        row(name, "TaskDelete (containerd: /tasks/delete), median", "ms", median(sw["delete"]),
            median(cd["delete"]))
        row(name, "container already dead when TaskExit (/tasks/exit) arrived", "of n",
            sw["dead_at_exit"], cd["dead_at_exit"], fmt="{}")
    m = results.get("mass", {}).get("figures")
    if m:
        sw, cd = m["shimwatch"], m["containerd"]
        n = sw["n"]
        name = f"{n} real runc shims SIGKILLed at once"
        r = sw["last_exit_s"] / cd["last_exit_s"]
        row(name, "last TaskExit (containerd: /tasks/exit)", "s", sw["last_exit_s"], cd["last_exit_s"],
            ("≤ 0.25 × containerd", r <= 0.25), (f"{r:.2f} ×",))
        r = sw["last_delete_s"] / cd["last_delete_s"]
        row(name, "last TaskDelete (containerd: /tasks/delete)", "s", sw["last_delete_s"],
            cd["last_delete_s"], ("≤ 0.9 × containerd", r <= 0.9), (f"{r:.2f} ×",))
        row(name, "left behind (processes, state, dirs, sockets, cgroups)", "", sw["leftovers"],
            cd["leftovers"], ("0", sw["leftovers"] == 0), fmt="{}")
        cpu_total = "CPU in the window: service + its children" + (
            " + bus" if sw.get("bus_counted") else "")
        row(name, cpu_total, "CPU-s", sw["cpu_total_s"], cd["cpu_total_s"])
        row(name, "CPU in the window: the service's own", "CPU-s", sw["cpu_own_s"],
            cd["cpu_own_s"])
        # The CPU in the window that is not the service's own (`shim delete`, runc, the bus),
        # spread evenly over every CPU: no service, however cheap, ends its last delete
        # before that, and neither does containerd (its default run does less of the work)
        others = "the rest of that CPU over all CPUs (the shortest window it allows)"

        def floor_s(f):
            return (f["cpu_total_s"] - f["cpu_own_s"]) / f["cpus"]

        if "cpus" in sw:            # (not in the JSON of runs before it was added)
            row(name, others, "s", floor_s(sw), floor_s(cd))
        per = 1000 * sw["cpu_own_s"] / n
        row(name, "the service's own CPU per death", "ms", per, 1000 * cd["cpu_own_s"] / n,
            ("≤ 1 ms", per <= 1.0), (f"{per:.2f} ms",))
        full = m.get("containerd_full")
        if full:
            name = (f"{n} real runc shims SIGKILLed at once, containerd's cleanup timeout "
                    f"{full['cleanup_timeout']} (the same work)")
            row(name, "last TaskExit (containerd: /tasks/exit)", "s", sw["last_exit_s"],
                full["last_exit_s"])
            row(name, "last TaskDelete (containerd: /tasks/delete)", "s", sw["last_delete_s"],
                full["last_delete_s"])
            row(name, "left behind (processes, state, dirs, sockets, cgroups)", "",
                sw["leftovers"], full["leftovers"], fmt="{}")
            row(name, cpu_total, "CPU-s", sw["cpu_total_s"], full["cpu_total_s"])
            if "cpus" in sw:
                row(name, others, "s", floor_s(sw), floor_s(full))
            row(name, "the service's own CPU per death", "ms", per,
                1000 * full["cpu_own_s"] / n)
        row(f"{n} tasks idle", "service CPU", "% of a core", sw["idle_cpu_percent"],
            cd["idle_cpu_percent"])
        row(f"{n} tasks idle", "service RSS", "MiB", sw["rss_kib"] / 1024, cd["rss_kib"] / 1024,
            fmt="{:.1f}")
    c = results.get("scale", {}).get("figures")
    if c:
        n = c["n"]
        name = f"{n} test-shim tasks"
        row(name, "RSS", "MiB", c["rss_kib"] / 1024, fmt="{:.1f}")
        row(name, "idle CPU (default HealthInterval)", "% of a core", c["idle_cpu_percent"],
            target=("≤ 1 %", c["idle_cpu_percent"] <= 1.0))
        row(name, "main-thread wake-ups (sleeps ended), idle", "per s", c["wakeups_per_s"],
            target=("≤ 2 /s", c["wakeups_per_s"] <= 2.0), fmt="{:.1f}")
        polls = c.get("polls_per_s")
        # no target of its own: a health tick's checks are sent 20 per dispatch (deaths
        # that come meanwhile are not held up by a whole tick), in iterations that do not
        # sleep; the wake-ups above are what the target counts
        row(name, "main-loop iterations (poll/epoll_wait calls), idle", "per s", polls,
            fmt="{:.1f}")
        row(name, "main-thread preemptions, idle", "per s", c["preemptions_per_s"], fmt="{:.1f}")
        row(name, f"context switches, all {c['threads']} threads, idle", "per s",
            c["switches_per_s"], fmt="{:.1f}")
        row(name, "GetManagedObjects, whole reply received, median", "ms",
            c["GetManagedObjects_ms"],
            target=("≤ 50 ms", c["GetManagedObjects_ms"] <= 50), fmt="{:.1f}")
        row(name, "GetManagedObjects, decoded by a Gio client, median", "ms",
            c.get("GetManagedObjects_gio_ms"), fmt="{:.1f}")
        row(name, "ListShims, whole reply received, median", "ms", c["ListShims_ms"],
            target=("≤ 50 ms", c["ListShims_ms"] <= 50), fmt="{:.1f}")
        row(name, "ListShims, decoded by a Gio client, median", "ms",
            c.get("ListShims_gio_ms"), fmt="{:.1f}")
        w = c["create_window"]
        row(name, f"CreateTask rate, first {w}", "per s", c["create_rate_first"], fmt="{:.0f}")
        r = c["create_rate_last"] / c["create_rate_first"]
        row(name, f"CreateTask rate, last {w} (at {n})", "per s", c["create_rate_last"],
            target=("≥ 0.9 × first", r >= 0.9), check=(f"{r:.2f} ×",), fmt="{:.0f}")
        ok = c["restart_s"] is not None and c["restart_s"] <= 1.0
        row(name, f"restart → all {n} taken over again", "s", c["restart_s"],
            target=("≤ 1 s", ok))
        row(name, f"{n} deaths → last TaskDelete", "s", c["mass_last_delete_s"],
            target=("≤ 5 s", c["mass_last_delete_s"] <= 5.0))
        row(name, f"{n} deaths → left behind", "", c["mass_leftovers"],
            target=("0", c["mass_leftovers"] == 0), fmt="{}")
        row(name, f"{n} deaths → each signal exactly once", "",
            "yes" if c["exactly_once"] else f"no ({c['signal_counts_off']})",
            target=("yes", c["exactly_once"]), fmt="{}")
        row(name, f"{n} deaths → the service's own CPU per death", "ms",
            1000 * c["mass_cpu_own_s"] / n)
        row(name, f"ShimDisconnected p99 ({c['kills']} deaths)", "ms", c["disconnected_p99_ms"],
            target=("≤ 1.5 × raw EOF p99",
                    c["disconnected_p99_ms"] <= 1.5 * c["eof_p99_ms"]),
            check=(f"{c['disconnected_p99_ms'] / c['eof_p99_ms']:.2f} × EOF",))
        row(name, f"ShimDisconnected p99, decoded by a Gio client "
            f"({c.get('disconnected_gio_n', c['kills'])} other deaths)", "ms",
            c.get("disconnected_gio_p99_ms"))
        row(name, f"raw EOF p99 ({c['kills']} deaths)", "ms", c["eof_p99_ms"])
    if smoke:
        for r in rows:      # a smoke run is too small to judge a target
            r["result"] = "smoke" if r["result"] else None
    return rows


def render(rows, markdown=False):
    def fmt(value, spec):
        if value is None:
            return "—"
        if isinstance(value, str):
            return value
        return spec.format(value)
    if markdown:
        # one table, a heading row per scenario; the unit goes with the figure
        lines = ["| figure | shimwatch | containerd 1.6.20 | ratio | target | result |",
                 "|---|---|---|---|---|---|"]
        scenario = None
        for r in rows:
            if r["scenario"] != scenario:
                scenario = r["scenario"]
                lines.append(f"| **{scenario}** | | | | | |")
            figure = r["figure"] + (f" ({r['unit']})" if r["unit"] else "")
            target = r["target"] or ""
            if r["measured"]:
                target += f" (measured {r['measured']})"
            cells = [figure, fmt(r["shimwatch"], r["format"]), fmt(r["containerd"], r["format"]),
                     fmt(r["ratio"], "{:.2f}"), target, r["result"] or ""]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines)
    header = ["scenario", "figure", "unit", "shimwatch", "containerd 1.6.20", "ratio",
              "target", "measured", "result"]
    table = [[r["scenario"], r["figure"], r["unit"], fmt(r["shimwatch"], r["format"]),
              fmt(r["containerd"], r["format"]), fmt(r["ratio"], "{:.2f}"),
              r["target"] or "", r["measured"] or "", r["result"] or ""] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    out = []
    for line in [header] + table:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
        if line is header:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def drive(args):
    if os.geteuid() != 0:
        print("1..0 # SKIP the benchmark needs root (runc, containerd, a private system bus)")
        return 77
    units = args.only.split(",") if args.only else list(UNITS)
    results = {}
    out_dir = tempfile.mkdtemp(prefix="swbench-out-", dir="/tmp")
    failed = []
    env = dict(os.environ)
    with_bus = os.path.join(SOURCE_DIR, "tests", "with-system-bus.sh")
    started = time.time()
    try:
        for unit in units:
            out = os.path.join(out_dir, unit + ".json")
            argv = [with_bus, "/usr/bin/python3", os.path.abspath(__file__), "--unit", unit,
                    "--out", out] + passthrough(args)
            if args.lock:
                argv = ["flock", args.lock] + argv
            log(f"{unit}: starting{' (waiting for ' + args.lock + ')' if args.lock else ''}")
            t0 = time.monotonic()
            rc = subprocess.run(argv, env=env).returncode
            try:
                with open(out) as f:
                    results[unit] = json.load(f)
            except (OSError, ValueError):
                results[unit] = {"error": f"no result (exit {rc})"}
            if "skipped" in results[unit]:
                print(f"1..0 # SKIP {results[unit]['skipped']}")
                return 77
            log(f"{unit}: done in {time.monotonic() - t0:.0f} s (exit {rc})")
            if rc != 0 or results[unit].get("error") or results[unit].get("left_behind"):
                failed.append(f"{unit}: exit {rc}, error {results[unit].get('error')}, left "
                              f"behind {results[unit].get('left_behind')}")
    finally:
        subprocess.run(["rm", "-rf", out_dir], check=False)
    try:
        rows = rows_of(results, args.smoke)
    except (KeyError, TypeError, ZeroDivisionError) as e:
        rows = []
        failed.append(f"figures missing: {type(e).__name__}: {e}")
    missing = [f"{r['scenario']}: {r['figure']}" for r in rows if r["shimwatch"] is None]
    if missing:
        failed.append("figures missing: " + "; ".join(missing))
    report = {
        "version": 1, "mode": "smoke" if args.smoke else "full",
        "started": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(),
        "duration_s": time.time() - started,
        "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "versions": {"containerd": version_of(["containerd", "--version"]),
                     "runc": version_of(["runc", "--version"]),
                     "shimwatchd": version_of([it.SHIMWATCHD, "--version"])},
        "rows": rows,
        "raw": results, "problems": failed,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(render(rows, args.markdown))
    print(f"\n{report['mode']} run, {report['duration_s']:.0f} s; load average at the end "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
          + (f"; JSON: {args.json}" if args.json else ""))
    for problem in failed:
        print("PROBLEM:", problem)
    return 1 if failed else 0


def passthrough(args):
    out = []
    for name in ("single_n", "mass_n", "scale_n", "scale_kills", "idle_seconds",
                 "settle_seconds", "listing_calls"):
        out += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    if args.keep_log:
        out += ["--keep-log", os.path.abspath(args.keep_log)]
    if args.perf:
        out += ["--perf", os.path.abspath(args.perf), "--perf-freq", str(args.perf_freq)]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="a few tasks per scenario: checks the harness, judges nothing")
    parser.add_argument("--json", help="also write the table and the raw figures here")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--lock", help="hold this lock file (flock) for each scenario")
    parser.add_argument("--only", help="comma-separated scenarios: single,mass,scale")
    parser.add_argument("--perf", help="record `perf record -g` profiles of the service's busy "
                        "phases into this directory (such a run's figures include perf's cost)")
    parser.add_argument("--perf-freq", type=int, default=499,
                        help="samples per second for --perf (more for a short window)")
    parser.add_argument("--keep-log", metavar="DIR",
                        help="keep each scenario's service log as DIR/<scenario>-shimwatchd.log "
                        "(set G_MESSAGES_DEBUG for the service's info lines)")
    parser.add_argument("--single-n", type=int)
    parser.add_argument("--mass-n", type=int)
    parser.add_argument("--scale-n", type=int)
    parser.add_argument("--scale-kills", type=int)
    parser.add_argument("--idle-seconds", type=float)
    parser.add_argument("--settle-seconds", type=float)
    parser.add_argument("--listing-calls", type=int)
    parser.add_argument("--render", metavar="JSON",
                        help="print the table of an earlier run's JSON, and nothing else")
    parser.add_argument("--unit", choices=list(UNITS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    extra = os.environ.get("SHIMWATCH_BENCH_ARGS", "").split()
    args = parser.parse_args(sys.argv[1:] + extra)
    defaults = ({"single_n": 3, "mass_n": 3, "scale_n": 6, "scale_kills": 2, "idle_seconds": 1,
                 "settle_seconds": 0.5, "listing_calls": 2} if args.smoke else
                {"single_n": 20, "mass_n": 200, "scale_n": 1000, "scale_kills": 100,
                 "idle_seconds": 10, "settle_seconds": 3, "listing_calls": 10})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        for r in report["rows"]:
            r.setdefault("format", "{:.2f}")
        print(render(report["rows"], args.markdown))
        return 0
    if args.unit:
        return run_unit(args)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
