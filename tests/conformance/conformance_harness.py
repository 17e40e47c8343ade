"""The harness of the API conformance suite (issue 46): calling an RPC on a
backend and taking its outcome (the answer, or an Err), `normalise`, the
backends started (and filled) on first use (`Env`; its fixture is in
conftest.py), the error cases' machinery (`Case`, `error_params`,
`run_error_case`), and the comparison of answers between the backends
(`check`, `same`, the *_view functions, `covers`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
import re
from typing import Any, Callable, Dict, Iterable, List, Optional

# conformance_data first: it sets GRPC_ENABLE_FORK_SUPPORT and sys.path.
from conformance_data import (BUILT, BUILT_IDS, BUILT_N, DIM, N, SMALL, SMALL_DIM, SMALL_IDS,
                              SMALL_N, U8, WIDE_DIM, close, doc_point, point, pvals, small_points,
                              unval, write_model)

import grpc  # noqa: E402
import pytest  # noqa: E402

import backends as B  # noqa: E402
from conformance_drift import over_backends  # noqa: E402
from zoomd._proto import decoder_pb2 as dpb  # noqa: E402
from zoomd._proto import zoom_pb2 as pb  # noqa: E402


# ---- calls and their outcomes ------------------------------------------------------------

DECODER_RPCS = {"LoadModel", "UnloadModel", "ListModels", "TopK", "StreamTopK"}
CLIENT_STREAMING = {"Import", "RestoreSnapshot"}
SERVER_STREAMING = {"DownloadSnapshot"}
BIDI = {"StreamTopK"}


def call(b: B.Backend, rpc: str, req: Any, timeout: float = 60) -> Any:
    fn = getattr(b.dec if rpc in DECODER_RPCS else b.vs, rpc)
    if rpc in CLIENT_STREAMING:
        return fn(iter(list(req)), timeout=timeout)
    if rpc in BIDI:
        return list(fn(iter(list(req)), timeout=timeout))
    if rpc in SERVER_STREAMING:
        return list(fn(req, timeout=timeout))
    return fn(req, timeout=timeout)


@dataclasses.dataclass
class Err:
    code: str
    message: str


def outcome(b: B.Backend, rpc: str, req: Any, timeout: float = 60) -> Any:
    try:
        return call(b, rpc, req, timeout)
    except grpc.RpcError as e:
        return Err(e.code().name, e.details() or "")


LOCAL_NAME = re.compile(r"\b([A-Za-z0-9_-]+?)_s\d+_[0-9a-f]{8}\b")
UPLOAD_NAME = re.compile(r"\bupload-\d+-\d+\.zsnap\b")


def normalise(message: str) -> str:
    """A node's replica name <collection>_s<k>_<uid8> reads as <collection>; a
    restore's staging file upload-<time>-<n>.zsnap as upload.zsnap. Nothing else
    is rewritten."""
    return UPLOAD_NAME.sub("upload.zsnap", LOCAL_NAME.sub(r"\1", message))


def expect_error(got: Any, code: str, fragment: str) -> Err:
    assert isinstance(got, Err), f"expected {code} ({fragment!r}), got OK: {got}"
    assert got.code == code, f"expected {code}, got {got.code}: {got.message}"
    assert fragment in got.message, f"{fragment!r} not in {got.message!r}"
    return got


def same_error(got: Err, ref: Err) -> None:
    assert (got.code, normalise(got.message)) == (ref.code, normalise(ref.message)), (
        f"\n cluster:    {got.code}: {got.message}\n standalone: {ref.code}: {ref.message}")


def without_tokens(resp: Any) -> Any:
    """A response without its write tokens (a cluster's only)."""
    if hasattr(resp, "DESCRIPTOR") and "tokens" in resp.DESCRIPTOR.fields_by_name:
        resp = type(resp).FromString(resp.SerializeToString())
        resp.ClearField("tokens")
    return resp


def ok(got: Any) -> Any:
    assert not isinstance(got, Err), f"{got.code}: {got.message}"
    return got


# ---- the backends, started once ---------------------------------------------------------

_fresh = itertools.count(1)


def env_fresh(prefix: str) -> str:
    """A collection or model name no other case uses (the same counter for both
    backends: a case that runs on both gets two names)."""
    return f"{prefix}{next(_fresh)}"


class Env:
    """The backends, each started (and filled) on first use, stopped at the end."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.models_dir = root / "models"
        self.model = write_model(self.models_dir / "tiny")
        write_model(self.models_dir / "tiny2", seed=8)
        broken = self.models_dir / "broken"
        write_model(broken)
        (broken / "W.f32").write_bytes(b"\0" * 100)  # not V x d floats
        self.backends: Dict[str, B.Backend] = {}
        self.failed: Dict[str, str] = {}

    def get(self, name: str) -> B.Backend:
        if name in self.failed:
            pytest.fail(f"{name} did not start: {self.failed[name]}", pytrace=False)
        if name == "cluster" and not os.access(B.NATS, os.X_OK):
            pytest.skip(f"{B.NATS}: nats-server is not installed (deploy/install-deps.sh)")
        if name not in self.backends:
            (self.root / name).mkdir()
            b = B.make_backend(name, self.root / name, self.models_dir)
            self.backends[name] = b
            try:
                b.start()
                fill(b)
            except BaseException as e:
                self.failed[name] = f"{e}\n{b.logs()}"
                raise
        return self.backends[name]

    def stop(self) -> None:
        for b in self.backends.values():
            b.stop()


def upsert(b: B.Backend, collection: str, points: List[pb.Point]) -> pb.UpsertResponse:
    r = b.vs.Upsert(pb.UpsertRequest(collection=collection, points=points), timeout=60)
    b.sync(collection, r.tokens)
    return r


def create(b: B.Backend, name: str, dim: int, metric=pb.L2, **kw) -> pb.CollectionInfo:
    return b.vs.CreateCollection(pb.CreateCollectionRequest(
        spec=b.spec(name=name, dim=dim, metric=metric, **kw)), timeout=60).info


def fill(b: B.Backend) -> None:
    """The read-only collections every backend holds the same way."""
    create(b, "docs", DIM)
    for field, t in (("cat", pb.KEYWORD), ("n", pb.INTEGER)):
        b.vs.CreateFieldIndex(pb.CreateFieldIndexRequest(collection="docs", field=field, type=t,
                                                         wait=True), timeout=60)
    for lo in range(0, N, 300):  # after the field indexes: their tokens cover them
        upsert(b, "docs", [doc_point(i) for i in range(lo, min(N, lo + 300))])
    create(b, "ipc", SMALL_DIM, pb.INNER_PRODUCT)
    upsert(b, "ipc", [pb.Point(id=SMALL_IDS[i], vector=SMALL[i].tolist()) for i in range(SMALL_N)])
    create(b, "cosc", SMALL_DIM, pb.COSINE)
    upsert(b, "cosc", [pb.Point(id=SMALL_IDS[i], vector=SMALL[i].tolist())
                       for i in range(SMALL_N)])
    create(b, "u8", SMALL_DIM, dtype=pb.UINT8)
    upsert(b, "u8", [pb.Point(id=SMALL_IDS[i], vector_bytes=U8[i].tobytes())
                     for i in range(SMALL_N)])
    create(b, "built", DIM)
    upsert(b, "built", [pb.Point(id=BUILT_IDS[i], vector=BUILT[i].tolist())
                        for i in range(BUILT_N)])
    b.vs.BuildIndex(pb.BuildIndexRequest(collection="built", wait=True), timeout=120)
    create(b, "wide", WIDE_DIM)
    # Where the write cases go (one that should have been refused lands here).
    create(b, "scratch", DIM)
    b.vs.CreateFieldIndex(pb.CreateFieldIndexRequest(collection="scratch", field="cat",
                                                     type=pb.KEYWORD, wait=True), timeout=60)
    upsert(b, "scratch", [point(i, fields=pvals({"cat": f"c{i % 2}", "n": i}))
                          for i in range(20)])
    # The point SetPayload.fields_under_limit_over_log_entry sets (it exists:
    # the case is about the fields' size, not about ids that do not).
    upsert(b, "scratch", [point(0, id=77001)])
    b.dec.LoadModel(dpb.LoadModelRequest(name="tiny", dir="tiny", wait=True), timeout=120)


def both(env: Env, bname: str):
    """The backend under test, and the reference (the standalone) when it is the cluster."""
    b = env.get(bname)
    return b, (env.get("standalone") if bname == "cluster" else None)


# ---- the error cases: one request, one code, the same message on both ----------------------


@dataclasses.dataclass
class Case:
    id: str
    rpc: str
    request: Callable[[], Any]  # built when run (some are large)
    code: str
    fragment: str  # in the standalone's message (what the case is about)


def error_params(cases: List[Case]) -> List[Any]:
    """(case, backend) parameters, each with the id `<case id>-<backend>`."""
    out = []
    for c in cases:
        for p in over_backends(c.id):
            out.append(pytest.param(c, *p.values, marks=p.marks, id=f"{c.id}-{p.values[0]}"))
    return out


def run_error_case(case: Case, bname: str, env: Env) -> None:
    """The body of every module's test_error."""
    b, ref = both(env, bname)
    req = case.request()
    try:
        _check_case(case, req, b, ref)
    finally:
        cleanup_created(case, req, (b, ref))


def _check_case(case: Case, req: Any, b: B.Backend, ref: Optional[B.Backend]) -> None:
    # A router answers a CreateCollection it should have refused only once the
    # replicas serve, or after 10 s: a shorter deadline ends that wait.
    timeout = 4 if case.rpc == "CreateCollection" else 60
    got = outcome(b, case.rpc, req, timeout)
    if case.code == "OK":
        ok(got)
        if ref is not None:
            assert without_tokens(got) == without_tokens(ok(outcome(ref, case.rpc, req, timeout)))
        return
    expect_error(got, case.code, case.fragment if ref is None else "")
    if ref is not None:
        same_error(got, expect_error(outcome(ref, case.rpc, req, timeout), case.code,
                                     case.fragment))


def cleanup_created(case: Case, req: Any, backends: Iterable[Optional[B.Backend]]) -> None:
    """A CreateCollection a backend should have refused and did not: dropped."""
    if case.rpc != "CreateCollection" or case.code == "ALREADY_EXISTS":
        return
    for b in backends:
        if b is not None:
            outcome(b, "DropCollection", pb.DropCollectionRequest(name=req.spec.name))


# ---- comparing answers ----------------------------------------------------------------------


def same(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats within 1e-4 relative."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (path, a, b)
        assert close(float(a), float(b)), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(a), sorted(b))
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


def fields_view(m) -> Dict[str, Any]:
    return {k: unval(v) for k, v in sorted(m.items())}


def hit_view(h: pb.Hit) -> Dict[str, Any]:
    return {"id": h.id, "score": h.score, "payload": h.payload, "vector": list(h.vector),
            "fields": fields_view(h.fields)}


def point_view(p: pb.Point) -> Dict[str, Any]:
    return {"id": p.id, "vector": list(p.vector), "payload": p.payload,
            "fields": fields_view(p.fields)}


def search_view(r: pb.SearchResponse) -> Dict[str, Any]:
    """What must be the same on both backends: the hits, coverage, whether
    it is exact, and the filter's counts."""
    s = r.stats
    return {"hits": [hit_view(h) for h in r.hits], "coverage": r.coverage,
            "degraded": r.degraded, "exact": s.exact, "filter_matches": s.filter_matches,
            "filter_scan": s.filter_scan, "warning": s.warning}


# CollectionInfo fields that legitimately differ: the RAM and disk of the
# replicas (two shards, each with its own files) are not a standalone's.
INFO_IMPLEMENTATION = {"resident_bytes", "disk_bytes"}


# Compared by their own cases (test_collection_info_*), so that a drift in
# one of them does not hide the rest of an answer.
INFO_OWN_CASES = {"default_target_recall"}


def info_view(info: pb.CollectionInfo) -> Dict[str, Any]:
    """CollectionInfo as compared: no byte sizes, no spec name (the tests'
    fresh names differ), no shards / replicas (asked for on the cluster
    only), field indexes without their point counts (their own case)."""
    d = {f.name: getattr(info, f.name) for f in info.DESCRIPTOR.fields
         if f.name not in INFO_IMPLEMENTATION | INFO_OWN_CASES |
         {"spec", "field_indexes", "calibration"}}
    spec = pb.CollectionSpec()
    spec.CopyFrom(info.spec)
    spec.ClearField("shards")  # asked for on the cluster only
    spec.ClearField("replicas")
    spec.ClearField("name")  # the tests' fresh names differ
    d["spec"] = spec.SerializeToString(deterministic=True)
    d["field_indexes"] = sorted((f.field, f.type, f.ready) for f in info.field_indexes)
    return d


# RPC -> the happy-path tests that run it, filled as the test modules are imported
# (test_every_rpc_has_cases, in test_rpc_coverage.py, imports every one).
HAPPY: Dict[str, List[str]] = {}


def covers(*rpcs: str):
    def mark(fn):
        for r in rpcs:
            HAPPY.setdefault(r, []).append(fn.__name__)
        return fn
    return mark


def check(b: B.Backend, ref: Optional[B.Backend], scenario: Callable[[B.Backend], Any]) -> Any:
    """Runs the scenario on b (it asserts the oracle) and, on the cluster, on
    the standalone too: the two views must be the same."""
    got = scenario(b)
    if ref is not None:
        same(got, scenario(ref))
    return got


# ---- shared scenarios ------------------------------------------------------------------------


def filled(x: B.Backend, prefix: str, n: int = 30) -> str:
    name = env_fresh(prefix)
    create(x, name, 4)
    upsert(x, name, small_points(n))
    return name
