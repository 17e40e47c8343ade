"""Conversions between Python values and zoomd's protos, with the client-side
checks (shapes, dimensions, NaN, payload types) that run before a request
goes out, and the wire encoding of vectors (numpy bytes straight into the
protobuf encoding: packed floats are little-endian float32)."""

from __future__ import annotations

import math
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from google.protobuf import json_format

from zoomd._proto import decoder_pb2, zoom_pb2
from zoomd.errors import invalid
from zoomd.models import (Calibration, CalibrationPoint, CollectionInfo, FieldIndexInfo,
                          GeoPoint, IndexSpec, ModelInfo, Payload, QueryStats, Record,
                          ScoredPoint, SearchKnobs, SearchResult, ServerInfo, WriteToken)

FilterLike = Union[None, Mapping[str, Any], zoom_pb2.Filter]

_METRICS = {"l2": zoom_pb2.L2, "euclid": zoom_pb2.L2, "ip": zoom_pb2.INNER_PRODUCT,
            "inner_product": zoom_pb2.INNER_PRODUCT, "dot": zoom_pb2.INNER_PRODUCT,
            "cosine": zoom_pb2.COSINE}
_METRIC_NAMES = {zoom_pb2.L2: "l2", zoom_pb2.INNER_PRODUCT: "ip", zoom_pb2.COSINE: "cosine"}
_DTYPES = {"float32": zoom_pb2.FLOAT32, "uint8": zoom_pb2.UINT8}
_DTYPE_NAMES = {zoom_pb2.DTYPE_UNSPECIFIED: "float32", zoom_pb2.FLOAT32: "float32",
                zoom_pb2.UINT8: "uint8"}
_KINDS = {"ivf_hnsw_pq": zoom_pb2.IVF_HNSW_PQ, "hnsw_pq": zoom_pb2.HNSW_PQ}
_KIND_NAMES = {zoom_pb2.INDEX_KIND_UNSPECIFIED: "ivf_hnsw_pq",
               zoom_pb2.IVF_HNSW_PQ: "ivf_hnsw_pq", zoom_pb2.HNSW_PQ: "hnsw_pq"}
_QUANTIZERS = {"pq": zoom_pb2.QUANTIZER_PQ, "rabitq": zoom_pb2.QUANTIZER_RABITQ}
_QUANTIZER_NAMES = {zoom_pb2.QUANTIZER_UNSPECIFIED: "pq", zoom_pb2.QUANTIZER_PQ: "pq",
                    zoom_pb2.QUANTIZER_RABITQ: "rabitq"}
_FIELD_TYPES = {"keyword": zoom_pb2.KEYWORD, "integer": zoom_pb2.INTEGER,
                "float": zoom_pb2.FLOAT, "bool": zoom_pb2.BOOL, "geo": zoom_pb2.GEO}
_FIELD_TYPE_NAMES = {v: k for k, v in _FIELD_TYPES.items()}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


def _choice(kind: str, value: str, table: Mapping[str, Any]) -> Any:
    if not isinstance(value, str) or value.lower() not in table:
        raise invalid(f"unknown {kind} {value!r}; use one of {', '.join(sorted(table))}")
    return table[value.lower()]


# ---- Varints and the encoding of vectors ------------------------------------------------

