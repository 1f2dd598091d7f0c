#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write the seed corpus of tests/fuzz (corpus/<harness>/*): a few valid inputs of each
kind, built by hand from the .proto field numbers and the record/config formats, so the
fuzzers start from what real peers send. Rerun after changing a format:
    /usr/bin/python3 tests/fuzz/make-seeds.py tests/fuzz/corpus"""

import json
import os
import struct
import sys


def varint(n):
    out = b""
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


def msg(*fields):
    return b"".join(field(n, v) for n, v in fields)


def frame(stream_id, kind, body, flags=0):
    return struct.pack(">IIBB", len(body), stream_id, kind, flags) + body


REQUEST, RESPONSE, DATA = 1, 2, 3
timestamp = msg((1, 1764700000), (2, 123456789))


def any_(type_url, value):
    return msg((1, type_url), (2, value))


def envelope(topic, type_url, event):
    return msg((1, timestamp), (2, "default"), (3, topic), (4, any_(type_url, event)))


task_exit = msg((1, "web1"), (2, "web1"), (3, 4242), (4, 137), (5, timestamp))
task_create = msg((1, "web1"), (2, "/run/shimwatch/tasks/default/web1"), (6, 4242))
forward_exit = msg((1, envelope("/tasks/exit", "containerd.events.TaskExit", task_exit)))
forward_create = msg((1, envelope("/tasks/create", "containerd.events.TaskCreate",
                                  task_create)))
connect_response = msg((1, 4200), (2, 4242), (3, "1.6.20"))
state_response = msg((1, "web1"), (2, "/run/b"), (3, 4242), (4, 3), (9, 137), (10, timestamp))
wait_response = msg((1, 137), (2, timestamp))
delete_response = msg((1, 4242), (2, 137), (3, timestamp))
pids_response = msg((1, msg((1, 4242))), (1, msg((1, 4243))))
metadata = msg((1, "containerd-namespace-ttrpc"), (2, "default"))
request_forward = msg((1, "containerd.services.events.ttrpc.v1.Events"), (2, "Forward"),
                      (3, forward_exit), (4, 5000000000), (5, metadata))
request_state = msg((1, "containerd.task.v2.Task"), (2, "State"), (3, msg((1, "web1"))))
status_ok = msg((1, 0))
status_not_found = msg((1, 5), (2, "task web1 not found"))


def response(payload, status=status_ok):
    return msg((1, status), (2, payload))


record = {
    "version": 1, "namespace": "default", "id": "web1", "runtime": "io.containerd.runc.v2",
    "shim_binary": "/usr/bin/containerd-shim-runc-v2",
    "task_dir": "/run/shimwatch/tasks/default/web1",
    "address": "unix:///run/containerd/s/0123456789abcdef", "shim_pid": 4200,
    "task_pid": 4242, "task_start_time": 123456, "created_at": 1764700000000000,
    "status": "running", "exit_known": False, "exit_pid": 0, "exit_status": 0,
    "exited_at": 0, "exit_emitted": False, "disconnected": False, "deleted": False,
    "delete_emitted": False, "pending_signal": "TaskExit", "pending_sent": 0,
}
record_done = dict(record, status="stopped", exit_known=True, exit_pid=4242, exit_status=137,
                   exited_at=1764700001000000, exit_emitted=True, disconnected=True,
                   pending_signal="TaskDelete", pending_sent=1)
record_marked = dict(record, marks_seq=1764700000000042, pending_signal="", pending_sent=0)


def fnv1a(data):
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


# the signal marks file (service/store/shimwatch-marks.h): a header and one slot of 96 bytes per
# signal, ShimDisconnected, TaskExit, TaskDelete
def mark(state, seq, flags=0, pid=0, exit_status=0, exited_at=0, status="", reason=""):
    head = struct.pack("<BBH", state, flags, 0)
    rest = (struct.pack("<QIIq", seq, pid, exit_status, exited_at) +
            status.encode().ljust(16, b"\0") + reason.encode().ljust(48, b"\0"))
    return head + struct.pack("<I", fnv1a(head[1:] + rest)) + rest


def marks(*slots):
    slots = list(slots) + [bytes(96)] * (3 - len(slots))
    return b"SWMARKS1" + struct.pack("<II", 1, 96) + b"".join(slots)


PENDING, SENT = 1, 2
disconnected = mark(SENT, 1764700000000043, status="disconnected")
exited = mark(PENDING, 1764700000000044, flags=2, pid=4242, exit_status=137,
              exited_at=1764700001000000, status="cleaning", reason="shim-died")
oci = {
    "ociVersion": "1.0.2-dev",
    "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["sleep", "100000"],
                "env": ["PATH=/bin"], "cwd": "/"},
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}],
              "cgroupsPath": "/shimwatch/default/web1"},
    "annotations": {"org.shimwatch.test.mode": "normal"},
}

SEEDS = {
    "ttrpc": {
        # first byte: bit 0 = server role, the rest the chunk size
        "client-answers": bytes([0x10]) + frame(1, RESPONSE, response(connect_response)) +
        frame(3, RESPONSE, response(b"", status_not_found)) +
        frame(5, RESPONSE, response(state_response)),
        "client-bytewise": bytes([0x00]) + frame(3, RESPONSE, response(wait_response)) +
        frame(1, RESPONSE, response(delete_response)),
        "client-junk-type": bytes([0x0e]) + frame(1, 0x7F, b"\xff" * 6) +
        frame(7, RESPONSE, response(b"")) + frame(1, DATA, b"x"),
        "client-oversize": bytes([0xfe]) + struct.pack(">IIBB", 5 << 20, 1, RESPONSE, 0) +
        b"\0" * 1024,
        "server-forward": bytes([0x21]) + frame(1, REQUEST, request_forward) +
        frame(3, REQUEST, request_state),
        "server-bad-streams": bytes([0x03]) + frame(2, REQUEST, request_state) +
        frame(1, REQUEST, request_state) + frame(1, REQUEST, request_state) +
        frame(5, REQUEST, request_state, flags=2) + frame(7, DATA, b"") +
        frame(9, REQUEST, b"\xff\xff"),
    },
    "wire-decode": {
        "forward-exit": forward_exit,
        "forward-create": forward_create,
        "connect": connect_response,
        "state": state_response,
        "wait": wait_response,
        "delete": delete_response,
        "pids": pids_response,
        "request": request_forward,
        "response": response(connect_response),
        "response-error": response(b"", status_not_found),
    },
    "start-output": {
        "plain": b"unix:///run/containerd/s/0123456789abcdef",
        "plain-newline": b"unix:///run/containerd/s/0123456789abcdef\n",
        "json": json.dumps({"version": 2, "address": "unix:///run/containerd/s/01",
                            "protocol": "ttrpc"}).encode(),
        "bootstrap": msg((1, 2), (2, "unix:///run/containerd/s/01"), (3, "ttrpc")),
        "garbage": b"this is not an address",
    },
    "record": {
        "running": json.dumps(record, indent=2).encode(),
        "done": json.dumps(record_done, indent=2).encode(),
        "marked": json.dumps(record_marked, indent=2).encode(),
        "old-format": json.dumps({k: v for k, v in record.items()
                                  if k not in ("pending_signal", "pending_sent")}).encode(),
        "truncated": json.dumps(record).encode()[:60],
    },
    "marks": {
        "fresh": marks(),
        "disconnected-sent": marks(disconnected),
        "exit-pending": marks(disconnected, exited),
        "all-sent": marks(disconnected, mark(SENT, 1764700000000044, flags=2, pid=4242,
                                             exit_status=137, exited_at=1764700001000000,
                                             status="cleaning", reason="shim-died"),
                          mark(SENT, 1764700000000045, flags=2, pid=4242, exit_status=137,
                               exited_at=1764700001000000, status="cleaning",
                               reason="shim-died")),
        "cut-short": marks(disconnected, b"\0" + exited[1:50] + bytes(46)),
        "bad-checksum": marks(disconnected[:40] + b"X" + disconnected[41:]),
        "bad-state": marks(b"\x07" + disconnected[1:]),
        "truncated": marks(disconnected)[:100],
        "empty": b"",
        "zeros": bytes(304),
        "other-version": marks(disconnected).replace(b"SWMARKS1\x01", b"SWMARKS1\x02"),
    },
    "oci-config": {
        "runc-spec": json.dumps(oci, indent=2).encode(),
        "absolute-root": json.dumps(dict(oci, root={"path": "/srv/rootfs"})).encode(),
        "no-root": json.dumps({"process": {}}).encode(),
    },
    "config": {
        "full": b"[Service]\nRuntimeDirectory=/run/shimwatch\nStateDirectory=/var/lib/shimwatch\n"
                b"RuntimePath=/usr/bin;/usr/sbin\nCleanupTimeout=10\nCleanupConcurrency=4\n"
                b"HealthInterval=30\n",
        "comments": b"# shimwatch\n\n[Service]\n# none\nCleanupTimeout=2\n[Other]\nKey=value\n",
        "bad-value": b"[Service]\nCleanupTimeout=ten\nRuntimePath=relative\n",
    },
}


# 100,000 levels of nesting (about 200 KB, under the size caps): json-glib's parser recurses
# once per level, so this crashed the service before the nesting depth was checked first
DEEP = 100000
SEEDS["oci-config"]["deep-nesting"] = (b'{"process":{},"root":{"path":"rootfs"},"x":' +
                                       b"[" * DEEP + b"]" * DEEP + b"}")
SEEDS["record"]["deep-nesting"] = b'{"version":1,"namespace":' + b"[" * DEEP + b"]" * DEEP + b"}"

# json-glib reads "\2" as a raw byte and "\ud800" as invalid UTF-8; fuzz-record found that
# such a record decoded and the record written back did not
_address = json.dumps(record["address"])
SEEDS["record"]["bad-escape"] = json.dumps(record).replace(
    _address, _address[:-1] + '\\2"').encode()
SEEDS["record"]["lone-surrogate"] = json.dumps(record).replace(
    _address, _address[:-1] + '\\ud800"').encode()


def main():
    out = sys.argv[1]
    for harness, seeds in SEEDS.items():
        os.makedirs(os.path.join(out, harness), exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out, harness, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
