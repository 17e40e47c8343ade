"""A power failure of the cluster's log (issue 47): nats-server's store on
lazyfs (tests/faults/lazyfs: writes kept in memory until fsync, dropped on
a simulated power failure), three zoomd nodes (one shard, three replicas,
--sync always) and a router, on loopback.

nats-server 2.9 acknowledges a publish before it syncs its files (every two
minutes), so a power failure takes back an acknowledged tail of the log,
and the log then gives its sequences to new writes. Asserted:
  * under write concern majority, every acknowledged write survives: the
    replicas find the fork, publish again what the log lost, and every
    replica ends equal to the model of the acknowledged writes (the writes
    made after the failure win over the older ones to the same points);
    /metrics counts the repair (zoomd_log_repairs_total);
  * under write concern log (acknowledged on the PubAck alone), writes no
    replica had applied before the failure are lost: the harness can tell.

Skipped, saying why, without nats-server, lazyfs or the right to mount FUSE.
LAZYFS_BINARY and ZOOMD_BINARY name the binaries (ctest sets them).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
import tempfile
from typing import Dict, List, Optional

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(REPO / "tests" / "cluster"))
import grpc  # noqa: E402
from zoomd._proto import zoom_pb2, zoom_pb2_grpc  # noqa: E402
import cluster_procs  # noqa: E402
from cluster_procs import (NATS, Proc, free_port, metric, start_nats,  # noqa: E402
                           start_serving)
from cluster_procs import wait_until as procs_wait_until  # noqa: E402

DIM = 8
NODES = ["n1", "n2", "n3"]


def wait_until(what, fn, timeout: float = 60.0, every: float = 0.05):
    return procs_wait_until(what, fn, timeout, every,
                            fail=lambda m: pytest.fail(m, pytrace=False))


def binary(env: str, default: pathlib.Path) -> str:
    path = os.environ.get(env) or str(default)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built ({env})")
    return path


class LazyMount(cluster_procs.LazyMount):
    """cluster_procs.LazyMount under ROOT, skipping the test where FUSE
    cannot be mounted."""

    def __init__(self, root: pathlib.Path) -> None:
        super().__init__(binary("LAZYFS_BINARY", REPO / "build" / "tests" / "lazyfs"),
                         root / "nats-backing", root / "nats-mnt", root / "lazyfs.log")

    def start(self) -> None:
        if not os.path.exists("/dev/fuse"):
            pytest.skip("no /dev/fuse on this machine")
        try:
            super().start()
        except RuntimeError as e:
            if "cannot mount" in str(e):
                pytest.skip(str(e))
            pytest.fail(str(e))


class Cluster:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.lazy = LazyMount(root)
        self.nats_port = free_port()
        self.nats = Proc("nats", [NATS, "-a", "127.0.0.1", "-p", str(self.nats_port), "-js",
                                  "-sd", str(self.lazy.mnt), "-n", "nats0"], root / "nats.log")
        zoomd = binary("ZOOMD_BINARY", REPO / "build" / "server" / "main" / "zoomd")
        self.ports: Dict[str, int] = {}
        self.procs: Dict[str, Proc] = {}
        for h in NODES + ["router"]:
            port, mport = free_port(), free_port()
            self.ports[h] = port
            argv = [zoomd, f"--role={'router' if h == 'router' else 'node'}",
                    f"--nats=nats://127.0.0.1:{self.nats_port}", "--nats_replicas=1",
                    "--cluster=pf", f"--grpc_address=127.0.0.1:{port}",
                    f"--metrics_address=127.0.0.1:{mport}", "--node_ttl_s=4",
                    "--auto_build_points=0", "--threads=2", "--allow_unauthenticated"]
            if h != "router":
                argv += [f"--node_id={h}", f"--data_dir={root / h}"]
            self.procs[h] = Proc(h, argv, root / f"{h}.log")
            self.procs[h].metrics = f"http://127.0.0.1:{mport}/metrics"  # type: ignore

    def target(self, h: str) -> str:
        return f"127.0.0.1:{self.ports[h]}"

    def start(self) -> None:
        self.lazy.start()
        start_nats([self.nats], wait_until)
        for h in NODES + ["router"]:
            start_serving(self.procs[h], self.target(h), wait_until, 90, 0.1)

    def power_failure(self) -> None:
        """kill -9 of nats-server, then its un-synced writes dropped."""
        self.nats.signal(signal.SIGKILL)
        self.lazy.crash()
        start_nats([self.nats], wait_until)

    def stop(self) -> None:
        for p in list(self.procs.values()) + [self.nats]:
            p.signal(signal.SIGKILL)
        self.lazy.stop()


@pytest.fixture()
def cluster():
    if not os.access(NATS, os.X_OK):
        pytest.skip("nats-server is not installed")
    root = pathlib.Path(tempfile.mkdtemp(prefix="zoom-pf-", dir="/var/tmp"))
    c = Cluster(root)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        if not os.environ.get("ZOOM_E2E_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


def vec(i: int, salt: float) -> List[float]:
    rng = np.random.default_rng(i * 1000 + int(salt * 100))
    return rng.standard_normal(DIM).astype(np.float32).tolist()


def upsert(stub, ids: List[int], salt: float, concern: int) -> zoom_pb2.UpsertResponse:
    pts = [zoom_pb2.Point(id=i, vector=vec(i, salt), payload=b"%d/%g" % (i, salt)) for i in ids]
    return stub.Upsert(zoom_pb2.UpsertRequest(collection="docs", points=pts,
                                              write_concern=concern), timeout=30)


def scroll(target: str, collection: str) -> Dict[int, bytes]:
    """Every point's payload in `collection` at `target`."""
    stub = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(target))
    out: Dict[int, bytes] = {}
    offset = 0
    while True:
        resp = stub.Scroll(zoom_pb2.ScrollRequest(collection=collection, offset=offset,
                                                  limit=1000, with_payload=True), timeout=30)
        for p in resp.points:
            out[p.id] = p.payload
        if not resp.HasField("next_offset"):
            return out
        offset = resp.next_offset


