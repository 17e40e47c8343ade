#!/usr/bin/python3
"""A/B of zoomd's inline reads (--inline_reads 0 vs 1), one run, same data.

Starts two zoomd processes on the demo collection (tests/data SIFT 4.5K,
L2, uint8; data in a temporary directory), then, alternating rounds,
measures the Python client's round trip of Health.Check (gRPC alone) and of
a preview-only Search (k 10) against each: p50 and p99 in microseconds,
closed loop, one caller.

    loadtest/inline_ab.py [--zoomd build/server/main/zoomd] [--rounds 3] [--calls 3000]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import zoomd  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, calls):
    for _ in range(100):
        fn()
    ts = np.empty(calls)
    for i in range(calls):
        t = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t
    return np.median(ts) * 1e6, np.percentile(ts, 99) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zoomd", default=os.path.join(ROOT, "build", "server", "main", "zoomd"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    base = os.path.join(ROOT, "tests", "data", "sift-ngt-5k")
    raw = np.fromfile(os.path.join(base, "query.bvecs"), dtype=np.uint8)
    d = int.from_bytes(raw[:4].tobytes(), "little")
    query = raw.reshape(-1, 4 + d)[0, 4:].astype(np.float32)
    procs, clients = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for mode in (0, 1):
                port = free_port()
                procs.append(subprocess.Popen(
                    [a.zoomd, "--data_dir", os.path.join(tmp, str(mode)),
                     "--grpc_address", f"127.0.0.1:{port}", "--metrics_address", "",
                     "--demo_collection", "sift", "--demo_vectors",
                     os.path.join(base, "base.bvecs"), "--inline_reads", str(mode)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                c = zoomd.Client(f"127.0.0.1:{port}", timeout=120)
                end = time.time() + 120
                while True:
                    try:
                        if c.get_collection("sift").index_state == "ready":
                            break
                    except zoomd.ZoomError:
                        pass
                    if time.time() > end:
                        raise SystemExit("zoomd did not become ready")
                    time.sleep(0.2)
                clients[mode] = c
            rows = {0: [], 1: []}
            for r in range(a.rounds):
                for mode in (0, 1):
                    c = clients[mode]
                    h = timed(lambda: c.health(), a.calls)
                    s = timed(lambda: c.search("sift", query, k=10, preview_only=True), a.calls)
                    rows[mode].append((h, s))
                    print(f"round {r + 1} inline_reads={mode}: health p50 {h[0]:.0f} p99 {h[1]:.0f}"
                          f" | preview search p50 {s[0]:.0f} p99 {s[1]:.0f} us", flush=True)
            for mode in (0, 1):
                med = np.median([[h[0], h[1], s[0], s[1]] for h, s in rows[mode]], axis=0)
                print(f"median of {a.rounds} rounds, inline_reads={mode}: health p50 {med[0]:.0f}"
                      f" p99 {med[1]:.0f} | preview search p50 {med[2]:.0f} p99 {med[3]:.0f} us")
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=30)


if __name__ == "__main__":
    main()
