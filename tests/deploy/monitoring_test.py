#!/usr/bin/python3
"""The monitoring stack for real: a zoomd with the demo collection serves
searches (zoomload), Prometheus scrapes it with deploy/prometheus/prometheus.yml
(the target pointed at this zoomd), and every query of the Grafana dashboard
deploy/grafana/dashboards/zoomd.json is evaluated by that Prometheus: each
must parse and the traffic, latency, SSD, memory and I/O backend panels must
return data. Also `promtool check metrics` on zoomd's /metrics.

Environment: ZOOM_SOURCE_DIR, ZOOMD_BINARY, ZOOMLOAD_BINARY (optional).
Skipped (exit 77) when Prometheus is not installed.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import yaml

SRC = os.environ.get("ZOOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
ZOOMD = os.environ.get("ZOOMD_BINARY", "")
ZOOMLOAD = os.environ.get("ZOOMLOAD_BINARY", "")
SIFT = os.path.join(SRC, "tests", "data", "sift-ngt-5k")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def read_file(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read().strip()


def wait_until(pred, timeout, what, proc=None):
    """Polls pred() until it returns something true; fails at once if `proc`
    (a process the wait depends on) has exited."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}")
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def bound_metrics_port(log_path):
    """The metrics port zoomd chose (--metrics_address 127.0.0.1:0), from its
    start line: no port is picked here and handed over later (a race)."""
    m = re.search(r"metrics on \S+ \(port (\d+)\)", read_file(log_path))
    return int(m.group(1)) if m else None


class MonitoringTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="zoomd-monitoring-")
        cls.procs = []
        cls.logs = []
        port_file = os.path.join(cls.tmp, "port")
        zoomd = subprocess.Popen(
            [ZOOMD, "--data_dir", os.path.join(cls.tmp, "data"), "--grpc_address", "127.0.0.1:0",
             "--metrics_address", "127.0.0.1:0", "--threads", "2",
             "--demo_collection", "sift", "--demo_vectors", os.path.join(SIFT, "base.bvecs"),
             "--port_file", port_file],
            stdout=subprocess.DEVNULL, stderr=cls.log("zoomd.log"))
        cls.procs.append(zoomd)
        cls.grpc_port = wait_until(lambda: read_file(port_file), 300, "zoomd", zoomd)
        cls.metrics_port = wait_until(
            lambda: bound_metrics_port(os.path.join(cls.tmp, "zoomd.log")), 60,
            "zoomd's metrics port", zoomd)

        # Prometheus with the compose stack's config, the target pointed here.
        with open(os.path.join(SRC, "deploy", "prometheus", "prometheus.yml")) as f:
            conf = yaml.safe_load(f)
        conf["global"]["scrape_interval"] = "1s"
        job = [j for j in conf["scrape_configs"] if j["job_name"] == "zoomd"][0]
        job["static_configs"][0]["targets"] = [f"127.0.0.1:{cls.metrics_port}"]
        conf_path = os.path.join(cls.tmp, "prometheus.yml")
        with open(conf_path, "w") as f:
            yaml.safe_dump(conf, f)
        # Prometheus cannot be told to pick its own port: a free one is picked
        # here, and another if something took it before Prometheus bound it.
        for attempt in range(5):
            cls.prom_port = free_port()
            prom = subprocess.Popen(
                ["prometheus", f"--config.file={conf_path}",
                 f"--storage.tsdb.path={os.path.join(cls.tmp, f'tsdb{attempt}')}",
                 f"--web.listen-address=127.0.0.1:{cls.prom_port}"],
                stdout=subprocess.DEVNULL, stderr=cls.log(f"prometheus{attempt}.log"))
            cls.procs.append(prom)
            try:
                wait_until(lambda: cls.query("up")["result"] and
                           cls.query("up")["result"][0]["value"][1] == "1", 120,
                           "the first scrape", prom)
                break
            except AssertionError:
                if prom.poll() is None or attempt == 4:
                    raise

        # Traffic over ~6 scrapes, so rate() has samples on both sides.
        if ZOOMLOAD:
            r = subprocess.run(
                [ZOOMLOAD, "--target", f"127.0.0.1:{cls.grpc_port}", "--workload", "search",
                 "--dataset", SIFT, "--collection", "sift", "--concurrency", "2",
                 "--duration", "6", "--warmup", "0", "--progress=false"],
                capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
        else:
            zoomctl = os.environ.get("ZOOMCTL_BINARY", "")
            end = time.time() + 6
            row = 0
            while time.time() < end:
                subprocess.run([zoomctl, "--target", f"127.0.0.1:{cls.grpc_port}", "search",
                                "sift", "--query_file", os.path.join(SIFT, "query.bvecs"),
                                "--row", str(row % 100)], capture_output=True, check=True)
                row += 1
        # Every query is evaluated at one instant just after the traffic, with
        # a rate window that covers all of it, once Prometheus has scraped
        # past that instant (however slowly this machine runs).
        cls.at = time.time() + 1.5
        wait_until(lambda: float(cls.query("max(timestamp(up))")["result"][0]["value"][1]) >
                   cls.at + 1, 120, "a scrape after the traffic")

    @classmethod
    def log(cls, name):
        f = open(os.path.join(cls.tmp, name), "w")
        cls.logs.append(f)
        return f

    @classmethod
    def tearDownClass(cls):
        for f in cls.logs:
            f.close()
        for p in reversed(cls.procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def query(cls, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = (f"http://127.0.0.1:{cls.prom_port}/api/v1/query?" +
               urllib.parse.urlencode(params))
        try:
            body = json.loads(http_get(url))
        except urllib.error.HTTPError as e:  # 400: the query does not parse
            body = json.loads(e.read().decode())
        if body["status"] != "success":
            raise AssertionError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def test_promtool_accepts_the_exposition(self):
        text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True)
        # promtool exits 3 for lint-only findings (e.g. naming advice); 1 is an error.
        self.assertIn(r.returncode, (0, 3), r.stdout + r.stderr)
        self.assertNotIn("error", (r.stdout + r.stderr).lower())

    def test_every_dashboard_query_runs_and_the_core_panels_have_data(self):
        with open(os.path.join(SRC, "deploy", "grafana", "dashboards", "zoomd.json")) as f:
            dash = json.load(f)
        # Grafana's variables: every instance, a rate window of 5 scrapes.
        var = dash["templating"]["list"][0]
        instances = self.query(var["definition"].replace("label_values(", "group by (instance) (")
                               .replace(", instance)", ")"))["result"]
        self.assertEqual(len(instances), 1)
        must_have_data = {
            "Requests per second by RPC", "RPC latency p50 / p99",
            "Search latency per stage p50 / p99", "SSD reads per query", "SSD read throughput",
            "Memory", "I/O backend", "Points and index build",
        }
        with_data = set()
        checked = 0
        for p in dash["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"].replace("$instance", ".*").replace("$__rate_interval", "30s")
                res = self.query(expr, self.at)["result"]  # raises when it does not parse
                checked += 1
                values = [float(s["value"][1]) for s in res]
                if any(v == v and v > 0 for v in values):  # not NaN, positive
                    with_data.add(p["title"])
        self.assertGreaterEqual(checked, 20)
        self.assertEqual(must_have_data - with_data, set(),
                         "panels without data after searches")
        # A figure checked against what happened: searches were served.
        reads = self.query('sum(rate(zoomd_ssd_reads_total[30s])) / '
                           'sum(rate(zoomd_searches_total[30s]))', self.at)
        self.assertTrue(reads["result"])


if __name__ == "__main__":
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("SKIP: prometheus not installed (deploy/install-deps.sh installs it)")
        sys.exit(77)
    if not ZOOMD:
        print("ZOOMD_BINARY not set", file=sys.stderr)
        sys.exit(2)
    unittest.main(verbosity=2)
