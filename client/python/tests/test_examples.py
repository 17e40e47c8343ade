"""The examples run against the test server (small inputs)."""

import pathlib
import subprocess
import sys

from conftest import SIFT

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_recall_curve_draws_a_png(server, tmp_path):
    out = tmp_path / "curve.png"
    r = subprocess.run([sys.executable, str(EXAMPLES / "recall_curve.py"), "--target",
                        server.target, "--dataset", str(SIFT), "--collection", "ex_sift",
                        "--queries", "50", "--rerank", "10,40", "--nprobe", "16",
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [l.split() for l in r.stdout.splitlines() if l.strip().startswith("16 ")]
    assert len(rows) == 2 and all(0.5 < float(x[2]) <= 1.0 for x in rows), r.stdout


def test_decode_runs_greedy_steps(server):
    r = subprocess.run([sys.executable, str(EXAMPLES / "decode.py"), "--target", server.target,
                        "--model_dir", "tiny", "--local_dir", str(server.models / "tiny"),
                        "--name", "tiny_ex", "--steps", "50", "--ef", "200", "--show", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("50 steps: greedy = exact top-1 in"), r.stdout
    assert float(last.split(" in ")[1].split("%")[0]) >= 90.0, last
