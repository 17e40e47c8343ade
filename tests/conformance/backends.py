"""The two backends of the API conformance suite (issue 46): the same
zoom.v1.VectorSearch and zoom.v1.Decoder API served by

  * Standalone: one zoomd (its own temporary data directory);
  * Cluster:    a nats-server with JetStream (max_payload 8MB, as
                docs/cluster.md asks: cluster_procs.start_nats), two zoomd nodes
                (--role=node) and a router (--role=router) in front of
                them; every collection the suite creates through it has
                S = 2 shards and R = 2 replicas (each node holds a replica
                of each shard).

Both behind one small interface: `target` (host:port to call), the raw
stubs (`vs`, `dec`), `spec()` (a CollectionSpec for this backend: the
cluster's carries shards / replicas), `sync()` (bounded: returns once every
replica of every shard has applied the writes of the given tokens; the
standalone's writes are visible at once), `barrier()` (the same for writes
that answer no tokens: SetPayload, DeletePayload, field indexes), and
start / stop. Processes and helpers come from tests/cluster/cluster_procs.py
(ports chosen by the OS, readiness by the gRPC health check).

ZOOMD_BINARY names zoomd (default build/server/main/zoomd); nats-server is
Debian's. ZOOM_CONFORMANCE_KEEP=1 keeps the logs' directory.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
import tempfile
from typing import Dict, Iterable, List, Optional

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # children forked beside gRPC

import grpc  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from cluster_procs import (NATS, Proc, free_port, health, metric, start_nats,  # noqa: E402
                           start_serving, wait_until)
from zoomd._proto import decoder_pb2_grpc, zoom_pb2, zoom_pb2_grpc  # noqa: E402

CLUSTER_NAME = "conf"
SHARDS, REPLICAS = 2, 2
NODES = ["n0", "n1"]  # R = 2: each node holds a replica of each shard


def zoomd_binary() -> str:
    return os.environ.get("ZOOMD_BINARY") or str(REPO / "build" / "server" / "main" / "zoomd")


def _channel(target: str) -> grpc.Channel:
    # Large enough for the limit cases (a request of 100,001 ids, a payload
    # over 1 MiB) and their answers.
    opts = [("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20)]
    return grpc.insecure_channel(target, options=opts)


# Flags both kinds of zoomd get: no automatic build (a build is asked for),
# few threads (2 cores run everything).
COMMON = ["--auto_build_points=0", "--threads=4", "--build_threads=1",
          "--allow_unauthenticated", "--calibration_queries=0"]


class Backend:
    """One way of serving the API. Subclasses start their processes."""

    name = "?"

    def __init__(self, root: pathlib.Path, models_dir: pathlib.Path) -> None:
        self.root = root
        self.models_dir = models_dir
        self.procs: List[Proc] = []
        self.target = ""
        self._vs = None
        self._dec = None
        self._channel: Optional[grpc.Channel] = None

    # ---- the interface -------------------------------------------------------

    @property
    def vs(self) -> zoom_pb2_grpc.VectorSearchStub:
        return self._vs

    @property
    def dec(self) -> decoder_pb2_grpc.DecoderStub:
        return self._dec

    def spec(self, **kw) -> zoom_pb2.CollectionSpec:
        return zoom_pb2.CollectionSpec(**kw)

    def sync(self, collection: str, tokens: Iterable[zoom_pb2.WriteToken]) -> None:
        """Every replica has applied the writes of `tokens` (standalone: at once)."""

    def barrier(self, collection: str) -> None:
        """Every replica has applied every write acknowledged so far."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        for p in reversed(self.procs):
            p.signal(signal.SIGKILL)

    def logs(self, lines: int = 15) -> str:
        return "\n".join(f"---- {p.name} ({p.log}) ----\n" +
                         "\n".join(p.tail().splitlines()[-lines:]) for p in self.procs)

    def _connect(self) -> None:
        self._channel = _channel(self.target)
        self._vs = zoom_pb2_grpc.VectorSearchStub(self._channel)
        self._dec = decoder_pb2_grpc.DecoderStub(self._channel)


class Standalone(Backend):
    name = "standalone"

    def start(self) -> None:
        port = free_port()
        self.target = f"127.0.0.1:{port}"
        p = Proc("zoomd", [zoomd_binary(), f"--data_dir={self.root / 'data'}",
                           f"--grpc_address={self.target}", "--metrics_address=",
                           f"--models_dir={self.models_dir}", *COMMON],
                 self.root / "zoomd.log")
        self.procs.append(p)
        start_serving(p, self.target, wait_until, 90, 0.05)
        self._connect()