def replica(cluster: Cluster, h: str) -> Optional[Dict[int, bytes]]:
    """Node h's own replica of the shard (its local collection); None while
    the node has not made it yet."""
    stub = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(cluster.target(h)))
    names = [c.spec.name for c in stub.ListCollections(zoom_pb2.ListCollectionsRequest(),
                                                       timeout=30).collections]
    local = [n for n in names if n.startswith("docs_s0_")]
    assert len(local) <= 1, names
    return scroll(cluster.target(h), local[0]) if local else None


def converged(cluster: Cluster, model: Dict[int, bytes]) -> bool:
    try:
        return all(replica(cluster, h) == model for h in NODES)
    except grpc.RpcError:
        return False


def diff(cluster: Cluster, model: Dict[int, bytes]) -> str:
    out = []
    for h in NODES:
        got = replica(cluster, h)
        if got is None:
            out.append(f"{h}: no replica yet")
            continue
        missing = sorted(set(model) - set(got))
        wrong = sorted(i for i in model if i in got and got[i] != model[i])
        extra = sorted(set(got) - set(model))
        out.append(f"{h}: {len(missing)} missing {missing[:10]}, {len(wrong)} stale "
                   f"{wrong[:10]}, {len(extra)} extra {extra[:10]}")
    return "; ".join(out)


def test_acknowledged_writes_survive_a_power_failure_of_the_log(cluster: Cluster) -> None:
    try:
        run_power_failures(cluster)
    except BaseException:
        for name, p in list(cluster.procs.items()) + [("nats", cluster.nats)]:
            print(f"---- {name} ----\n" + "\n".join(p.tail().splitlines()[-15:]))
        raise


