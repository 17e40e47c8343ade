"""zoomd.AsyncClient: the asyncio client (grpc.aio), the same methods as
zoomd.Client as coroutines. Create it inside the event loop that uses it."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from zoomd import _convert as cv
from zoomd import _ops as ops
from zoomd._channel import channel_args, metadata
from zoomd._progress import Progress
from zoomd.errors import NotFound, ZoomError, from_rpc_error, invalid
from zoomd.models import (CollectionInfo, ImportResult, IndexSpec, ModelInfo, Record,
                          SearchKnobs, SearchResult, ServerInfo, TopKResult, TopKStep)

__all__ = ["AsyncClient", "AsyncTopKStream"]

_Timeout = ops.Timeout
#: A method's timeout when none is given (see ops.DEFAULT).
_DEFAULT = ops.DEFAULT


class AsyncClient(ops.Base):
    """The asyncio form of :class:`zoomd.Client`: the same constructor
    arguments and methods, each a coroutine (``await client.search(...)``);
    ``async with zoomd.AsyncClient(...) as client:`` closes it. Many
    concurrent calls share its one channel."""

    def __init__(self, target: str = "127.0.0.1:50051", api_key: Optional[str] = None,
                 tls: Any = None, timeout: Optional[float] = None,
                 retry: Optional[ops.RetryPolicy] = None,
                 channel: Optional[grpc.aio.Channel] = None) -> None:
        if channel is None:
            creds, options = channel_args(tls)
            channel = (grpc.aio.secure_channel(target, creds, options=options)
                       if creds is not None else grpc.aio.insecure_channel(target, options=options))
        super().__init__(channel, metadata(api_key), timeout, retry)

    # ---- Plumbing --------------------------------------------------------------------

    async def close(self) -> None:
        """Closes the channel."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _run(self, op: ops.Op, timeout: _Timeout = _DEFAULT) -> Any:
        deadline = self._deadline(timeout, op.waits)
        call = self._unary[op.method]
        attempt = 0
        while True:
            try:
                return op.read(await call(op.request, timeout=self._left(op.name, deadline),
                                          metadata=self._metadata))
            except grpc.RpcError as e:
                await asyncio.sleep(self._pause(op, e, attempt, deadline))
                attempt += 1

    async def _shape(self, name: str, timeout: _Timeout = _DEFAULT) -> ops.Shape:
        shape = self._shapes.get(name)
        if shape is None:
            info = await self.get_collection(name, timeout=timeout)
            shape = (info.dim, info.dtype)
        return shape

    async def _checked(self, name: str, build: Any, timeout: _Timeout,
                       method: str = "") -> ops.Op:
        try:
            shape = await self._shape(name, timeout)
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
            return build(await self._shape(name, timeout))

    # ---- The server --------------------------------------------------------------------

    async def health(self, service: str = "", timeout: _Timeout = _DEFAULT) -> str:
        """See Client.health."""
        deadline = self._deadline(timeout)
        try:
            data = await self._health(
                cv.health_request(service), metadata=self._metadata,
                timeout=None if deadline is None else deadline - time.monotonic())
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Health.Check") from None
        return cv.health_status(data)

    async def server_info(self, timeout: _Timeout = _DEFAULT) -> ServerInfo:
        """See Client.server_info."""
        return await self._run(ops.server_info(), timeout)

    async def server_version(self, timeout: _Timeout = _DEFAULT) -> str:
        """See Client.server_version."""
        return (await self.server_info(timeout)).version

    # ---- Collections -------------------------------------------------------------------

    async def create_collection(self, name: str, dim: int, metric: str = "cosine",
                                dtype: str = "float32", index: Optional[IndexSpec] = None,
                                default_knobs: Union[None, SearchKnobs, Mapping[str, int]] = None,
                                timeout: _Timeout = _DEFAULT,
                                cache_bytes: Optional[int] = None, shards: Optional[int] = None,
                                replicas: Optional[int] = None) -> CollectionInfo:
        """See Client.create_collection."""
        info = await self._run(
            ops.create_collection(name, dim, metric, dtype, index, default_knobs, cache_bytes,
                                  shards, replicas),
            timeout)
        self._shapes[name] = (info.dim, info.dtype)
        return info

    async def get_collection(self, name: str, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """See Client.get_collection."""
        info = await self._run(ops.get_collection(name), timeout)
        self._shapes[name] = (info.dim, info.dtype)
        return info

    async def list_collections(self, timeout: _Timeout = _DEFAULT) -> List[CollectionInfo]:
        """See Client.list_collections."""
        return await self._run(ops.list_collections(), timeout)

    async def drop_collection(self, name: str, timeout: _Timeout = _DEFAULT) -> None:
        """See Client.drop_collection."""
        self._shapes.pop(name, None)
        await self._run(ops.drop_collection(name), timeout)

    async def build_index(self, name: str, wait: bool = True,
                          timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """See Client.build_index."""
        return await self._run(ops.build_index(name, wait), timeout)

    async def compact(self, name: str, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """See Client.compact."""
        return await self._run(ops.compact(name), timeout)

    async def create_field_index(self, name: str, field: str, type: str = "keyword",
                                 wait: bool = True, timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """See Client.create_field_index."""
        return await self._run(ops.create_field_index(name, field, type, wait), timeout)

    async def delete_field_index(self, name: str, field: str,
                                 timeout: _Timeout = _DEFAULT) -> CollectionInfo:
        """See Client.delete_field_index."""
        return await self._run(ops.delete_field_index(name, field), timeout)

    # ---- Points --------------------------------------------------------------------------

    async def upsert(self, name: str, ids: Any, vectors: Any,
                     payloads: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
                     raw_payloads: Optional[Sequence[Optional[bytes]]] = None,
                     timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
                     write_concern: ops.WriteConcernLike = None) -> int:
        """See Client.upsert."""
        concern = ops.write_concern(write_concern)
        op = await self._checked(
            name, lambda s: ops.upsert(name, s, ids, vectors, payloads, raw_payloads, tokens,
                                       concern), timeout,
            "Upsert")
        return await self._run(op, timeout)

    async def delete(self, name: str, ids: Any = None, filter: cv.FilterLike = None,
                     timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
                     all: bool = False, write_concern: ops.WriteConcernLike = None) -> int:
        """See Client.delete."""
        return await self._run(ops.delete(name, ids, filter, tokens, all, write_concern),
                               timeout)

    async def get(self, name: str, ids: Any, with_vectors: bool = False,
                  with_payload: bool = True, timeout: _Timeout = _DEFAULT) -> List[Record]:
        """See Client.get."""
        return await self._run(ops.get(name, ids, with_vectors, with_payload), timeout)

    async def set_payload(self, name: str, ids: Any, payload: Mapping[str, Any],
                          overwrite: bool = False, timeout: _Timeout = _DEFAULT,
                          tokens: Optional[list] = None,
                          write_concern: ops.WriteConcernLike = None) -> int:
        """See Client.set_payload."""
        return await self._run(
            ops.set_payload(name, ids, payload, overwrite, tokens, write_concern), timeout)

    async def delete_payload(self, name: str, ids: Any, keys: Optional[Sequence[str]] = None,
                             timeout: _Timeout = _DEFAULT, tokens: Optional[list] = None,
                             write_concern: ops.WriteConcernLike = None) -> int:
        """See Client.delete_payload."""
        return await self._run(ops.delete_payload(name, ids, keys, tokens, write_concern),
                               timeout)

    async def count(self, name: str, filter: cv.FilterLike = None,
                    timeout: _Timeout = _DEFAULT) -> int:
        """See Client.count."""
        return await self._run(ops.count(name, filter), timeout)

    async def scroll(self, name: str, filter: cv.FilterLike = None, offset: int = 0,
                     limit: int = 100, with_payload: bool = True, with_vectors: bool = False,
                     timeout: _Timeout = _DEFAULT) -> Tuple[List[Record], Optional[int]]:
        """See Client.scroll."""
        return await self._run(
            ops.scroll(name, filter, offset, limit, with_payload, with_vectors), timeout)

    async def import_points(self, name: str, vectors: Any, ids: Any = None,
                            payloads: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
                            raw_payloads: Optional[Sequence[Optional[bytes]]] = None,
                            batch_size: Optional[int] = None, progress: bool = True,
                            start_id: int = 0, timeout: _Timeout = _DEFAULT,
                            write_concern: ops.WriteConcernLike = None) -> ImportResult:
        """See Client.import_points."""
        concern = ops.write_concern(write_concern)
        shape = await self._shape(name, timeout)
        bs = int(batch_size) if batch_size else ops.default_batch(shape[0])
        total, batches = ops.import_source(vectors, ids, payloads, raw_payloads, start_id, bs)
        bar = Progress(total, progress)
        deadline = self._deadline(timeout, waits=True)
        call = self._import(metadata=self._metadata,
                            timeout=None if deadline is None else deadline - time.monotonic())
        try:
            for i, batch in enumerate(batches):
                try:
                    n, body = ops.import_message(name, shape, batch, i == 0, concern)
                except BaseException:
                    call.cancel()
                    raise
                try:
                    await call.write(body)
                except asyncio.InvalidStateError:
                    # The call ended before this batch (its deadline passed,
                    # or the server refused a batch): its status says why.
                    await call
                    raise
                bar.update(n)
            await call.done_writing()
            resp = await call
        except grpc.RpcError as e:
            bar.close()
            raise ops.rpc_error(e, "Import", ops.IMPORT_JOB) from None
        except BaseException:
            bar.close()
            raise
        secs = bar.close(resp.imported)
        return ops.import_result(resp, secs)

    # ---- Search ----------------------------------------------------------------------------

    async def search(self, name: str, vector: Any, k: int = 10, ef: Optional[int] = None,
                     nprobe: Optional[int] = None, rerank: Optional[int] = None,
                     preview_only: bool = False, exact: bool = False,
                     with_payload: bool = False, with_vectors: bool = False,
                     filter: cv.FilterLike = None, timeout: _Timeout = _DEFAULT,
                     allow_partial: bool = False,
                     rerank_stop_sd: Optional[float] = None,
                     target_recall: Optional[float] = None,
                     min_coverage: Optional[float] = None, after: Any = None,
                     band_confidence: Optional[float] = None,
                     exact_scores: bool = False) -> SearchResult:
        """See Client.search."""
        op = await self._checked(name, lambda s: ops.search(
            name, s, vector, k, ef, nprobe, rerank, preview_only, exact, with_payload,
            with_vectors, filter, allow_partial, rerank_stop_sd, target_recall, min_coverage,
            after, band_confidence, exact_scores), timeout, "Search")
        return await self._run(op, timeout)

    async def search_batch(self, name: str, vectors: Any, k: int = 10,
                           ef: Optional[int] = None, nprobe: Optional[int] = None,
                           rerank: Optional[int] = None, preview_only: bool = False,
                           exact: bool = False, with_payload: bool = False,
                           with_vectors: bool = False, filter: cv.FilterLike = None,
                           timeout: _Timeout = _DEFAULT,
                           allow_partial: bool = False,
                           rerank_stop_sd: Optional[float] = None,
                           target_recall: Optional[float] = None,
                           min_coverage: Optional[float] = None,
                           after: Any = None,
                           band_confidence: Optional[float] = None,
                           exact_scores: bool = False) -> List[SearchResult]:
        """See Client.search_batch."""
        op = await self._checked(name, lambda s: ops.search_batch(
            name, s, vectors, k, ef, nprobe, rerank, preview_only, exact, with_payload,
            with_vectors, filter, allow_partial, rerank_stop_sd, target_recall, min_coverage,
            after, band_confidence, exact_scores), timeout, "SearchBatch")
        return await self._run(op, timeout)

    # ---- Snapshots -------------------------------------------------------------------------

    async def create_snapshot(self, name: str, timeout: _Timeout = _DEFAULT) -> Any:
        """See Client.create_snapshot."""
        return await self._run(ops.create_snapshot(name), timeout)

    async def list_snapshots(self, name: str, timeout: _Timeout = _DEFAULT) -> List[Any]:
        """See Client.list_snapshots."""
        return await self._run(ops.list_snapshots(name), timeout)

    async def delete_snapshot(self, name: str, snapshot: str, timeout: _Timeout = _DEFAULT) -> None:
        """See Client.delete_snapshot."""
        await self._run(ops.delete_snapshot(name, snapshot), timeout)

    # ---- Decoder ---------------------------------------------------------------------------

    async def load_model(self, name: str, dir: str, m: int = 0, ef_construction: int = 0,
                         wait: bool = True, timeout: _Timeout = _DEFAULT,
                         default_ef: int = 0) -> ModelInfo:
        """See Client.load_model."""
        return await self._run(ops.load_model(name, dir, m, ef_construction, wait, default_ef),
                               timeout)

    async def list_models(self, timeout: _Timeout = _DEFAULT) -> List[ModelInfo]:
        """See Client.list_models."""
        return await self._run(ops.list_models(), timeout)

    async def unload_model(self, name: str, timeout: _Timeout = _DEFAULT) -> None:
        """See Client.unload_model."""
        await self._run(ops.unload_model(name), timeout)

    async def topk(self, model: str, contexts: Any, k: int = 10, ef: int = 0,
                   return_words: bool = False, return_probs: bool = False, exact: bool = False,
                   tail_samples: int = 0, tail: Optional[str] = None,
                   timeout: _Timeout = _DEFAULT) -> TopKResult:
        """See Client.topk."""
        return await self._run(ops.topk(model, contexts, k, ef, return_words, return_probs,
                                        exact, tail_samples, tail), timeout)

    def stream_topk(self, model: str, k: int = 10, ef: int = 0, return_words: bool = False,
                    return_probs: bool = False, timeout: _Timeout = _DEFAULT) -> "AsyncTopKStream":
        """``async with client.stream_topk("ptb") as s: step = await s.step(h)``."""
        return AsyncTopKStream(self, model, k, ef, return_words, return_probs, timeout)


class AsyncTopKStream:
    """One StreamTopK call: ``await step(h)`` sends a context, returns its top k."""

    def __init__(self, client: AsyncClient, model: str, k: int, ef: int, return_words: bool,
                 return_probs: bool, timeout: _Timeout) -> None:
        self._steps = ops.StepRequests(model, k, ef, return_words, return_probs)
        deadline = client._deadline(timeout)
        self._call = client._stream_topk(
            metadata=client._metadata,
            timeout=None if deadline is None else deadline - time.monotonic())
        self._closed = False
        self.steps = 0

    async def step(self, h: Any) -> TopKStep:
        """The top k of one context h (1-d)."""
        if self._closed:
            raise invalid("stream_topk: the stream is closed")
        req = self._steps.request(h)
        try:
            await self._call.write(req)
            resp = await self._call.read()
        except grpc.RpcError as e:
            self._closed = True
            raise from_rpc_error(e, "StreamTopK") from None
        if resp is grpc.aio.EOF:
            self._closed = True
            raise invalid("stream_topk: the server ended the stream")
        self.steps += 1
        return self._steps.read(resp)

    async def close(self) -> None:
        """Ends the stream."""
        if not self._closed:
            self._closed = True
            try:
                await self._call.done_writing()
                while await self._call.read() is not grpc.aio.EOF:
                    pass
            except grpc.RpcError:
                pass

    async def __aenter__(self) -> "AsyncTopKStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
