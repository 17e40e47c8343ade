"""The calls of the zoomd API as data: each public method of Client and
AsyncClient builds an Op (the RPC, the serialized request, how to read the
answer, whether a retry is safe) here, and runs it its own way (blocking or
asyncio). Requests are serialized here so that both clients send the same
bytes."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from zoomd import _convert as cv
from zoomd._proto import decoder_pb2, zoom_pb2
from zoomd.errors import DeadlineExceeded, ZoomError, error_for, from_rpc_error, invalid
from zoomd.models import (ImportResult, IndexSpec, Record, SearchKnobs, SearchResult,
                          TopKResult, TopKStep)

_VS = "/zoom.v1.VectorSearch/"
_DEC = "/zoom.v1.Decoder/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"

# Response types of the unary methods (requests go out as bytes).
UNARY: Dict[str, Any] = {
    _VS + "GetServerInfo": zoom_pb2.GetServerInfoResponse,
    _VS + "CreateCollection": zoom_pb2.CreateCollectionResponse,
    _VS + "DropCollection": zoom_pb2.DropCollectionResponse,
    _VS + "ListCollections": zoom_pb2.ListCollectionsResponse,
    _VS + "GetCollection": zoom_pb2.GetCollectionResponse,
    _VS + "Upsert": zoom_pb2.UpsertResponse,
    _VS + "Delete": zoom_pb2.DeleteResponse,
    _VS + "Get": zoom_pb2.GetResponse,
    _VS + "SetPayload": zoom_pb2.SetPayloadResponse,
    _VS + "DeletePayload": zoom_pb2.DeletePayloadResponse,
    _VS + "Search": zoom_pb2.SearchResponse,
    _VS + "SearchBatch": zoom_pb2.SearchBatchResponse,
    _VS + "Count": zoom_pb2.CountResponse,
    _VS + "Scroll": zoom_pb2.ScrollResponse,
    _VS + "CreateFieldIndex": zoom_pb2.CreateFieldIndexResponse,
    _VS + "DeleteFieldIndex": zoom_pb2.DeleteFieldIndexResponse,
    _VS + "BuildIndex": zoom_pb2.BuildIndexResponse,
    _VS + "Compact": zoom_pb2.CompactResponse,
    _VS + "CreateSnapshot": zoom_pb2.CreateSnapshotResponse,
    _VS + "ListSnapshots": zoom_pb2.ListSnapshotsResponse,
    _VS + "DeleteSnapshot": zoom_pb2.DeleteSnapshotResponse,
    _DEC + "LoadModel": decoder_pb2.LoadModelResponse,
    _DEC + "UnloadModel": decoder_pb2.UnloadModelResponse,
    _DEC + "ListModels": decoder_pb2.ListModelsResponse,
    _DEC + "TopK": decoder_pb2.TopKResponse,
}
IMPORT = _VS + "Import"
STREAM_TOPK = _DEC + "StreamTopK"

#: The collection fields a request needs checked on the client: (dim, dtype).
Shape = Tuple[int, str]


class _Default:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


#: A method's ``timeout`` when the caller passes none: the client's default
#: deadline (its ``timeout``), except for a call that waits for a job on the
#: server (Op.waits), which then has no deadline. ``timeout=None`` passed to
#: a method is no deadline, whatever the client's default.
DEFAULT: Any = _Default()

#: A method's timeout: seconds, None (no deadline) or DEFAULT.
Timeout = Union[None, float, _Default]

# What a call that waits for a job leaves on the server when its deadline
# passes (added to DeadlineExceeded's message). "If it had started": a
# request still queued on the server at its deadline is not run.
BUILD_JOB = ("the build goes on on the server if it had started; call get_collection to see "
             "its state (index_state, build_progress)")
FIELD_INDEX_JOB = ("the field index goes on being built on the server if it had started; call "
                   "get_collection to see it (field_indexes[...].ready)")
COMPACT_JOB = ("the compaction goes on on the server if it had started; call get_collection "
               "to see its state (deleted_points, compaction_error)")
SNAPSHOT_JOB = ("the snapshot goes on being written on the server if it had started; call "
                "list_snapshots to see it")
MODEL_JOB = ("the model goes on loading on the server if it had started; call list_models to "
             "see its state")
IMPORT_JOB = ("the import stopped there: the points of the batches the server had stored stay "
              "(get_collection's points counts them), the rest were not imported")


@dataclass
class Op:
    """One unary call: method path, request bytes, reader of the response."""
    method: str
    request: bytes
    read: Callable[[Any], Any]
    idempotent: bool
    collection: str = ""  # whose cached shape to forget when the server refuses
    #: A call that starts a job on the server (a build, a model load): what
    #: goes on there when the call's deadline passes (see rpc_error).
    job: str = ""
    #: The call waits for the job (the build, ...) to end: without a timeout
    #: from the caller it has no deadline (not the client's default).
    waits: bool = False

    @property
    def name(self) -> str:
        return self.method.rsplit("/", 1)[-1]


@dataclass
class RetryPolicy:
    """Retries of UNAVAILABLE (only): `attempts` in all, the n-th retry after
    about initial_backoff * multiplier^n seconds (full jitter, at most
    max_backoff), never past the call's deadline. Reads are retried; writes
    only with retry_writes (an Upsert is idempotent by id, an Import batch is
    too, but a retried Delete-by-filter may delete points written between)."""
    attempts: int = 4
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    retry_writes: bool = False

    def delay(self, retry: int) -> float:
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** retry)
        return random.uniform(cap / 2, cap)

    def allows(self, op: Op, code: Optional[grpc.StatusCode], attempt: int) -> bool:
        return (code == grpc.StatusCode.UNAVAILABLE and attempt + 1 < self.attempts and
                (op.idempotent or self.retry_writes))


def rpc_error(err: grpc.RpcError, method: str, job: str = "") -> ZoomError:
    """from_rpc_error, with `job` (what goes on on the server, e.g.
    BUILD_JOB) added to the message of a DEADLINE_EXCEEDED."""
    e = from_rpc_error(err, method)
    if job and e.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        e = error_for(e.code, f"{e.message}; {job}" if e.message else job, method)
    return e


def seconds(what: str, t: Any) -> Optional[float]:
    """A timeout checked: seconds (a number, not NaN) or None."""
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or \
            t != t:
        raise invalid(f"{what}: expected seconds (a number) or None (no deadline); got {t!r}")
    return float(t)


def _ser(msg: Any) -> bytes:
    return msg.SerializeToString()


def _name(what: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise invalid(f"{what}: expected a non-empty string; got {name!r}")
    return name


def _uint32(what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**32:
        raise invalid(f"{what}: expected an integer in [0, 2^32); got {v!r}")
    return int(v)


# ---- The server ------------------------------------------------------------------------

def server_info() -> Op:
    return Op(_VS + "GetServerInfo", b"", cv.server_info, True)


# ---- Collections -----------------------------------------------------------------------

def create_collection(name: str, dim: int, metric: str, dtype: str, index: Optional[IndexSpec],
                      default_knobs: Union[None, SearchKnobs, Mapping[str, int]],
                      cache_bytes: Optional[int] = None, shards: Optional[int] = None,
                      replicas: Optional[int] = None) -> Op:
    spec = cv.collection_spec(name, dim, metric, dtype, index, default_knobs, cache_bytes,
                              shards, replicas)
    return Op(_VS + "CreateCollection", _ser(zoom_pb2.CreateCollectionRequest(spec=spec)),
              lambda r: cv.collection_info(r.info), False, name)


def get_collection(name: str) -> Op:
    return Op(_VS + "GetCollection",
              _ser(zoom_pb2.GetCollectionRequest(name=_name("name", name))),
              lambda r: cv.collection_info(r.info), True, name)


def list_collections() -> Op:
    return Op(_VS + "ListCollections", b"",
              lambda r: [cv.collection_info(i) for i in r.collections], True)


def drop_collection(name: str) -> Op:
    return Op(_VS + "DropCollection",
              _ser(zoom_pb2.DropCollectionRequest(name=_name("name", name))), lambda r: None,
              False, name)


def build_index(name: str, wait: bool) -> Op:
    return Op(_VS + "BuildIndex",
              _ser(zoom_pb2.BuildIndexRequest(collection=_name("name", name), wait=wait)),
              lambda r: cv.collection_info(r.info), True, name, job=BUILD_JOB, waits=wait)


def compact(name: str) -> Op:
    # The server answers once the compaction is done: a call that waits.
    return Op(_VS + "Compact", _ser(zoom_pb2.CompactRequest(collection=_name("name", name))),
              lambda r: cv.collection_info(r.info), True, name, job=COMPACT_JOB, waits=True)


def create_field_index(name: str, field: str, type: str, wait: bool) -> Op:
    req = zoom_pb2.CreateFieldIndexRequest(collection=_name("name", name),
                                           field=_name("field", field),
                                           type=cv.field_type(type), wait=wait)
    return Op(_VS + "CreateFieldIndex", _ser(req), lambda r: cv.collection_info(r.info), True,
              name, job=FIELD_INDEX_JOB, waits=wait)


def delete_field_index(name: str, field: str) -> Op:
    req = zoom_pb2.DeleteFieldIndexRequest(collection=_name("name", name),
                                           field=_name("field", field))
    return Op(_VS + "DeleteFieldIndex", _ser(req), lambda r: cv.collection_info(r.info), True,
              name)


# ---- Points ------------------------------------------------------------------------------

#: A write's `write_concern=`: None (the server's default, majority), "log",
#: "majority", "all" (any case) or a zoom_pb2.WRITE_CONCERN_* value.
WriteConcernLike = Union[None, str, int]


def write_concern(value: Any) -> int:
    """`write_concern=` checked (InvalidArgument, nothing sent) as the
    zoom.v1.WriteConcern number; an int it returned passes again unchanged."""
    return cv.write_concern(value)


def _concern_field(number: int, concern: int) -> bytes:
    """The varint field `number` of a request built as bytes (none for DEFAULT)."""
    return cv.varint(number << 3) + cv.varint(concern) if concern else b""


def upsert(name: str, shape: Shape, ids: Any, vectors: Any, payloads: Optional[Sequence[Any]],
           raw_payloads: Optional[Sequence[Optional[bytes]]], tokens: Optional[list] = None,
           write_concern: WriteConcernLike = None) -> Op:
    concern = cv.write_concern(write_concern)
    mat = cv.matrix_2d(vectors, shape[0], shape[1])
    id_list = cv.ids_array(ids, mat.shape[0])
    body = cv.points_message(name, id_list, mat, payloads, raw_payloads, shape[1]) + \
        _concern_field(3, concern)  # UpsertRequest.write_concern

    def read(r: zoom_pb2.UpsertResponse) -> int:
        cv.merge_tokens(tokens, r.tokens)
        return r.upserted
    return Op(_VS + "Upsert", body, read, False, name)


def delete(name: str, ids: Any, filter: cv.FilterLike, tokens: Optional[list] = None,
           all: bool = False, write_concern: WriteConcernLike = None) -> Op:
    concern = cv.write_concern(write_concern)
    if (ids is None) == (filter is None) and not (all and ids is None):
        raise invalid("delete: pass exactly one of ids and filter (or all=True alone to "
                      "delete every point)")
    if ids is not None and all:
        raise invalid("delete: all=True goes with a filter or alone, not with ids")
    req = zoom_pb2.DeleteRequest(collection=_name("name", name), all=bool(all),
                                 write_concern=concern)
    if ids is not None:
        req.ids.extend(cv.ids_array(ids))
    elif filter is not None:
        cv.fill_filter(filter, req.filter)
    def read(r: zoom_pb2.DeleteResponse) -> int:
        cv.merge_tokens(tokens, r.tokens)
        return r.deleted
    return Op(_VS + "Delete", _ser(req), read, False, name)


def get(name: str, ids: Any, with_vectors: bool, with_payload: bool) -> Op:
    req = zoom_pb2.GetRequest(collection=_name("name", name), ids=cv.ids_array(ids),
                              with_vectors=with_vectors, with_payload=with_payload)
    return Op(_VS + "Get", _ser(req),
              lambda r: [cv.record_of(p, with_payload, with_vectors) for p in r.points], True,
              name)


def set_payload(name: str, ids: Any, payload: Mapping[str, Any], overwrite: bool,
                tokens: Optional[list] = None, write_concern: WriteConcernLike = None) -> Op:
    concern = cv.write_concern(write_concern)
    req = zoom_pb2.SetPayloadRequest(collection=_name("name", name), ids=cv.ids_array(ids),
                                     overwrite=overwrite, write_concern=concern)
    cv.fill_fields(payload, req.fields)

    def read(r: zoom_pb2.SetPayloadResponse) -> int:
        cv.merge_tokens(tokens, r.tokens)
        return r.updated
    return Op(_VS + "SetPayload", _ser(req), read, False, name)


def delete_payload(name: str, ids: Any, keys: Optional[Sequence[str]],
                   tokens: Optional[list] = None, write_concern: WriteConcernLike = None) -> Op:
    concern = cv.write_concern(write_concern)
    req = zoom_pb2.DeletePayloadRequest(collection=_name("name", name), ids=cv.ids_array(ids),
                                        keys=list(keys or []), write_concern=concern)

    def read(r: zoom_pb2.DeletePayloadResponse) -> int:
        cv.merge_tokens(tokens, r.tokens)
        return r.updated
    return Op(_VS + "DeletePayload", _ser(req), read, False, name)


def count(name: str, filter: cv.FilterLike) -> Op:
    req = zoom_pb2.CountRequest(collection=_name("name", name))
    cv.fill_filter(filter, req.filter)
    return Op(_VS + "Count", _ser(req), lambda r: r.count, True, name)


def scroll(name: str, filter: cv.FilterLike, offset: int, limit: int, with_payload: bool,
           with_vectors: bool) -> Op:
    req = zoom_pb2.ScrollRequest(collection=_name("name", name), offset=int(offset),
                                 limit=int(limit), with_payload=with_payload,
                                 with_vectors=with_vectors)
    cv.fill_filter(filter, req.filter)

    def read(r: zoom_pb2.ScrollResponse) -> Tuple[List[Record], Optional[int]]:
        pts = [cv.record_of(p, with_payload, with_vectors) for p in r.points]
        return pts, (r.next_offset if r.HasField("next_offset") else None)
    return Op(_VS + "Scroll", _ser(req), read, True, name)


# ---- Search ------------------------------------------------------------------------------

def search(name: str, shape: Shape, vector: Any, k: int, ef: Optional[int],
           nprobe: Optional[int], rerank: Optional[int], preview_only: bool, exact: bool,
           with_payload: bool, with_vectors: bool, filter: cv.FilterLike,
           allow_partial: bool, rerank_stop_sd: Optional[float] = None,
           target_recall: Optional[float] = None, min_coverage: Optional[float] = None,
           after: Any = None, band_confidence: Optional[float] = None,
           exact_scores: bool = False) -> Op:
    row = cv.vector_1d(vector, shape[0], shape[1])
    head = cv.search_template(_name("name", name), k, ef, nprobe, rerank, preview_only, exact,
                              with_payload, with_vectors, allow_partial, filter,
                              rerank_stop_sd, target_recall, min_coverage, after,
                              band_confidence, exact_scores)
    return Op(_VS + "Search", head + cv.query_vector(row, shape[1]),
              lambda r: cv.search_result(r, with_payload, with_vectors), True, name)


def search_batch(name: str, shape: Shape, vectors: Any, k: int, ef: Optional[int],
                 nprobe: Optional[int], rerank: Optional[int], preview_only: bool, exact: bool,
                 with_payload: bool, with_vectors: bool, filter: cv.FilterLike,
                 allow_partial: bool, rerank_stop_sd: Optional[float] = None,
                 target_recall: Optional[float] = None, min_coverage: Optional[float] = None,
                 after: Any = None, band_confidence: Optional[float] = None,
                 exact_scores: bool = False) -> Op:
    mat = cv.matrix_2d(vectors, shape[0], shape[1])
    head = cv.search_template("", k, ef, nprobe, rerank, preview_only, exact, with_payload,
                              with_vectors, allow_partial, filter, rerank_stop_sd,
                              target_recall, min_coverage, after, band_confidence,
                              exact_scores)
    parts = [cv.field_bytes(1, _name("name", name).encode())]
    for row in mat:
        parts.append(cv.field_bytes(2, head + cv.query_vector(row, shape[1])))

    def read(r: zoom_pb2.SearchBatchResponse) -> List[SearchResult]:
        return [cv.search_result(x, with_payload, with_vectors) for x in r.results]
    return Op(_VS + "SearchBatch", b"".join(parts), read, True, name)


# ---- Snapshots -----------------------------------------------------------------------------

def create_snapshot(name: str) -> Op:
    # The server answers once the archive is written: a call that waits.
    return Op(_VS + "CreateSnapshot",
              _ser(zoom_pb2.CreateSnapshotRequest(collection=_name("name", name))),
              lambda r: r.snapshot, False, name, job=SNAPSHOT_JOB, waits=True)


def list_snapshots(name: str) -> Op:
    return Op(_VS + "ListSnapshots",
              _ser(zoom_pb2.ListSnapshotsRequest(collection=_name("name", name))),
              lambda r: list(r.snapshots), True, name)


def delete_snapshot(name: str, snapshot: str) -> Op:
    req = zoom_pb2.DeleteSnapshotRequest(collection=_name("name", name),
                                         name=_name("snapshot", snapshot))
    return Op(_VS + "DeleteSnapshot", _ser(req), lambda r: None, True, name)


# ---- Decoder -------------------------------------------------------------------------------

def load_model(name: str, dir: str, m: int, ef_construction: int, wait: bool,
               default_ef: int = 0) -> Op:
    req = decoder_pb2.LoadModelRequest(name=_name("name", name), dir=_name("dir", str(dir)),
                                       m=_uint32("m", m),
                                       ef_construction=_uint32("ef_construction", ef_construction),
                                       wait=wait, default_ef=_uint32("default_ef", default_ef))
    return Op(_DEC + "LoadModel", _ser(req), lambda r: cv.model_info(r.info), False,
              job=MODEL_JOB, waits=wait)


def unload_model(name: str) -> Op:
    return Op(_DEC + "UnloadModel",
              _ser(decoder_pb2.UnloadModelRequest(name=_name("name", name))), lambda r: None,
              True)


def list_models() -> Op:
    return Op(_DEC + "ListModels", b"", lambda r: [cv.model_info(m) for m in r.models], True)


def topk_arrays(results: Sequence[decoder_pb2.TopKResult], return_words: bool,
                return_probs: bool) -> TopKResult:
    n = len(results)
    k = min((len(r.ids) for r in results), default=0)
    ids = np.empty((n, k), dtype=np.uint32)
    logits = np.empty((n, k), dtype=np.float32)
    probs = np.empty((n, k), dtype=np.float32) if return_probs else None
    tail = np.empty(n, dtype=np.float32) if return_probs else None
    micros = np.empty(n, dtype=np.uint64)
    words: Optional[List[List[str]]] = [] if return_words else None
    for i, r in enumerate(results):
        ids[i] = np.asarray(r.ids[:k], dtype=np.uint32)
        logits[i] = np.asarray(r.logits[:k], dtype=np.float32)
        if probs is not None:
            probs[i] = np.asarray(r.probs[:k], dtype=np.float32)
            tail[i] = r.tail_mass
        if words is not None:
            words.append(list(r.words[:k]))
        micros[i] = r.stats.micros
    return TopKResult(ids=ids, logits=logits, probs=probs, tail_mass=tail, words=words,
                      micros=micros)


def topk(model: str, contexts: Any, k: int, ef: int, return_words: bool, return_probs: bool,
         exact: bool, tail_samples: int, tail: Optional[str] = None) -> Op:
    mat = cv.contexts_2d(contexts)
    body = cv.topk_request(_name("model", model), mat, k, ef, return_words, return_probs, exact,
                           tail_samples, tail)
    return Op(_DEC + "TopK", body,
              lambda r: topk_arrays(r.results, return_words, return_probs), True)


# ---- Import ------------------------------------------------------------------------------

def default_batch(dim: int) -> int:
    """Points per Import message: about 4 MiB of vectors, at most 10,000 (the
    server's default --max_batch)."""
    return max(1, min(10000, (4 << 20) // (4 * dim + 16)))


def import_source(source: Any, ids: Any, payloads: Optional[Sequence[Any]],
                  raw_payloads: Optional[Sequence[Optional[bytes]]], start_id: int,
                  batch_size: int) -> Tuple[Optional[int], Any]:
    """(total points if known, an iterator of (ids, vectors, payloads, raw)
    batches) of an array, a .fvecs/.bvecs path or an iterator of batches
    (arrays, or (ids, vectors) / (ids, vectors, payloads) tuples)."""
    import os
    from zoomd.io import read_vecs

    if isinstance(source, (str, os.PathLike)):
        source = read_vecs(source)
    if isinstance(source, (np.ndarray, list)):
        arr = source if isinstance(source, np.ndarray) else np.asarray(source)
        if arr.ndim != 2:
            raise invalid(f"vectors: expected a 2-d array (n, dim); got shape {tuple(arr.shape)}")
        n = arr.shape[0]
        id_list = cv.ids_array(ids, n) if ids is not None else None
        if payloads is not None and len(payloads) != n:
            raise invalid(f"payloads: {len(payloads)} payloads for {n} vectors")
        if raw_payloads is not None and len(raw_payloads) != n:
            raise invalid(f"raw_payloads: {len(raw_payloads)} for {n} vectors")
        if id_list is None and start_id + n - 1 > (1 << 64) - 1:
            raise invalid("start_id: the ids would pass 2^64-1")

        def gen() -> Any:
            for a, b in cv.split(n, batch_size):
                bid = id_list[a:b] if id_list is not None else list(range(start_id + a,
                                                                          start_id + b))
                yield (bid, arr[a:b], payloads[a:b] if payloads is not None else None,
                       raw_payloads[a:b] if raw_payloads is not None else None)
        return n, gen()
    if ids is not None or payloads is not None or raw_payloads is not None:
        raise invalid("import_points: with an iterator of batches, pass ids and payloads in "
                      "the batches ((ids, vectors) or (ids, vectors, payloads) tuples)")

    def gen_iter() -> Any:
        next_id = start_id
        for i, batch in enumerate(source):
            if isinstance(batch, tuple):
                if len(batch) not in (2, 3):
                    raise invalid(f"batch {i}: expected (ids, vectors) or (ids, vectors, "
                                  f"payloads); got a tuple of {len(batch)}")
                bid, vec = batch[0], batch[1]
                pl = batch[2] if len(batch) == 3 else None
            else:
                vec, bid, pl = batch, None, None
            arr = np.asarray(vec)
            if arr.ndim != 2:
                raise invalid(f"batch {i}: expected a 2-d array (n, dim); got shape "
                              f"{tuple(arr.shape)}")
            n = arr.shape[0]
            if bid is None:
                bid = list(range(next_id, next_id + n))
                next_id += n
            for a, b in cv.split(n, batch_size):
                yield (bid[a:b], arr[a:b], pl[a:b] if pl is not None else None, None)
    return None, gen_iter()


def import_message(name: str, shape: Shape, batch: Any, first: bool,
                   write_concern: int = 0) -> Tuple[int, bytes]:
    """One ImportRequest; the first names the collection and carries the
    write concern (the server takes the first message's for every batch)."""
    bid, vec, pl, raw = batch
    mat = cv.matrix_2d(vec, shape[0], shape[1])
    id_list = cv.ids_array(bid, mat.shape[0])
    body = cv.points_message(name if first else "", id_list, mat, pl, raw, shape[1])
    if first:
        body += _concern_field(3, cv.write_concern(write_concern))  # ImportRequest.write_concern
    return mat.shape[0], body


def import_result(resp: zoom_pb2.ImportResponse, secs: float) -> ImportResult:
    return ImportResult(imported=resp.imported, seconds=secs,
                        write_concern=cv.concern_name(resp.write_concern))


# ---- What both clients share -------------------------------------------------------------

class Base:
    """The state and plumbing of Client and AsyncClient: a channel's
    multi-callables (the sync and the grpc.aio channel have the same API),
    the metadata, the default timeout, the retry policy and the cached
    collection shapes."""

    def __init__(self, channel: Any, md: Sequence[Tuple[str, str]], timeout: Optional[float],
                 retry: Optional[RetryPolicy]) -> None:
        self._channel = channel
        self._metadata = tuple(md)
        #: The deadline in seconds of each call that does not wait for a job
        #: and is given no timeout (None: none).
        self.timeout = seconds("timeout", timeout)
        self.retry = retry if retry is not None else RetryPolicy()
        self._unary: Dict[str, Any] = {
            m: channel.unary_unary(m, request_serializer=None, response_deserializer=t.FromString)
            for m, t in UNARY.items()}
        self._health = channel.unary_unary(HEALTH_CHECK)
        self._import = channel.stream_unary(
            IMPORT, response_deserializer=zoom_pb2.ImportResponse.FromString)
        self._stream_topk = channel.stream_stream(
            STREAM_TOPK, response_deserializer=decoder_pb2.TopKResponse.FromString)
        self._shapes: Dict[str, Shape] = {}

    def _deadline(self, timeout: Timeout, waits: bool = False) -> Optional[float]:
        """The monotonic deadline of a call given its method's `timeout`:
        DEFAULT is the client's timeout, or none for a call that waits for a
        job (waits); None is none."""
        if timeout is DEFAULT:
            t = None if waits else self.timeout
        else:
            t = seconds("timeout", timeout)
        return None if t is None else time.monotonic() + t

    @staticmethod
    def _left(op_name: str, deadline: Optional[float]) -> Optional[float]:
        """Seconds to the deadline; DeadlineExceeded (nothing sent) once it passed."""
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"the deadline passed before {op_name} was sent",
                                   client_side=True, method=op_name)
        return left

    def _pause(self, op: Op, err: grpc.RpcError, attempt: int, deadline: Optional[float]) -> float:
        """After a failed attempt: the pause before the next one, or the
        failure raised as a ZoomError (forgetting the collection's cached shape
        when the server did not know it or refused the input)."""
        code = err.code() if hasattr(err, "code") else None
        if self.retry.allows(op, code, attempt):
            pause = self.retry.delay(attempt)
            if deadline is None or time.monotonic() + pause < deadline:
                return pause
        if op.collection and code in (grpc.StatusCode.NOT_FOUND,
                                      grpc.StatusCode.INVALID_ARGUMENT):
            self._shapes.pop(op.collection, None)
        raise rpc_error(err, op.name, op.job) from None

    def _retry_shape(self, name: str, err: ZoomError) -> None:
        """A client-side error from a cached shape: forget it (the caller
        builds once more with the info re-read); any other: raise it."""
        if not err.stale_shape or name not in self._shapes:
            raise err
        self._shapes.pop(name, None)


class StepRequests:
    """The fixed part of a StreamTopK stream: its checked arguments, each
    step's request, and the reading of its answer (sync and asyncio streams)."""

    def __init__(self, model: str, k: int, ef: int, return_words: bool,
                 return_probs: bool) -> None:
        cv.topk_request(model, [], k, ef, return_words, return_probs, False, 0)  # checks
        self.model, self.k, self.ef = model, k, ef
        self.words, self.probs = return_words, return_probs

    def request(self, h: Any) -> bytes:
        return cv.topk_request(self.model, [cv.context_1d(h)], self.k, self.ef, self.words,
                               self.probs, False, 0)

    def read(self, resp: decoder_pb2.TopKResponse) -> TopKStep:
        r = topk_arrays(resp.results, self.words, self.probs)
        return TopKStep(ids=r.ids[0], logits=r.logits[0],
                        probs=r.probs[0] if r.probs is not None else None,
                        tail_mass=float(r.tail_mass[0]) if r.tail_mass is not None else None,
                        words=r.words[0] if r.words is not None else None)
