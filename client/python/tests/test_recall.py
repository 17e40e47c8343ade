"""Recall through Python equals zoomctl's on the bundled SIFT set (the same
server, collection and knobs: the same answers)."""

import json
import os
import subprocess

import numpy as np
import pytest

import zoomd

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
    exact = [client.search(name, q, k=10, exact=True) for q in sift["query"][:QUERIES]]
    assert recall_at_10([r.ids.tolist() for r in exact], gt) >= 0.99
    # Brute force runs no knob: none is reported (they were, as if they had).
    assert all(r.stats.exact and r.stats.knobs is None for r in exact)


def test_rerank_that_stops_early_reads_less(server, client, name, sift):
    """rerank_stop_sd through Python, SearchBatch and zoomctl: the same
    answers, fewer SSD reads than reading all K', in more than one round,
    and recall close to reading all (measured: the same here)."""
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.import_points(name, SIFT / "base.bvecs", progress=False)
    client.build_index(name)
    queries = sift["query"][:QUERIES]
    full = [client.search(name, q, k=10, ef=64, nprobe=16, rerank=100) for q in queries]
    stop = [client.search(name, q, k=10, ef=64, nprobe=16, rerank=100, rerank_stop_sd=2)
            for q in queries]
    batch = client.search_batch(name, queries, k=10, ef=64, nprobe=16, rerank=100,
                                rerank_stop_sd=2)
    assert [r.ids.tolist() for r in batch] == [r.ids.tolist() for r in stop]
    assert all(r.stats.fullview_rounds == 1 for r in full)
    assert all(r.stats.fullview_rounds >= 1 for r in stop)
    assert any(r.stats.fullview_rounds > 1 for r in stop)
    assert sum(r.stats.ssd_reads for r in stop) < sum(r.stats.ssd_reads for r in full)
    gt = sift["gt"][:QUERIES]
    r_full = recall_at_10([r.ids.tolist() for r in full], gt)
    r_stop = recall_at_10([r.ids.tolist() for r in stop], gt)
    assert r_stop >= r_full - 0.03, (r_stop, r_full)
    zoomctl = os.environ.get("ZOOMCTL_BINARY") or str(REPO / "build/client/zoomctl")
    for row in range(3):
        out = subprocess.run(
            [zoomctl, "--target", server.target, "search", name, "--query_file",
             str(SIFT / "query.bvecs"), "--row", str(row), "--k", "10", "--ef", "64",
             "--nprobe", "16", "--rerank", "100", "--rerank_stop_sd", "2", "--json"],
            check=True, capture_output=True, text=True, timeout=60).stdout
        assert [int(h["id"]) for h in json.loads(out)["hits"]] == stop[row].ids.tolist()
    with pytest.raises(zoomd.InvalidArgument, match="rerank_stop_sd"):
        client.search(name, queries[0], k=10, rerank_stop_sd=101)


def test_target_recall_picks_calibrated_knobs(server, client, name, sift):
    """Recall as a knob: a build calibrates the index; a search with
    target_recall runs the cheapest calibrated knobs that reached it (the
    stats say which, and what they reached), reaches about that recall on
    the set's own held-back queries, and a bad target is refused before it
    is sent. A collection's own default target shows in its info."""
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.import_points(name, SIFT / "base.bvecs", progress=False)
    info = client.build_index(name)
    cal = info.calibration
    assert cal is not None and info.calibration_current
    assert cal.k == 10 and cal.queries > 0 and cal.points
    assert info.default_target_recall == pytest.approx(0.95)  # the server's
    queries, gt = sift["query"][:QUERIES], sift["gt"][:QUERIES]
    for target in (0.9, 0.99):
        want = cal.choose(target)
        assert want is not None
        results = client.search_batch(name, queries, k=10, target_recall=target)
        s = results[0].stats
        assert s.target_recall == pytest.approx(target) and s.target_reached
        assert (s.knobs.nprobe, s.knobs.rerank) == (want.nprobe, want.rerank)
        assert s.calibrated_recall == pytest.approx(want.recall, abs=1e-6)
        one = client.search(name, queries[0], k=10, target_recall=target)
        assert one.ids.tolist() == results[0].ids.tolist()
        # 40 queries: a sampling error of a few points around the target.
        assert recall_at_10([r.ids.tolist() for r in results], gt) >= target - 0.05
    # A knob given beats the target's choice for that knob.
    s = client.search(name, queries[0], k=10, nprobe=7, target_recall=0.9).stats
    assert s.knobs.nprobe == 7 and s.calibrated_recall == 0
    for bad in (1.5, -0.1, "high", True):
        with pytest.raises(zoomd.InvalidArgument, match="target_recall"):
            client.search(name, queries[0], k=10, target_recall=bad)
    other = name + "-t"
    info = client.create_collection(other, dim=128, metric="l2", dtype="uint8",
                                    default_knobs=zoomd.SearchKnobs(target_recall=0.9))
    assert info.default_knobs.target_recall == pytest.approx(0.9)
    assert info.default_target_recall == pytest.approx(0.9)
    assert info.calibration is None  # no index yet
    client.drop_collection(other)
