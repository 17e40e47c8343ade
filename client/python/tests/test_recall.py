"""Recall through Python equals zoomctl's on the bundled SIFT set (the same
server, collection and knobs: the same answers)."""

import json
import os
import subprocess

import numpy as np

from conftest import REPO, SIFT

QUERIES = 40
KNOBS = dict(ef=64, nprobe=16, rerank=40)


def recall_at_10(ids, gt):
    return np.mean([len(set(i[:10]) & set(g[:10])) / 10 for i, g in zip(ids, gt)])


def test_python_recall_equals_zoomctl(server, client, name, sift):
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.import_points(name, SIFT / "base.bvecs", progress=False)  # ids = row numbers
    client.build_index(name)
    py = [client.search(name, q, k=10, **KNOBS).ids.tolist() for q in sift["query"][:QUERIES]]
    batch = [r.ids.tolist() for r in client.search_batch(name, sift["query"][:QUERIES], k=10,
                                                         **KNOBS)]
    zoomctl = os.environ.get("ZOOMCTL_BINARY") or str(REPO / "build/client/zoomctl")
    cli = []
    for row in range(QUERIES):
        out = subprocess.run(
            [zoomctl, "--target", server.target, "search", name, "--query_file",
             str(SIFT / "query.bvecs"), "--row", str(row), "--k", "10", "--ef", "64",
             "--nprobe", "16", "--rerank", "40", "--json"],
            check=True, capture_output=True, text=True, timeout=60).stdout
        cli.append([int(h["id"]) for h in json.loads(out)["hits"]])
    gt = sift["gt"][:QUERIES]
    assert py == cli and batch == cli
    r = recall_at_10(py, gt)
    assert r == recall_at_10(cli, gt)
    assert r >= 0.9, r  # the knobs' recall on this set (measured ~0.99)
    exact = [client.search(name, q, k=10, exact=True).ids.tolist()
             for q in sift["query"][:QUERIES]]
    assert recall_at_10(exact, gt) >= 0.99
