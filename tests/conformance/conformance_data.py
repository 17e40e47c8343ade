"""The data of the API conformance suite (issue 46): the deterministic points
every backend is filled with, the Decoder's models, the numpy oracle, and the
request builders the cases share.

Importing it puts the Python client (client/python, for its protos) and this
directory on sys.path: the other modules of the suite import it first.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"  # children forked beside gRPC's threads

import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "client" / "python"))
sys.path.insert(0, str(HERE))
from zoomd._proto import decoder_pb2 as dpb  # noqa: E402
from zoomd._proto import zoom_pb2 as pb  # noqa: E402

# ---- data ----------------------------------------------------------------------------

DIM, N = 16, 600
RNG = np.random.default_rng(46)
IDS = [1000 + 7 * i for i in range(N)]  # sparse, so that offsets between ids mean something
VECS = RNG.standard_normal((N, DIM)).astype(np.float32)
SMALL_DIM, SMALL_N = 8, 100
SMALL_IDS = [5 + 3 * i for i in range(SMALL_N)]
SMALL = RNG.standard_normal((SMALL_N, SMALL_DIM)).astype(np.float32)
U8 = RNG.integers(0, 256, (SMALL_N, SMALL_DIM)).astype(np.uint8)
BUILT_N = 800
BUILT = RNG.standard_normal((BUILT_N, DIM)).astype(np.float32)
BUILT_IDS = list(range(1, BUILT_N + 1))
QUERIES = RNG.standard_normal((8, DIM)).astype(np.float32)
SMALL_Q = RNG.standard_normal((4, SMALL_DIM)).astype(np.float32)
WIDE_DIM = 4096  # the server's --max_dim: an answer estimate over the message limit
# A uint8 query of the u8 collection (its own generator: RNG's draws above stay as they are).
RNG_Q8 = np.random.default_rng(88).integers(0, 256, SMALL_DIM).astype(np.uint8)


def fields_of(i: int) -> Dict[str, Any]:
    f: Dict[str, Any] = {
        "cat": f"c{i % 5}",
        "n": i,
        "price": i * 0.5,
        "flag": i % 2 == 0,
        "tags": [f"t{i % 3}", f"u{i % 7}"],
        "loc": (-60.0 + (i % 120), -170.0 + (i * 3 % 340)),
    }
    if i % 10 == 0:
        f["opt"] = None
    elif i % 10 == 1:
        f["opt"] = i
    if i % 4 == 0:
        f["empty"] = []
    return f


FIELDS = [fields_of(i) for i in range(N)]


def val(x: Any) -> pb.Value:
    if x is None:
        return pb.Value(null_value=pb.NULL_VALUE)
    if isinstance(x, bool):
        return pb.Value(bool_value=x)
    if isinstance(x, int):
        return pb.Value(integer_value=x)
    if isinstance(x, float):
        return pb.Value(double_value=x)
    if isinstance(x, str):
        return pb.Value(string_value=x)
    if isinstance(x, tuple):
        return pb.Value(geo_value=pb.GeoPoint(lat=x[0], lon=x[1]))
    if isinstance(x, list):
        return pb.Value(list_value=pb.ListValue(values=[val(v) for v in x]))
    raise TypeError(x)


def unval(v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "geo_value":
        return (v.geo_value.lat, v.geo_value.lon)
    if kind == "list_value":
        return [unval(x) for x in v.list_value.values]
    return getattr(v, kind)


def pvals(d: Dict[str, Any]) -> Dict[str, pb.Value]:
    return {k: val(x) for k, x in d.items()}


def doc_point(i: int) -> pb.Point:
    return pb.Point(id=IDS[i], vector=VECS[i].tolist(), payload=b"p%d" % i,
                    fields=pvals(FIELDS[i]))


# ---- the oracle ------------------------------------------------------------------------


def exact_top(vectors: np.ndarray, ids: Sequence[int], q: np.ndarray, k: int, metric: str,
              allowed: Optional[Callable[[int], bool]] = None):
    """(ids, scores) of the k best by the metric's own score."""
    v = vectors.astype(np.float64)
    qq = q.astype(np.float64)
    if metric == "l2":
        s = ((v - qq) ** 2).sum(axis=1)
        order = np.argsort(s, kind="stable")
    elif metric == "ip":
        s = v @ qq
        order = np.argsort(-s, kind="stable")
    else:
        s = (v / np.linalg.norm(v, axis=1, keepdims=True)) @ (qq / np.linalg.norm(qq))
        order = np.argsort(-s, kind="stable")
    order = [i for i in order if allowed is None or allowed(i)][:k]
    return [ids[i] for i in order], [float(s[i]) for i in order]


