#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Cockpit page (cockpit/) in a real browser, against the running service on the
private system bus (tests/with-system-bus.sh) with the real polkitd and real
containerd-shim-runc-v2 + runc tasks: Debian's cockpit-ws in --local-session mode, run as
a user the test polkit rules allow (uid 1) and as one they refuse (uid 2), serves the page
from XDG_DATA_HOME; chromium-headless-shell, as an unprivileged user, is driven over the
DevTools protocol. Everything is asserted through real mouse clicks, typed text and the
DOM. Every process started here (cockpit-ws, its bridges, chromium) is stopped by PID.
Output is TAP."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402
from integration_test import (MANAGER, MANAGER_PATH, SHIM, ShimwatchTestCase,  # noqa: E402
                              process_dead, wait_until)
from gi.repository import GLib  # noqa: E402

COCKPIT_WS = "/usr/lib/cockpit/cockpit-ws"
CHROMIUM = "/usr/bin/chromium-headless-shell"
PAGE_SOURCE = os.environ.get("SHIMWATCH_COCKPIT_SOURCE")
PAGE_BUILD = os.environ.get("SHIMWATCH_COCKPIT_BUILD")
ARTEFACTS = os.environ.get("SHIMWATCH_ARTEFACT_DIR")
AUTHORIZED, REFUSED, BROWSER_USER = 1, 2, 65534     # daemon, bin (tests/50-test-shimwatch.rules), nobody


_integration_skip_reason = it.skip_reason


def cockpit_skip_reason():
    reason = _integration_skip_reason()
    if reason:
        return reason
    for path, package in ((COCKPIT_WS, "cockpit-ws"), ("/usr/bin/cockpit-bridge", "cockpit-bridge"),
                          ("/usr/share/cockpit/systemd", "cockpit-system"),
                          (CHROMIUM, "chromium-headless-shell")):
        if not os.path.exists(path):
            return f"{package} is not installed"
    try:
        import websocket  # noqa: F401 (the DevTools protocol's transport)
    except ImportError:
        return "python3-websocket is not installed"
    if not PAGE_SOURCE or not PAGE_BUILD:
        return "run through meson test (SHIMWATCH_COCKPIT_SOURCE/_BUILD name the page)"
    return None