def varint(n: int) -> bytes:
    """The protobuf varint of a non-negative integer."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def packed_floats(number: int, row: np.ndarray) -> bytes:
    """A packed repeated float field holding `row` (float32, C order)."""
    data = row.tobytes()
    return varint(number << 3 | 2) + varint(len(data)) + data


# ---- Vectors ------------------------------------------------------------------------------

def _as_float32(values: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as e:  # ragged lists
        raise invalid(f"{what}: not an array of numbers ({e})") from None
    if arr.dtype == object or arr.dtype.kind not in "fiub":
        raise invalid(f"{what}: expected numbers (float32 or uint8); got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        with np.errstate(over="ignore"):
            out = arr.astype(np.float32)
        if not np.isfinite(out).all() and np.isfinite(arr).all():
            raise invalid(f"{what}: values beyond float32's range (|x| > 3.4e38)")
        return np.ascontiguousarray(out, dtype="<f4")
    return np.ascontiguousarray(arr, dtype="<f4")


def _check_values(arr: np.ndarray, what: str, dtype: str) -> None:
    finite = np.isfinite(arr)
    if not finite.all():
        where = np.argwhere(~finite)[0]
        raise invalid(f"{what}: NaN or infinity at index {tuple(int(i) for i in where)}; "
                      "vectors must be finite")
    if dtype == "uint8":
        bad = (arr < 0) | (arr > 255) | (arr != np.floor(arr))
        if bad.any():
            where = np.argwhere(bad)[0]
            raise invalid(f"{what}: the collection's dtype is uint8: components must be integers "
                          f"0..255; got {float(arr[tuple(where)])} at index "
                          f"{tuple(int(i) for i in where)}", stale_shape=True)


def vector_1d(values: Any, dim: int, dtype: str, what: str = "vector") -> np.ndarray:
    """One query vector: 1-d, `dim` finite components."""
    arr = _as_float32(values, what)
    if arr.ndim != 1:
        hint = " (for several queries use search_batch)" if arr.ndim == 2 else ""
        raise invalid(f"{what}: expected a 1-d array of {dim} numbers; got shape "
                      f"{tuple(arr.shape)}{hint}")
    if arr.shape[0] != dim:
        raise invalid(f"{what}: wrong dimension: the collection has dim {dim}; got {arr.shape[0]}",
                      stale_shape=True)
    _check_values(arr, what, dtype)
    return arr


def matrix_2d(values: Any, dim: int, dtype: str, what: str = "vectors") -> np.ndarray:
    """Vectors: a 2-d (n, dim) array of finite components."""
    arr = _as_float32(values, what)
    if arr.ndim != 2:
        hint = " (one vector: pass [vector] or vector[None, :])" if arr.ndim == 1 else ""
        raise invalid(f"{what}: expected a 2-d array of shape (n, {dim}); got shape "
                      f"{tuple(arr.shape)}{hint}")
    if arr.shape[1] != dim:
        raise invalid(f"{what}: wrong dimension: the collection has dim {dim}; got shape "
                      f"{tuple(arr.shape)}", stale_shape=True)
    _check_values(arr, what, dtype)
    return arr


def ids_array(ids: Any, n: Optional[int] = None, what: str = "ids") -> List[int]:
    """Point ids as Python ints (uint64), `n` of them when given."""
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        ids = [ids]
    try:
        arr = np.asarray(ids)
    except (ValueError, TypeError) as e:
        raise invalid(f"{what}: not a list of integers ({e})") from None
    if arr.ndim != 1:
        raise invalid(f"{what}: expected a 1-d list of integers; got shape {tuple(arr.shape)}")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype == object and all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            out = [int(x) for x in ids]
        else:
            raise invalid(f"{what}: expected integers; got dtype {arr.dtype}")
    else:
        out = [int(x) for x in arr.tolist()]
    if n is not None and len(out) != n:
        raise invalid(f"{what}: {len(out)} ids for {n} vectors")
    for x in out:
        if x < 0 or x > _UINT64_MAX:
            raise invalid(f"{what}: {x} is not a uint64 id (0..2^64-1)")
    return out


# ---- Payloads -------------------------------------------------------------------------------

def _scalar_value(x: Any, where: str, out: zoom_pb2.Value) -> None:
    if x is None:
        out.null_value = zoom_pb2.NULL_VALUE
    elif isinstance(x, (bool, np.bool_)):
        out.bool_value = bool(x)
    elif isinstance(x, (int, np.integer)):
        v = int(x)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise invalid(f"payload {where}: {v} does not fit an int64")
        out.integer_value = v
    elif isinstance(x, (float, np.floating)):
        v = float(x)
        if not math.isfinite(v):
            raise invalid(f"payload {where}: {v} is not finite")
        out.double_value = v
    elif isinstance(x, str):
        out.string_value = x
    elif isinstance(x, GeoPoint):
        out.geo_value.lat, out.geo_value.lon = float(x.lat), float(x.lon)
    elif isinstance(x, Mapping) and set(x.keys()) == {"lat", "lon"}:
        out.geo_value.lat, out.geo_value.lon = float(x["lat"]), float(x["lon"])
    elif isinstance(x, (bytes, bytearray)):
        raise invalid(f"payload {where}: bytes are not a typed value; pass opaque bytes as "
                      "raw_payloads")
    elif isinstance(x, Mapping):
        raise invalid(f"payload {where}: nested objects are not supported (only a geo point "
                      "{'lat': .., 'lon': ..}); flatten the field names, e.g. 'a.b'")
    else:
        raise invalid(f"payload {where}: unsupported type {type(x).__name__}; use str, int, "
                      "float, bool, None, a geo point or a list of those")


def to_value(x: Any, where: str, out: zoom_pb2.Value) -> None:
    """Fills `out` with the Value of a payload field."""
    if isinstance(x, (list, tuple, np.ndarray)):
        items = x.tolist() if isinstance(x, np.ndarray) else x
        lv = out.list_value
        lv.SetInParent()
        if len(items) > 1024:
            raise invalid(f"payload {where}: a list of {len(items)} values; at most 1024")
        for i, e in enumerate(items):
            if isinstance(e, (list, tuple, np.ndarray)):
                raise invalid(f"payload {where}[{i}]: lists of lists are not supported")
            if e is None:
                raise invalid(f"payload {where}[{i}]: null inside a list; leave it out")
            _scalar_value(e, f"{where}[{i}]", lv.values.add())
    else:
        _scalar_value(x, where, out)


def fill_fields(payload: Optional[Mapping[str, Any]], fields: Any) -> None:
    """Fills a proto map<string, Value> from a payload dict."""
    if payload is None:
        return
    if not isinstance(payload, Mapping):
        raise invalid(f"payload: expected a dict of field -> value; got {type(payload).__name__}")
    for k, v in payload.items():
        if not isinstance(k, str) or not k or len(k.encode()) > 256 or "\0" in k:
            raise invalid(f"payload: field names are 1..256 bytes without NUL; got {k[:64]!r}"
                          if isinstance(k, str) else
                          f"payload: field names are strings; got {type(k).__name__}")
        to_value(v, repr(k), fields[k])


def from_value(v: zoom_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "list_value":
        return [from_value(e) for e in v.list_value.values]
    if kind == "geo_value":
        return {"lat": v.geo_value.lat, "lon": v.geo_value.lon}
    return getattr(v, kind)


def from_fields(fields: Any) -> Payload:
    return {k: from_value(v) for k, v in fields.items()}


# ---- Filters ----------------------------------------------------------------------------------

def to_filter(f: FilterLike) -> Optional[zoom_pb2.Filter]:
    """A Filter proto from Qdrant's JSON shape (a dict) or a Filter proto."""
    if f is None:
        return None
    if isinstance(f, zoom_pb2.Filter):
        return f
    if not isinstance(f, Mapping):
        raise invalid(f"filter: expected a dict in Qdrant's shape or a zoom_pb2.Filter; got "
                      f"{type(f).__name__}")
    try:
        return json_format.ParseDict(f, zoom_pb2.Filter())
    except json_format.ParseError as e:
        raise invalid(f"filter: {e}") from None


