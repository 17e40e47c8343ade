"""Fixtures: a real zoomd on a port the OS picks (its --port_file), with a
small language model for the Decoder, for the whole session.

ZOOMD_BINARY / ZOOMCTL_BINARY name the binaries (ctest sets them); otherwise
build/server/main/zoomd and build/client/zoomctl under the repository.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, Iterator

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SIFT = REPO / "tests" / "data" / "sift-ngt-5k"

# The model the Decoder tests load: random, exact top-k by brute force.
MODEL_V, MODEL_D = 2000, 32


def _binary(env: str, default: str) -> str:
    path = os.environ.get(env) or str(REPO / default)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not an executable (build it, or set {env})", pytrace=False)
    return path


def write_model(d: pathlib.Path) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    W = rng.standard_normal((MODEL_V, MODEL_D)).astype(np.float32)
    b = (0.1 * rng.standard_normal(MODEL_V)).astype(np.float32)
    d.mkdir(parents=True)
    W.tofile(d / "W.f32")
    b.tofile(d / "b.f32")
    (d / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(MODEL_V)))
    (d / "meta.json").write_text(json.dumps({"vocab_size": MODEL_V, "dim": MODEL_D}))
    # Contexts and references in lm-ptb's layout, for examples/decode.py:
    # column 0 a "true" word, 1.. the exact top ids.
    H = rng.standard_normal((64, MODEL_D)).astype(np.float32)
    top = np.argsort(-(H @ W.T + b), axis=1)[:, :10]
    ref = np.concatenate([rng.integers(0, MODEL_V, (64, 1)), top], axis=1).astype(np.int32)
    H.tofile(d / "H.f32")
    ref.tofile(d / "ref_ids.i32")
    return {"W": W, "b": b}


class Server:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.models = root / "models"
        self.model = write_model(self.models / "tiny")
        port_file = root / "port"
        self.log_path = root / "zoomd.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [_binary("ZOOMD_BINARY", "build/server/main/zoomd"), "--data_dir", str(root / "data"),
             "--grpc_address", "127.0.0.1:0", "--metrics_address", "127.0.0.1:0",
             "--port_file", str(port_file), "--models_dir", str(self.models), "--threads", "4",
             "--snapshots_dir", str(root / "snapshots"),
             "--auto_build_points", "1000000000"],
            stdout=self.log, stderr=subprocess.STDOUT)
        # Bounded wait for the port file (written once serving).
        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"zoomd exited with {self.proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"zoomd did not serve within 120 s:\n{self.logs()}")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())
        self.target = f"127.0.0.1:{self.port}"

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="zoomd-pytest-"))
    s = Server(root)
    try:
        yield s
    finally:
        s.stop()
        if s.proc.returncode not in (0, -signal.SIGTERM):
            print(s.logs())
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def client(server: Server) -> Iterator["object"]:
    import zoomd
    with zoomd.Client(server.target, timeout=120) as c:
        yield c


_names = iter(range(1, 1 << 30))


@pytest.fixture()
def name(client: "object") -> Iterator[str]:
    """A fresh collection name; the collection is dropped afterwards."""
    import zoomd
    n = f"py{next(_names)}_{os.getpid()}"
    yield n
    try:
        client.drop_collection(n)  # type: ignore[attr-defined]
    except zoomd.NotFound:
        pass


@pytest.fixture(scope="session")
def sift() -> Dict[str, np.ndarray]:
    import zoomd
    return {"base": zoomd.read_bvecs(SIFT / "base.bvecs"),
            "query": zoomd.read_bvecs(SIFT / "query.bvecs"),
            "gt": zoomd.read_ivecs(SIFT / "groundtruth_l2.ivecs")}
