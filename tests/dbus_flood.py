#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A caller that floods shimwatchd with privileged calls, for the denial-of-service tests
in integration_test.py (run there under setpriv as an unprivileged user).

Each of --connections private bus connections keeps up to --outstanding calls of --method
under way, cycling through --ids, until --total calls were made (with --duration: until
that many seconds have passed; with --until-eof: until its stdin is closed). "started" is printed once the first calls are on the wire;
at the end one JSON line maps each outcome (the D-Bus error name, or "ok") to its count."""

import argparse
import json
import os
import sys
import time

import gi
gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

BUS_NAME = "org.shimwatch.Shimwatch1"
MANAGER_PATH = "/org/shimwatch/Shimwatch1"
MANAGER = BUS_NAME + ".Manager"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--outstanding", type=int, default=50)
    parser.add_argument("--total", type=int, default=0)
    parser.add_argument("--duration", type=float, default=0.0)
    parser.add_argument("--until-eof", action="store_true")
    parser.add_argument("--method", choices=("CreateTask", "Reap"), default="CreateTask")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--ids", default="flooded")
    parser.add_argument("--bundle", default="/nonexistent")
    args = parser.parse_args()

    address = os.environ["DBUS_SYSTEM_BUS_ADDRESS"]
    ids = args.ids.split(",")
    outcomes = {}
    state = {"sent": 0, "answered": 0, "deadline": None, "stopped": False}
    loop = GLib.MainLoop()

    def more():
        if state["stopped"]:
            return False
        if args.total and state["sent"] >= args.total:
            return False
        if state["deadline"] is not None and time.monotonic() >= state["deadline"]:
            return False
        return True

    def send(connection):
        task_id = ids[state["sent"] % len(ids)]
        if args.method == "CreateTask":
            parameters = GLib.Variant("(sssa{sv})", (args.namespace, task_id, args.bundle, {}))
        else:
            parameters = GLib.Variant("(ssa{sv})", (args.namespace, task_id, {}))
        state["sent"] += 1
        connection.call(BUS_NAME, MANAGER_PATH, MANAGER, args.method, parameters, None,
                        Gio.DBusCallFlags.NONE, 60000, None, answered, connection)

    def answered(connection, result, _):
        try:
            connection.call_finish(result)
            outcome = "ok"
        except GLib.Error as e:
            outcome = Gio.DBusError.get_remote_error(e) or e.message
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        state["answered"] += 1
        if more():
            send(connection)
        elif state["answered"] == state["sent"]:
            loop.quit()

    connections = [Gio.DBusConnection.new_for_address_sync(
        address, Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT |
        Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
        for _ in range(args.connections)]
    if args.duration:
        state["deadline"] = time.monotonic() + args.duration
    if args.until_eof:
        def stdin_ready(fd, condition):
            if condition & GLib.IOCondition.IN and os.read(fd, 4096):
                return GLib.SOURCE_CONTINUE
            state["stopped"] = True
            if state["answered"] == state["sent"]:
                loop.quit()
            return GLib.SOURCE_REMOVE
        GLib.unix_fd_add_full(GLib.PRIORITY_DEFAULT, sys.stdin.fileno(),
                              GLib.IOCondition.IN | GLib.IOCondition.HUP, stdin_ready)
    for connection in connections:
        for _ in range(args.outstanding):
            if more():
                send(connection)
    for connection in connections:
        connection.flush_sync(None)
    print("started", flush=True)
    if state["sent"] > 0:
        loop.run()
    print(json.dumps({"sent": state["sent"], "outcomes": outcomes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
