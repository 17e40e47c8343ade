#!/usr/bin/python3
"""Recall@10 against QPS for a sweep of K' (rerank) and nprobe, against a
running zoomd, drawn to a PNG with matplotlib.

    client/python/examples/recall_curve.py --dataset ../shared/data/glove-6b-100d \\
        --metric cosine --out glove-recall.png

The dataset folder holds base.{fvecs,bvecs}, query.{fvecs,bvecs} and
groundtruth_<metric>.ivecs (the TEXMEX layout of ../shared/data). The
collection (--collection, default: the folder's name) is created, imported
and indexed when it does not exist. Each point of the sweep runs --queries
queries from --concurrency threads; the table it prints is the plot's data.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import zoomd  # noqa: E402


def find(folder: pathlib.Path, stem: str) -> pathlib.Path:
    for ext in (".fvecs", ".bvecs"):
        if (folder / (stem + ext)).exists():
            return folder / (stem + ext)
    sys.exit(f"{folder}: no {stem}.fvecs or {stem}.bvecs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="127.0.0.1:50051")
    ap.add_argument("--api_key", default=None)
    ap.add_argument("--dataset", required=True, type=pathlib.Path)
    ap.add_argument("--metric", default="l2", choices=["l2", "ip", "cosine"])
    ap.add_argument("--collection", default=None)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rerank", default="10,20,40,80,160", help="K' values")
    ap.add_argument("--nprobe", default="8,16,32,64", help="nprobe values (ivf_hnsw_pq)")
    ap.add_argument("--out", default="recall_curve.png")
    a = ap.parse_args()

    base_path, query_path = find(a.dataset, "base"), find(a.dataset, "query")
    gt = zoomd.read_ivecs(a.dataset / f"groundtruth_{a.metric}.ivecs")[:, :10]
    queries = np.asarray(zoomd.read_vecs(query_path)[: a.queries], dtype=np.float32)
    gt = gt[: len(queries)]
    name = a.collection or a.dataset.name.replace(".", "_")
    client = zoomd.Client(a.target, api_key=a.api_key, timeout=600)
    try:
        info = client.get_collection(name)
    except zoomd.NotFound:
        base = zoomd.read_vecs(base_path)
        dtype = "uint8" if base.dtype == np.uint8 else "float32"
        client.create_collection(name, dim=base.shape[1], metric=a.metric, dtype=dtype)
        client.import_points(name, base_path)
        info = client.build_index(name, wait=True)
    print(f"{name}: {info.points:,} points, dim {info.dim}, {info.metric}, index "
          f"{info.index.kind} ({info.index_state}), preview {info.resident_bytes / 2**20:.1f} MiB")

    def run(rerank: int, nprobe: int):
        def one(i: int):
            t = time.perf_counter()
            r = client.search(name, queries[i], k=10, rerank=rerank, nprobe=nprobe)
            return i, r.ids, r.stats.ssd_reads, time.perf_counter() - t
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
            out = list(pool.map(one, range(len(queries))))
        secs = time.perf_counter() - start
        hits = sum(len(set(ids.tolist()) & set(gt[i].tolist())) for i, ids, _, _ in out)
        lat = sorted(x[3] for x in out)
        return (hits / (10 * len(queries)), len(queries) / secs,
                np.mean([x[2] for x in out]), lat[len(lat) // 2] * 1e6)

    rows = []
    kp = "K'"
    print(f"{'nprobe':>6} {kp:>5} {'recall@10':>9} {'QPS':>8} {'reads/q':>8} {'p50 us':>8}")
    for nprobe in [int(x) for x in a.nprobe.split(",")]:
        for rerank in [int(x) for x in a.rerank.split(",")]:
            recall, qps, reads, p50 = run(rerank, nprobe)
            rows.append((nprobe, rerank, recall, qps))
            print(f"{nprobe:6d} {rerank:5d} {recall:9.4f} {qps:8.0f} {reads:8.1f} {p50:8.0f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for nprobe in sorted({r[0] for r in rows}):
        pts = [(r[2], r[3]) for r in rows if r[0] == nprobe]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"nprobe {nprobe}")
    ax.set_xlabel("recall@10")
    ax.set_ylabel(f"QPS ({a.concurrency} client threads, Python, gRPC)")
    ax.set_title(f"zoomd {info.index.kind}: {name} ({info.points:,} points), K' swept")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {os.path.abspath(a.out)}")


if __name__ == "__main__":
    main()
