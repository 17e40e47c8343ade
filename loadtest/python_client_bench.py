#!/usr/bin/python3
"""The Python client's speed against the C++ tools on the same server and data:
import_points vs `zoomctl import`, and search QPS / p50 at 1 and 16
concurrent callers (threads, asyncio) vs zoomload's closed loop.

    loadtest/python_client_bench.py --target 127.0.0.1:50051 \\
        --dataset ../shared/data/glove-6b-100d --zoomctl build/client/zoomctl \\
        --zoomload build/loadtest/zoomload [--json out.jsonl]

Creates <prefix>_cli and <prefix>_py (dropped first if present), imports the
base set into each (zoomctl, then import_points), builds the second, and runs
each search configuration for --duration seconds after --warmup, the queries
of the folder cycling, with the collection's default knobs. The client
machine is the server's: on few cores the callers' CPU is the server's too,
for zoomload and Python alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client" / "python"))
import zoomd  # noqa: E402


def find(folder: pathlib.Path, stem: str) -> pathlib.Path:
    for ext in (".fvecs", ".bvecs"):
        if (folder / (stem + ext)).exists():
            return folder / (stem + ext)
    sys.exit(f"{folder}: no {stem}.fvecs/.bvecs")


def summarize(lat: list, secs: float) -> dict:
    lat = np.sort(np.array(lat)) * 1e6
    return {"qps": len(lat) / secs, "p50_us": float(np.percentile(lat, 50)),
            "p99_us": float(np.percentile(lat, 99)), "requests": len(lat)}


def threads_run(client, name, queries, n, warmup, duration):
    stop_at = time.perf_counter() + warmup + duration
    t_measure = time.perf_counter() + warmup
    lats = [[] for _ in range(n)]

    def work(w):
        i = w
        while True:
            t = time.perf_counter()
            if t >= stop_at:
                return
            client.search(name, queries[i % len(queries)], k=10)
            e = time.perf_counter()
            if t >= t_measure:
                lats[w].append(e - t)
            i += n
    ts = [threading.Thread(target=work, args=(w,)) for w in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return summarize([x for l in lats for x in l], duration)


async def asyncio_run(target, name, queries, n, warmup, duration):
    async with zoomd.AsyncClient(target, timeout=60) as a:
        await a.get_collection(name)
        stop_at = time.perf_counter() + warmup + duration
        t_measure = time.perf_counter() + warmup
        lats = []

        async def work(w):
            i = w
            while time.perf_counter() < stop_at:
                t = time.perf_counter()
                await a.search(name, queries[i % len(queries)], k=10)
                if t >= t_measure:
                    lats.append(time.perf_counter() - t)
                i += n
        await asyncio.gather(*[work(w) for w in range(n)])
    return summarize(lats, duration)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="127.0.0.1:50051")
    ap.add_argument("--dataset", type=pathlib.Path, required=True)
    ap.add_argument("--metric", default=None, help="default: cosine for float sets, else l2")
    ap.add_argument("--prefix", default="pybench")
    ap.add_argument("--zoomctl", required=True)
    ap.add_argument("--zoomload", required=True)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    base, query = find(a.dataset, "base"), find(a.dataset, "query")
    base_arr = zoomd.read_vecs(base)
    uint8 = base_arr.dtype == np.uint8
    metric = a.metric or ("l2" if uint8 else "cosine")
    dim = base_arr.shape[1]
    queries = np.asarray(zoomd.read_vecs(query)[:2000], dtype=np.float32)
    c = zoomd.Client(a.target, timeout=3600)
    info = c.server_info()
    print(f"server {a.target}: zoomd {info.version}, SIMD {info.simd_level}; data {a.dataset} "
          f"({len(base_arr):,} x {dim}, {metric})")
    out = []
    cli, py = f"{a.prefix}_cli", f"{a.prefix}_py"
    for n in (cli, py):
        try:
            c.drop_collection(n)
        except zoomd.NotFound:
            pass
        c.create_collection(n, dim=dim, metric=metric, dtype="uint8" if uint8 else "float32")

    t = time.perf_counter()
    subprocess.run([a.zoomctl, "--target", a.target, "import", cli, str(base)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli_secs = time.perf_counter() - t
    r = c.import_points(py, base, progress=False)
    for tool, secs in (("zoomctl import", cli_secs), ("import_points", r.seconds)):
        rate = len(base_arr) / secs
        print(f"  {tool:<16} {len(base_arr):,} points in {secs:6.2f} s = {rate:10,.0f} points/s")
        out.append({"record": "import", "tool": tool, "points": len(base_arr), "seconds": secs,
                    "points_per_s": rate})
    c.drop_collection(cli)
    c.build_index(py, wait=True)

    conc = [int(x) for x in a.concurrency.split(",")]
    rows = []
    for n in conc:
        with tempfile.NamedTemporaryFile(suffix=".json") as jf:
            subprocess.run(
                [a.zoomload, "--target", a.target, "--workload", "search", "--dataset",
                 str(a.dataset), "--collection", py, "--metric", metric, "--k", "10",
                 "--concurrency", str(n), "--duration", str(a.duration), "--warmup",
                 str(a.warmup), "--json", jf.name], check=True, capture_output=True, text=True)
            j = json.load(open(jf.name))
        rows.append(("zoomload (C++)", n, {"qps": j["qps"], "p50_us": j["p50_us"],
                                           "p99_us": j["p99_us"], "requests": j["requests"]}))
        rows.append(("Python threads", n, threads_run(c, py, queries, n, a.warmup, a.duration)))
        rows.append(("Python asyncio", n, asyncio.run(
            asyncio_run(a.target, py, queries, n, a.warmup, a.duration))))
    print(f"  {'caller':<16} {'conc':>4} {'QPS':>9} {'p50 us':>8} {'p99 us':>8} {'vs zoomload':>11}")
    ref = {n: s["qps"] for tool, n, s in rows if tool.startswith("zoomload")}
    for tool, n, s in rows:
        print(f"  {tool:<16} {n:4d} {s['qps']:9.0f} {s['p50_us']:8.0f} {s['p99_us']:8.0f} "
              f"{s['qps'] / ref[n]:10.2f}x")
        out.append({"record": "search", "caller": tool, "concurrency": n, **s,
                    "qps_vs_zoomload": s["qps"] / ref[n]})
    c.drop_collection(py)
    if a.json:
        with open(a.json, "w") as f:
            for o in out:
                f.write(json.dumps(o) + "\n")


if __name__ == "__main__":
    main()
