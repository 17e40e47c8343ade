"""The fault runner's workload and checker's reads (tests/cluster/fault_runner.py):
what each id may hold (History), the client thread that writes and reads
through the routers (Workload), and every replica's view of the ids
(read_replicas)."""
import random
import threading
import time
from typing import Dict, List, Optional, Set, Tuple

import grpc
import numpy as np

from zoomd._proto import zoom_pb2, zoom_pb2_grpc
from cluster_procs import local_shards
from test_cluster_e2e import Cluster

DIM = 16
ABSENT = ("absent",)  # a point's state: ABSENT, or ("live", payload, field)

State = Tuple

def say(msg: str) -> None:
    print(msg, flush=True)


def stub(target: str):
    return zoom_pb2_grpc.VectorSearchStub(grpc.insecure_channel(target))


def vector_of(i: int) -> List[float]:
    """Point i's own vector (deterministic): exact search finds it alone."""
    return np.random.default_rng(i).standard_normal(DIM).astype(np.float32).tolist()


class History:
    """What each id may hold: the state the last acknowledged operation
    fixed, and every outcome of an operation that failed (it may have been
    applied, even later)."""

    def __init__(self) -> None:
        self.fixed: Dict[int, State] = {}
        self.maybe: Dict[int, Set[State]] = {}
        self.attempted: Set[int] = set()

    def allowed(self, i: int) -> Set[State]:
        out = set(self.maybe.get(i, set()))
        out.add(self.fixed.get(i, ABSENT))
        return out

    def acked(self, i: int, state: State) -> None:
        self.attempted.add(i)
        self.fixed[i] = state

    def failed(self, i: int, state: State) -> None:
        self.attempted.add(i)
        self.maybe.setdefault(i, set()).add(state)

    def current(self, i: int) -> State:
        return self.fixed.get(i, ABSENT)


