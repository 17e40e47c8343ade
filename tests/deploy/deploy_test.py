#!/usr/bin/python3
"""Checks of deploy/: the Dockerfile, the entrypoint, the seccomp profile (zoomd
really runs under it, with io_uring; without the io_uring syscalls it falls
back to pread and says why), docker-compose.yml, the Prometheus and Grafana
provisioning and the Kubernetes manifests (fields, kustomize rendering and
schema validation). The image itself is built and run by deploy/test-image.sh
(podman; too slow for CI).

Environment: ZOOM_SOURCE_DIR, ZOOM_BINARY_DIR, ZOOMD_BINARY, ZOOMCTL_BINARY.
"""
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import yaml

SRC = os.environ.get("ZOOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("ZOOM_BINARY_DIR", "")
DEPLOY = os.path.join(SRC, "deploy")
ZOOMD = os.environ.get("ZOOMD_BINARY", "")
ZOOMCTL = os.environ.get("ZOOMCTL_BINARY", "")
HERE = os.path.dirname(os.path.abspath(__file__))


def load_yaml(*parts):
    with open(os.path.join(DEPLOY, *parts)) as f:
        return yaml.safe_load(f)


def dockerfile_stages():
    """Parses deploy/Dockerfile into [(stage name, [(INSTRUCTION, args)])]."""
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.I)
            stages.append((m.group(2) or "", [("FROM", m.group(1))]))
        elif stages:
            stages[-1][1].append((instr, args.strip()))
    return stages


_node_deps = None


def node_deps():
    """Installs tests/deploy/package.json's validators into the build dir once;
    returns that dir, or None when node/npm are missing (the test is skipped)."""
    global _node_deps
    if _node_deps is not None:
        return _node_deps or None
    if not shutil.which("node") or not shutil.which("npm"):
        _node_deps = ""
        return None
    root = os.path.join(BIN or tempfile.gettempdir(), "deploy-schema-deps")
    os.makedirs(root, exist_ok=True)
    shutil.copy(os.path.join(HERE, "package.json"), os.path.join(root, "package.json"))
    stamp = os.path.join(root, "node_modules", ".zoomd-installed")
    with open(os.path.join(HERE, "package.json")) as f:
        want = f.read()
    if not os.path.exists(stamp) or open(stamp).read() != want:
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund",
                            "--no-package-lock", "--prefix", root],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError(f"npm install of the schema validators failed:\n{r.stderr[-2000:]}")
        with open(stamp, "w") as f:
            f.write(want)
    _node_deps = root
    return root


def validate_schema(kind, path):
    deps = node_deps()
    if deps is None:
        raise unittest.SkipTest("node/npm not installed: schema validation skipped")
    r = subprocess.run(["node", os.path.join(HERE, "validate_schemas.mjs"), kind, path],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NODE_DEPS_DIR=deps))
    return r.returncode, r.stdout + r.stderr