def close(a: float, b: float, rel: float = 1e-4, abs_: float = 1e-5) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def assert_scores(got: Sequence[float], want: Sequence[float]) -> None:
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert close(g, w), (list(got), list(want))


# ---- the models ------------------------------------------------------------------------------

MODEL_V, MODEL_D = 400, 16


def write_model(d: pathlib.Path, seed: int = 7) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((MODEL_V, MODEL_D)).astype(np.float32)
    b = (0.1 * rng.standard_normal(MODEL_V)).astype(np.float32)
    d.mkdir(parents=True)
    W.tofile(d / "W.f32")
    b.tofile(d / "b.f32")
    (d / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(MODEL_V)))
    (d / "meta.json").write_text(json.dumps({"vocab_size": MODEL_V, "dim": MODEL_D}))
    return {"W": W, "b": b}


# ---- requests --------------------------------------------------------------------------------


def S(**kw) -> pb.SearchRequest:
    kw.setdefault("collection", "docs")
    kw.setdefault("k", 5)
    if "vector" not in kw and "vector_bytes" not in kw:
        kw["vector"] = QUERIES[0].tolist()
    return pb.SearchRequest(**kw)


def F(**kw) -> pb.Filter:
    return pb.Filter(**kw)


def C(**kw) -> pb.Condition:
    return pb.Condition(**kw)


def deep_filter(levels: int) -> pb.Filter:
    f = F(must=[C(key="cat", match=pb.Match(keyword="c1"))])
    for _ in range(levels):
        f = F(must=[C(filter=f)])
    return f


BAD_FILTERS = {
    # name: (filter, code, fragment)
    "no_key": (F(must=[C(match=pb.Match(keyword="x"))]), "INVALID_ARGUMENT", "needs a key"),
    "range_on_keyword_index": (F(must=[C(key="cat", range=pb.Range(lt=3))]),
                               "INVALID_ARGUMENT", "keyword index"),
    "too_deep": (deep_filter(9), "INVALID_ARGUMENT", "deep"),
    "any_1025_values": (F(must=[C(key="cat", match=pb.Match(
        integers=pb.Integers(values=list(range(1025)))))]), "RESOURCE_EXHAUSTED", "1024"),
    "nan_bound": (F(must=[C(key="price", range=pb.Range(gt=float("nan")))]),
                  "INVALID_ARGUMENT", "NaN"),
    "min_should_over": (F(min_should=pb.MinShould(
        conditions=[C(key="cat", match=pb.Match(keyword="c1"))], min_count=2)),
        "INVALID_ARGUMENT", "min_count"),
    "has_id_65537": (F(must=[C(has_id=list(range(65537)))]), "RESOURCE_EXHAUSTED", "65536"),
    "empty_condition": (F(must=[C()]), "INVALID_ARGUMENT", ""),
    "two_kinds": (F(must=[C(key="cat", match=pb.Match(keyword="c1"), range=pb.Range(lt=1))]),
                  "INVALID_ARGUMENT", ""),
    "geo_off_globe": (F(must=[C(key="loc", geo_radius=pb.GeoRadius(
        center=pb.GeoPoint(lat=91, lon=0), radius=10))]), "INVALID_ARGUMENT", ""),
    "257_conditions": (F(must=[C(key="n", match=pb.Match(integer=i)) for i in range(257)]),
                       "INVALID_ARGUMENT", "256"),
}


def point(i: int, **kw) -> pb.Point:
    kw.setdefault("id", 1 + i)
    if "vector" not in kw and "vector_bytes" not in kw:
        kw["vector"] = [0.25] * DIM
    return pb.Point(**kw)


def U(points, collection="scratch") -> pb.UpsertRequest:
    return pb.UpsertRequest(collection=collection, points=points)


def topk(**kw) -> dpb.TopKRequest:
    kw.setdefault("model", "tiny")
    kw.setdefault("k", 5)
    kw.setdefault("contexts", [dpb.Context(h=[0.1] * MODEL_D)])
    return dpb.TopKRequest(**kw)


MB = 1 << 20


def small_points(n: int, dim: int = 4, first: int = 1) -> List[pb.Point]:
    rng = np.random.default_rng(first)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return [pb.Point(id=first + i, vector=v[i].tolist(), payload=b"x%d" % (first + i),
                     fields=pvals({"g": f"g{(first + i) % 3}", "i": first + i}))
            for i in range(n)]