def run_power_failures(cluster: Cluster) -> None:
    r = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(cluster.target("router")))
    r.CreateCollection(zoom_pb2.CreateCollectionRequest(spec=zoom_pb2.CollectionSpec(
        name="docs", dim=DIM, metric=zoom_pb2.L2, shards=1, replicas=3)), timeout=60)
    majority = zoom_pb2.WRITE_CONCERN_MAJORITY
    model: Dict[int, bytes] = {}

    def write(ids: List[int], salt: float, concern: int = majority) -> None:
        upsert(r, ids, salt, concern)
        model.update({i: b"%d/%g" % (i, salt) for i in ids})

    write(list(range(0, 40)), 0.0)
    # JetStream's periodic flush (every two minutes on nats-server 2.9):
    # the catalog, the stream and these writes are on disk.
    wait_until("every replica to apply the first writes", lambda: converged(cluster, model))
    cluster.lazy.sync()
    for first in range(40, 200, 20):
        write(list(range(first, first + 20)), 0.0)
    # The power failure takes back every write after the flush, acknowledged
    # under majority (on disk on the replicas).
    cluster.power_failure()
    # Writes after it, some to points written before: the later ones win.
    for first in (100, 300):
        ids = list(range(first, first + 20))
        wait_until("a write after the failure", lambda ids=ids: try_write(r, ids, 0.5, model))
    wait_until(lambda: "the replicas to converge: " + diff(cluster, model),
               lambda: converged(cluster, model), timeout=90)
    repairs = sum(metric(cluster.procs[h].metrics,
                         'zoomd_log_repairs_total{event="repaired"}') for h in NODES)
    assert repairs >= 1
    republished = sum(metric(cluster.procs[h].metrics,
                             'zoomd_log_repairs_total{event="republished"}') for h in NODES)
    assert republished >= 1
    assert scroll(cluster.target("router"), "docs") == model
    print(f"power failure under w=majority: {len(model)} points acknowledged, 0 lost; "
          f"{int(repairs)} replica repairs, {int(republished)} entries published again")

    # Under write concern log, a write is acknowledged by the log alone:
    # with every replica down (killed: a paused one still receives what was
    # in flight, and keeps it), the power failure loses it for good.
    cluster.lazy.sync()
    for h in NODES:
        cluster.procs[h].signal(signal.SIGKILL)
    lost_ids = list(range(1000, 1020))
    upsert(r, lost_ids, 0.0, zoom_pb2.WRITE_CONCERN_LOG)  # acknowledged
    cluster.power_failure()
    for h in NODES:
        start_serving(cluster.procs[h], cluster.target(h), wait_until, 90, 0.1)
    wait_until("a write after the second failure",
               lambda: try_write(r, [2000], 0.0, model))
    wait_until(lambda: "the replicas to converge again: " + diff(cluster, model),
               lambda: converged(cluster, model), timeout=90)
    got = replica(cluster, "n1") or {}
    lost = sum(1 for i in lost_ids if i not in got)
    print(f"power failure under w=log, replicas down: {len(lost_ids)} points acknowledged, "
          f"{lost} lost")
    assert lost == len(lost_ids), "w=log writes survived: the harness could not tell"


def test_a_log_lost_before_its_first_flush_is_rebuilt_from_the_nodes(cluster: Cluster) -> None:
    """A power failure before JetStream synced anything: the buckets (the
    shard map with them) and the stream are gone. The nodes create the
    buckets again, put the map back from their copies, create the stream
    again, and the replicas publish again what they applied: every write
    acknowledged under majority is back, through the router too."""
    try:
        r = zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(cluster.target("router")))
        r.CreateCollection(zoom_pb2.CreateCollectionRequest(spec=zoom_pb2.CollectionSpec(
            name="docs", dim=DIM, metric=zoom_pb2.L2, shards=1, replicas=3)), timeout=60)
        model: Dict[int, bytes] = {}
        for first in range(0, 100, 20):
            ids = list(range(first, first + 20))
            upsert(r, ids, 0.0, zoom_pb2.WRITE_CONCERN_MAJORITY)
            model.update({i: b"%d/%g" % (i, 0.0) for i in ids})
        wait_until("every replica to apply the writes", lambda: converged(cluster, model))
        cluster.power_failure()
        wait_until(lambda: "the replicas to converge: " + diff(cluster, model),
                   lambda: converged(cluster, model), timeout=90)
        wait_until("a write after the failure",
                   lambda: try_write(r, list(range(50, 60)), 0.5, model), timeout=60)
        wait_until(lambda: "the replicas to converge again: " + diff(cluster, model),
                   lambda: converged(cluster, model), timeout=90)
        wait_until("the router to read every point",
                   lambda: scroll_or_none(cluster.target("router")) == model, timeout=60)
        print(f"power failure before the first flush: {len(model)} points acknowledged, "
              f"0 lost; catalog and stream rebuilt from the nodes")
    except BaseException:
        for name, p in list(cluster.procs.items()) + [("nats", cluster.nats)]:
            print(f"---- {name} ----\n" + "\n".join(p.tail().splitlines()[-15:]))
        raise


def scroll_or_none(target: str):
    try:
        return scroll(target, "docs")
    except grpc.RpcError:
        return None


def try_write(r, ids: List[int], salt: float, model: Dict[int, bytes]) -> bool:
    """One majority write; True once acknowledged (the model updated)."""
    try:
        upsert(r, ids, salt, zoom_pb2.WRITE_CONCERN_MAJORITY)
    except grpc.RpcError:
        return False
    model.update({i: b"%d/%g" % (i, salt) for i in ids})
    return True