class DockerfileTest(unittest.TestCase):
    def test_multi_stage_runtime_is_minimal_and_non_root(self):
        stages = dockerfile_stages()
        names = [s[0] for s in stages]
        self.assertEqual(names, ["build", "runtime"])
        build, runtime = dict(stages)["build"], dict(stages)["runtime"]
        self.assertTrue(any(i == "RUN" and "install-deps.sh --build" in a
                            for i, a in build), "the build stage installs the build packages")
        self.assertTrue(any(i == "RUN" and "--target zoomd zoomctl zoomload" in a for i, a in build))
        run_lines = [a for i, a in runtime if i == "RUN"]
        self.assertTrue(any("install-deps.sh --runtime" in a for a in run_lines))
        self.assertFalse(any("apt-get install" in a for a in run_lines),
                         "runtime packages come from install-deps.sh --runtime only")
        self.assertTrue(any(i == "COPY" and a.startswith("--from=build") for i, a in runtime))
        instr = {}
        for i, a in runtime:
            instr.setdefault(i, []).append(a)
        self.assertEqual(instr["USER"], ["zoomd"])
        self.assertIn('["/data"]', instr["VOLUME"][0])
        self.assertEqual(sorted(instr["EXPOSE"][0].split()), ["50051", "9464"])
        self.assertIn("zoomctl", instr["HEALTHCHECK"][0])
        self.assertIn('"health"', instr["HEALTHCHECK"][0])
        self.assertEqual(instr["ENTRYPOINT"], ['["docker-entrypoint.sh"]'])
        env = " ".join(instr["ENV"])
        for flag in ("ZOOMD_DATA_DIR=/data", "ZOOMD_GRPC_ADDRESS=0.0.0.0:50051",
                     "ZOOMD_METRICS_ADDRESS=0.0.0.0:9464"):
            self.assertIn(flag, env)
        # The uid the Kubernetes manifests run as.
        self.assertTrue(any("--uid 10001" in a for a in run_lines))

    def test_copied_sources_exist(self):
        for _, instrs in dockerfile_stages():
            for i, a in instrs:
                if i != "COPY" or a.startswith("--from"):
                    continue
                for src in a.split()[:-1]:
                    self.assertTrue(os.path.exists(os.path.join(SRC, src)), src)

    def test_runtime_packages_cover_zoomd_libraries(self):
        """Every shared library of the built zoomd belongs to a package that
        install-deps.sh --runtime installs or one of their dependencies."""
        if not ZOOMD or not shutil.which("dpkg-query"):
            self.skipTest("needs ZOOMD_BINARY and dpkg")
        out = subprocess.run(["ldd", ZOOMD], capture_output=True, text=True, check=True).stdout
        self.assertNotIn("not found", out)
        with open(os.path.join(DEPLOY, "install-deps.sh")) as f:
            text = f.read()
        runtime = re.search(r"RUNTIME_PKGS=\((.*?)\)", text, re.S).group(1).split()
        closure, todo = set(), list(runtime)
        while todo:  # the packages' dependency closure, from dpkg's metadata
            p = todo.pop()
            if p in closure:
                continue
            closure.add(p)
            r = subprocess.run(["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", p],
                               capture_output=True, text=True)
            for dep in re.split(r"[,|]", r.stdout):
                name = dep.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
        for path in re.findall(r"=> (/\S+)", out):
            real = os.path.realpath(path)
            owner = None
            for cand in (path, real, "/usr" + path, "/usr" + real):
                r = subprocess.run(["dpkg-query", "-S", cand], capture_output=True, text=True)
                if r.returncode == 0:
                    owner = r.stdout.split(":")[0]
                    break
            self.assertIsNotNone(owner, path)
            self.assertIn(owner, closure, f"{path} ({owner}) is not installed by --runtime")


class EntrypointTest(unittest.TestCase):
    def run_entrypoint(self, args, env):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "zoomd")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
            os.chmod(fake, 0o755)
            full_env = {"PATH": d + ":/usr/bin:/bin", **env}
            r = subprocess.run(["sh", os.path.join(DEPLOY, "docker-entrypoint.sh"), *args],
                               capture_output=True, text=True, env=full_env, check=True)
            return r.stdout.splitlines()

    def test_env_becomes_flags_and_arguments_win(self):
        out = self.run_entrypoint(["--threads=4", "--sync", "batch"],
                                  {"ZOOMD_THREADS": "2", "ZOOMD_LOAD_MODEL": "lm=/models/a b",
                                   "OTHER": "x"})
        self.assertEqual(sorted(out[:2]), ["--load_model=lm=/models/a b", "--threads=2"])
        self.assertEqual(out[2:], ["--threads=4", "--sync", "batch"])

    def test_a_command_runs_instead_of_zoomd(self):
        r = subprocess.run(["sh", os.path.join(DEPLOY, "docker-entrypoint.sh"), "echo", "hi there"],
                           capture_output=True, text=True, check=True)
        self.assertEqual(r.stdout, "hi there\n")

    def test_flags_from_env_reach_a_real_zoomd(self):
        if not ZOOMD:
            self.skipTest("needs ZOOMD_BINARY")
        with tempfile.TemporaryDirectory() as d:
            os.symlink(ZOOMD, os.path.join(d, "zoomd"))
            env = {"PATH": d + ":/usr/bin:/bin", "ZOOMD_DATA_DIR": os.path.join(d, "data"),
                   "ZOOMD_GRPC_ADDRESS": "127.0.0.1:0", "ZOOMD_METRICS_ADDRESS": "",
                   "ZOOMD_THREADS": "2", "ZOOMD_NO_SUCH_FLAG": "1"}
            r = subprocess.run(["sh", os.path.join(DEPLOY, "docker-entrypoint.sh")],
                               capture_output=True, text=True, env=env, timeout=60)
            # An unknown ZOOMD_ variable is an unknown flag: a clear error, no start.
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no_such_flag", r.stderr)
            del env["ZOOMD_NO_SUCH_FLAG"]
            p = subprocess.Popen(["sh", os.path.join(DEPLOY, "docker-entrypoint.sh"),
                                  "--threads=3", "--port_file=" + os.path.join(d, "port")],
                                 stderr=subprocess.PIPE, text=True, env=env)
            try:
                line = wait_for_line(p, "serving on")
                self.assertIn("3 workers", line)  # the argument beat ZOOMD_THREADS=2
                self.assertIn("data dir " + os.path.join(d, "data"), line)
            finally:
                p.terminate()
                self.assertEqual(p.wait(timeout=30), 0)