it.skip_reason = cockpit_skip_reason


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(pid):
    """Every descendant of pid, deepest first (a snapshot of /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
    found = []

    def walk(p):
        for child in parents.get(p, []):
            walk(child)
            found.append(child)
    walk(pid)
    return found


def stop_tree(proc, grace=5):
    """SIGTERM a process we started, then SIGKILL it and whatever it started, by PID."""
    if proc is None:
        return
    descendants = children_of(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    descendants += [p for p in children_of(proc.pid) if p not in descendants]
    for pid in descendants:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(not process_dead(p) for p in descendants) and time.monotonic() < deadline:
        time.sleep(0.02)


class CockpitWs:
    """cockpit-ws --local-session=cockpit-bridge on a loopback port, as one user."""

    def __init__(self, uid, data_home, home):
        self.port = free_port()
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "XDG_DATA_HOME": data_home,
            "XDG_DATA_DIRS": "/usr/local/share:/usr/share",
            "DBUS_SYSTEM_BUS_ADDRESS": os.environ["DBUS_SYSTEM_BUS_ADDRESS"],
            # no per-user session bus: the bridge would start one that outlives the test
            "DBUS_SESSION_BUS_ADDRESS": "disabled:",
            "SHIMWATCH_TEST_SUITE": os.environ.get("SHIMWATCH_TEST_SUITE", ""),
        }
        self.log_path = os.path.join(home, f"cockpit-ws-{uid}.log")
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups",
             COCKPIT_WS, "--local-session=cockpit-bridge", "--port", str(self.port),
             "--address", "127.0.0.1"],
            env=env, stdin=subprocess.DEVNULL, stdout=open(self.log_path, "w"),
            stderr=subprocess.STDOUT, cwd="/")
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"cockpit-ws did not start: {self.log()}")
                time.sleep(0.05)

    def url(self, page="index.html"):
        return f"http://127.0.0.1:{self.port}/cockpit/@localhost/shimwatch/{page}"

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        stop_tree(self.proc)


class Browser:
    """chromium-headless-shell, as an unprivileged user (its sandbox stays on), and one
    page of it driven over the DevTools protocol."""

    def __init__(self, home):
        import websocket
        self.profile = os.path.join(home, "chromium")
        os.makedirs(self.profile)
        shutil.chown(self.profile, BROWSER_USER, BROWSER_USER)
        env = {"PATH": "/usr/bin:/bin", "HOME": self.profile, "LANG": "C.UTF-8",
               "SHIMWATCH_TEST_SUITE": os.environ.get("SHIMWATCH_TEST_SUITE", "")}
        self.log_path = os.path.join(home, "chromium.log")
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={BROWSER_USER}", f"--regid={BROWSER_USER}", "--clear-groups",
             CHROMIUM, "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "--no-first-run", "--disable-gpu", "--disable-extensions", "--hide-scrollbars",
             "--window-size=1360,1000", "--disable-background-networking", "about:blank"],
            env=env, stdin=subprocess.DEVNULL, stdout=open(self.log_path, "w"),
            stderr=subprocess.STDOUT, cwd="/")
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                with open(self.log_path, errors="replace") as f:
                    raise AssertionError(f"chromium did not start: {f.read()}")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = [t for t in json.load(reply) if t["type"] == "page"]
        self.ws = websocket.create_connection(targets[0]["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.user_agent = self.send("Browser.getVersion")["userAgent"]

    def send(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]
            if "method" in message:
                self.events.append(message)
                del self.events[:-500]

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression, timeout=10, what=None, interval=0.02):
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                # the state, and what the page says with it (a failed state's error)
                state = self.evaluate("document.getElementById('app') && [document.getElementById('app').dataset.state, "
                                      "(document.getElementById('state') || {}).textContent]")
                raise AssertionError(f"timed out after {timeout} s waiting for {what or expression}; "
                                     f"page state {state!r}, console: {self.console()[-10:]}")
            time.sleep(interval)

    def console(self):
        out = []
        for e in self.events:
            if e["method"] == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(str(e["params"]["exceptionDetails"]))
        return out

    def open(self, url, language="en-US"):
        self.send("Emulation.setUserAgentOverride", userAgent=self.user_agent, acceptLanguage=language)
        self.events.clear()
        # the document before is marked: what is waited for below is the new one's (right
        # after Page.navigate, the old one, complete and connected, may still be there)
        self.evaluate("window.swOldDocument = true")
        self.send("Page.navigate", url=url)
        self.wait("window.swOldDocument === undefined && "
                  "document.readyState === 'complete' && !!document.getElementById('app') && "
                  "document.getElementById('app').dataset.state !== undefined && "
                  "document.getElementById('app').dataset.state !== 'connecting'",
                  timeout=20, what="the page to connect")

    def click(self, selector):
        """A real mouse click (press and release) in the middle of the element."""
        box = self.wait(f"""(() => {{
            const e = document.querySelector({json.dumps(selector)});
            if (!e || e.disabled || e.offsetParent === null) return null;
            e.scrollIntoView({{block: "center"}});
            const r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2];
        }})()""", what=f"{selector} to be clickable")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left",
                      clickCount=1 if kind != "mouseMoved" else 0)

    def type(self, selector, text):
        self.click(selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).select && "
                      f"document.querySelector({json.dumps(selector)}).select()")
        self.send("Input.insertText", text=text)

    def text(self, selector):
        return self.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || null")

    def screenshot(self, path):
        """The whole page, from its top."""
        import base64
        self.evaluate("window.scrollTo(0, 0)")
        width, height = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        stop_tree(self.proc)


def artefact(page, name):
    """A screenshot of the page as the test left it, next to the test log."""
    if ARTEFACTS:
        os.makedirs(ARTEFACTS, exist_ok=True)
        page.screenshot(os.path.join(ARTEFACTS, name))


def row(namespace, task_id):
    return f'#tasks tr[data-namespace="{namespace}"][data-id="{task_id}"]'


class Harness:
    """One browser and two cockpit-ws (an allowed and a refused user) for all the tests
    (run_tests runs each test on its own, so this is started on first use and stopped at
    the end of the run); the service, as in every integration test, afresh for each test."""

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="swcockpit-", dir="/tmp")
        os.chmod(self.home, 0o755)
        self.servers = {}
        self.browser = None
        try:
            # the page as meson installs it: share/cockpit/shimwatch under XDG_DATA_HOME
            page = os.path.join(self.home, "data", "cockpit", "shimwatch")
            os.makedirs(page)
            for name in os.listdir(PAGE_SOURCE):
                if name.endswith((".js", ".html", ".css", ".json")):
                    shutil.copy(os.path.join(PAGE_SOURCE, name), page)
            for name in os.listdir(PAGE_BUILD):
                if name.startswith("po.") and name.endswith(".js"):
                    shutil.copy(os.path.join(PAGE_BUILD, name), page)
            subprocess.run(["chmod", "-R", "a+rX", self.home], check=True)
            for uid in (AUTHORIZED, REFUSED):
                home = os.path.join(self.home, f"home-{uid}")
                os.makedirs(home)
                shutil.chown(home, uid, uid)
                self.servers[uid] = CockpitWs(uid, os.path.join(self.home, "data"), home)
            self.browser = Browser(self.home)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.browser:
            self.browser.close()
            self.browser = None
        for server in self.servers.values():
            server.stop()
        self.servers = {}
        shutil.rmtree(self.home, ignore_errors=True)


HARNESS = None


def harness():
    global HARNESS
    if HARNESS is None:
        HARNESS = Harness()
    return HARNESS


class CockpitTestCase(ShimwatchTestCase):
    def setUp(self):
        super().setUp()
        self.harness = harness()
        self.servers = self.harness.servers
        self.browser = self.harness.browser

    def open_page(self, uid=AUTHORIZED, language="en-US"):
        self.page = self.browser
        self.page.open(self.servers[uid].url(), language)
        return self.page

    def wait_ready(self):
        return self.page.wait("['ready', 'empty'].includes(document.getElementById('app').dataset.state)",
                              timeout=15, what="the task table")

    def open_detail(self, namespace, task_id):
        self.page.click(row(namespace, task_id) + " .sw-id button")
        self.page.wait(f"document.getElementById('task-detail-title') && "
                       f"document.getElementById('task-detail-title').textContent === '{namespace}/{task_id}'",
                       what="the task's detail")

    def assert_still_running(self, path, task_pid):
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertFalse(process_dead(task_pid), "the task's process is gone")


class TableTests(CockpitTestCase):
    def test_rows_live_three_tasks_and_a_killed_shim(self):
        page = self.open_page()
        self.wait_ready()
        page.wait("document.getElementById('state-empty') !== null", what="the empty state")

        # a task appears within a second of CreateTask, with its properties
        path = self.create_task("default", "web1")
        created = time.monotonic()
        page.wait(f"document.querySelector('{row('default', 'web1')}') !== null", timeout=5,
                  interval=0.01, what="the row of default/web1")
        self.assertLess(time.monotonic() - created, 1.0, "the row came more than 1 s after CreateTask")
        page.wait(f"document.querySelector('{row('default', 'web1')}').dataset.status === 'running'")
        cells = page.evaluate(f"""Array.from(document.querySelectorAll('{row("default", "web1")} td'))
                                  .map(td => td.textContent)""")
        self.assertEqual(cells[0:2], ["default", "web1"])
        self.assertEqual(cells[3], "sleep 100000")
        self.assertEqual(cells[4], str(self.prop(path, "TaskPid")))
        self.assertEqual(cells[8], "shimwatch")
        self.assertIsNone(page.evaluate("document.getElementById('state-empty')"))

        self.create_task("default", "db", bundle=self.make_bundle(
            "db", ["sh", "-c", "echo ready; exec sleep 100000"]),
            options={"labels": GLib.Variant("a{ss}", {"app": "db"})})
        self.create_task("batch", "nightly", options={"start": GLib.Variant("b", False)})
        page.wait("document.querySelectorAll('#tasks tbody tr').length === 3", what="three rows")
        page.wait(f"document.querySelector('{row('batch', 'nightly')}').dataset.status === 'created'")
        order = page.evaluate("Array.from(document.querySelectorAll('#tasks tbody tr'))"
                              ".map(r => r.dataset.namespace + '/' + r.dataset.id)")
        self.assertEqual(order, ["batch/nightly", "default/db", "default/web1"])
        self.open_detail("default", "db")
        page.wait("document.getElementById('task-log').textContent.includes('ready')",
                  what="the output of default/db")
        page.wait("document.querySelector('#task-stats').textContent.includes('MiB') || "
                  "document.querySelector('#task-stats').textContent.includes('KiB')", what="the task's memory")
        artefact(page, "cockpit-three-tasks.png")

        # the shim of default/web1 is SIGKILLed: its row shows the disconnect, then leaves
        page.evaluate(f"""(() => {{
            window.seen = [];
            const target = document.querySelector('#tasks tbody');
            new MutationObserver(() => {{
                const r = document.querySelector('{row("default", "web1")}');
                window.seen.push(r ? r.dataset.status + (r.dataset.disconnected ? '+disconnected' : '') : 'gone');
            }}).observe(target, {{subtree: true, childList: true, attributes: true}});
        }})()""")
        shim_pid = self.prop(path, "ShimPid")
        os.kill(shim_pid, signal.SIGKILL)
        page.wait(f"document.querySelector('{row('default', 'web1')}') === null", timeout=20,
                  what="the killed shim's row to leave")
        seen = page.evaluate("window.seen")
        self.assertTrue(any(s.endswith("+disconnected") for s in seen), seen)
        self.assertEqual(seen[-1], "gone", seen)
        feed = page.evaluate("Array.from(document.querySelectorAll('#events li'))"
                             ".filter(e => e.dataset.task === 'default/web1' && e.dataset.source === 'signal')"
                             ".map(e => e.dataset.event)")
        self.assertEqual(feed[:3], ["delete", "exit", "disconnected"], feed)      # newest first
        self.assertEqual(page.evaluate("document.querySelectorAll('#tasks tbody tr').length"), 2)


class ActionTests(CockpitTestCase):
    def reap_from_page(self, uid):
        path = self.create_task("default", "stuck")
        task_pid = self.prop(path, "TaskPid")
        sock = self.socket_of(path)
        page = self.open_page(uid)
        self.wait_ready()
        self.open_detail("default", "stuck")
        page.click("#task-reap")
        page.wait("document.getElementById('confirm-reap') !== null", what="the confirmation")
        self.assertIn("default/stuck", page.text("#confirm-reap-title"))
        page.click("#confirm-reap-confirm")
        return path, task_pid, sock

    def test_reap_authorized_cleans_up(self):
        path, task_pid, sock = self.reap_from_page(AUTHORIZED)
        page = self.page
        page.wait("document.getElementById('task-reap-result') !== null", timeout=30, what="Reap's result")
        page.wait(f"document.querySelector('{row('default', 'stuck')}') === null", what="the row to leave")
        wait_until(lambda: process_dead(task_pid), 10, "the container to die")
        self.assert_nothing_left("default", "stuck", sock, task_pid)
        self.assertNotIn(path, self.call(MANAGER_PATH, MANAGER, "ListShims")[0])

    def test_reap_refused_shows_not_authorized_and_changes_nothing(self):
        path, task_pid, sock = self.reap_from_page(REFUSED)
        page = self.page
        error = page.wait("(() => { const e = document.querySelector('#task-result [data-error]');"
                          " return e && [e.dataset.error, e.textContent]; })()", timeout=30,
                          what="the error of Reap")
        self.assertEqual(error[0], "NotAuthorized")
        artefact(page, "cockpit-reap-refused.png")
        self.assertIn("Not authorized", error[1])
        self.assertIn("not authorized for org.shimwatch.reap", error[1])   # the service's message
        self.assertIsNone(page.evaluate("document.getElementById('confirm-reap')"))
        self.assertEqual(page.evaluate(f"document.querySelector('{row('default', 'stuck')}').dataset.status"),
                         "running")
        self.assert_still_running(path, task_pid)
        self.assertTrue(os.path.exists(sock))
        self.assertTrue(os.path.isdir(self.task_dir("default", "stuck")))
        # refused from reading its output as well: the log says so instead of showing it
        page.wait("document.getElementById('task-log-status').dataset.state === 'denied'",
                  what="the log's not-authorized state")

    def test_stop_shows_exit_status_and_reason(self):
        bundle = self.make_bundle("polite", ["sh", "-c", "trap 'exit 3' TERM; while :; do sleep 0.2; done"])
        path = self.create_task("default", "polite", bundle=bundle)
        page = self.open_page()
        self.wait_ready()
        self.open_detail("default", "polite")
        page.click("#task-stop")
        page.type("#stop-timeout", "5")
        page.click("#confirm-stop-confirm")
        result = page.wait("(() => { const e = document.getElementById('task-stop-result');"
                           " return e && e.dataset.exitReason && [e.dataset.exitStatus, e.dataset.exitReason, e.textContent]; })()",
                           timeout=30, what="Stop's result")
        self.assertEqual(result[:2], ["3", "exited"])
        self.assertIn("exit status 3", result[2])
        self.assertIn("Reason: exited", result[2])
        self.assertEqual(self.prop(path, "ExitStatus"), 3)
        self.assertEqual(page.text(row("default", "polite") + " .sw-exit"), "3 (exited)")
        self.assertEqual(page.evaluate(f"document.querySelector('{row('default', 'polite')}').dataset.status"),
                         "stopped")
        # now only Delete (and Reap) make sense; Delete after its confirmation removes it
        self.assertTrue(page.evaluate("document.getElementById('task-stop').disabled"))
        page.click("#task-delete")
        page.click("#confirm-delete-confirm")
        page.wait(f"document.querySelector('{row('default', 'polite')}') === null", what="the row to leave")
        self.assertNotIn(path, self.call(MANAGER_PATH, MANAGER, "ListShims")[0])

    def test_pause_resume_kill(self):
        path = self.create_task("default", "frozen")
        page = self.open_page()
        self.wait_ready()
        self.open_detail("default", "frozen")
        page.click("#task-pause")
        page.wait(f"document.querySelector('{row('default', 'frozen')}').dataset.status === 'paused'")
        self.assertEqual(self.prop(path, "Status"), "paused")
        page.click("#task-resume")
        page.wait(f"document.querySelector('{row('default', 'frozen')}').dataset.status === 'running'")
        # Kill asks first: Cancel changes nothing
        page.click("#task-kill")
        page.click("#confirm-kill-cancel")
        self.assertIsNone(page.evaluate("document.getElementById('confirm-kill')"))
        self.assertEqual(self.prop(path, "Status"), "running")
        page.click("#task-kill")
        page.evaluate("document.getElementById('kill-signal').value = '9'")
        page.click("#confirm-kill-confirm")
        page.wait(f"document.querySelector('{row('default', 'frozen')}').dataset.status === 'stopped'",
                  timeout=20)
        self.assertEqual(page.text(row("default", "frozen") + " .sw-exit"), "137 (killed by a signal)")


class LogTests(CockpitTestCase):
    def test_log_view_reads_then_follows(self):
        bundle = self.make_bundle("chatty", ["sh", "-c", "echo hello-from-task; echo oops >&2; "
                                             "i=0; while :; do i=$((i+1)); echo line-$i; sleep 0.3; done"])
        self.create_task("default", "chatty", bundle=bundle)
        page = self.open_page()
        self.wait_ready()
        wait_until(lambda: len(self.call(MANAGER_PATH + "/shims/default/chatty", SHIM, "ReadLog",
                                         "(a{sv})", ({},))[0]) >= 4, 10, "a few lines in the log")
        self.open_detail("default", "chatty")
        page.wait("document.getElementById('task-log').textContent.includes('hello-from-task')",
                  what="the task's first line")
        self.assertIn("stderr oops", page.text("#task-log"))
        self.assertEqual(page.evaluate("document.querySelector('#task-log .sw-stderr') !== null"), True)
        # following: lines written after the panel opened come by themselves
        shown = page.evaluate("document.querySelectorAll('#task-log .sw-log-line').length")
        page.wait(f"document.querySelectorAll('#task-log .sw-log-line').length >= {shown + 3}",
                  timeout=15, what="new lines")
        lines = page.evaluate("Array.from(document.querySelectorAll('#task-log .sw-log-line'))"
                              ".map(l => l.textContent.trim().split(' ').slice(-1)[0])")
        numbered = [int(l[5:]) for l in lines if l.startswith("line-")]
        self.assertEqual(numbered, list(range(numbered[0], numbered[0] + len(numbered))),
                         "lines lost or shown twice")


class CreateDialogTests(CockpitTestCase):
    def test_create_dialog_creates_and_shows_errors(self):
        page = self.open_page()
        self.wait_ready()
        page.click("#create-task-button")
        page.type("#create-id", "made")
        page.type("#create-bundle", self.bundle)
        page.type("#create-labels", "app=web\ntier=front")
        page.click("#create-task-confirm")
        page.wait("document.getElementById('create-task') === null", timeout=30, what="the dialog to close")
        page.wait(f"document.querySelector('{row('default', 'made')}') !== null")
        path = MANAGER_PATH + "/shims/default/made"
        self.assertEqual(self.prop(path, "Status"), "running")
        self.assertEqual(self.prop(path, "Labels"), {"app": "web", "tier": "front"})
        self.assertEqual(self.prop(path, "BundleSource"), self.bundle)
        # the new task is selected
        page.wait("document.getElementById('task-detail-title').textContent === 'default/made'")

        # a bad bundle path: the service's own error, in the dialog; nothing created
        before = self.call(MANAGER_PATH, MANAGER, "ListShims")[0]
        bad = os.path.join(self.dir, "no-such-bundle")
        expected = self.assert_dbus_error("InvalidArgument", self.create_task, "default", "bad", bad)
        message = Gio_message(expected)
        page.click("#create-task-button")
        page.type("#create-id", "bad")
        page.type("#create-bundle", bad)
        page.click("#create-task-confirm")
        error = page.wait("(() => { const e = document.querySelector('#create-task .sw-dialog-errors [data-error]');"
                          " return e && [e.dataset.error, e.textContent]; })()", timeout=30,
                          what="the error in the dialog")
        self.assertEqual(error[0], "InvalidArgument")
        self.assertIn("Invalid argument", error[1])
        self.assertIn(message, error[1])
        self.assertNotIn("at ", error[1].split(message)[1] if message in error[1] else "")
        self.assertIsNotNone(page.evaluate("document.getElementById('create-task')"))
        artefact(page, "cockpit-create-error.png")
        self.assertEqual(self.call(MANAGER_PATH, MANAGER, "ListShims")[0], before)
        page.click("#create-task-cancel")
        self.assertIsNone(page.evaluate("document.getElementById('create-task')"))


def Gio_message(error):
    """The service's message, without GDBus's "GDBus.Error:NAME: " prefix."""
    prefix = "GDBus.Error:"
    message = error.message
    return message.split(": ", 1)[1] if message.startswith(prefix) else message


class StateTests(CockpitTestCase):
    def test_history_not_running_and_back(self):
        # events from before the page opened come from GetHistory
        path = self.create_task("default", "old")
        self.call(path, SHIM, "Kill", "(ub)", (9, False))
        wait_until(lambda: self.prop(path, "Status") == "stopped", 10, "the task to stop")
        self.call(path, SHIM, "Delete")
        page = self.open_page()
        self.wait_ready()
        page.wait("document.getElementById('state-empty') !== null", what="the empty state")
        history = page.wait("(() => { const l = Array.from(document.querySelectorAll('#events li'))"
                            ".filter(e => e.dataset.task === 'default/old').map(e => e.dataset.source + ':' + e.dataset.event);"
                            " return l.length >= 4 && l; })()", what="the history")
        self.assertEqual(history[:4], ["history:delete", "history:exit", "history:start", "history:create"])

        # the service stops: the page says so, with the command to start it
        self.stop_daemon()
        page.wait("document.getElementById('state-not-running') !== null", timeout=15,
                  what="the not-running state")
        self.assertIn("systemctl start shimwatch.service", page.text("#state-not-running"))
        artefact(page, "cockpit-not-running.png")
        self.assertTrue(page.evaluate("document.getElementById('create-task-button').disabled"))
        # and comes back: the page follows by itself
        self.start_daemon()
        self.create_task("default", "new")
        page.wait(f"document.querySelector('{row('default', 'new')}') !== null", timeout=15,
                  what="the table after the restart")

        # a page opened while it is not running says so at once
        self.stop_daemon()
        page = self.open_page()
        page.wait("document.getElementById('state-not-running') !== null", timeout=15)
        self.start_daemon()

    def test_bus_policy_refusal_shows_not_authorized(self):
        """A bus policy that refuses the user: the page says "not authorized", not a
        stack trace nor an endless spinner."""
        policy = os.path.join(os.environ["SHIMWATCH_TEST_BUS_DIR"], "policy", "zz-cockpit-test-deny.conf")
        with open(policy, "w") as f:
            f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"\n'
                    ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">\n'
                    '<busconfig><policy user="bin">'
                    '<deny send_destination="org.shimwatch.Shimwatch1"/>'
                    '</policy></busconfig>\n')

        def reload():
            self.call_bus("ReloadConfig")
        self.addCleanup(reload)
        self.addCleanup(os.unlink, policy)
        reload()
        self.create_task("default", "hidden")
        page = self.open_page(REFUSED)
        page.wait("document.getElementById('state-not-authorized') !== null", timeout=15,
                  what="the not-authorized state")
        self.assertIn("AccessDenied", page.evaluate("document.querySelector('#state-not-authorized [data-error]').dataset.error"))
        self.assertEqual(page.evaluate("document.querySelectorAll('#tasks tbody tr').length"), 0)
        self.assertTrue(page.evaluate("document.getElementById('create-task-button').disabled"))
        artefact(page, "cockpit-not-authorized.png")

    def call_bus(self, method):
        self.bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                           method, None, None, 0, 10000, None)

    def test_in_the_tools_menu(self):
        """Cockpit lists the page under Tools, from the installed manifest."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.servers[AUTHORIZED].port}"
                                    "/cockpit/@localhost/manifests.json", timeout=30) as reply:
            manifests = json.load(reply)
        self.assertEqual(manifests["shimwatch"]["tools"]["index"]["label"], "Container shims")

    def test_translated(self):
        for language, title, empty in (("de", "Container-Shims", "Keine Tasks"),
                                       ("fr", "Shims de conteneurs", "Aucune tâche")):
            page = self.open_page(language=language)
            self.wait_ready()
            self.assertEqual(page.text("h1"), title)
            self.assertEqual(page.evaluate("document.title"), title)
            page.wait("document.getElementById('state-empty') !== null")
            self.assertEqual(page.text("#state-empty h2"), empty)
            self.assertEqual(page.evaluate("cockpit.language"), language)


def main():
    try:
        return it.run_tests(sys.modules[__name__])
    finally:
        if HARNESS is not None:
            HARNESS.stop()


if __name__ == "__main__":
    sys.exit(main())
