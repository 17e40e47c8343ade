"""The cluster's benchmark (issue 17): ratios measured on one machine.

Starts three nats-servers clustered on loopback (JetStream, streams R=3),
four zoomd nodes (z0-z3), a router and a standalone zoomd (--sync always),
all on this machine's cores, then measures (--parts, default all):

  router    a router + one node (S=1, R=1) against the standalone zoomd:
            QPS and p99 under zoomload (same data, knobs, workers), the runs
            alternated (--runs each); the ratios of their medians. With
            --vs_zoomd OLD: a second cluster of that build beside the first
            (same data), the two builds' router and standalone run in turn
            (order flipped every round): per-round ratios, their medians
            (JSON router_ab).
  writes    the base set imported (the Python client's import_points, the
            same batches): into the standalone zoomd (--sync always) against
            through the router, acknowledged by JetStream R=3, at S=1/R=1,
            S=1/R=2, S=2/R=1, S=4/R=1; and until every replica applied it.
  failover  searches one at a time through the router (S=1, R=2); kill -9
            of the replica answering them (/metrics says which): the longest
            time without a successful reply around the kill (the failover
            gap, ms) against the longest before it, and the failed
            searches; --trials kills, the killed node restarted between.
  concerns  write concerns: a one-point Upsert's p50/p99 (one caller) and
            the Import throughput under log / majority / all at S=1 and
            R=1, 2, 3 through the router, beside the standalone.
  catchup   a replica killed while --catchup_points points are written;
            restarted: points/s from its gRPC port serving to the points
            applied (its log replayed); then the same node with an empty
            disk: bootstrap (a peer's snapshot streamed, restored, the log
            after it replayed) in points/s.
  rereplicate
            a node killed for good (S=2, R=3): seconds until the router
            declares it dead, then until the live nodes hold R copies of
            every point again (its replicas placed elsewhere and
            bootstrapped), against shard bytes / 100 MB/s + 60 s; searches
            and writes meanwhile, and how many failed.
  fanout    S = 1, 2, 4 (R=1; every shard on its own node): QPS, p99,
            recall and CPU seconds a query (/proc, nodes and router apart),
            against the model of docs/scale-out.md.
  decoder   a language model (--lm_dataset, the PTB export) loaded through
            the router (every node serves it) against the standalone
            zoomd: TopK QPS and p99 under zoomload (--workload topk), runs
            alternated, and how the calls spread over the nodes.

Every number is printed as it comes and written to --json (one object:
router_vs_single, write_throughput, failover, catch_up, fanout, decoder,
rereplicate). The cores
are shared by every process (the clients too): read ratios, not scaling.

  python3 loadtest/cluster_bench.py --zoomd build2/server/main/zoomd \\
      --zoomload build2/loadtest/zoomload --dataset ../shared/data/glove-6b-100d
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Dict, List

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"  # children forked beside gRPC's threads

import grpc  # noqa: E402
import numpy as np  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from cluster_procs import (NATS, Proc, free_port, metric, start_nats,  # noqa: E402
                           start_serving, wait_until)
import zoomd  # noqa: E402  (on the path through cluster_procs)
from zoomd._proto import zoom_pb2, zoom_pb2_grpc  # noqa: E402

NODES = ["z0", "z1", "z2", "z3"]
TICKS = os.sysconf("SC_CLK_TCK")


def say(*a) -> None:
    print(*a, flush=True)


def cpu_seconds(p: Proc) -> float:
    """user + system CPU of the process so far."""
    fields = pathlib.Path(f"/proc/{p.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def context_switches(p: Proc) -> int:
    """Voluntary + involuntary context switches of every thread of the process so far."""
    total = 0
    for t in pathlib.Path(f"/proc/{p.p.pid}/task").iterdir():
        try:
            for line in (t / "status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    total += int(line.split()[1])
        except OSError:  # the thread ended while we read
            pass
    return total


SEARCH_KEYS = ("qps", "p99_us", "p50_us", "recall_at_k", "cpu_us_per_query",
               "switches_per_query", "node_cpu_us_per_query")


def medians(rows: List[dict]) -> Dict[str, float]:
    return {k: round(statistics.median(x[k] for x in rows), 4) for k in SEARCH_KEYS}


def part_router_vs(a: "Bench", b: "Bench") -> dict:
    """The routed search of two builds' clusters (a: --zoomd, b: --vs_zoomd),
    side by side on the same data: --runs rounds, each running a's and b's
    router and standalone in turn, the order flipped every round (a b, b a,
    ...) so the machine's drift hits both; per-round ratios a/b, medians."""
    runs: Dict[str, Dict[str, List[dict]]] = {w: {"single": [], "router": []} for w in "ab"}
    for i in range(a.a.runs):
        for w in ("ab" if i % 2 == 0 else "ba"):
            for h in ("router", "single"):
                r = (a if w == "a" else b).measure_search(h)
                runs[w][h].append(r)
                (a if w == "a" else b).say_search(h, r, f"{w} round {i + 1}")
    out: Dict[str, object] = {"runs": a.a.runs, "concurrency": a.a.concurrency,
                              "a": a.a.zoomd, "b": b.a.zoomd}
    for h in ("router", "single"):
        ratios = {k: round(statistics.median(
            x[k] / max(y[k], 1e-9) for x, y in zip(runs["a"][h], runs["b"][h])), 3)
            for k in ("qps", "p50_us", "p99_us", "cpu_us_per_query", "switches_per_query")}
        out[h] = {"a": medians(runs["a"][h]), "b": medians(runs["b"][h]), "a_over_b": ratios}
        say(f"{h}: a/b per round, medians of {a.a.runs}: QPS {ratios['qps']:.3f}x, p50 "
            f"{ratios['p50_us']:.3f}x, p99 {ratios['p99_us']:.3f}x, CPU-us a query "
            f"{ratios['cpu_us_per_query']:.3f}x, context switches {ratios['switches_per_query']:.3f}x")
    for w in "ab":
        rs = [x["qps"] / y["qps"] for x, y in zip(runs[w]["router"], runs[w]["single"])]
        out[f"{w}_router_over_single_qps"] = round(statistics.median(rs), 3)
        say(f"{w}: router / single QPS, median of the rounds: {statistics.median(rs):.3f}x")
    return out


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="zoom-cbench-", dir="/var/tmp"))
        self.nats_ports = [free_port() for _ in range(3)]
        routes = [free_port() for _ in range(3)]
        self.nats_urls = ",".join(f"nats://127.0.0.1:{p}" for p in self.nats_ports)
        self.nats: List[Proc] = []
        for i in range(3):
            others = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(routes) if j != i)
            self.nats.append(Proc(f"nats{i}", [
                NATS, "-a", "127.0.0.1", "-p", str(self.nats_ports[i]), "-js", "-sd",
                str(self.root / f"nats{i}"), "-n", f"nats{i}", "--cluster_name", "bench",
                "--cluster", f"nats://127.0.0.1:{routes[i]}", "--routes", others],
                self.root / f"nats{i}.log"))
        self.ports: Dict[str, int] = {}
        self.metrics: Dict[str, str] = {}
        self.procs: Dict[str, Proc] = {}
        for h in NODES + ["router", "single"]:
            port, mport = free_port(), free_port()
            self.ports[h] = port
            self.metrics[h] = f"http://127.0.0.1:{mport}/metrics"
            argv = [a.zoomd, f"--grpc_address=127.0.0.1:{port}",
                    f"--models_dir={a.lm_dataset.resolve().parent}",
                    f"--metrics_address=127.0.0.1:{mport}", "--auto_build_points=0",
                    f"--threads={a.threads}", "--allow_unauthenticated"]
            if h == "single":
                argv += ["--sync=always", f"--data_dir={self.root / h}"]
            else:
                argv += [f"--role={'router' if h == 'router' else 'node'}",
                         f"--nats={self.nats_urls}", "--nats_replicas=3", "--cluster=bench"]
            if h in NODES:
                argv += [f"--node_id={h}", f"--data_dir={self.root / h}",
                         f"--rereplicate_after_s={a.rereplicate_after_s}"]
            self.procs[h] = Proc(h, argv, self.root / f"{h}.log")
        self.client: Dict[str, zoomd.Client] = {}
        self.out: Dict[str, object] = {}

    def target(self, h: str) -> str:
        return f"127.0.0.1:{self.ports[h]}"

    def start(self) -> None:
        start_nats(self.nats, wait_until)
        for h in NODES + ["router", "single"]:
            self.start_zoomd(h)
        wait_until("the router to see four nodes",
                   lambda: metric(self.metrics["router"], "zoomd_router_live_nodes") == 4, 60)
        for h in ["router", "single"]:
            self.client[h] = zoomd.Client(self.target(h), timeout=3600)

    def start_zoomd(self, h: str) -> float:
        """Starts `h`; the time its gRPC API began to serve."""
        start_serving(self.procs[h], self.target(h), wait_until, 120, 0.02)
        return time.monotonic()

    def stop(self) -> None:
        for c in self.client.values():
            c.close()
        for p in list(self.procs.values()) + self.nats:
            p.signal(signal.SIGKILL)
        if not self.a.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    # ---- helpers -----------------------------------------------------------------------------

    def local_points(self, h: str, collection: str) -> int:
        """Points of `collection`'s shards on node h (its local collections)."""
        try:
            got = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(self.target(h))) \
                .ListCollections(zoom_pb2.ListCollectionsRequest(), timeout=5)
        except grpc.RpcError:
            return -1
        return sum(c.points for c in got.collections if c.spec.name.startswith(collection + "_s"))

    def create(self, name: str, shards: int, replicas: int) -> None:
        c = self.client["router"]
        try:
            c.drop_collection(name)
        except zoomd.NotFound:
            pass
        c.create_collection(name, dim=self.dim, metric=self.metric, shards=shards,
                            replicas=replicas)

    def imported(self, target: str, name: str, ids=None, vectors=None,
                 write_concern=None) -> float:
        """Imports (the base set by default): acknowledged points/s."""
        vectors = self.base if vectors is None else vectors
        r = self.client[target].import_points(name, vectors, ids=ids, progress=False,
                                              write_concern=write_concern)
        return r.imported / r.seconds

    def zoomload(self, h: str, name: str) -> dict:
        out = self.root / f"load-{h}-{name}.json"
        subprocess.run([
            self.a.zoomload, "--target", self.target(h), "--workload", "search",
            "--dataset", str(self.a.dataset), "--metric", self.metric, "--collection", name,
            "--ef", "64", "--nprobe", "16", "--rerank", "100", "--k", "10",
            "--concurrency", str(self.a.concurrency), "--duration", str(self.a.duration),
            "--warmup", str(self.a.warmup), "--progress=false", "--json", str(out)],
            check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())

    def cpu(self) -> Dict[str, float]:
        return {h: cpu_seconds(self.procs[h]) for h in NODES + ["router", "single"]} | {
            p.name: cpu_seconds(p) for p in self.nats}

    # ---- parts -------------------------------------------------------------------------------

    def load_data(self) -> None:
        d = self.a.dataset
        self.base = zoomd.read_vecs(next(d.glob("base.*")))[: self.a.points]
        self.base = np.ascontiguousarray(self.base, dtype=np.float32)
        self.dim = self.base.shape[1]
        self.metric = self.a.metric
        say(f"data {d} ({len(self.base):,} x {self.dim}, {self.metric}); SIMD "
            f"{self.client['single'].server_info().simd_level}; {os.cpu_count()} cores shared by "
            f"everything; zoomd --threads={self.a.threads}")

    def fresh_single(self, name: str) -> None:
        """Collection `name` on the standalone, empty."""
        c = self.client["single"]
        try:
            c.drop_collection(name)
        except zoomd.NotFound:
            pass
        c.create_collection(name, dim=self.dim, metric=self.metric)

    def part_writes_and_collections(self) -> None:
        """Imports into every collection the other parts search (timed)."""
        rates = {}
        self.fresh_single("f1")
        rates["single_sync_always"] = self.imported("single", "f1")
        say(f"import, standalone --sync always: {rates['single_sync_always']:,.0f} points/s")
        sets = (("f1", 1, 1), ("cu", 1, 2), ("f2", 2, 1), ("f4", 4, 1))
        if set(self.a.parts.split(",")) <= {"router", "concerns", "rereplicate"}:
            sets = sets[:1]  # those parts read f1 alone (concerns, rereplicate: not even that)
        for name, s, r in sets:
            self.create(name, s, r)
            t0 = time.monotonic()
            ack = self.imported("router", name)
            t_ack = time.monotonic() - t0
            want = len(self.base) * r
            wait_until(f"{name} applied", lambda: sum(
                max(0, self.local_points(h, name)) for h in NODES) == want, 600, 0.02)
            t_applied = time.monotonic() - t0
            key = f"router_S{s}_R{r}"
            rates[key] = {"acknowledged_points_per_s": round(ack),
                          "applied_points_per_s": round(len(self.base) / t_applied),
                          "ack_seconds": round(t_ack, 2), "applied_seconds": round(t_applied, 2)}
            say(f"import through the router, JetStream R=3, S={s} R={r}: acknowledged "
                f"{ack:,.0f} points/s ({t_ack:.2f} s); every replica applied after "
                f"{t_applied:.2f} s ({len(self.base) / t_applied:,.0f} points/s); "
                f"{ack / rates['single_sync_always']:.2f}x the standalone's")
        self.out["write_throughput"] = rates
        self.client["single"].build_index("f1", wait=True)
        for name, _, _ in sets:
            t0 = time.monotonic()
            # An explicit deadline: a router before 66f8f11 gave a build
            # without one its 10 s read default (side-by-side runs).
            self.client["router"].build_index(name, wait=True, timeout=3600)
            say(f"built {name} through the router in {time.monotonic() - t0:.1f} s")

    def measure_search(self, h: str, name: str = "f1") -> dict:
        """One zoomload run of searches through `h` (router or single), with
        the CPU and context switches a query cost the serving process and,
        through the router, the nodes (/proc, every thread)."""
        procs = ["single"] if h == "single" else ["router"] + NODES
        c0 = {n: cpu_seconds(self.procs[n]) for n in procs}
        s0 = context_switches(self.procs[h])
        r = self.zoomload(h, name)
        q = max(1, r["ok"])
        r["cpu_us_per_query"] = (cpu_seconds(self.procs[h]) - c0[h]) / q * 1e6
        r["switches_per_query"] = (context_switches(self.procs[h]) - s0) / q
        r["node_cpu_us_per_query"] = sum(
            cpu_seconds(self.procs[n]) - c0[n] for n in procs[1:]) / q * 1e6
        return r

    def say_search(self, h: str, r: dict, run: str) -> None:
        say(f"search f1 via {h:<6} {run}: {r['qps']:8.1f} QPS, p50 {r['p50_us']} "
            f"us, p99 {r['p99_us']} us, recall@10 {r['recall_at_k']:.4f}, "
            f"errors {r['errors']}; {h} {r['cpu_us_per_query']:.0f} CPU-us and "
            f"{r['switches_per_query']:.1f} context switches a query"
            + (f", nodes {r['node_cpu_us_per_query']:.0f} CPU-us" if h == "router" else ""))

    def part_router(self) -> None:
        runs: Dict[str, List[dict]] = {"single": [], "router": []}
        for i in range(self.a.runs):
            for h in ("single", "router"):
                r = self.measure_search(h)
                runs[h].append(r)
                self.say_search(h, r, f"run {i + 1}")
        med = {h: medians(v) for h, v in runs.items()}
        qps_ratio = med["router"]["qps"] / med["single"]["qps"]
        p99_ratio = med["router"]["p99_us"] / med["single"]["p99_us"]
        say(f"router + 1 node / single (medians of {self.a.runs}): QPS {qps_ratio:.3f}x, "
            f"p99 {p99_ratio:.3f}x (target QPS >= 0.8x)")
        self.out["router_vs_single"] = {
            "qps_ratio": round(qps_ratio, 3), "p99_ratio": round(p99_ratio, 3),
            "single": med["single"], "router": med["router"], "runs": self.a.runs,
            "concurrency": self.a.concurrency}

    def part_fanout(self) -> None:
        rows = {}
        for name, s in (("f1", 1), ("f2", 2), ("f4", 4)):
            before = self.cpu()
            r = self.zoomload("router", name)
            after = self.cpu()
            q = max(1, r["ok"])
            nodes = sum(after[h] - before[h] for h in NODES) / q * 1e6
            router = (after["router"] - before["router"]) / q * 1e6
            rows[s] = {"qps": r["qps"], "p50_us": r["p50_us"], "p99_us": r["p99_us"],
                       "recall_at_10": r["recall_at_k"], "node_cpu_us_per_query": round(nodes),
                       "router_cpu_us_per_query": round(router),
                       "reads_per_query": r["reads_per_query"]}
            say(f"fan-out S={s}: {r['qps']:8.1f} QPS, p99 {r['p99_us']} us, recall@10 "
                f"{r['recall_at_k']:.4f}, nodes {nodes:,.0f} CPU-us/query, router "
                f"{router:,.0f}, SSD reads/query {r['reads_per_query']:.1f}")
        for s in (2, 4):
            rows[s]["node_cpu_vs_S1"] = round(rows[s]["node_cpu_us_per_query"]
                                              / rows[1]["node_cpu_us_per_query"], 2)
            rows[s]["model_scan_vs_S1"] = round(s ** 0.5, 2)
            rows[s]["model_per_shard_vs_S1"] = s
        say("node CPU a query against S=1: " + ", ".join(
            f"S={s} {rows[s]['node_cpu_vs_S1']}x (model: scan sqrt(S) = "
            f"{rows[s]['model_scan_vs_S1']}x, per-shard costs S = {s}x)" for s in (2, 4)))
        self.out["fanout"] = rows

    def part_decoder(self) -> None:
        lm = self.a.lm_dataset

        def topk(h: str, setup: bool) -> dict:
            out = self.root / f"topk-{h}.json"
            subprocess.run([
                self.a.zoomload, "--target", self.target(h), "--workload", "topk",
                "--dataset", str(lm), "--model", "ptb", "--model_dir", lm.name, "--k", "10",
                "--concurrency", str(self.a.concurrency),
                "--duration", str(1 if setup else self.a.duration),
                "--warmup", str(self.a.warmup), "--progress=false", "--json", str(out)]
                + (["--setup"] if setup else []), check=True, stdout=subprocess.DEVNULL)
            return json.loads(out.read_text())
        for h in ("single", "router"):
            t0 = time.monotonic()
            topk(h, True)  # loads the model (through the router: on every node) and waits
            say(f"model ptb loaded via {h} in {time.monotonic() - t0:.1f} s")
        calls0 = {h: self.node_calls(h, "TopK") for h in NODES}
        runs: Dict[str, List[dict]] = {"single": [], "router": []}
        cpu_us: Dict[str, List[float]] = {"single": [], "router_itself": [], "router_nodes": []}
        for i in range(self.a.runs):
            for h in ("single", "router"):
                before = self.cpu()
                r = topk(h, False)
                after = self.cpu()
                calls = max(1, r["ok"])
                if h == "single":
                    cpu_us["single"].append((after["single"] - before["single"]) / calls * 1e6)
                else:
                    cpu_us["router_itself"].append(
                        (after["router"] - before["router"]) / calls * 1e6)
                    cpu_us["router_nodes"].append(
                        sum(after[n] - before[n] for n in NODES) / calls * 1e6)
                runs[h].append(r)
                say(f"topk via {h:<6} run {i + 1}: {r['qps']:8.1f} QPS, p50 {r['p50_us']} us, "
                    f"p99 {r['p99_us']} us, recall@10 {r['recall_at_k']}, errors {r['errors']}")
        spread = {h: self.node_calls(h, "TopK") - calls0[h] for h in NODES}
        med = {h: {k: statistics.median(x[k] for x in v) for k in ("qps", "p99_us", "p50_us")}
               for h, v in runs.items()}
        self.out["decoder"] = {
            "qps_ratio": round(med["router"]["qps"] / med["single"]["qps"], 3),
            "p99_ratio": round(med["router"]["p99_us"] / med["single"]["p99_us"], 3),
            "single": med["single"], "router": med["router"], "topk_calls_by_node": spread,
            "cpu_us_per_call": {k: round(statistics.median(v)) for k, v in cpu_us.items()}}
        for h in ("single", "router"):  # the later parts without it
            self.client[h].unload_model("ptb")
        say(f"topk through the router / single (medians of {self.a.runs}): QPS "
            f"{self.out['decoder']['qps_ratio']:.3f}x, p99 {self.out['decoder']['p99_ratio']:.3f}x;"
            f" calls by node {spread}; CPU a call (us): {self.out['decoder']['cpu_us_per_call']}")

    def searcher(self, stop: threading.Event, log: List[tuple]) -> None:
        stub = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(self.target("router")))
        q = self.base[:100]
        i = 0
        while not stop.is_set():
            req = zoom_pb2.SearchRequest(collection="cu", vector=q[i % len(q)].tolist(), k=10)
            i += 1
            try:
                stub.Search(req, timeout=2)
                log.append((time.monotonic(), True))
            except grpc.RpcError:
                log.append((time.monotonic(), False))

    def node_calls(self, h: str, rpc: str) -> float:
        """Calls of `rpc` node h has answered (its /metrics)."""
        try:
            text = urllib.request.urlopen(self.metrics[h], timeout=5).read().decode()
        except OSError:
            return 0.0
        return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                   if l.startswith("zoomd_rpc_requests_total{") and f'rpc="{rpc}"' in l)

    def part_failover(self) -> None:
        trials = []
        for t in range(self.a.trials):
            stop, log = threading.Event(), []
            th = threading.Thread(target=self.searcher, args=(stop, log))
            th.start()
            time.sleep(1.0)
            s0 = {h: self.node_calls(h, "Search") for h in ("z0", "z1")}
            time.sleep(1.0)
            s1 = {h: self.node_calls(h, "Search") for h in ("z0", "z1")}
            victim = max(("z0", "z1"), key=lambda h: s1[h] - s0[h])
            t_kill = time.monotonic()
            self.procs[victim].signal(signal.SIGKILL)
            time.sleep(2.0)
            stop.set()
            th.join()
            ok = [ts for ts, good in log if good]
            failed = sum(1 for ts, good in log if not good and ts >= t_kill)

            def longest(lo: float, hi: float) -> float:
                xs = [ts for ts in ok if lo <= ts <= hi]
                return max((b - a for a, b in zip(xs, xs[1:])), default=float("nan")) * 1e3
            before = longest(t_kill - 1.5, t_kill)
            # the gap around the kill: from the last reply before it to the
            # first after it, or a longer one in the 2 s after
            last = max((ts for ts in ok if ts <= t_kill), default=t_kill)
            first = min((ts for ts in ok if ts > t_kill), default=float("nan"))
            gap = max((first - last) * 1e3, longest(t_kill, t_kill + 2.0))
            trials.append({"victim": victim, "gap_ms": round(gap, 2),
                           "longest_gap_before_ms": round(before, 2), "failed": failed,
                           "searches": len(log)})
            say(f"failover trial {t + 1}: kill -9 {victim} (answering {s1[victim] - s0[victim]:.0f}"
                f" searches/s): gap {gap:.1f} ms without a reply (longest before the kill "
                f"{before:.1f} ms), {failed} failed of {len(log)}")
            self.start_zoomd(victim)
            wait_until(f"{victim} back in the router's view", lambda: metric(
                self.metrics["router"], "zoomd_router_live_nodes") == 4, 60)
            time.sleep(2.5)  # its replica serving again (a heartbeat says so)
        gaps = [x["gap_ms"] for x in trials]
        self.out["failover"] = {"failover_gap_ms_median": statistics.median(gaps),
                                "failover_gap_ms_max": max(gaps),
                                "failed": sum(x["failed"] for x in trials), "trials": trials}
        say(f"failover gap: median {statistics.median(gaps):.1f} ms, max {max(gaps):.1f} ms over "
            f"{len(gaps)} kills; failed searches {self.out['failover']['failed']}")

    def part_concerns(self) -> None:
        """Write concerns (issue 47): a one-point Upsert's latency (one caller)
        and the Import throughput under log / majority / all, through the
        router at S = 1 and R = 1, 2, 3, beside the standalone (--sync
        always); the concerns taken in turn, write by write."""
        concerns = ("log", "majority", "all")
        n = self.a.concern_writes
        vecs = self.base[: max(n, self.a.concern_import)]
        targets = [("single", "wl", 0)] + [("router", f"w{r}", r) for r in (1, 2, 3)]
        self.fresh_single("wl")
        for r in (1, 2, 3):
            self.create(f"w{r}", 1, r)
        # The concerns alternate write by write (log, majority, all, log, ...),
        # so that the machine's drift hits each alike, each write after a 5 ms
        # pause: the replicas have applied the one before (else a write after
        # a `log` one would wait for its predecessor's apply too).
        lat: Dict[str, List[float]] = {}
        next_id = 10_000_000
        for h, name, r in targets:
            ws = ("majority",) if h == "single" else concerns
            for i in range(n):
                for w in ws:
                    key = f"{h}_R{r}_{w}" if r else "single"
                    time.sleep(0.005)
                    t0 = time.perf_counter()
                    self.client[h].upsert(name, [next_id], vecs[i:i + 1], write_concern=w)
                    lat.setdefault(key, []).append(time.perf_counter() - t0)
                    next_id += 1
        rows: Dict[str, dict] = {}
        for key, v in lat.items():
            v = sorted(v)
            rows[key] = {"upsert_p50_us": round(v[len(v) // 2] * 1e6),
                         "upsert_p99_us": round(v[min(len(v) - 1, len(v) * 99 // 100)] * 1e6),
                         "writes": len(v)}
        imp = vecs[: self.a.concern_import]
        for h, name, r in targets:
            for w in (("majority",) if h == "single" else concerns):
                key = f"{h}_R{r}_{w}" if r else "single"
                got = self.client[h].import_points(name, imp, ids=np.arange(
                    next_id, next_id + len(imp), dtype=np.uint64), progress=False,
                    write_concern=w)
                next_id += len(imp)
                rows[key]["import_points_per_s"] = round(got.imported / got.seconds)
                rows[key]["acknowledged_under"] = got.write_concern
        for key, row in rows.items():
            say(f"write concern {key:<18} upsert p50 {row['upsert_p50_us']:>6} us, p99 "
                f"{row['upsert_p99_us']:>6} us; import {row['import_points_per_s']:>7,} points/s "
                f"(acknowledged under {row['acknowledged_under']})")
        for r in (1, 2, 3):
            ratio = rows[f"router_R{r}_majority"]["upsert_p50_us"] / rows[f"router_R{r}_log"][
                "upsert_p50_us"]
            rows[f"R{r}_majority_over_log_p50"] = round(ratio, 3)
            say(f"R={r}: majority / log upsert p50 {ratio:.2f}x (target at R=3: <= 2x)")
        self.out["write_concerns"] = rows

    def part_catchup(self) -> None:
        # Only this collection on the nodes: an empty disk bootstraps it alone.
        for name in ("f1", "f2", "f4"):
            self.client["router"].drop_collection(name)
        wait_until("the other collections dropped on z1", lambda: self.local_points(
            "z1", "f") == 0, 60)
        m = self.a.catchup_points
        n0 = len(self.base)
        want = n0 + m
        rows = {}
        self.procs["z1"].signal(signal.SIGKILL)
        extra = self.base[np.arange(m) % n0]
        # One of the shard's two replicas is down: MAJORITY (both, at R = 2)
        # cannot be met; the log's acknowledgement is what this part times.
        ack = self.imported("router", "cu", ids=np.arange(n0, want, dtype=np.uint64),
                            vectors=extra, write_concern="log")
        say(f"{m:,} points written with z1 down ({ack:,.0f} points/s acknowledged)")
        t_start = time.monotonic()
        t_serving = self.start_zoomd("z1")
        wait_until("z1 to catch up", lambda: self.local_points("z1", "cu") == want, 600, 0.01)
        t_done = time.monotonic()
        rows["replay"] = {"points": m, "points_per_s": round(m / (t_done - t_serving)),
                          "seconds_from_serving": round(t_done - t_serving, 3),
                          "seconds_from_start": round(t_done - t_start, 3)}
        say(f"catch-up by replay: {m:,} points in {t_done - t_serving:.2f} s after z1 served "
            f"({m / (t_done - t_serving):,.0f} points/s; {t_done - t_start:.2f} s from its start)")
        # An empty disk: a peer's snapshot, then the log after it.
        self.procs["z1"].signal(signal.SIGKILL)
        shutil.rmtree(self.root / "z1")
        t_start = time.monotonic()
        t_serving = self.start_zoomd("z1")
        wait_until("z1 to bootstrap", lambda: self.local_points("z1", "cu") == want, 600, 0.01)
        t_done = time.monotonic()
        rows["bootstrap"] = {"points": want, "points_per_s": round(want / (t_done - t_start)),
                             "seconds_from_start": round(t_done - t_start, 3)}
        say(f"bootstrap of an empty node: {want:,} points in {t_done - t_start:.2f} s from its "
            f"start ({want / (t_done - t_start):,.0f} points/s; serving after "
            f"{t_serving - t_start:.2f} s)")
        self.out["catch_up"] = {"catch_up_points_per_s": rows["replay"]["points_per_s"], **rows}

    def part_rereplicate(self) -> None:
        """A node lost for good: its replicas are placed on the others and
        bootstrapped from a peer's snapshot, without an operator. Timed from
        the node being declared dead (the router's live nodes drop: its
        heartbeats stopped --node_ttl_s ago) to every shard at R again (the
        live nodes hold R copies of every point), against the issue's target
        of shard bytes / 100 MB/s + 60 s; searches and writes run
        throughout (MAJORITY at R = 3: one replica down does not stop them)
        and their failures are counted."""
        for name in ("f1", "f2", "f4", "cu"):
            try:
                self.client["router"].drop_collection(name)
            except zoomd.NotFound:
                pass
        if self.procs["z1"].p is None or self.procs["z1"].p.poll() is not None:
            self.start_zoomd("z1")
        name, r = "rr", 3
        self.create(name, shards=2, replicas=r)
        n = len(self.base)
        self.imported("router", name)
        wait_until("every replica to hold the import",
                   lambda: sum(max(0, self.local_points(h, name)) for h in NODES) == r * n,
                   900, 0.05)
        victim = "z0"
        live = [h for h in NODES if h != victim]
        stop = threading.Event()
        counts = {"searches": 0, "writes": 0, "failed": 0}
        written: List[int] = []
        retry = zoomd.RetryPolicy(attempts=10, max_backoff=2.0, retry_writes=True)

        def searcher() -> None:
            with zoomd.Client(self.target("router"), timeout=10, retry=retry) as c:
                i = 0
                while not stop.is_set():
                    try:
                        c.search(name, self.base[i % n], k=10)
                        counts["searches"] += 1
                    except zoomd.ZoomError:
                        counts["failed"] += 1
                    i += 1

        def writer() -> None:
            with zoomd.Client(self.target("router"), timeout=30, retry=retry) as c:
                next_id = n
                while not stop.is_set():
                    ids = list(range(next_id, next_id + 10))
                    next_id += 10
                    try:
                        c.upsert(name, ids, self.base[[i % n for i in ids]])
                        counts["writes"] += 1
                        written.extend(ids)
                    except zoomd.ZoomError:
                        counts["failed"] += 1
                    time.sleep(0.05)
        threads = [threading.Thread(target=searcher, daemon=True),
                   threading.Thread(target=writer, daemon=True)]
        for t in threads:
            t.start()
        t_kill = time.monotonic()
        self.procs[victim].signal(signal.SIGKILL)
        wait_until("the router to declare z0 dead", lambda: metric(
            self.metrics["router"], "zoomd_router_live_nodes") == len(live), 300, 0.05)
        t_dead = time.monotonic()
        wait_until("R restored on the live nodes", lambda: sum(
            max(0, self.local_points(h, name)) for h in live) >= r * (n + len(written)),
            1800, 0.1)
        t_done = time.monotonic()
        stop.set()
        for t in threads:
            t.join(timeout=60)
        shard_bytes = (n + len(written)) / 2 * self.dim * 4
        target = shard_bytes / 100e6 + 60
        row = {"points": n, "shards": 2, "replicas": r, "shard_bytes": round(shard_bytes),
               "seconds_to_declared_dead": round(t_dead - t_kill, 3),
               "seconds_dead_to_restored": round(t_done - t_dead, 3),
               "target_seconds": round(target, 3),
               "searches": counts["searches"], "writes": counts["writes"],
               "failed": counts["failed"]}
        say(f"re-replication: {victim} killed, declared dead after {t_dead - t_kill:.1f} s, R = "
            f"{r} restored {t_done - t_dead:.1f} s later (target {target:.1f} s for "
            f"{shard_bytes / 1e6:.1f} MB shards); {counts['searches']} searches and "
            f"{counts['writes']} writes meanwhile, {counts['failed']} failed")
        self.out["rereplicate"] = row



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoomd", default=str(REPO / "build" / "server" / "main" / "zoomd"))
    ap.add_argument("--zoomload", default=str(REPO / "build" / "loadtest" / "zoomload"))
    ap.add_argument("--dataset", type=pathlib.Path,
                    default=REPO.parent / "shared" / "data" / "glove-6b-100d")
    ap.add_argument("--metric", default="cosine")
    ap.add_argument("--points", type=int, default=200000, help="the first N base vectors")
    ap.add_argument("--lm_dataset", type=pathlib.Path,
                    default=REPO.parent / "shared" / "data" / "lm-ptb",
                    help="decoder: an LM export (W.f32, b.f32, vocab.txt, meta.json, H.f32)")
    ap.add_argument("--parts",
                    default="router,writes,concerns,failover,catchup,fanout,decoder,rereplicate")
    ap.add_argument("--concern_writes", type=int, default=300,
                    help="concerns: one-point upserts timed a concern and replication factor")
    ap.add_argument("--concern_import", type=int, default=20000,
                    help="concerns: points imported a concern and replication factor")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--duration", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--catchup_points", type=int, default=100000)
    ap.add_argument("--rereplicate_after_s", type=int, default=60,
                    help="rereplicate: the nodes' --rereplicate_after_s (zoomd's default)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data and logs")
    ap.add_argument("--vs_zoomd", default=None,
                    help="with --parts router: a second build's zoomd (b), its cluster beside "
                         "--zoomd's (a) on the same data, the rounds interleaved; "
                         "JSON router_ab")
    a = ap.parse_args()
    for f in (a.zoomd, a.zoomload, NATS):
        if not os.access(f, os.X_OK):
            sys.exit(f"{f} is not an executable")
    parts = set(a.parts.split(","))
    if a.vs_zoomd and parts != {"router"}:
        sys.exit("--vs_zoomd goes with --parts router")
    b = Bench(a)
    benches = [b]
    if a.vs_zoomd:
        benches.append(Bench(argparse.Namespace(**{**vars(a), "zoomd": a.vs_zoomd})))
    try:
        for x in benches:
            x.start()
            x.load_data()
            if parts - {"decoder"}:
                x.part_writes_and_collections()  # the collections every other part reads
        if a.vs_zoomd:
            b.out["router_ab"] = part_router_vs(b, benches[1])
        elif "router" in parts:
            b.part_router()
        if "fanout" in parts:
            b.part_fanout()
        if "decoder" in parts and (a.lm_dataset / "W.f32").exists():
            b.part_decoder()
        elif "decoder" in parts:
            say(f"decoder part skipped: no LM export in {a.lm_dataset}")
        if "failover" in parts:
            b.part_failover()
        if "concerns" in parts:
            b.part_concerns()
        if "catchup" in parts:
            b.part_catchup()
        if "rereplicate" in parts:
            b.part_rereplicate()
    except BaseException:
        for x in benches:
            say(f"logs in {x.root}")
        a.keep = True
        raise
    finally:
        for x in benches:
            x.stop()
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(b.out, indent=1) + "\n")


if __name__ == "__main__":
    main()