def wait_for_line(proc, needle, timeout=120):
    """The first stderr line of `proc` containing `needle`. A reader thread
    feeds a queue, so a zoomd that prints nothing (and does not exit) fails
    the test after `timeout` instead of blocking readline() forever."""
    lines = queue.Queue()

    def pump():
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)  # EOF

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.time() + timeout
    seen = []
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            break
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if needle in line:
            return line  # the pump keeps draining, so zoomd never blocks on a full pipe
    raise AssertionError(f"no '{needle}' from zoomd; it printed:\n{''.join(seen)[-3000:]}")


def wait_for_port_file(path, proc, timeout=120):
    """The port zoomd writes once serving (after the demo collection loads)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        if proc.poll() is not None:
            raise AssertionError(f"zoomd exited with {proc.returncode} before serving")
        time.sleep(0.05)
    raise AssertionError("zoomd wrote no port file")


class SeccompTest(unittest.TestCase):
    PROFILE = os.path.join(DEPLOY, "seccomp-zoomd.json")
    IO_URING = ["io_uring_setup", "io_uring_enter", "io_uring_register"]

    def test_profile_is_what_the_generator_writes(self):
        r = subprocess.run([sys.executable, os.path.join(DEPLOY, "gen-seccomp.py"), "--check"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_default_deny_with_io_uring_allowed(self):
        with open(self.PROFILE) as f:
            p = json.load(f)
        self.assertEqual(p["defaultAction"], "SCMP_ACT_ERRNO")
        unconditional = set()
        for rule in p["syscalls"]:
            if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("includes") \
                    and not rule.get("excludes") and not rule.get("args"):
                unconditional |= set(rule["names"])
        for name in self.IO_URING:
            self.assertIn(name, unconditional)
        # The privileged ones stay behind their capabilities.
        for name in ("mount", "unshare", "setns", "ptrace", "bpf", "init_module", "reboot",
                     "keyctl", "clone3"):
            self.assertNotIn(name, unconditional)
        clone = [r for r in p["syscalls"] if r["names"] == ["clone"]][0]
        self.assertEqual(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ")
        self.assertEqual(clone["args"][0]["value"] & 0x10000000, 0x10000000)  # CLONE_NEWUSER

    def run_zoomd_under(self, extra):
        if not ZOOMD:
            self.skipTest("needs ZOOMD_BINARY")
        try:
            import seccomp  # noqa: F401
        except ImportError:
            self.skipTest("python3-seccomp not installed")
        d = tempfile.mkdtemp(prefix="zoomd-seccomp-")
        self.addCleanup(shutil.rmtree, d, True)
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "seccomp_exec.py"), self.PROFILE,
                              *extra, "--", ZOOMD, "--data_dir", os.path.join(d, "data"),
                              "--grpc_address", "127.0.0.1:0", "--metrics_address", "",
                              "--threads", "2", "--demo_collection", "sift",
                              "--demo_vectors",
                              os.path.join(SRC, "tests/data/sift-ngt-5k/base.bvecs"),
                              "--port_file", os.path.join(d, "port")],
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        line = wait_for_line(p, "serving on")
        return p, line, wait_for_port_file(os.path.join(d, "port"), p)

    def search(self, port):
        r = subprocess.run([ZOOMCTL, "--target", f"127.0.0.1:{port}", "--json", "search", "sift",
                            "--query_file", os.path.join(SRC, "tests/data/sift-ngt-5k/query.bvecs"),
                            "--row", "0", "--k", "10"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_zoomd_serves_with_io_uring_under_the_profile(self):
        p, line, port = self.run_zoomd_under([])
        self.assertIn("io backend io_uring", line)
        res = self.search(port)
        self.assertEqual(len(res["hits"]), 10)
        p.terminate()
        self.assertEqual(p.wait(timeout=60), 0)

    def test_without_io_uring_zoomd_falls_back_to_pread_and_says_why(self):
        p, line, port = self.run_zoomd_under(["--drop", ",".join(self.IO_URING)])
        self.assertIn("io backend pread (io_uring unavailable: io_uring_setup: Operation not permitted",
                      line)
        res = self.search(port)
        self.assertEqual(len(res["hits"]), 10)
        p.terminate()
        self.assertEqual(p.wait(timeout=60), 0)


class ComposeTest(unittest.TestCase):
    def setUp(self):
        self.c = load_yaml("docker-compose.yml")

    def test_services_and_wiring(self):
        s = self.c["services"]
        self.assertEqual(set(s), {"zoomd", "prometheus", "grafana"})
        z = s["zoomd"]
        ctx = os.path.normpath(os.path.join(DEPLOY, z["build"]["context"]))
        self.assertTrue(os.path.isfile(os.path.join(ctx, z["build"]["dockerfile"])))
        seccomp = [o for o in z["security_opt"] if o.startswith("seccomp=")]
        self.assertEqual(len(seccomp), 1)
        self.assertTrue(os.path.isfile(os.path.join(DEPLOY, seccomp[0].split("=", 1)[1])))
        self.assertEqual(sorted(z["ports"]), ["50051:50051", "9464:9464"])
        self.assertIn("zoomd-data:/data", z["volumes"])
        self.assertEqual(z["healthcheck"]["test"][:2], ["CMD", "zoomctl"])
        self.assertIn("health", z["healthcheck"]["test"])
        for name in ("prometheus", "grafana"):
            for v in s[name]["volumes"]:
                src = v.split(":")[0]
                if src.startswith("./"):
                    self.assertTrue(os.path.exists(os.path.join(DEPLOY, src)), v)
        self.assertIn("./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro",
                      s["prometheus"]["volumes"])
        for vol in ("zoomd-data", "prometheus-data", "grafana-data"):
            self.assertIn(vol, self.c["volumes"])

    def test_schema(self):
        code, out = validate_schema("compose", os.path.join(DEPLOY, "docker-compose.yml"))
        self.assertEqual(code, 0, out)

    def test_schema_catches_a_typo(self):
        """The validator is live: a misspelt key fails."""
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            with open(os.path.join(DEPLOY, "docker-compose.yml")) as src:
                f.write(src.read().replace("stop_grace_period:", "stop_grace_perod:"))
            f.flush()
            code, out = validate_schema("compose", f.name)
            self.assertNotEqual(code, 0, out)
            self.assertIn("stop_grace_perod", out)


class MonitoringConfigTest(unittest.TestCase):
    def test_prometheus_scrapes_zoomd(self):
        p = load_yaml("prometheus", "prometheus.yml")
        job = [j for j in p["scrape_configs"] if j["job_name"] == "zoomd"][0]
        self.assertEqual(job["static_configs"][0]["targets"], ["zoomd:9464"])
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "config",
                                os.path.join(DEPLOY, "prometheus", "prometheus.yml")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_grafana_provisioning_matches_compose(self):
        ds = load_yaml("grafana", "provisioning", "datasources", "prometheus.yml")["datasources"][0]
        self.assertEqual(ds["url"], "http://prometheus:9090")
        prov = load_yaml("grafana", "provisioning", "dashboards", "zoomd.yml")["providers"][0]
        mounts = load_yaml("docker-compose.yml")["services"]["grafana"]["volumes"]
        self.assertIn(f"./grafana/dashboards:{prov['options']['path']}:ro", mounts)
        with open(os.path.join(DEPLOY, "grafana", "dashboards", "zoomd.json")) as f:
            dash = json.load(f)
        uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p.get("targets", [])}
        self.assertEqual(uids, {ds["uid"]})

    def test_dashboard_covers_the_issue_and_names_real_metrics(self):
        with open(os.path.join(DEPLOY, "grafana", "dashboards", "zoomd.json")) as f:
            dash = json.load(f)
        titles = " | ".join(p["title"] for p in dash["panels"]).lower()
        for want in ("requests per second", "latency per stage", "ssd reads per query", "errors",
                     "memory", "i/o backend"):
            self.assertIn(want, titles)
        with open(os.path.join(SRC, "server", "metrics", "metrics.cc")) as f:
            exported = set(re.findall(r'"(zoomd_[a-z_]+)"', f.read()))
        exported |= {n + s for n in exported for s in ("_bucket", "_sum", "_count")}
        for p in dash["panels"]:
            for t in p.get("targets", []):
                for name in re.findall(r"\bzoomd_[a-z_]+", t["expr"]):
                    self.assertIn(name, exported, f"panel '{p['title']}' uses unknown {name}")
        # Panels must not overlap on the grid.
        cells = set()
        for p in dash["panels"]:
            g = p["gridPos"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, p["title"])
                    cells.add((x, y))


class KubernetesTest(unittest.TestCase):
    def render(self, overlay):
        path = os.path.join(DEPLOY, "k8s", overlay)
        if shutil.which("kubectl"):
            r = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout, list(yaml.safe_load_all(r.stdout))
        kust = load_yaml("k8s", overlay, "kustomization.yaml")
        if any(not os.path.isfile(os.path.join(path, r)) for r in kust["resources"]):
            self.skipTest("kubectl not installed: overlays of other overlays not rendered")
        docs = []
        for res in kust["resources"]:
            with open(os.path.join(path, res)) as f:
                docs += [d for d in yaml.safe_load_all(f) if d]
        return yaml.safe_dump_all(docs), docs

    def test_statefulset_and_services(self):
        _, docs = self.render("base")
        by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        sts = by[("StatefulSet", "zoomd")]
        spec = sts["spec"]
        self.assertEqual(spec["serviceName"], "zoomd-headless")
        self.assertIn(("Service", "zoomd-headless"), by)
        self.assertEqual(by[("Service", "zoomd-headless")]["spec"]["clusterIP"], "None")
        claim = spec["volumeClaimTemplates"][0]
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertIn("storage", claim["spec"]["resources"]["requests"])
        pod = spec["template"]["spec"]
        c = pod["containers"][0]
        self.assertIn({"name": claim["metadata"]["name"], "mountPath": "/data"}, c["volumeMounts"])
        env = {e["name"]: e["value"] for e in c["env"]}
        self.assertEqual(env["ZOOMD_DATA_DIR"], "/data")
        self.assertEqual(env["ZOOMD_GRPC_ADDRESS"], "0.0.0.0:50051")
        self.assertEqual(env["ZOOMD_METRICS_ADDRESS"], "0.0.0.0:9464")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], 50051, probe)
        for kind in ("requests", "limits"):
            self.assertEqual(set(c["resources"][kind]), {"cpu", "memory"})
        ann = spec["template"]["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(ann["prometheus.io/port"], "9464")
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertEqual(pod["securityContext"]["runAsUser"], 10001)
        self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault")
        self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"])
        ports = {p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {50051, 9464})
        svc = by[("Service", "zoomd")]
        self.assertEqual({p["port"] for p in svc["spec"]["ports"]}, {50051, 9464})
        # The selectors match the pod's labels.
        labels = spec["template"]["metadata"]["labels"]
        for sel in (spec["selector"]["matchLabels"], svc["spec"]["selector"]):
            for k, v in sel.items():
                self.assertEqual(labels.get(k), v)

    def test_io_uring_overlay_uses_the_profile(self):
        _, docs = self.render("io-uring")
        sts = [d for d in docs if d["kind"] == "StatefulSet"][0]
        prof = sts["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]
        self.assertEqual(prof, {"type": "Localhost", "localhostProfile": "zoomd/seccomp-zoomd.json"})

    def test_schema(self):
        for overlay in ("base", "io-uring"):
            if overlay != "base" and not shutil.which("kubectl"):
                continue
            text, _ = self.render(overlay)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                f.write(text)
                f.flush()
                code, out = validate_schema("k8s", f.name)
                self.assertEqual(code, 0, out)
                self.assertEqual(out.count("valid "), 3, out)

    def test_schema_catches_a_wrong_type(self):
        text, _ = self.render("base")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(text.replace("containerPort: 50051", "containerPort: grpc"))
            f.flush()
            code, out = validate_schema("k8s", f.name)
            self.assertNotEqual(code, 0, out)
            self.assertIn("containerPort", out)


class ClusterKubernetesTest(KubernetesTest):
    """deploy/k8s/cluster: NATS (3, JetStream, PVCs), zoomd nodes, routers."""

    def docs(self):
        _, docs = self.render("cluster")
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    @staticmethod
    def env(container):
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

    def test_nats_is_three_routed_jetstream_servers(self):
        by = self.docs()
        sts = by[("StatefulSet", "nats")]["spec"]
        self.assertEqual(sts["replicas"], 3)
        self.assertEqual(sts["serviceName"], "nats-headless")
        self.assertIn("storage", sts["volumeClaimTemplates"][0]["spec"]["resources"]["requests"])
        conf = by[("ConfigMap", "nats-config")]["data"]["nats.conf"]
        self.assertIn("jetstream", conf)
        # zoomd's largest log entries (docs/cluster.md, "NATS max_payload").
        self.assertIn("max_payload: 8MB", conf)
        for i in range(3):
            self.assertIn(f"nats://nats-{i}.nats-headless:6222", conf)
        pod = sts["template"]["spec"]
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertEqual(anti[0]["topologyKey"], "kubernetes.io/hostname")
        self.assertEqual(by[("PodDisruptionBudget", "nats")]["spec"]["maxUnavailable"], 1)
        c = pod["containers"][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertEqual(c[probe]["httpGet"]["port"], 8222, probe)

    def test_nodes_and_routers(self):
        by = self.docs()
        nodes = by[("StatefulSet", "zoomd-node")]["spec"]
        self.assertEqual(nodes["serviceName"], "zoomd-node-headless")
        self.assertEqual(by[("Service", "zoomd-node-headless")]["spec"]["clusterIP"], "None")
        c = nodes["template"]["spec"]["containers"][0]
        env = self.env(c)
        self.assertEqual(env["ZOOMD_ROLE"], "node")
        self.assertEqual(env["POD_NAME"], {"fieldRef": {"fieldPath": "metadata.name"}})
        self.assertEqual(env["ZOOMD_NODE_ID"], "$(POD_NAME)")
        self.assertEqual(env["ZOOMD_ADVERTISE_ADDRESS"], "$(POD_NAME).zoomd-node-headless:50051")
        self.assertEqual(env["ZOOMD_NATS_REPLICAS"], "3")
        names = [e["name"] for e in c["env"]]
        self.assertLess(names.index("POD_NAME"), names.index("ZOOMD_NODE_ID"))
        self.assertEqual(env["ZOOMD_DATA_DIR"], "/data")
        self.assertEqual(by[("PodDisruptionBudget", "zoomd-node")]["spec"]["maxUnavailable"], 1)
        router = by[("Deployment", "zoomd-router")]["spec"]
        rc = router["template"]["spec"]["containers"][0]
        renv = self.env(rc)
        self.assertEqual(renv["ZOOMD_ROLE"], "router")
        self.assertEqual(renv["ZOOMD_NATS"], env["ZOOMD_NATS"])
        for i in range(3):
            self.assertIn(f"nats://nats-{i}.nats-headless:4222", env["ZOOMD_NATS"])
        self.assertGreaterEqual(router["replicas"], 2)
        self.assertEqual(by[("PodDisruptionBudget", "zoomd-router")]["spec"]["minAvailable"], 1)
        for container in (c, rc):
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                self.assertEqual(container[probe]["grpc"]["port"], 50051, probe)
            self.assertTrue(container["securityContext"]["readOnlyRootFilesystem"])
        # The API is the routers'; every selector matches its pods' labels.
        svc = by[("Service", "zoomd")]["spec"]
        labels = router["template"]["metadata"]["labels"]
        for k, v in svc["selector"].items():
            self.assertEqual(labels.get(k), v)
        for sel, spec in ((nodes["selector"]["matchLabels"], nodes),
                          (router["selector"]["matchLabels"], router)):
            for k, v in sel.items():
                self.assertEqual(spec["template"]["metadata"]["labels"].get(k), v)

    def test_schema(self):
        text, docs = self.render("cluster")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(text)
            f.flush()
            code, out = validate_schema("k8s", f.name)
            self.assertEqual(code, 0, out)
            self.assertEqual(out.count("valid "), len(docs), out)

    # The base overlay's checks are KubernetesTest's own.
    test_statefulset_and_services = None
    test_io_uring_overlay_uses_the_profile = None
    test_schema_catches_a_wrong_type = None


class ClusterComposeTest(unittest.TestCase):
    def setUp(self):
        self.c = load_yaml("docker-compose.cluster.yml")

    def test_services_and_wiring(self):
        s = self.c["services"]
        self.assertEqual(set(s), {"nats0", "nats1", "nats2", "node0", "node1", "router"})
        for i in range(3):
            cmd = s[f"nats{i}"]["command"]
            self.assertIn("-js", cmd)
            # max_payload has no flag: a config file (docs/cluster.md).
            conf = cmd[cmd.index("-c") + 1]
            self.assertEqual([c["target"] for c in s[f"nats{i}"]["configs"]], [conf])
            routes = cmd[cmd.index("--routes") + 1]
            self.assertEqual(sorted(routes.split(",")),
                             sorted(f"nats://nats{j}:6222" for j in range(3) if j != i))
        ids = set()
        for n in ("node0", "node1"):
            env = s[n]["environment"]
            self.assertEqual(env["ZOOMD_ROLE"], "node")
            self.assertEqual(env["ZOOMD_ADVERTISE_ADDRESS"], f"{n}:50051")
            ids.add(env["ZOOMD_NODE_ID"])
            self.assertIn(f"{n}-data:/data", s[n]["volumes"])
        self.assertEqual(ids, {"node0", "node1"})
        self.assertEqual(s["router"]["environment"]["ZOOMD_ROLE"], "router")
        self.assertEqual(sorted(s["router"]["ports"]), ["50051:50051", "9464:9464"])
        for n in ("node0", "node1", "router"):
            self.assertEqual(s[n]["environment"]["ZOOMD_NATS"],
                             "nats://nats0:4222,nats://nats1:4222,nats://nats2:4222")
        with open(os.path.join(DEPLOY, self.c["configs"]["nats-conf"]["file"])) as f:
            self.assertIn("max_payload: 8MB", f.read())
        ctx = os.path.normpath(os.path.join(DEPLOY, s["node0"]["build"]["context"]))
        self.assertTrue(os.path.isfile(os.path.join(ctx, s["node0"]["build"]["dockerfile"])))

    def test_schema(self):
        code, out = validate_schema("compose", os.path.join(DEPLOY, "docker-compose.cluster.yml"))
        self.assertEqual(code, 0, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
