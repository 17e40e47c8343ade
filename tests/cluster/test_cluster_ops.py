"""Operating a zoomd cluster under load (issue 47, part 3), on the topology of
test_cluster_e2e.py (three nats-servers, four nodes, a router; network
namespaces when the test runs as root):

  * rolling restart: every node, one at a time (SIGTERM, started again, its
    replicas caught up with the writes acknowledged while it was down before
    the next goes), then the router, while a writer (unique ids, payloads)
    and a searcher run through the Python client with its retries: zero
    failed requests while the nodes restart (the router's own restart is
    reported, not asserted: see the test), zero acknowledged writes lost
    (every replica of every shard holds exactly the acknowledged points of
    its shard, payloads included);
  * cluster snapshot: CreateSnapshot through the router while writes go on
    holds every write acknowledged before the call (and the manifest records
    each shard's log position at or past the head read); restored through
    the router into a new collection (same shards and replicas) and into a
    standalone zoomd (one node), both answer the snapshot's points.

Counts and times are printed (the closing note's "rolling restart counts").
ZOOMD_BINARY names zoomd (ctest sets it).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
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
from cluster_procs import NATS, Proc, caught_up, free_port, health, local_shards  # noqa: E402
from test_cluster_e2e import SIFT, Cluster, read_bvecs, wait_until, zoomd_binary  # noqa: E402

SHARDS, REPLICAS = 2, 3


def stub(target: str):
    return zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(target))


@pytest.fixture(scope="module")
def cluster():
    if not os.access(NATS, os.X_OK):
        pytest.skip("nats-server is not installed (deploy/install-deps.sh installs it)")
    root = pathlib.Path(tempfile.mkdtemp(prefix="zoom-ops-", dir="/var/tmp"))
    # Signed snapshots on every zoomd: the router checks its nodes' archives
    # and signs the cluster's; the restore checks it.
    (root / "snapshot.key").write_text("ops-test-snapshot-key-0123456789\n")
    c = Cluster(root, zoomd_args=[f"--snapshot_key_file={root / 'snapshot.key'}"])
    try:
        c.start()
        yield c
    except BaseException:
        for name, p in list(c.procs.items()) + [(p.name, p) for p in c.nats]:
            print(f"---- {name} ({p.log}) ----\n" + "\n".join(p.tail().splitlines()[-12:]))
        raise
    finally:
        c.stop()
        if not os.environ.get("ZOOM_E2E_KEEP"):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def base() -> np.ndarray:
    return read_bvecs(SIFT / "base.bvecs")


class Load:
    """A writer (batches of unique ids with payloads) and a searcher through
    the Python client with its retries (writes too: an Upsert is idempotent
    by id). Counts what was acknowledged and what failed."""

    def __init__(self, target: str, base: np.ndarray, first_id: int) -> None:
        self.base, self.next_id = base, first_id
        self.retry = zoomd.RetryPolicy(attempts=10, max_backoff=2.0, retry_writes=True)
        self.acked: Dict[int, bytes] = {}
        self.tokens: Dict[int, int] = {}
        self.failed: List[str] = []
        # What the failures happened during (the test sets it): the router's
        # own restart is counted apart (see test_rolling_restart).
        self.phase = "nodes"
        self.writes = self.searches = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.target = target
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._search, daemon=True)]

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a load thread did not stop"

    def max_tokens(self) -> Dict[int, int]:
        with self.lock:
            return dict(self.tokens)

    def _write(self) -> None:
        with zoomd.Client(self.target, timeout=30, retry=self.retry) as c:
            while not self.stop.is_set():
                ids = list(range(self.next_id, self.next_id + 10))
                self.next_id += 10
                payloads = [b"w%d" % i for i in ids]
                toks: List[zoomd.WriteToken] = []
                try:
                    c.upsert("docs", ids, self.base[[i % len(self.base) for i in ids]],
                             raw_payloads=payloads, tokens=toks)
                except zoomd.ZoomError as e:
                    self.failed.append(f"{self.phase}: upsert {ids[0]}: {e}")
                    continue
                with self.lock:
                    self.writes += 1
                    for i, p in zip(ids, payloads):
                        self.acked[i] = p
                    for t in toks:
                        self.tokens[t.shard] = max(self.tokens.get(t.shard, 0), t.sequence)

    def _search(self) -> None:
        with zoomd.Client(self.target, timeout=10, retry=self.retry) as c:
            i = 0
            while not self.stop.is_set():
                try:
                    c.search("docs", self.base[i % len(self.base)], k=10)
                    self.searches += 1
                except zoomd.ZoomError as e:
                    self.failed.append(f"{self.phase}: search: {e}")
                i += 1


def replica_sets(cluster: Cluster, ids: List[int]) -> Dict[str, Dict[int, Dict[int, bytes]]]:
    """node -> shard -> {id: payload} of `ids` its replica holds."""
    out: Dict[str, Dict[int, Dict[int, bytes]]] = {}
    for h in cluster.nodes:
        s = stub(cluster.target(h))
        out[h] = {}
        for shard, name in local_shards(cluster.target(h)).items():
            have: Dict[int, bytes] = {}
            for b in range(0, len(ids), 2000):
                got = s.Get(zoom_pb2.GetRequest(collection=name, ids=ids[b:b + 2000],
                                                with_payload=True), timeout=30)
                have.update({p.id: p.payload for p in got.points})
            out[h][shard] = have
    return out


def test_rolling_restart(cluster: Cluster, base: np.ndarray) -> None:
    r = stub(cluster.target("router"))
    r.CreateCollection(zoom_pb2.CreateCollectionRequest(spec=zoom_pb2.CollectionSpec(
        name="docs", dim=base.shape[1], metric=zoom_pb2.L2, shards=SHARDS, replicas=REPLICAS)),
        timeout=60)
    load = Load(cluster.target("router"), base, first_id=0).start()
    wait_until("the first writes", lambda: load.writes >= 20, 60, 0.05)
    t0 = time.monotonic()
    for h in cluster.nodes:
        cluster.procs[h].signal(signal.SIGTERM)
        writes_before = load.writes
        cluster.start_zoomd(h)
        back = load.max_tokens()
        wait_until(f"{h}'s replicas to catch up", lambda: caught_up(cluster.target(h), back),
                   120, 0.1)
        # Writes went on around it.
        wait_until(f"writes after {h}'s restart", lambda: load.writes > writes_before, 60, 0.05)
    restart_s = time.monotonic() - t0
    node_failures = list(load.failed)
    # The router last: its clients retry UNAVAILABLE while it is away. Its
    # drain answers the calls that start after SIGTERM UNAVAILABLE and cuts
    # the connections before gRPC's shutdown, which would answer a call
    # reaching it CANCELLED (not retried: it failed 1 run in 5 before).
    load.phase = "router"
    cluster.procs["router"].signal(signal.SIGTERM)
    cluster.start_zoomd("router")
    writes_before = load.writes
    wait_until("writes through the restarted router", lambda: load.writes > writes_before + 5,
               60, 0.05)
    load.finish()
    router_failures = load.failed[len(node_failures):]
    print(f"rolling restart of {len(cluster.nodes)} nodes and the router under load: "
          f"{load.writes} upserts ({len(load.acked)} points) and {load.searches} searches "
          f"acknowledged; {len(node_failures)} failed while the nodes restarted (in "
          f"{restart_s:.1f} s), {len(router_failures)} while the router did "
          f"{router_failures[:2]}")
    assert node_failures == [], node_failures[:5]
    assert router_failures == [], router_failures[:5]

    # Zero lost: every replica of a shard holds the same acknowledged points,
    # payloads included, and the shards together hold all of them.
    ids = sorted(load.acked)
    final = load.max_tokens()
    for h in cluster.nodes:
        wait_until(f"{h} to apply every acknowledged write",
                   lambda: caught_up(cluster.target(h), final), 60, 0.1)
    sets = replica_sets(cluster, ids)
    by_shard: Dict[int, List[Dict[int, bytes]]] = {}
    for h, shards in sets.items():
        for k, have in shards.items():
            by_shard.setdefault(k, []).append(have)
    assert sorted(by_shard) == list(range(SHARDS))
    union: Dict[int, bytes] = {}
    for k, copies in by_shard.items():
        assert len(copies) == REPLICAS, (k, len(copies))
        for c in copies[1:]:
            assert c == copies[0], f"shard {k}'s replicas differ"
        assert not (set(union) & set(copies[0])), "an id in two shards"
        union.update(copies[0])
    lost = [i for i in ids if union.get(i) != load.acked[i]]
    assert lost == [], f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"


def test_cluster_snapshot(cluster: Cluster, base: np.ndarray) -> None:
    r = stub(cluster.target("router"))
    load = Load(cluster.target("router"), base, first_id=10_000_000).start()
    wait_until("writes", lambda: load.writes >= 20, 60, 0.05)
    # Every write acknowledged before the call is in the snapshot.
    with load.lock:
        before = dict(load.acked)
    made = r.CreateSnapshot(zoom_pb2.CreateSnapshotRequest(collection="docs"), timeout=300)
    load.finish()
    info = made.snapshot
    assert info.collection == "docs" and info.points >= len(before), info
    chunks = list(r.DownloadSnapshot(zoom_pb2.DownloadSnapshotRequest(collection="docs",
                                                                      name=info.name),
                                     timeout=300))
    data = b"".join(c.data for c in chunks)
    assert len(data) == info.size_bytes
    print(f"cluster snapshot {info.name}: {info.points} points, {info.size_bytes} bytes, "
          f"taken while {load.writes} upserts went on")

    def restored_ok(target_stub, name: str) -> None:
        """Every point acknowledged before the snapshot reads back from
        `name`. Reads through a router are eventual (one replica a shard,
        maybe still applying what a majority acknowledged): waited for,
        bounded; the last difference reported."""
        ids = sorted(before)
        last = [""]

        def check() -> bool:
            for b in range(0, len(ids), 2000):
                got = target_stub.Get(zoom_pb2.GetRequest(collection=name, ids=ids[b:b + 2000],
                                                          with_payload=True), timeout=30)
                have = {p.id: p.payload for p in got.points}
                missing = [i for i in ids[b:b + 2000] if have.get(i) != before[i]]
                if missing:
                    last[0] = f"{len(missing)} missing, e.g. {missing[:5]}"
                    return False
            return True
        wait_until(lambda: f"the snapshot's points in {name} ({last[0]})", check, 60, 0.1)

    # Through the router, from the router's copy: the same layout.
    got = r.RestoreSnapshot(iter([zoom_pb2.RestoreSnapshotRequest(
        collection="docs_restored", source=f"docs/{info.name}.zsnap")]), timeout=600)
    assert got.info.points == info.points, (got.info.points, info.points)
    assert (got.info.spec.shards, got.info.spec.replicas) == (SHARDS, REPLICAS)
    restored_ok(r, "docs_restored")

    # Into a standalone zoomd: one node, every shard's points in one collection.
    # The archive is signed with the cluster's key: a standalone with
    # another key refuses it, one with the cluster's restores it.
    up = [zoom_pb2.RestoreSnapshotRequest(collection="docs")] + [
        zoom_pb2.RestoreSnapshotRequest(data=data[i:i + (1 << 20)])
        for i in range(0, len(data), 1 << 20)]
    (cluster.root / "other.key").write_text("some-other-snapshot-key-98765\n")
    port = free_port()
    for key, refused in (("other.key", True), ("snapshot.key", False)):
        single = Proc("single", [zoomd_binary(), f"--data_dir={cluster.root / 'single'}",
                                 f"--grpc_address=127.0.0.1:{port}", "--metrics_address=",
                                 f"--snapshot_key_file={cluster.root / key}",
                                 "--auto_build_points=0"], cluster.root / "single.log").start()
        if not refused:
            break
        try:
            wait_until("the standalone", lambda: health(f"127.0.0.1:{port}"), 60)
            with pytest.raises(grpc.RpcError) as e:
                stub(f"127.0.0.1:{port}").RestoreSnapshot(iter(up), timeout=600)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value
            assert "signed with key" in e.value.details(), e.value.details()
        finally:
            single.signal(signal.SIGTERM)  # waits for it
    try:
        wait_until("the standalone", lambda: health(f"127.0.0.1:{port}"), 60)
        s = stub(f"127.0.0.1:{port}")
        one = s.RestoreSnapshot(iter(up), timeout=600)
        assert one.info.points == info.points
        restored_ok(s, "docs")
    finally:
        single.signal(signal.SIGKILL)
    r.DeleteSnapshot(zoom_pb2.DeleteSnapshotRequest(collection="docs", name=info.name),
                     timeout=30)