class Cluster(Backend):
    name = "cluster"

    def start(self) -> None:
        nats_port = free_port()
        nats_url = f"nats://127.0.0.1:{nats_port}"
        nats = Proc("nats", [NATS, "-a", "127.0.0.1", "-p", str(nats_port), "-js", "-sd",
                             str(self.root / "nats"), "-n", "nats0"], self.root / "nats.log")
        self.procs.append(nats)
        start_nats([nats], wait_until)
        self.node_targets: Dict[str, str] = {}
        # --node_ttl_s 5: heartbeats every second, so that a new collection's
        # replicas are seen serving sooner (CreateCollection waits for them).
        cluster = [f"--nats={nats_url}", f"--cluster={CLUSTER_NAME}", "--node_ttl_s=5"]
        for n in NODES:
            t = f"127.0.0.1:{free_port()}"
            self.node_targets[n] = t
            p = Proc(n, [zoomd_binary(), "--role=node", *cluster, f"--node_id={n}",
                         f"--data_dir={self.root / n}", f"--grpc_address={t}",
                         "--metrics_address=", f"--models_dir={self.models_dir}", *COMMON],
                     self.root / f"{n}.log")
            self.procs.append(p)
            start_serving(p, t, wait_until, 90, 0.05)
        self.target = f"127.0.0.1:{free_port()}"
        mport = free_port()
        router = Proc("router", [zoomd_binary(), "--role=router", *cluster,
                                 f"--data_dir={self.root / 'router'}",
                                 f"--grpc_address={self.target}",
                                 f"--metrics_address=127.0.0.1:{mport}", *COMMON],
                      self.root / "router.log")
        self.procs.append(router)
        start_serving(router, self.target, wait_until, 90, 0.05)
        url = f"http://127.0.0.1:{mport}/metrics"
        wait_until("the router to see both nodes",
                   lambda: metric(url, "zoomd_router_live_nodes") == len(NODES), 60)
        self._connect()
        self._node_stubs = {n: zoom_pb2_grpc.VectorSearchStub(_channel(t))
                            for n, t in self.node_targets.items()}
        self._dims: Dict[str, int] = {}

    def spec(self, **kw) -> zoom_pb2.CollectionSpec:
        kw.setdefault("shards", SHARDS)
        kw.setdefault("replicas", REPLICAS)
        return zoom_pb2.CollectionSpec(**kw)

    def _replicas(self, collection: str):
        """(node stub, local collection name, dim) of every replica of `collection`."""
        out = []
        for n, s in self._node_stubs.items():
            got = s.ListCollections(zoom_pb2.ListCollectionsRequest(), timeout=10)
            for c in got.collections:
                name = c.spec.name
                if name.startswith(collection + "_s") and name[len(collection) + 2:].split(
                        "_")[0].isdigit():
                    out.append((s, name, c.spec.dim))
        return out

    def sync(self, collection: str, tokens: Iterable[zoom_pb2.WriteToken]) -> None:
        """A SESSION search with the tokens on each replica directly: a node
        answers it only once it has applied them (it waits up to 1 s, else
        UNAVAILABLE; retried, bounded)."""
        tokens = list(tokens)
        if not tokens:
            return

        def applied() -> bool:
            reps = self._replicas(collection)
            if len(reps) != SHARDS * REPLICAS:
                return False
            for stub, local, dim in reps:
                try:
                    stub.Search(zoom_pb2.SearchRequest(
                        collection=local, vector=[1.0] * dim, k=1,
                        consistency=zoom_pb2.SESSION, after=tokens), timeout=10)
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.UNAVAILABLE:
                        return False
                    raise
            return True
        wait_until(f"every replica of {collection} to apply {len(tokens)} write tokens",
                   applied, 30, 0.05)

    def barrier(self, collection: str) -> None:
        """A Delete of ids no test uses, one on each shard (a shard's log is in
        order: its token covers every write before it), then sync."""
        ids = [(1 << 63) + i for i in range(32)]
        r = self.vs.Delete(zoom_pb2.DeleteRequest(collection=collection, ids=ids), timeout=30)
        assert sorted(t.shard for t in r.tokens) == list(range(SHARDS)), r
        self.sync(collection, r.tokens)


def make_backend(name: str, root: pathlib.Path, models_dir: pathlib.Path) -> Backend:
    if not os.access(zoomd_binary(), os.X_OK):
        raise FileNotFoundError(f"{zoomd_binary()} is not an executable (build it, or set "
                                "ZOOMD_BINARY)")
    if name == "cluster":
        if not os.access(NATS, os.X_OK):
            raise FileNotFoundError(f"{NATS}: nats-server is not installed")
        return Cluster(root, models_dir)
    return Standalone(root, models_dir)


def temp_root(prefix: str) -> pathlib.Path:
    return pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))


def remove_root(root: pathlib.Path) -> None:
    if not os.environ.get("ZOOM_CONFORMANCE_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["Backend", "Standalone", "Cluster", "make_backend", "temp_root", "remove_root",
           "health", "wait_until", "NATS", "SHARDS", "REPLICAS", "NODES", "CLUSTER_NAME"]