class Workload:
    """One client thread: writes and session reads through the routers."""

    def __init__(self, cluster: Cluster, rng: random.Random, history: History,
                 first_id: int) -> None:
        self.cluster, self.rng, self.h = cluster, rng, history
        self.next_id = first_id
        self.stubs = {r: stub(cluster.target(r)) for r in cluster.routers}
        self.stop = threading.Event()
        self.acked = self.failed = self.reads = self.read_unavailable = 0
        self.violations: List[str] = []
        self.tokens: Dict[int, int] = {}
        self.lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None
        self.version = 0
        self.errors: Dict[str, int] = {}  # failed operations by gRPC code
        self.first_error: Dict[str, str] = {}

    def start(self) -> None:
        self.stop.clear()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=60)
            assert not self.thread.is_alive(), "the workload did not stop"

    def _failed(self, op: str, e: grpc.RpcError) -> None:
        """Counts a failed operation; a short pause so that a dead router is
        not asked thousands of times a second."""
        self.failed += 1
        key = f"{op}:{e.code().name}"
        self.errors[key] = self.errors.get(key, 0) + 1
        self.first_error.setdefault(key, (e.details() or "")[:200])
        time.sleep(0.02)

    def _stub(self):
        return self.stubs[self.rng.choice(self.cluster.routers)]

    def _note_tokens(self, toks) -> None:
        with self.lock:
            for t in toks:
                self.tokens[t.shard] = max(self.tokens.get(t.shard, 0), t.sequence)

    def _live_ids(self) -> List[int]:
        return [i for i, s in self.h.fixed.items() if s[0] == "live"]

    def _session_search(self, i: int, toks, want_present: bool) -> None:
        req = zoom_pb2.SearchRequest(collection="docs", vector=vector_of(i), k=1, exact=True,
                                     consistency=zoom_pb2.SESSION, after=toks)
        try:
            got = self._stub().Search(req, timeout=5)
        except grpc.RpcError:
            self.read_unavailable += 1
            return
        self.reads += 1
        top = [h.id for h in got.hits]
        if want_present and top != [i]:
            self.violations.append(f"session read after writing {i} answered {top}")
        if not want_present and i in top:
            self.violations.append(f"session read after deleting {i} still answered it")

    def probe(self, router: str) -> bool:
        """One upsert of a new id through `router` (the workload stopped):
        True once acknowledged. Recorded in the history as any write."""
        i = self.next_id
        self.next_id += 1
        self.version += 1
        state = ("live", b"probe%d-%d" % (i, self.version), None)
        try:
            resp = self.stubs[router].Upsert(zoom_pb2.UpsertRequest(
                collection="docs", points=[zoom_pb2.Point(id=i, vector=vector_of(i),
                                                          payload=state[1])]), timeout=5)
        except grpc.RpcError:
            self.h.failed(i, state)
            return False
        self._note_tokens(resp.tokens)
        self.h.acked(i, state)
        return True

    def _run(self) -> None:
        while not self.stop.is_set():
            self.version += 1
            live = self._live_ids()
            op = self.rng.choices(["upsert", "overwrite", "delete", "set_payload"],
                                  [5, 2, 1, 1] if live else [1, 0, 0, 0])[0]
            try:
                if op == "upsert" or op == "overwrite":
                    if op == "upsert":
                        ids = list(range(self.next_id, self.next_id + 5))
                        self.next_id += 5
                    else:
                        ids = self.rng.sample(live, min(3, len(live)))
                    states = {i: ("live", b"v%d-%d" % (i, self.version), None) for i in ids}
                    pts = [zoom_pb2.Point(id=i, vector=vector_of(i), payload=states[i][1])
                           for i in ids]
                    try:
                        resp = self._stub().Upsert(zoom_pb2.UpsertRequest(
                            collection="docs", points=pts), timeout=5)
                    except grpc.RpcError as e:
                        self._failed(op, e)
                        for i in ids:
                            self.h.failed(i, states[i])
                        continue
                    self.acked += 1
                    self._note_tokens(resp.tokens)
                    for i in ids:
                        self.h.acked(i, states[i])
                    self._session_search(ids[0], resp.tokens, True)
                elif op == "delete":
                    i = self.rng.choice(live)
                    try:
                        resp = self._stub().Delete(zoom_pb2.DeleteRequest(
                            collection="docs", ids=[i]), timeout=5)
                    except grpc.RpcError as e:
                        self._failed(op, e)
                        self.h.failed(i, ABSENT)
                        continue
                    self.acked += 1
                    self._note_tokens(resp.tokens)
                    self.h.acked(i, ABSENT)
                    self._session_search(i, resp.tokens, False)
                else:
                    i = self.rng.choice(live)
                    cur = self.h.current(i)
                    state = ("live", cur[1], self.version)
                    try:
                        resp = self._stub().SetPayload(zoom_pb2.SetPayloadRequest(
                            collection="docs", ids=[i],
                            fields={"v": zoom_pb2.Value(integer_value=self.version)}),
                            timeout=5)
                    except grpc.RpcError as e:
                        self._failed(op, e)
                        self.h.failed(i, state)
                        # A failed SetPayload on a point an earlier failed op
                        # may have changed: its field on any of those.
                        for m in list(self.h.maybe.get(i, set())):
                            if m[0] == "live":
                                self.h.failed(i, ("live", m[1], self.version))
                        continue
                    self.acked += 1
                    self._note_tokens(resp.tokens)
                    self.h.acked(i, state)
                    for m in list(self.h.maybe.get(i, set())):
                        if m[0] == "live":  # an uncertain overwrite, its field set now
                            self.h.failed(i, ("live", m[1], self.version))
            except Exception as e:  # noqa: BLE001  (a bug here must not hang the run)
                self.violations.append(f"workload error: {e!r}")
                time.sleep(0.1)




def read_replicas(cluster: Cluster, ids: List[int]) -> Dict[int, Dict[str, Dict[int, State]]]:
    """shard -> node -> id -> state, for the ids a replica holds."""
    out: Dict[int, Dict[str, Dict[int, State]]] = {}
    for h in cluster.nodes:
        s = stub(cluster.target(h))
        for shard, name in local_shards(cluster.target(h)).items():
            have: Dict[int, State] = {}
            for b in range(0, len(ids), 1000):
                got = s.Get(zoom_pb2.GetRequest(collection=name, ids=ids[b:b + 1000],
                                                with_payload=True, with_vectors=True),
                            timeout=30)
                for p in got.points:
                    field = p.fields["v"].integer_value if "v" in p.fields else None
                    # A vector other than the point's own is a state no
                    # operation wrote (every write of id i sends vector_of(i)).
                    payload = p.payload if np.array_equal(
                        np.asarray(p.vector, dtype=np.float32),
                        np.asarray(vector_of(p.id), dtype=np.float32)) else b"<wrong vector>"
                    have[p.id] = ("live", payload, field)
            out.setdefault(shard, {})[h] = have
    return out
