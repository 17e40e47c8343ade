"""zoomd.Client: the blocking client (one gRPC channel; safe to share between
threads)."""

from __future__ import annotations

import queue
import time
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from zoomd import _convert as cv
from zoomd import _ops as ops
from zoomd._channel import channel_args, metadata
from zoomd._progress import Progress
from zoomd.errors import NotFound, ZoomError, from_rpc_error, invalid
from zoomd.models import (CollectionInfo, ImportResult, IndexSpec, ModelInfo, Record,
                          SearchKnobs, SearchResult, ServerInfo, TopKResult, TopKStep)

__all__ = ["Client", "TopKStream"]

_Timeout = ops.Timeout
#: A method's timeout when none is given (see ops.DEFAULT).
_DEFAULT = ops.DEFAULT


class Client(ops.Base):
    """A blocking client of one zoomd server.

    target: "host:port". api_key: sent as ``authorization: Bearer KEY`` (else
    $ZOOM_API_KEY if set). tls: None (plaintext), True (the system's CA
    roots), a CA file path, a :class:`zoomd.TLS` or grpc credentials.
    timeout: the default deadline in seconds of each call that does not
    wait for a job (None: none). retry: a :class:`zoomd.RetryPolicy`
    (UNAVAILABLE only; reads by default, writes only with retry_writes).
    channel: an existing grpc.Channel to use instead of target/tls.

    Each method's ``timeout`` overrides the default: seconds, or None for no
    deadline at all. The calls that wait for a job on the server, whose
    length is the job's and not a round trip's (build_index and
    create_field_index with wait, compact, create_snapshot, load_model with
    wait, import_points), have no deadline unless given a ``timeout`` (the
    client's default does not apply to them); when a deadline passes,
    :class:`zoomd.DeadlineExceeded`'s message says what goes on on the
    server. A deadline already past raises DeadlineExceeded without sending.

    Use as a context manager or call close(). Vectors go in as numpy arrays
    (float32, or uint8 for uint8 collections) or lists; the client checks
    their shape, dimension and values before a request goes out, from the
    collection's info (fetched once per collection, then cached).
    """

    def __init__(self, target: str = "127.0.0.1:50051", api_key: Optional[str] = None,
                 tls: Any = None, timeout: Optional[float] = None,
                 retry: Optional[ops.RetryPolicy] = None,
                 channel: Optional[grpc.Channel] = None) -> None:
        if channel is None:
            creds, options = channel_args(tls)
            channel = (grpc.secure_channel(target, creds, options=options) if creds is not None
                       else grpc.insecure_channel(target, options=options))
        super().__init__(channel, metadata(api_key), timeout, retry)

    # ---- Plumbing --------------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel (calls in flight are cancelled)."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, op: ops.Op, timeout: _Timeout = _DEFAULT) -> Any:
        deadline = self._deadline(timeout, op.waits)
        call = self._unary[op.method]
        attempt = 0
        while True:
            try:
                return op.read(call(op.request, timeout=self._left(op.name, deadline),
                                    metadata=self._metadata))
            except grpc.RpcError as e:
                time.sleep(self._pause(op, e, attempt, deadline))
                attempt += 1

    def _shape(self, name: str, timeout: _Timeout = _DEFAULT) -> ops.Shape:
        shape = self._shapes.get(name)
        if shape is None:
            info = self.get_collection(name, timeout=timeout)
            shape = (info.dim, info.dtype)
        return shape

    def _checked(self, name: str, build: Any, timeout: _Timeout,
                 method: str = "") -> ops.Op:
        """build(shape) with the cached shape; on a client-side shape error,
        once more with the shape fetched afresh (the collection may have been
        re-created with another dimension)."""
        try:
            shape = self._shape(name, timeout)
        except NotFound as e:
            # The collection's shape is looked up first: name the call the
            # user made, not that lookup (GetCollection).
            if method:
                e.method = method
            raise
        try:
            return build(shape)
        except ZoomError as e:
            self._retry_shape(name, e)
            return build(self._shape(name, timeout))

    # ---- The server --------------------------------------------------------------------

    def health(self, service: str = "", timeout: _Timeout = _DEFAULT) -> str:
        """The gRPC health status: "SERVING", "NOT_SERVING" (e.g. still
        recovering at start-up) or "SERVICE_UNKNOWN"."""
        deadline = self._deadline(timeout)
        try:
            data = self._health(cv.health_request(service), metadata=self._metadata,
                                timeout=None if deadline is None else deadline - time.monotonic())
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Health.Check") from None
        return cv.health_status(data)

    def server_info(self, timeout: _Timeout = _DEFAULT) -> ServerInfo:
        """The server's version, SIMD level and start time."""
        return self._run(ops.server_info(), timeout)

    def server_version(self, timeout: _Timeout = _DEFAULT) -> str:
        """The server's version, e.g. "0.1.0"."""
        return self.server_info(timeout).version

    # ---- Collections -------------------------------------------------------------------

    def create_collection(self, name: str, dim: int, metric: str = "cosine",
                          dtype: str = "float32", index: Optional[IndexSpec] = None,
                          default_knobs: Union[None, SearchKnobs, Mapping[str, int]] = None,
                          timeout: _Timeout = _DEFAULT,
                          cache_bytes: Optional[int] = None, shards: Optional[int] = None,
                          replicas: Optional[int] = None) -> CollectionInfo:
        """Creates a collection. metric: "l2" (score: squared distance, lower
        is better), "ip" or "cosine" (higher is better). dtype: "float32" or
        "uint8". index: how the preview is built (IndexSpec; defaults: the
        server's). default_knobs: the collection's search defaults
        (SearchKnobs or {"ef":, "nprobe":, "rerank":}). cache_bytes: the
        collection's DRAM cache of hot full vectors (None/0: the server's
        --cache_bytes; at most its --max_cache_bytes). shards, replicas: a
        clustered collection, created through a cluster's router (None: 1
        shard, 2 replicas or 1 on a one-node cluster; a standalone zoomd
        takes none). AlreadyExists if taken."""
        info = self._run(ops.create_collection(name, dim, metric, dtype, index, default_knobs,
                                               cache_bytes, shards, replicas), timeout)
        self._shapes[name] = (info.dim, info.dtype)
        return info

    def get_collection(self, name: str, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """A collection's spec and state. NotFound if there is none."""
        info = self._run(ops.get_collection(name), timeout)
        self._shapes[name] = (info.dim, info.dtype)
        return info

    def list_collections(self, timeout: _Timeout = _DEFAULT) -> List[CollectionInfo]:
        """Every collection's info."""
        return self._run(ops.list_collections(), timeout)

    def drop_collection(self, name: str, timeout: _Timeout = _DEFAULT) -> None:
        """Deletes a collection and its files. NotFound if there is none."""
        self._shapes.pop(name, None)
        self._run(ops.drop_collection(name), timeout)

    def build_index(self, name: str, wait: bool = True,
                    timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """Builds (or rebuilds) the collection's index from its points; with
        wait, returns once it serves. A build already running counts as this one.
        With wait there is no deadline unless `timeout` is given (not the
        client's default): past it, DeadlineExceeded says the build goes on
        on the server (get_collection shows its state)."""
        return self._run(ops.build_index(name, wait), timeout)

    def compact(self, name: str, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """Rewrites the collection without its deleted points (searches go
        on); returns when it is done. No deadline unless `timeout` is given:
        past it, DeadlineExceeded says the compaction goes on on the server."""
        return self._run(ops.compact(name), timeout)

    def create_field_index(self, name: str, field: str, type: str = "keyword",
                           wait: bool = True, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """An in-RAM payload index on `field` (keyword, integer, float, bool or
        geo), built over the existing points (wait: before returning) and kept
        current by every write. With wait there is no deadline unless
        `timeout` is given: past it, DeadlineExceeded says the index goes on
        being built on the server."""
        return self._run(ops.create_field_index(name, field, type, wait), timeout)

    def delete_field_index(self, name: str, field: str,
                           timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """Drops a payload index (filters on the field then scan the payloads)."""
        return self._run(ops.delete_field_index(name, field), timeout)

    # ---- Points --------------------------------------------------------------------------

    def upsert(self, name: str, ids: Any, vectors: Any,
               payloads: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
               raw_payloads: Optional[Sequence[Optional[bytes]]] = None,
               timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
               write_concern: ops.WriteConcernLike = None) -> int:
        """Inserts or replaces points: ids (n uint64), vectors (n, dim) as a
        numpy array or lists, payloads (n dicts or None: the typed payload,
        replaced), raw_payloads (n opaque bytes). Durable when it returns.
        Returns the points written. Not retried unless retry.retry_writes.
        tokens: a list the write's WriteTokens are merged into (a clustered
        collection's: one a shard written); pass it to search(after=...) to
        read this write. write_concern: when the write is acknowledged: None
        (the server's default, "majority"), "log", "majority", "all" or a
        zoom_pb2.WRITE_CONCERN_* value (see the README's "Write concerns")."""
        concern = ops.write_concern(write_concern)
        return self._run(self._checked(
            name, lambda s: ops.upsert(name, s, ids, vectors, payloads, raw_payloads, tokens,
                                       concern), timeout,
            "Upsert"),
            timeout)

    def delete(self, name: str, ids: Any = None, filter: cv.FilterLike = None,
               timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
               all: bool = False, write_concern: ops.WriteConcernLike = None) -> int:
        """Deletes the points with these ids, or every point passing `filter`
        (one of the two). Returns how many existed. A filter that matches
        every point (empty, only empty nested filters, or every live point
        when it runs) is refused (InvalidArgument / FailedPrecondition,
        nothing deleted) unless all=True; all=True alone deletes every point.
        tokens, write_concern: as upsert's."""
        return self._run(ops.delete(name, ids, filter, tokens, all, write_concern), timeout)

    def get(self, name: str, ids: Any, with_vectors: bool = False, with_payload: bool = True,
            timeout: _Timeout = _DEFAULT) -> List[Record]:
        """The points with these ids, in request order (missing ids left out);
        vectors as float32 arrays when with_vectors."""
        return self._run(ops.get(name, ids, with_vectors, with_payload), timeout)

    def set_payload(self, name: str, ids: Any, payload: Mapping[str, Any],
                    overwrite: bool = False, timeout: _Timeout = _DEFAULT,
                    tokens: Optional[list] = None,
                    write_concern: ops.WriteConcernLike = None) -> int:
        """Sets these fields of the points' typed payloads (overwrite: replaces
        all their fields); vectors untouched. Returns the points changed.
        tokens, write_concern: as upsert's."""
        return self._run(ops.set_payload(name, ids, payload, overwrite, tokens, write_concern),
                         timeout)

    def delete_payload(self, name: str, ids: Any, keys: Optional[Sequence[str]] = None,
                       timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
                       write_concern: ops.WriteConcernLike = None) -> int:
        """Removes the named fields (every field without keys). Returns the
        points changed. tokens, write_concern: as upsert's."""
        return self._run(ops.delete_payload(name, ids, keys, tokens, write_concern), timeout)

    def count(self, name: str, filter: cv.FilterLike = None,
              timeout: _Timeout = _DEFAULT) -> int:
        """The live points (passing `filter`), exact."""
        return self._run(ops.count(name, filter), timeout)

    def scroll(self, name: str, filter: cv.FilterLike = None, offset: int = 0,
               limit: int = 100, with_payload: bool = True, with_vectors: bool = False,
               timeout: _Timeout = _DEFAULT) -> Tuple[List[Record], Optional[int]]:
        """A page of the points (passing `filter`) with id >= offset, ascending;
        returns (points, next_offset), next_offset None on the last page."""
        return self._run(ops.scroll(name, filter, offset, limit, with_payload, with_vectors),
                         timeout)

    def import_points(self, name: str, vectors: Any, ids: Any = None,
                      payloads: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
                      raw_payloads: Optional[Sequence[Optional[bytes]]] = None,
                      batch_size: Optional[int] = None, progress: bool = True,
                      start_id: int = 0, timeout: _Timeout = _DEFAULT,
                      write_concern: ops.WriteConcernLike = None) -> ImportResult:
        """Bulk load through the client-streaming Import: `vectors` is an
        (n, dim) array, a .fvecs/.bvecs path (memory-mapped), or an iterator
        of batches (arrays, or (ids, vectors[, payloads]) tuples). ids default
        to start_id + the row number. Each batch is durable before the next is
        read (the server's flow control). progress: a tqdm bar (or a line a
        second) and the rate at the end, on stderr. Not retried. No deadline
        unless `timeout` is given (the client's default bounds only the
        reading of the collection's dim first): past it, DeadlineExceeded
        says the import stopped there, the batches the server had stored
        kept. write_concern: as upsert's, for every batch; the result's
        write_concern is the one the server acknowledged them under."""
        concern = ops.write_concern(write_concern)
        shape = self._shape(name, timeout)
        bs = int(batch_size) if batch_size else ops.default_batch(shape[0])
        total, batches = ops.import_source(vectors, ids, payloads, raw_payloads, start_id, bs)
        bar = Progress(total, progress)
        failure: List[BaseException] = []

        def messages() -> Iterator[bytes]:
            try:
                for i, batch in enumerate(batches):
                    n, body = ops.import_message(name, shape, batch, i == 0, concern)
                    yield body
                    bar.update(n)
            except BaseException as e:
                # Raised on gRPC's thread, which cancels the call (the server
                # then keeps only the batches before); re-raised below as is.
                failure.append(e)
                raise

        deadline = self._deadline(timeout, waits=True)
        try:
            resp = self._import(messages(), metadata=self._metadata,
                                timeout=None if deadline is None else deadline - time.monotonic())
        except grpc.RpcError as e:
            bar.close()
            if failure:
                raise failure[0] from None
            raise ops.rpc_error(e, "Import", ops.IMPORT_JOB) from None
        if failure:
            bar.close()
            raise failure[0]
        secs = bar.close(resp.imported)
        return ops.import_result(resp, secs)

    # ---- Search ----------------------------------------------------------------------------

    def search(self, name: str, vector: Any, k: int = 10, ef: Optional[int] = None,
               nprobe: Optional[int] = None, rerank: Optional[int] = None,
               preview_only: bool = False, exact: bool = False, with_payload: bool = False,
               with_vectors: bool = False, filter: cv.FilterLike = None,
               timeout: _Timeout = _DEFAULT, allow_partial: bool = False,
               rerank_stop_sd: Optional[float] = None,
               target_recall: Optional[float] = None,
               min_coverage: Optional[float] = None, after: Any = None,
               band_confidence: Optional[float] = None,
               exact_scores: bool = False) -> SearchResult:
        """The k nearest points to `vector` (1-d, the collection's dim), best
        first, as a list of ScoredPoint with ``.stats``. ef / nprobe / rerank
        (K') override the collection's knobs; preview_only skips the SSD
        re-rank; exact is brute force; filter: Qdrant's shape as a dict
        ({"must": [{"key": "tag", "match": {"value": "a"}}]}; numpy scalars
        and 1-d arrays go where numbers and lists do) or a Filter proto, an
        unknown key or a wrong type refused on the client; allow_partial:
        under a tight deadline answer with the preview ranking
        (stats.degraded) rather than DeadlineExceeded;
        rerank_stop_sd: the re-rank that stops early (0 or None: read all K';
        2 is a good start; stats.ssd_reads and fullview_rounds show it);
        target_recall: the recall@10 to aim at, in (0, 1]: the knobs left None
        are the cheapest that reached it when the index was calibrated
        (get_collection(name).calibration; stats.knobs says what ran).
        Through a cluster's router: min_coverage in (0, 1] accepts an answer
        from that share of the shards (allow_partial: from any); the result's
        .coverage and .degraded say what answered. after: WriteTokens (from
        the tokens= of upsert, delete, set_payload or delete_payload): every
        replica asked applies them first (session consistency).
        band_confidence: read only the candidates whose rank is in doubt: each
        candidate gets an interval for its true distance from its code's
        error, at this many deviations; certain-in hits come back unread with
        estimated scores (ScoredPoint.estimated), certain-out ones are not
        read (stats.certain_in / certain_out). 2 is a good start; ivf_hnsw_pq
        indexes only; not with rerank_stop_sd. exact_scores: with
        band_confidence, read the certain-in hits too, so every score is
        exact (the certain-out ones still are not read)."""
        op = self._checked(name, lambda s: ops.search(
            name, s, vector, k, ef, nprobe, rerank, preview_only, exact, with_payload,
            with_vectors, filter, allow_partial, rerank_stop_sd, target_recall, min_coverage,
            after, band_confidence, exact_scores), timeout, "Search")
        return self._run(op, timeout)

    def search_batch(self, name: str, vectors: Any, k: int = 10, ef: Optional[int] = None,
                     nprobe: Optional[int] = None, rerank: Optional[int] = None,
                     preview_only: bool = False, exact: bool = False,
                     with_payload: bool = False, with_vectors: bool = False,
                     filter: cv.FilterLike = None, timeout: _Timeout = _DEFAULT,
                     allow_partial: bool = False,
                     rerank_stop_sd: Optional[float] = None,
                     target_recall: Optional[float] = None,
                     min_coverage: Optional[float] = None,
                     after: Any = None, band_confidence: Optional[float] = None,
                     exact_scores: bool = False) -> List[SearchResult]:
        """search() for each row of `vectors` (n, dim) in one call (the same
        knobs and filter for all); a list of n results."""
        op = self._checked(name, lambda s: ops.search_batch(
            name, s, vectors, k, ef, nprobe, rerank, preview_only, exact, with_payload,
            with_vectors, filter, allow_partial, rerank_stop_sd, target_recall, min_coverage,
            after, band_confidence, exact_scores), timeout, "SearchBatch")
        return self._run(op, timeout)

    # ---- Snapshots -------------------------------------------------------------------------

    def create_snapshot(self, name: str, timeout: _Timeout = _DEFAULT) -> Any:
        """A consistent snapshot of the collection on the server (SnapshotInfo
        proto), once written. No deadline unless `timeout` is given: past it,
        DeadlineExceeded says the snapshot goes on being written."""
        return self._run(ops.create_snapshot(name), timeout)

    def list_snapshots(self, name: str, timeout: _Timeout = _DEFAULT) -> List[Any]:
        """The collection's snapshots, newest first (SnapshotInfo protos)."""
        return self._run(ops.list_snapshots(name), timeout)

    def delete_snapshot(self, name: str, snapshot: str, timeout: _Timeout = _DEFAULT) -> None:
        """Deletes one snapshot of the collection."""
        self._run(ops.delete_snapshot(name, snapshot), timeout)

    # ---- Decoder ---------------------------------------------------------------------------

    def load_model(self, name: str, dir: str, m: int = 0, ef_construction: int = 0,
                   wait: bool = True, timeout: _Timeout = _DEFAULT,
                   default_ef: int = 0) -> ModelInfo:
        """Loads a language model's softmax (a directory on the server, under
        its --models_dir) and builds or loads its FGD graph; wait: until it serves.
        default_ef: the ef of topk(ef=0); 0 calibrates it on the directory's
        H.f32 contexts when it has them (ModelInfo.default_ef_source). With
        wait there is no deadline unless `timeout` is given: past it,
        DeadlineExceeded says the model goes on loading (list_models)."""
        return self._run(ops.load_model(name, dir, m, ef_construction, wait, default_ef),
                         timeout)

    def list_models(self, timeout: _Timeout = _DEFAULT) -> List[ModelInfo]:
        """The models loading or serving."""
        return self._run(ops.list_models(), timeout)

    def unload_model(self, name: str, timeout: _Timeout = _DEFAULT) -> None:
        """Unloads a model."""
        self._run(ops.unload_model(name), timeout)

    def topk(self, model: str, contexts: Any, k: int = 10, ef: int = 0,
             return_words: bool = False, return_probs: bool = False, exact: bool = False,
             tail_samples: int = 0, tail: Optional[str] = None,
             timeout: _Timeout = _DEFAULT) -> TopKResult:
        """The k largest logits for each context (an (n, d) array of hidden
        states): ids and logits (n, k), with probs and tail_mass when
        return_probs, words when return_words. exact: the full softmax.
        tail: how tail_mass is estimated: "clusters" (the default), "sample"
        (tail_samples words drawn uniformly; also the default when
        tail_samples > 0) or "none" (tail_mass 0, the fastest)."""
        return self._run(ops.topk(model, contexts, k, ef, return_words, return_probs, exact,
                                  tail_samples, tail), timeout)

    def stream_topk(self, model: str, k: int = 10, ef: int = 0, return_words: bool = False,
                    return_probs: bool = False, timeout: _Timeout = _DEFAULT) -> "TopKStream":
        """A decoding loop's stream: ``with client.stream_topk("ptb") as s:
        step = s.step(h)``, one request and answer per step on one open call
        (no per-call setup). timeout bounds the whole stream."""
        return TopKStream(self, model, k, ef, return_words, return_probs, timeout)


_END = object()


class TopKStream:
    """One StreamTopK call: step(h) sends a context and returns its top k."""

    def __init__(self, client: Client, model: str, k: int, ef: int, return_words: bool,
                 return_probs: bool, timeout: _Timeout) -> None:
        self._steps = ops.StepRequests(model, k, ef, return_words, return_probs)
        self._queue: "queue.Queue[Any]" = queue.Queue()
        deadline = client._deadline(timeout)
        self._call = client._stream_topk(
            iter(self._queue.get, _END), metadata=client._metadata,
            timeout=None if deadline is None else deadline - time.monotonic())
        self._closed = False
        self.steps = 0

    def step(self, h: Any) -> TopKStep:
        """The top k of one context h (1-d, the model's dim)."""
        if self._closed:
            raise invalid("stream_topk: the stream is closed")
        self._queue.put(self._steps.request(h))
        try:
            resp = next(self._call)
        except grpc.RpcError as e:
            self._closed = True
            raise from_rpc_error(e, "StreamTopK") from None
        except StopIteration:
            self._closed = True
            raise invalid("stream_topk: the server ended the stream") from None
        self.steps += 1
        return self._steps.read(resp)

    def close(self) -> None:
        """Ends the stream (the server sees the end of its requests)."""
        if not self._closed:
            self._closed = True
            self._queue.put(_END)
            try:
                for _ in self._call:
                    pass
            except grpc.RpcError:
                pass

    def __enter__(self) -> "TopKStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
