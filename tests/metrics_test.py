#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The fleet metrics (docs/metrics.md) as Prometheus gets them: the textfile the service
writes, scraped through Debian's real node_exporter (textfile collector, loopback port),
and Manager.GetMetrics / `shimwatchctl metrics`, both linted by the real promtool. Real
shims and runc tasks on a private, policy-enforcing system bus with real polkitd, as in
integration_test.py, whose fixtures this file uses. Output is TAP."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import integration_test as it  # noqa: E402

MANAGER_PATH, MANAGER = it.MANAGER_PATH, it.MANAGER
wait_until = it.wait_until

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
PROMTOOL = "/usr/bin/promtool"
SHIMWATCHCTL = os.environ.get("SHIMWATCHCTL")
SOURCE_DIR = os.environ.get("SHIMWATCH_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def parse(text):
    """{(name, frozenset of label pairs): value} of every sample."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if match is None:
            raise AssertionError(f"not a sample line: {line!r}")
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def promtool_check_metrics(test, text):
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    test.assertEqual((proc.returncode, proc.stdout + proc.stderr), (0, ""),
                     "promtool check metrics is not clean")


class MetricsTestCase(it.ShimwatchTestCase):
    def metrics(self):
        return self.call(MANAGER_PATH, MANAGER, "GetMetrics")[0]

    def start_node_exporter(self):
        with socket.socket() as s:        # a free loopback port for it
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(os.path.join(self.dir, "node_exporter.log"), "w")
        proc = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                                 "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={self.metrics_dir}"],
                                stdout=log, stderr=subprocess.STDOUT)
        it.guard_pid(self.dir, proc.pid)

        def stop():
            proc.kill()
            proc.wait()
        self.addCleanup(stop)
        self.scrape_url = f"http://127.0.0.1:{port}/metrics"

        def up():
            if proc.poll() is not None:
                raise AssertionError(f"node_exporter exited with {proc.returncode}")
            try:
                urllib.request.urlopen(self.scrape_url, timeout=2).read()
                return True
            except OSError:
                return False
        wait_until(up, 15, "node_exporter to answer")

    def scrape(self):
        with urllib.request.urlopen(self.scrape_url, timeout=5) as reply:
            text = reply.read().decode()
        samples = parse(text)
        # a textfile it could not parse shows as an error, not as our metrics
        if value(samples, "node_textfile_scrape_error") != 0:
            time.sleep(0.5)      # its log line
            with open(os.path.join(self.dir, "node_exporter.log")) as f:
                raise AssertionError(f"node_exporter could not read the textfile: {f.read()}")
        return samples


class NodeExporterTests(MetricsTestCase):
    def test_shim_death_is_scraped_and_counters_survive_a_restart(self):
        self.start_node_exporter()
        path = self.create_task("metrics", "victim")
        wait_until(lambda: value(self.scrape(), "shimwatch_tasks_supervised",
                                 namespace="metrics", owner="shimwatch") == 1, 15,
                   "the supervised gauge to count the task")
        before = self.scrape()
        self.assertEqual(value(before, "shimwatch_build_info",
                               version=self.prop(MANAGER_PATH, "Version", MANAGER)), 1)
        self.assertAlmostEqual(value(before, "shimwatch_start_time_seconds"), time.time(),
                               delta=120)
        died = value(before, "shimwatch_task_deaths_total", reason="shim-died")
        delays = value(before, "shimwatch_task_delete_delay_seconds_count")
        self.assertIsNotNone(died)
        self.assertIsNotNone(delays)

        os.kill(self.prop(path, "ShimPid"), signal.SIGKILL)
        wait_until(lambda: self.signals.named("TaskDelete", container_id="victim"), 15,
                   "TaskDelete of the dead shim's task")

        def counted():
            now = self.scrape()
            return (value(now, "shimwatch_task_deaths_total", reason="shim-died") == died + 1
                    and value(now, "shimwatch_task_delete_delay_seconds_count") == delays + 1
                    and value(now, "shimwatch_tasks_supervised", namespace="metrics",
                              owner="shimwatch") == 0)
        # written at most every 5 s: the next write has it
        wait_until(counted, 20, "node_exporter to show the death")
        after = self.scrape()
        self.assertEqual(value(after, "shimwatch_task_deaths_total", reason="exited"),
                         value(before, "shimwatch_task_deaths_total", reason="exited"))
        self.assertEqual(value(after, "shimwatch_reaps_total"),
                         value(before, "shimwatch_reaps_total") + 1)
        self.assertEqual(value(after, "shimwatch_shim_disconnects_total"),
                         value(before, "shimwatch_shim_disconnects_total") + 1)
        # the delay is inside one of the finite buckets, and the buckets add up
        self.assertEqual(value(after, "shimwatch_task_delete_delay_seconds_bucket", le="300"),
                         delays + 1)
        self.assertGreater(value(after, "shimwatch_task_delete_delay_seconds_sum"), 0)
        self.assertEqual(value(after, "shimwatch_task_delete_delay_seconds_bucket", le="+Inf"),
                         delays + 1)

        text = self.metrics()
        promtool_check_metrics(self, text)
        ours = {k: v for k, v in parse(text).items() if k[0] != "shimwatch_start_time_seconds"}
        with open(os.path.join(self.metrics_dir, "shimwatch.prom")) as f:
            written = {k: v for k, v in parse(f.read()).items()
                       if k[0] != "shimwatch_start_time_seconds"}
        self.assertEqual(ours, written, "GetMetrics and the textfile differ")

        # the counters are the same after a restart, in GetMetrics and in the textfile
        counters = {k: v for k, v in ours.items() if k[0].endswith(("_total", "_count",
                                                                       "_bucket", "_sum"))}
        self.stop_daemon()
        self.start_daemon()
        restarted = parse(self.metrics())
        self.assertEqual({k: restarted.get(k) for k in counters}, counters)
        wait_until(lambda: value(self.scrape(), "shimwatch_start_time_seconds") !=
                   value(after, "shimwatch_start_time_seconds"), 15,
                   "the restarted service's textfile")
        scraped = self.scrape()
        self.assertEqual({k: scraped.get(k) for k in counters}, counters)

    def test_no_write_while_nothing_changes(self):
        prom = os.path.join(self.metrics_dir, "shimwatch.prom")
        wait_until(lambda: os.path.exists(prom), 15, "the first textfile")
        time.sleep(1)
        first = os.stat(prom)
        # longer than the write interval: an idle service writes nothing, and no
        # temporary file is left behind
        time.sleep(6.5)
        self.assertEqual((os.stat(prom).st_ino, os.stat(prom).st_mtime_ns),
                         (first.st_ino, first.st_mtime_ns))
        self.assertEqual(os.listdir(self.metrics_dir), ["shimwatch.prom"])
        # a change is written, by a rename over the old file
        self.create_task("metrics", "newcomer")
        wait_until(lambda: os.stat(prom).st_ino != first.st_ino, 15, "the next textfile")
        with open(prom) as f:
            self.assertEqual(value(parse(f.read()), "shimwatch_tasks_supervised",
                                   namespace="metrics", owner="shimwatch"), 1)


class FaultTests(MetricsTestCase):
    extra_config = "HealthInterval=1\n"

    def test_timed_out_cleanup_and_unresponsive_shim(self):
        # a shim whose delete hangs past CleanupTimeout: a failure, by timeout
        bundle = self.make_bundle("hang", ["sleep", "100000"],
                                  {"org.shimwatch.test.mode": "hang-delete"})
        path = self.create_task("faults", "hang", bundle,
                                {"runtime": it.GLib.Variant("s", it.TEST_RUNTIME)})
        os.kill(self.prop(path, "ShimPid"), signal.SIGKILL)
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path),
                   self.cleanup_timeout + 5, "the object to be removed")
        samples = parse(self.metrics())
        self.assertEqual(value(samples, "shimwatch_cleanup_failures_total", reason="timed-out"),
                         1)
        self.assertEqual(value(samples, "shimwatch_cleanup_failures_total", reason="failed"), 0)
        self.assertEqual(self.prop(MANAGER_PATH, "CleanupFailureCount", MANAGER), 1)
        self.assertEqual(value(samples, "shimwatch_task_deaths_total", reason="shim-died"), 1)
        # TaskDelete came after the delete's timeout: not in the buckets below it
        self.assertEqual(value(samples, "shimwatch_task_delete_delay_seconds_count"), 1)
        self.assertEqual(value(samples, "shimwatch_task_delete_delay_seconds_bucket", le="1"), 0)
        self.assertGreaterEqual(value(samples, "shimwatch_task_delete_delay_seconds_sum"),
                                self.cleanup_timeout - 0.1)

        # a shim that stops answering the health checks, counted once while it stays so
        stuck = self.create_task("faults", "stuck")
        self.assertEqual(value(parse(self.metrics()), "shimwatch_unresponsive_shims_total"), 0)
        shim_pid = self.prop(stuck, "ShimPid")
        os.kill(shim_pid, signal.SIGSTOP)
        self.addCleanup(lambda: os.kill(shim_pid, signal.SIGCONT))
        wait_until(lambda: not self.prop(stuck, "Responsive"), 15, "Responsive=false")
        time.sleep(3)
        self.assertEqual(value(parse(self.metrics()), "shimwatch_unresponsive_shims_total"), 1)
        self.assertEqual(value(parse(self.metrics()), "shimwatch_task_deaths_total",
                               reason="signaled"), 0)


class TaskLogCapTests(MetricsTestCase):
    extra_config = "TaskLogMaxSize=65536\nTaskLogMaxFiles=2\n"

    def test_output_dropped_by_the_cap_is_counted(self):
        lines, text = 6000, "x" * 60
        bundle = self.make_bundle("chatty", [
            "sh", "-c", f"i=0; while [ $i -lt {lines} ]; do echo \"$i {text}\"; i=$((i+1)); "
            "done; echo done; sleep 1000"])
        path = self.create_task("logs", "chatty", bundle)
        log_dir = os.path.join(self.state_dir, "logs", "logs", "chatty")

        def done():
            try:
                with open(os.path.join(log_dir, "output.log")) as f:
                    return f.read().endswith(" stdout done\n")
            except OSError:
                return False
        wait_until(done, 60, "the task's last line in its log")
        kept = sum(os.path.getsize(os.path.join(log_dir, n)) for n in ("output.log",
                                                                        "output.log.1"))
        dropped = value(parse(self.metrics()), "shimwatch_task_log_dropped_bytes_total")
        # every line went to the files ("<time> stdout <text>"); what is not in them any
        # more is what was dropped, to the byte
        with open(os.path.join(log_dir, "output.log")) as f:
            stamp = len(f.readline().split(" ")[0])
        written = sum(stamp + len(f" stdout {i} {text}\n") for i in range(lines))
        written += stamp + len(" stdout done\n")
        self.assertGreater(dropped, 0)
        self.assertEqual(dropped + kept, written)
        self.call(MANAGER_PATH, MANAGER, "Reap", "(ssa{sv})", ("logs", "chatty", {}))
        wait_until(lambda: self.signals.named("InterfacesRemoved", path=path), 15,
                   "the reaped task to go")


class MissingDirectoryTests(MetricsTestCase):
    extra_config = "MetricsDirectory=/nonexistent-shimwatch-metrics-dir\n"

    def test_service_runs_without_the_directory(self):
        # it runs, answers, and says why there is no textfile once, not at each change
        self.create_task("metrics", "one")
        self.create_task("metrics", "two")
        text = self.metrics()
        promtool_check_metrics(self, text)
        self.assertEqual(value(parse(text), "shimwatch_tasks_supervised", namespace="metrics",
                               owner="shimwatch"), 2)
        time.sleep(6)
        self.create_task("metrics", "three")
        wait_until(lambda: "cannot write /nonexistent-shimwatch-metrics-dir" in
                   open(self.log_path, errors="replace").read(), 15, "the warning")
        time.sleep(6)
        with open(self.log_path, errors="replace") as f:
            self.assertEqual(f.read().count("metrics: cannot write"), 1)
        self.assertIsNone(self.daemon.poll())


class CliTests(MetricsTestCase):
    def test_shimwatchctl_metrics_for_everyone(self):
        self.create_task("metrics", "seen")
        # no authorization: nobody gets the same text (it has no task id)
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               SHIMWATCHCTL, "metrics"], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        promtool_check_metrics(self, proc.stdout)
        samples = parse(proc.stdout)
        self.assertEqual(value(samples, "shimwatch_tasks_supervised", namespace="metrics",
                               owner="shimwatch"), 1)
        self.assertNotIn("seen", proc.stdout)
        self.assertEqual(samples.keys(), parse(self.metrics()).keys())


class AlertRuleTests(unittest.TestCase):
    def test_documented_alert_rules_pass_promtool(self):
        with open(os.path.join(SOURCE_DIR, "docs", "metrics.md")) as f:
            blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
        self.assertEqual(len(blocks), 1, "docs/metrics.md has one block of rules")
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as rules:
            rules.write(blocks[0])
            rules.flush()
            proc = subprocess.run([PROMTOOL, "check", "rules", rules.name],
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("SUCCESS: 2 rules found", proc.stdout)
        # the rules name metrics the service has
        names = set(re.findall(r"shimwatch_[a-z_]+", blocks[0]))
        with open(os.path.join(SOURCE_DIR, "service", "store", "shimwatch-metrics.c")) as f:
            source = f.read()
        for name in names:
            self.assertIn(re.sub(r"_(bucket|count|sum)$", "", name), source)


if __name__ == "__main__":
    sys.exit(it.run_tests(sys.modules[__name__]))
