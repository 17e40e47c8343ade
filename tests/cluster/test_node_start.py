"""A node started while its cluster's NATS does not answer (issue 47: after
a power failure the nats-servers may take minutes before JetStream answers,
and a node that exited then had to be started again by hand or by a
restart loop). One nats-server, one node (one shard, one replica), a
router, on loopback. Asserted:

  * the node starts with NATS down: the process serves (health "" SERVING),
    says it has not joined (zoom.v1.VectorSearch NOT_SERVING), and answers
    reads of the replica it holds, at the position it reached;
  * a SIGTERM while it waits to join ends it promptly with exit code 0;
  * once the nats-server runs again the node joins on its own (no restart):
    zoom.v1.VectorSearch SERVING, and a write acknowledged under majority
    through the router is on its replica.

ZOOMD_BINARY names zoomd (ctest sets it).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
from typing import Dict, List

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import zoomd  # noqa: E402
from zoomd._proto import zoom_pb2, zoom_pb2_grpc  # noqa: E402
from cluster_procs import NATS, Proc, free_port, start_nats, start_serving  # noqa: E402
from cluster_procs import wait_until as procs_wait_until  # noqa: E402

DIM = 8


def wait_until(what, fn, timeout: float = 60.0, every: float = 0.05):
    return procs_wait_until(what, fn, timeout, every,
                            fail=lambda m: pytest.fail(m, pytrace=False))


def health(target: str, service: str) -> str:
    try:
        with zoomd.Client(target) as c:
            return c.health(service, timeout=2)
    except zoomd.ZoomError as e:
        return f"error: {e}"


def stub(target: str):
    return zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(target))


def local_name(target: str) -> str:
    names = [c.spec.name for c in stub(target).ListCollections(
        zoom_pb2.ListCollectionsRequest(), timeout=10).collections]
    local = [n for n in names if n.startswith("docs_s0_")]
    assert len(local) == 1, names
    return local[0]


def ids_of(target: str, collection: str) -> List[int]:
    resp = stub(target).Scroll(zoom_pb2.ScrollRequest(collection=collection, limit=1000),
                               timeout=10)
    return sorted(p.id for p in resp.points)


def vectors(ids: List[int]) -> List[zoom_pb2.Point]:
    return [zoom_pb2.Point(id=i, vector=np.random.default_rng(i).standard_normal(DIM)
                           .astype(np.float32).tolist()) for i in ids]


@pytest.fixture()
def root():
    if not os.access(NATS, os.X_OK):
        pytest.skip("nats-server is not installed (deploy/install-deps.sh installs it)")
    path = pathlib.Path(tempfile.mkdtemp(prefix="zoom-ns-", dir="/var/tmp"))
    yield path
    if not os.environ.get("ZOOM_E2E_KEEP"):
        shutil.rmtree(path, ignore_errors=True)


def test_a_node_started_while_nats_is_down_serves_and_joins_later(root: pathlib.Path) -> None:
    zoomd_bin = os.environ.get("ZOOMD_BINARY") or str(REPO / "build" / "server" / "main" / "zoomd")
    if not os.access(zoomd_bin, os.X_OK):
        pytest.skip(f"{zoomd_bin} is not built (ZOOMD_BINARY)")
    nats_port = free_port()
    nats = Proc("nats", [NATS, "-a", "127.0.0.1", "-p", str(nats_port), "-js",
                         "-sd", str(root / "nats"), "-n", "nats0"], root / "nats.log")
    ports: Dict[str, int] = {h: free_port() for h in ("n1", "router")}
    procs: Dict[str, Proc] = {}
    for h, port in ports.items():
        argv = [zoomd_bin, f"--role={'router' if h == 'router' else 'node'}",
                f"--nats=nats://127.0.0.1:{nats_port}", "--nats_replicas=1", "--cluster=ns",
                f"--grpc_address=127.0.0.1:{port}", f"--metrics_address=127.0.0.1:{free_port()}",
                "--node_ttl_s=4", "--auto_build_points=0", "--threads=2",
                "--allow_unauthenticated", f"--data_dir={root / h}"]
        if h != "router":
            argv.append(f"--node_id={h}")
        procs[h] = Proc(h, argv, root / f"{h}.log")
    node, router = f"127.0.0.1:{ports['n1']}", f"127.0.0.1:{ports['router']}"
    try:
        start_nats([nats], wait_until)
        start_serving(procs["n1"], node, wait_until, 90, 0.1)
        start_serving(procs["router"], router, wait_until, 90, 0.1)
        r = stub(router)
        r.CreateCollection(zoom_pb2.CreateCollectionRequest(spec=zoom_pb2.CollectionSpec(
            name="docs", dim=DIM, metric=zoom_pb2.L2, shards=1, replicas=1)), timeout=60)
        majority = zoom_pb2.WRITE_CONCERN_MAJORITY
        r.Upsert(zoom_pb2.UpsertRequest(collection="docs", points=vectors(list(range(20))),
                                        write_concern=majority), timeout=30)
        local = local_name(node)
        assert ids_of(node, local) == list(range(20))

        # NATS down; the node restarted: it starts, and serves what it holds.
        procs["n1"].signal(signal.SIGTERM)
        nats.signal(signal.SIGKILL)
        for attempt in range(2):
            procs["n1"].start()
            wait_until(lambda: f"n1 to serve without NATS ({procs['n1'].tail()[-600:]})",
                       lambda: health(node, "") == "SERVING", 60)
            assert health(node, "zoom.v1.VectorSearch") == "NOT_SERVING"
            assert ids_of(node, local) == list(range(20))
            q = stub(node).Search(zoom_pb2.SearchRequest(
                collection=local, vector=vectors([3])[0].vector, k=1), timeout=10)
            assert [h.id for h in q.hits] == [3]
            assert "cannot join yet" in procs["n1"].tail()
            if attempt == 0:
                # A SIGTERM while it waits to join: a prompt, clean exit.
                t0 = time.monotonic()
                procs["n1"].p.send_signal(signal.SIGTERM)
                assert procs["n1"].p.wait(timeout=30) == 0
                print(f"SIGTERM while waiting to join: exit 0 in "
                      f"{time.monotonic() - t0:.1f} s")

        # NATS back: the node joins without a restart.
        t0 = time.monotonic()
        start_nats([nats], wait_until)
        wait_until(lambda: f"n1 to join ({procs['n1'].tail()[-600:]})",
                   lambda: health(node, "zoom.v1.VectorSearch") == "SERVING", 90)
        joined_s = time.monotonic() - t0
        assert procs["n1"].p.poll() is None  # the same process

        def written() -> bool:
            try:
                r.Upsert(zoom_pb2.UpsertRequest(collection="docs", points=vectors([100]),
                                                write_concern=majority), timeout=10)
                return True
            except grpc.RpcError:
                return False
        wait_until("a majority write through the router", written, 60, 0.5)
        assert ids_of(node, local) == list(range(20)) + [100]
        print(f"node joined {joined_s:.1f} s after NATS started again; a majority write "
              f"after it is on its replica")
    except BaseException:
        for p in list(procs.values()) + [nats]:
            print(f"---- {p.name} ----\n" + "\n".join(p.tail().splitlines()[-15:]))
        raise
    finally:
        for p in list(procs.values()) + [nats]:
            p.signal(signal.SIGKILL)
