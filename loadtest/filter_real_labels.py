"""Filters that fight the vectors, on real labels, through a real zoomd (the
trust issue, case 1): what a new user gets with the collection's default
knobs (the calibrated target) and with the built-in knobs.

A labelled set (MNIST-784 in ../shared/data: base.bvecs with base_labels.txt,
query.bvecs with query_labels.txt; uint8, L2) is loaded into a zoomd this
script starts, with its label as an integer field `cls` and its row number
as `n` (both indexed). Each case runs --queries queries (a seeded sample of
the query file) against an exact filtered oracle (numpy brute force over the
matching rows, in float64), at --threads concurrent callers:

  not_own_class        must_not cls == the query's class    (~90% match)
  two_other_classes    cls in two classes not the query's   (~20%)
  own_class            cls == the query's class             (~10%, correlated)
  own_class_and_range  the query's class AND n < half       (~5%)
  unfiltered           no filter

Reported per case and knob setting: recall@10 (tie-aware: a hit counts when
its true distance is within the 10th's) mean and min over the queries, how
many queries fell below 0.9 and below 0.5, SSD reads a query, the planner's
strategies, and QPS (one process: the client and the oracle share the
cores, read the recall columns, not the speed). --json writes the same rows.

  /usr/bin/python3 loadtest/filter_real_labels.py --zoomd build/server/main/zoomd \\
      --dataset ../shared/data/mnist-784 --threads 1,2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))
import zoomd  # noqa: E402


def read_vecs(path: pathlib.Path) -> np.ndarray:
    raw = np.fromfile(path, dtype=np.uint8)
    d = int(np.frombuffer(raw[:4].tobytes(), dtype=np.int32)[0])
    return raw.reshape(-1, 4 + d)[:, 4:].copy()


def read_labels(path: pathlib.Path) -> np.ndarray:
    return np.array([int(x) for x in path.read_text().split()], dtype=np.int64)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(base_labels: np.ndarray, query_labels: np.ndarray):
    n = len(base_labels)
    half = n // 2
    rows = np.arange(n)
    classes = np.unique(base_labels)

    def others(c):
        rest = [int(x) for x in classes if x != c]
        return rest[(c * 3) % len(rest)], rest[(c * 7 + 1) % len(rest)]

    def not_own(q):
        c = int(query_labels[q])
        return {"must_not": [{"key": "cls", "match": {"value": c}}]}, base_labels != c

    def two_others(q):
        a, b = others(int(query_labels[q]))
        if a == b:
            b = next(int(x) for x in classes if x not in (a, int(query_labels[q])))
        return ({"must": [{"key": "cls", "match": {"any": [a, b]}}]},
                np.isin(base_labels, [a, b]))

    def own(q):
        c = int(query_labels[q])
        return {"must": [{"key": "cls", "match": {"value": c}}]}, base_labels == c

    def own_and_range(q):
        c = int(query_labels[q])
        return ({"must": [{"key": "cls", "match": {"value": c}},
                          {"key": "n", "range": {"lt": half}}]},
                (base_labels == c) & (rows < half))

    def unfiltered(q):
        return None, np.ones(n, dtype=bool)

    return {"not_own_class": not_own, "two_other_classes": two_others, "own_class": own,
            "own_class_and_range": own_and_range, "unfiltered": unfiltered}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoomd", default=str(REPO / "build/server/main/zoomd"))
    ap.add_argument("--dataset", default=str(REPO.parent / "shared/data/mnist-784"))
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--index", default="", help="index kind (default: the server's)")
    ap.add_argument("--cases", default="", help="comma-separated subset")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    ds = pathlib.Path(args.dataset)
    base = read_vecs(ds / "base.bvecs")
    queries = read_vecs(ds / "query.bvecs")
    base_labels = read_labels(ds / "base_labels.txt")
    query_labels = read_labels(ds / "query_labels.txt")
    rng = np.random.default_rng(45)
    sample = rng.choice(len(queries), min(args.queries, len(queries)), replace=False)
    bf = base.astype(np.float64)
    norms = (bf * bf).sum(1)

    work = pathlib.Path(tempfile.mkdtemp(prefix="zoomd-labels-"))
    port = free_port()
    log = open(work / "zoomd.log", "w")
    proc = subprocess.Popen([args.zoomd, f"--data_dir={work / 'data'}",
                             f"--grpc_address=127.0.0.1:{port}", "--metrics_address="],
                            stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        client = zoomd.Client(f"127.0.0.1:{port}")
        end = time.monotonic() + 60
        while True:
            try:
                client.health(timeout=2)
                break
            except zoomd.ZoomError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        index = zoomd.IndexSpec(kind=args.index) if args.index else None
        client.create_collection("labels", dim=base.shape[1], metric="l2", dtype="uint8",
                                 **({"index": index} if index else {}))
        for i in range(0, len(base), 2000):
            j = min(len(base), i + 2000)
            client.upsert("labels", np.arange(i, j), base[i:j],
                          payloads=[{"cls": int(c), "n": int(r)}
                                    for r, c in zip(range(i, j), base_labels[i:j])])
        client.create_field_index("labels", "cls", "integer")
        client.create_field_index("labels", "n", "integer")
        client.build_index("labels")
        while True:  # the default knobs come from the index's calibration
            info = client.get_collection("labels")
            if info.calibration is not None and info.calibration_current:
                break
            time.sleep(0.2)
        choice = info.calibration.choose(info.default_target_recall)
        print(f"# {ds.name}: {len(base)} points, {len(sample)} queries; index "
              f"{info.index.kind}; default target "
              f"{info.default_target_recall}: ef {choice.ef} nprobe {choice.nprobe} "
              f"K' {choice.rerank} (calibrated recall {choice.recall:.3f})", flush=True)
        print(f"{'case':22s} {'knobs':8s} {'thr':>3s} {'mean':>7s} {'min':>5s} {'<0.9':>5s} "
              f"{'<0.5':>5s} {'reads':>6s} {'QPS':>7s}  strategies", flush=True)
        all_cases = cases(base_labels, query_labels)
        wanted = [c for c in args.cases.split(",") if c] or list(all_cases)
        for name in wanted:
            make = all_cases[name]
            truth = []
            filters = []
            for q in sample:
                f, mask = make(q)
                qv = queries[q].astype(np.float64)
                d = norms - 2 * bf @ qv + qv @ qv  # squared L2, >= 0
                d[~mask] = np.inf
                kth = np.partition(d, 9)[9]
                truth.append((d, kth))
                filters.append(f)
            for knobs_name, knobs in (("default", {}), ("built-in",
                                                        {"ef": 64, "nprobe": 16, "rerank": 100})):
                for threads in [int(t) for t in args.threads.split(",")]:
                    def one(i):
                        r = client.search("labels", queries[sample[i]], k=10,
                                          filter=filters[i], **knobs)
                        d, kth = truth[i]
                        ok = sum(1 for h in r if d[h.id] <= kth * (1 + 1e-9))
                        return ok / 10, r.stats.ssd_reads, r.stats.filter_strategy or "none"
                    t0 = time.monotonic()
                    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                        out = list(pool.map(one, range(len(sample))))
                    secs = time.monotonic() - t0
                    rec = np.array([o[0] for o in out])
                    strategies = {}
                    for o in out:
                        strategies[o[2]] = strategies.get(o[2], 0) + 1
                    row = {"case": name, "knobs": knobs_name, "threads": threads,
                           "queries": len(sample), "recall_at_10": float(rec.mean()),
                           "min_recall_at_10": float(rec.min()),
                           "below_0_9": int((rec < 0.9).sum()),
                           "below_0_5": int((rec < 0.5).sum()),
                           "ssd_reads": float(np.mean([o[1] for o in out])),
                           "qps": len(sample) / secs, "strategies": strategies}
                    rows.append(row)
                    print(f"{name:22s} {knobs_name:8s} {threads:3d} {row['recall_at_10']:7.4f} "
                          f"{row['min_recall_at_10']:5.2f} {row['below_0_9']:5d} "
                          f"{row['below_0_5']:5d} {row['ssd_reads']:6.1f} {row['qps']:7.0f}  "
                          f"{strategies}", flush=True)
        client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        pathlib.Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
