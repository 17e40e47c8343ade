"""The cluster benchmark (loadtest/cluster_bench.py) runs end to end on the
SIFT 4.5K subset, briefly, and writes every field its JSON promises: a
smoke test of the script, not a measurement (the numbers are not checked,
only that they are there and no search failed around the kills)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_cluster_bench_runs_and_reports(tmp_path: pathlib.Path) -> None:
    zoomd, zoomload = os.environ.get("ZOOMD_BINARY"), os.environ.get("ZOOMLOAD_BINARY")
    if not zoomd or not zoomload:
        pytest.skip("ZOOMD_BINARY and ZOOMLOAD_BINARY name the binaries (ctest sets them)")
    if not (shutil.which("nats-server") or os.access("/usr/sbin/nats-server", os.X_OK)):
        pytest.skip("nats-server is not installed")
    # A small language-model export for the decoder part (random weights).
    lm = tmp_path / "lm-tiny"
    lm.mkdir()
    rng = np.random.default_rng(3)
    rng.standard_normal((500, 16)).astype(np.float32).tofile(lm / "W.f32")
    (0.1 * rng.standard_normal(500)).astype(np.float32).tofile(lm / "b.f32")
    rng.standard_normal((64, 16)).astype(np.float32).tofile(lm / "H.f32")
    (lm / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(500)))
    (lm / "meta.json").write_text(json.dumps({"vocab_size": 500, "dim": 16}))
    out = tmp_path / "bench.json"
    env = dict(os.environ, GRPC_ENABLE_FORK_SUPPORT="false")
    run = subprocess.run(
        [sys.executable, str(REPO / "loadtest" / "cluster_bench.py"), "--zoomd", zoomd,
         "--zoomload", zoomload, "--dataset", str(REPO / "tests" / "data" / "sift-ngt-5k"),
         "--metric", "l2", "--duration", "1", "--warmup", "0.5", "--runs", "1", "--trials", "1",
         "--catchup_points", "500", "--threads", "4", "--lm_dataset", str(lm),
         "--concern_writes", "30", "--concern_import", "500", "--rereplicate_after_s", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(out.read_text())
    assert set(got) == {"write_throughput", "router_vs_single", "fanout", "failover", "catch_up",
                        "decoder", "write_concerns", "rereplicate"}
    for r in (1, 2, 3):
        for w in ("log", "majority", "all"):
            row = got["write_concerns"][f"router_R{r}_{w}"]
            assert row["acknowledged_under"] == w and row["upsert_p50_us"] > 0, row
    assert got["decoder"]["qps_ratio"] > 0
    assert sum(got["decoder"]["topk_calls_by_node"].values()) > 0
    assert got["router_vs_single"]["qps_ratio"] > 0
    assert got["write_throughput"]["router_S1_R1"]["acknowledged_points_per_s"] > 0
    assert set(got["fanout"]) == {"1", "2", "4"}
    assert got["failover"]["failed"] == 0, got["failover"]
    assert got["failover"]["failover_gap_ms_median"] > 0
    assert got["catch_up"]["catch_up_points_per_s"] > 0
    assert got["catch_up"]["bootstrap"]["points"] == 4500 + 500
    assert got["rereplicate"]["failed"] == 0, got["rereplicate"]
    assert got["rereplicate"]["seconds_dead_to_restored"] > 0
