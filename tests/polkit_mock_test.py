#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""While a polkit check hangs, shimwatchd keeps answering everyone else. Runs with
python-dbusmock's polkitd template (SHIMWATCH_POLKIT=mock in with-system-bus.sh): real
polkitd cannot be made to hang."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402
from integration_test import GLib, Gio  # noqa: E402

MOCK = ("org.freedesktop.PolicyKit1", "/org/freedesktop/PolicyKit1/Authority",
        "org.freedesktop.DBus.Mock")


class HangingPolkitTests(it.ShimwatchTestCase):
    def mock(self, method, signature=None, args=None):
        return self.bus.call_sync(MOCK[0], MOCK[1], MOCK[2], method,
                                  GLib.Variant(signature, args) if signature else None,
                                  None, Gio.DBusCallFlags.NONE, 5000, None)

    def setUp(self):
        super().setUp()
        self.mock("SetAllowed", "(as)", (["org.shimwatch.manage", "org.shimwatch.reap"],))

    def tearDown(self):
        self.mock("SimulateHang", "(b)", (False,))
        self.mock("ReleaseHangingCalls")
        super().tearDown()

    def test_service_answers_while_a_check_hangs(self):
        path = self.create_task("default", "busy")
        self.mock("SimulateHang", "(b)", (True,))
        outcome = {}

        def reaped(connection, result, _):
            try:
                outcome["reply"] = connection.call_finish(result).unpack()
            except GLib.Error as e:
                outcome["error"] = e
        self.bus.call(it.BUS_NAME, it.MANAGER_PATH, it.MANAGER, "Reap",
                      GLib.Variant("(ssa{sv})", ("default", "busy", {})), None,
                      Gio.DBusCallFlags.NONE, 60000, None, reaped, None)
        it.wait_until(lambda: self.mock("HaveHangingCalls").unpack()[0], 5,
                      "the polkit check to hang")

        # the main loop is free: reads and other calls are answered at once
        started = time.monotonic()
        for _ in range(20):
            self.assertEqual(self.prop(path, "Status"), "running")
            self.assertEqual(self.call(it.MANAGER_PATH, it.MANAGER, "ListShims"), ([path],))
            self.assertEqual(self.prop(it.MANAGER_PATH, "ShimCount", it.MANAGER), 1)
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertNotIn("reply", outcome)
        self.assertFalse(it.process_dead(self.prop(path, "ShimPid")))

        # once polkit answers, the Reap completes
        self.mock("ReleaseHangingCalls")
        it.wait_until(lambda: outcome, 10, "the Reap to finish")
        self.assertEqual(outcome.get("reply"), (137,), outcome)

        # and the check asked about the caller's bus name, without interaction
        calls = self.mock("GetMethodCalls", "(s)", ("CheckAuthorization",)).unpack()[0]
        last = calls[-1][1]
        self.assertEqual(last[0][0], "system-bus-name")
        self.assertEqual(last[0][1]["name"], self.bus.get_unique_name())
        self.assertEqual(last[1], "org.shimwatch.reap")
        self.assertEqual(last[2], {"namespace": "default", "id": "busy"})
        self.assertEqual(last[3], 0)

    def test_interactive_flag_is_passed_on(self):
        self.mock("ClearCalls")
        with self.assertRaises(GLib.Error) as caught:
            self.bus.call_sync(it.BUS_NAME, it.MANAGER_PATH, it.MANAGER, "Reap",
                               GLib.Variant("(ssa{sv})", ("default", "nothing", {})), None,
                               Gio.DBusCallFlags.ALLOW_INTERACTIVE_AUTHORIZATION, 5000, None)
        self.assertEqual(Gio.DBusError.get_remote_error(caught.exception), it.ERROR + "NotFound")
        calls = self.mock("GetMethodCalls", "(s)", ("CheckAuthorization",)).unpack()[0]
        self.assertEqual(calls[-1][1][3], 1)     # POLKIT_CHECK_AUTHORIZATION_FLAGS_ALLOW_USER_INTERACTION

    def test_unanswered_check_gives_up(self):
        """A check polkit never answers fails with Failed after the timeout (30 s; 1.5 s
        here) instead of holding its place for good; later checks go through."""
        self.stop_daemon()
        self.start_daemon(SHIMWATCH_TEST_POLKIT_TIMEOUT_MS="1500")
        self.mock("SimulateHang", "(b)", (True,))
        started = time.monotonic()
        error = self.assert_dbus_error("Failed", self.call, it.MANAGER_PATH, it.MANAGER,
                                       "Reap", "(ssa{sv})", ("default", "nothing", {}))
        waited = time.monotonic() - started
        self.assertIn("polkit did not answer within 1.5 s", error.message)
        self.assertGreaterEqual(waited, 1.4)
        self.assertLess(waited, 20)
        self.mock("SimulateHang", "(b)", (False,))
        self.mock("ReleaseHangingCalls")
        self.assert_dbus_error("NotFound", self.call, it.MANAGER_PATH, it.MANAGER, "Reap",
                               "(ssa{sv})", ("default", "nothing", {}))

    def test_denied_by_polkit(self):
        path = self.create_task("default", "kept")
        self.mock("SetAllowed", "(as)", ([],))
        self.assert_dbus_error("NotAuthorized", self.call, it.MANAGER_PATH, it.MANAGER, "Reap",
                               "(ssa{sv})", ("default", "kept", {}))
        self.assertEqual(self.prop(path, "Status"), "running")


if __name__ == "__main__":
    sys.exit(it.run_tests(sys.modules[__name__]))