# ---- Requests ---------------------------------------------------------------------------------

def knobs_proto(ef: Optional[int], nprobe: Optional[int], rerank: Optional[int],
                out: zoom_pb2.SearchKnobs) -> None:
    for name, value, field_name in (("ef", ef, "ef"), ("nprobe", nprobe, "nprobe"),
                                    ("rerank", rerank, "rerank_candidates")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise invalid(f"{name}: expected a non-negative integer; got {value!r}")
        if value > 0xFFFFFFFF:
            raise invalid(f"{name}: {value} is too large")
        setattr(out, field_name, int(value))


def target_recall_of(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0 <= float(value) <= 1:
        raise invalid(f"target_recall: expected a number in (0, 1] (0: the default); got "
                      f"{value!r}")
    return float(value)


def search_template(collection: str, k: int, ef: Optional[int], nprobe: Optional[int],
                    rerank: Optional[int], preview_only: bool, exact: bool, with_payload: bool,
                    with_vectors: bool, allow_partial: bool, filter: FilterLike,
                    rerank_stop_sd: Optional[float] = None,
                    target_recall: Optional[float] = None,
                    min_coverage: Optional[float] = None, after: Any = None) -> bytes:
    """A SearchRequest without its vector, serialized (the vector is appended
    per query: protobuf merges concatenated fields)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise invalid(f"k: expected a positive integer; got {k!r}")
    if k > 0xFFFFFFFF:
        raise invalid(f"k: {k} is too large")
    req = zoom_pb2.SearchRequest(collection=collection, k=int(k), preview_only=preview_only,
                                 exact=exact, with_payload=with_payload,
                                 with_vectors=with_vectors, allow_partial=allow_partial)
    knobs_proto(ef, nprobe, rerank, req.knobs)
    if rerank_stop_sd is not None:
        if isinstance(rerank_stop_sd, bool) or not isinstance(
                rerank_stop_sd, (int, float, np.integer, np.floating)) or \
                not 0 <= float(rerank_stop_sd) <= 100:
            raise invalid(f"rerank_stop_sd: expected a number in [0, 100]; got "
                          f"{rerank_stop_sd!r}")
        req.knobs.rerank_stop_sd = float(rerank_stop_sd)
    if target_recall is not None:
        req.knobs.target_recall = target_recall_of(target_recall)
    if min_coverage is not None:
        if isinstance(min_coverage, bool) or not isinstance(
                min_coverage, (int, float, np.integer, np.floating)) or \
                not 0 <= float(min_coverage) <= 1:
            raise invalid(f"min_coverage: expected a number in [0, 1]; got {min_coverage!r}")
        req.min_coverage = float(min_coverage)
    if after is not None:
        req.consistency = zoom_pb2.SESSION
        req.after.extend(tokens_of(after))
    flt = to_filter(filter)
    if flt is not None:
        req.filter.CopyFrom(flt)
    return req.SerializeToString()


def points_message(collection: str, ids: Sequence[int], vectors: np.ndarray,
                   payloads: Optional[Sequence[Optional[Mapping[str, Any]]]],
                   raw_payloads: Optional[Sequence[Optional[bytes]]]) -> bytes:
    """An UpsertRequest / ImportRequest (same fields) of these points."""
    n = len(ids)
    if payloads is not None and len(payloads) != n:
        raise invalid(f"payloads: {len(payloads)} payloads for {n} vectors")
    if raw_payloads is not None and len(raw_payloads) != n:
        raise invalid(f"raw_payloads: {len(raw_payloads)} for {n} vectors")
    parts = [field_bytes(1, collection.encode())] if collection else []
    vec_head = varint(2 << 3 | 2) + varint(vectors.shape[1] * 4)
    raw_rows = vectors.tobytes()
    stride = vectors.shape[1] * 4
    for i in range(n):
        pid = ids[i]
        body = (b"\x08" + varint(pid) if pid else b"") + vec_head + \
            raw_rows[i * stride:(i + 1) * stride]
        p = payloads[i] if payloads is not None else None
        r = raw_payloads[i] if raw_payloads is not None else None
        if p is not None or r:
            extra = zoom_pb2.Point()
            if r:
                if not isinstance(r, (bytes, bytearray)):
                    raise invalid(f"raw_payloads[{i}]: expected bytes; got {type(r).__name__}")
                extra.payload = bytes(r)
            fill_fields(p, extra.fields)
            body += extra.SerializeToString()
        parts.append(b"\x12" + varint(len(body)) + body)
    return b"".join(parts)


# ---- Responses -------------------------------------------------------------------------------

def stats_of(s: zoom_pb2.QueryStats) -> QueryStats:
    return QueryStats(
        preview_us=s.preview_us, fullview_us=s.fullview_us, rerank_us=s.rerank_us,
        ssd_reads=s.ssd_reads, bytes_read=s.bytes_read, candidates=s.candidates,
        distance_evals=s.distance_evals, cache_hits=s.cache_hits, degraded=s.degraded,
        exact=s.exact, filter_strategy=s.filter_strategy, filter_matches=s.filter_matches,
        filter_expansions=s.filter_expansions, filter_scan=s.filter_scan, warning=s.warning,
        fullview_rounds=s.fullview_rounds, target_recall=s.target_recall,
        calibrated_recall=s.calibrated_recall, target_reached=s.target_reached,
        knobs=SearchKnobs(ef=s.knobs.ef, nprobe=s.knobs.nprobe,
                          rerank=s.knobs.rerank_candidates) if s.HasField("knobs") else None)


def search_result(resp: zoom_pb2.SearchResponse, with_payload: bool,
                  with_vectors: bool) -> SearchResult:
    hits = []
    for h in resp.hits:
        hits.append(ScoredPoint(
            id=h.id, score=h.score,
            payload=from_fields(h.fields) if with_payload else None,
            vector=np.array(h.vector, dtype=np.float32) if with_vectors else None,
            raw_payload=h.payload))
    return SearchResult(hits, stats_of(resp.stats),
                        coverage=resp.coverage if resp.coverage > 0 else 1.0,
                        degraded=resp.degraded)


def record_of(p: zoom_pb2.Point, with_payload: bool, with_vectors: bool) -> Record:
    return Record(id=p.id,
                  vector=np.array(p.vector, dtype=np.float32) if with_vectors else None,
                  payload=from_fields(p.fields) if with_payload else None,
                  raw_payload=p.payload)


def collection_info(i: zoom_pb2.CollectionInfo) -> CollectionInfo:
    s = i.spec
    return CollectionInfo(
        name=s.name, dim=s.dim, metric=_METRIC_NAMES.get(s.metric, str(s.metric)),
        dtype=_DTYPE_NAMES.get(s.dtype, str(s.dtype)),
        index=IndexSpec(kind=_KIND_NAMES.get(s.index.kind, str(s.index.kind)), m=s.index.m,
                        ef_construction=s.index.ef_construction, pq_m=s.index.pq_m,
                        pq_nbits=s.index.pq_nbits, nlist=s.index.nlist, opq=s.index.opq,
                        compact_links=s.index.compact_links,
                        quantizer=_QUANTIZER_NAMES.get(s.index.quantizer,
                                                       str(s.index.quantizer))),
        default_knobs=SearchKnobs(ef=s.default_knobs.ef, nprobe=s.default_knobs.nprobe,
                                  rerank=s.default_knobs.rerank_candidates,
                                  target_recall=s.default_knobs.target_recall),
        points=i.points, deleted_points=i.deleted_points, stored_records=i.stored_records,
        index_state=zoom_pb2.IndexState.Name(i.index_state).lower(),
        indexed_points=i.indexed_points, resident_bytes=i.resident_bytes,
        disk_bytes=i.disk_bytes, build_progress=i.build_progress, index_error=i.index_error,
        compaction_error=i.compaction_error,
        field_indexes=[FieldIndexInfo(field=f.field,
                                      type=_FIELD_TYPE_NAMES.get(f.type, str(f.type)),
                                      ready=f.ready, points=f.points, bytes=f.bytes)
                       for f in i.field_indexes],
        trained_points=i.trained_points, auto_retrains=i.auto_retrains,
        code_error_ratio=i.code_error_ratio, drift_retrains=i.drift_retrains,
        cache_bytes=s.cache_bytes, shards=s.shards, replicas=s.replicas,
        calibration=Calibration(
            k=i.calibration.k, queries=i.calibration.queries,
            indexed_points=i.calibration.indexed_points,
            created_unix_ms=i.calibration.created_unix_ms,
            points=[CalibrationPoint(ef=p.ef, nprobe=p.nprobe, rerank=p.rerank_candidates,
                                     recall=p.recall, recall_lower=p.recall_lower,
                                     mean_us=p.mean_us, ssd_reads=p.ssd_reads)
                    for p in i.calibration.points]) if i.HasField("calibration") else None,
        calibration_current=i.calibration_current, calibration_error=i.calibration_error,
        default_target_recall=i.default_target_recall)


def collection_spec(name: str, dim: int, metric: str, dtype: str, index: Optional[IndexSpec],
                    default_knobs: Union[None, SearchKnobs, Mapping[str, int]],
                    cache_bytes: Optional[int] = None, shards: Optional[int] = None,
                    replicas: Optional[int] = None) -> zoom_pb2.CollectionSpec:
    if not isinstance(name, str) or not name:
        raise invalid("name: a collection name is 1..64 characters of [A-Za-z0-9_-]")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise invalid(f"dim: expected a positive integer; got {dim!r}")
    spec = zoom_pb2.CollectionSpec(name=name, dim=int(dim),
                                   metric=_choice("metric", metric, _METRICS),
                                   dtype=_choice("dtype", dtype, _DTYPES))
    if index is not None:
        if not isinstance(index, IndexSpec):
            raise invalid(f"index: expected a zoomd.IndexSpec; got {type(index).__name__}")
        spec.index.kind = _choice("index kind", index.kind, _KINDS)
        for f in ("m", "ef_construction", "pq_m", "pq_nbits", "nlist"):
            setattr(spec.index, f, int(getattr(index, f)))
        spec.index.opq = bool(index.opq)
        spec.index.compact_links = bool(index.compact_links)
        spec.index.quantizer = _choice("quantizer", index.quantizer, _QUANTIZERS)
    if default_knobs is not None:
        k = default_knobs if isinstance(default_knobs, SearchKnobs) else SearchKnobs(**default_knobs)
        knobs_proto(k.ef, k.nprobe, k.rerank, spec.default_knobs)
        if k.target_recall:
            spec.default_knobs.target_recall = target_recall_of(k.target_recall)
    if cache_bytes is not None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or \
                not 0 <= cache_bytes < 2**64:
            raise invalid(f"cache_bytes: expected a non-negative integer; got {cache_bytes!r}")
        spec.cache_bytes = int(cache_bytes)
    for what, v in (("shards", shards), ("replicas", replicas)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**32:
            raise invalid(f"{what}: expected a non-negative integer; got {v!r}")
        setattr(spec, what, int(v))
    return spec


def tokens_of(after: Any) -> List[zoom_pb2.WriteToken]:
    """WriteTokens (or (shard, sequence) pairs) as protos."""
    out = []
    for t in after:
        shard, seq = (t.shard, t.sequence) if isinstance(t, (WriteToken, zoom_pb2.WriteToken)) \
            else t
        out.append(zoom_pb2.WriteToken(shard=int(shard), sequence=int(seq)))
    return out


def merge_tokens(into: Optional[List[WriteToken]], got: Any) -> None:
    """Adds a response's tokens to `into`, one a shard (the highest)."""
    if into is None:
        return
    best = {t.shard: t.sequence for t in into}
    for t in got:
        best[t.shard] = max(best.get(t.shard, 0), t.sequence)
    into[:] = [WriteToken(shard=k, sequence=v) for k, v in sorted(best.items())]


def field_type(t: str) -> int:
    return _choice("field index type", t, _FIELD_TYPES)


def model_info(m: decoder_pb2.ModelInfo) -> ModelInfo:
    return ModelInfo(name=m.name, dir=m.dir, vocab_size=m.vocab_size, dim=m.dim,
                     graph_bytes=m.graph_bytes, resident_bytes=m.resident_bytes,
                     state=decoder_pb2.ModelState.Name(m.state).lower(), progress=m.progress,
                     error=m.error, m=m.m, ef_construction=m.ef_construction,
                     graph_from_cache=m.graph_from_cache, default_ef=m.default_ef,
                     default_ef_source=m.default_ef_source or "builtin",
                     calibration_contexts=m.calibration_contexts,
                     calibration_p1=m.calibration_p1, calibration_p5=m.calibration_p5,
                     calibration_error=m.calibration_error)


def server_info(r: zoom_pb2.GetServerInfoResponse) -> ServerInfo:
    return ServerInfo(version=r.version, simd_level=r.simd_level,
                      started_unix_ms=r.started_unix_ms)


def contexts_2d(contexts: Any, what: str = "contexts") -> np.ndarray:
    arr = _as_float32(contexts, what)
    if arr.ndim != 2:
        hint = " (one context: pass [h] or h[None, :])" if arr.ndim == 1 else ""
        raise invalid(f"{what}: expected a 2-d array (n, d); got shape {tuple(arr.shape)}{hint}")
    _check_values(arr, what, "float32")
    return arr


def context_1d(h: Any, what: str = "context") -> np.ndarray:
    arr = _as_float32(h, what)
    if arr.ndim != 1:
        raise invalid(f"{what}: expected a 1-d array of d floats; got shape {tuple(arr.shape)}")
    _check_values(arr, what, "float32")
    return arr


_TAILS = {None: 0, "clusters": 1, "sample": 2, "none": 3}


def topk_request(model: str, contexts: Iterable[np.ndarray], k: int, ef: int, return_words: bool,
                 return_probs: bool, exact: bool, tail_samples: int,
                 tail: Optional[str] = None) -> bytes:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise invalid(f"k: expected a positive integer; got {k!r}")
    if tail not in _TAILS:
        raise invalid(f"tail: expected 'clusters', 'sample', 'none' or None; got {tail!r}")
    head = decoder_pb2.TopKRequest(model=model, k=int(k), ef=int(ef or 0),
                                   return_words=return_words, return_probs=return_probs,
                                   exact=exact, tail_samples=int(tail_samples or 0),
                                   tail=_TAILS[tail]).SerializeToString()
    parts = [head]
    for row in contexts:
        ctx = packed_floats(1, row)
        parts.append(b"\x12" + varint(len(ctx)) + ctx)
    return b"".join(parts)


def health_request(service: str) -> bytes:
    return field_bytes(1, service.encode()) if service else b""


_HEALTH = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def health_status(data: bytes) -> str:
    """grpc.health.v1.HealthCheckResponse's status (field 1, a varint)."""
    status, i = 0, 0
    while i < len(data):
        tag = data[i]
        i += 1
        if tag != 0x08:
            break
        shift = 0
        status = 0
        while i < len(data):
            b = data[i]
            i += 1
            status |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
    return _HEALTH.get(status, str(status))


def split(n: int, batch: int) -> List[Tuple[int, int]]:
    return [(i, min(n, i + batch)) for i in range(0, n, batch)]
