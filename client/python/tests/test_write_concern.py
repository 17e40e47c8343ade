"""Write concerns (write_concern= on upsert, delete, set_payload,
delete_payload and import_points), tokens= on set_payload / delete_payload,
and WriteToken.acknowledged_by.

Against a stand-in server in this process (what each request carried, the
tokens of a clustered collection's answer, nothing sent for a bad value)
and against a real standalone zoomd (--sync=always: it reports the concern
asked, "majority" for the default; it has no tokens)."""

import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

import zoomd
from zoomd import _convert as cv
from zoomd._proto import zoom_pb2

# (what the caller passes, the WriteConcern number sent)
FORMS = [
    (None, zoom_pb2.WRITE_CONCERN_DEFAULT),
    ("log", zoom_pb2.WRITE_CONCERN_LOG),
    ("majority", zoom_pb2.WRITE_CONCERN_MAJORITY),
    ("all", zoom_pb2.WRITE_CONCERN_ALL),
    ("LOG", zoom_pb2.WRITE_CONCERN_LOG),
    ("Majority", zoom_pb2.WRITE_CONCERN_MAJORITY),
    ("ALL", zoom_pb2.WRITE_CONCERN_ALL),
    (zoom_pb2.WRITE_CONCERN_DEFAULT, zoom_pb2.WRITE_CONCERN_DEFAULT),
    (zoom_pb2.WRITE_CONCERN_LOG, zoom_pb2.WRITE_CONCERN_LOG),
    (zoom_pb2.WRITE_CONCERN_MAJORITY, zoom_pb2.WRITE_CONCERN_MAJORITY),
    (zoom_pb2.WRITE_CONCERN_ALL, zoom_pb2.WRITE_CONCERN_ALL),
    (np.int64(zoom_pb2.WRITE_CONCERN_ALL), zoom_pb2.WRITE_CONCERN_ALL),
]
# What a standalone zoomd under --sync=always reports for each.
REPORTED = {0: "majority", 1: "log", 2: "majority", 3: "all"}

BAD = ["", "quorum", "default", "WRITE_CONCERN_ALL", 4, -1, True, False, 2.0, b"all",
       ["all"], object()]

WRITES = ["upsert", "delete", "set_payload", "delete_payload", "import_points"]


# ---- Without a server ------------------------------------------------------------------

@pytest.mark.parametrize("value,number", FORMS)
def test_accepted_forms(value, number):
    assert cv.write_concern(value) == number


@pytest.mark.parametrize("value", BAD)
def test_bad_values_name_the_accepted_ones(value):
    with pytest.raises(zoomd.InvalidArgument,
                       match="write_concern: expected None .*'log', 'majority', 'all' or a "
                             "zoom_pb2.WRITE_CONCERN_\\* value") as e:
        cv.write_concern(value)
    assert e.value.client_side and isinstance(e.value, ValueError)


def test_concern_names():
    assert [cv.concern_name(v) for v in range(4)] == ["majority", "log", "majority", "all"]


def test_write_token_acknowledged_by_is_backward_compatible():
    t = zoomd.WriteToken(shard=1, sequence=7)
    assert t.acknowledged_by == ()
    assert repr(t) == "WriteToken(shard=1, sequence=7)"
    acked = zoomd.WriteToken(1, 7, ("n1", "n2"))
    # Equality and hashing are the (shard, sequence) of before.
    assert acked == t and hash(acked) == hash(t) and {t, acked} == {t}
    assert acked != zoomd.WriteToken(1, 8)
    assert repr(acked) == "WriteToken(shard=1, sequence=7, acknowledged_by=('n1', 'n2'))"
    # And they still go to search's after= as before.
    assert cv.tokens_of([acked, (2, 3)]) == [zoom_pb2.WriteToken(shard=1, sequence=7),
                                             zoom_pb2.WriteToken(shard=2, sequence=3)]


def test_merge_tokens_keeps_acknowledged_by():
    into = [zoomd.WriteToken(0, 5, ("a",)), zoomd.WriteToken(2, 9, ("a", "b"))]
    cv.merge_tokens(into, [zoom_pb2.WriteToken(shard=0, sequence=6, acknowledged_by=["b", "c"]),
                           zoom_pb2.WriteToken(shard=1, sequence=1),
                           zoom_pb2.WriteToken(shard=2, sequence=9, acknowledged_by=["c", "a"]),
                           zoom_pb2.WriteToken(shard=2, sequence=4, acknowledged_by=["z"])])
    assert into == [zoomd.WriteToken(0, 6), zoomd.WriteToken(1, 1), zoomd.WriteToken(2, 9)]
    assert [t.acknowledged_by for t in into] == [("b", "c"), (), ("a", "b", "c")]
    assert all(isinstance(t.acknowledged_by, tuple) for t in into)
    cv.merge_tokens(None, [zoom_pb2.WriteToken(shard=0, sequence=1)])  # no list: nothing


def test_import_result_write_concern_defaults():
    r = zoomd.ImportResult(imported=3, seconds=1.0)  # constructed as before
    assert r.write_concern == "majority" and r.points_per_s == 3.0


# ---- A stand-in server -----------------------------------------------------------------

INFO = zoom_pb2.CollectionInfo(spec=zoom_pb2.CollectionSpec(name="c", dim=2, metric=zoom_pb2.L2))
TOKENS = [zoom_pb2.WriteToken(shard=0, sequence=11, acknowledged_by=["node-a", "node-b"]),
          zoom_pb2.WriteToken(shard=3, sequence=4, acknowledged_by=["node-c"])]

UNARY = {
    "Upsert": (zoom_pb2.UpsertRequest, zoom_pb2.UpsertResponse, "upserted",
               lambda q: len(q.points)),
    "Delete": (zoom_pb2.DeleteRequest, zoom_pb2.DeleteResponse, "deleted",
               lambda q: len(q.ids)),
    "SetPayload": (zoom_pb2.SetPayloadRequest, zoom_pb2.SetPayloadResponse, "updated",
                   lambda q: len(q.ids)),
    "DeletePayload": (zoom_pb2.DeletePayloadRequest, zoom_pb2.DeletePayloadResponse, "updated",
                      lambda q: len(q.ids)),
}


class StandIn:
    """Answers like a router of a clustered collection: the concern asked
    (MAJORITY for DEFAULT) and two tokens with the replicas that acked.
    `got` lists (method, request) as they arrive (GetCollection included)."""

    def __init__(self):
        self.got = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {"GetCollection": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: self._note("GetCollection", req) or
            zoom_pb2.GetCollectionResponse(info=INFO),
            response_serializer=zoom_pb2.GetCollectionResponse.SerializeToString)}
        for m, (req_t, resp_t, count, n) in UNARY.items():
            handlers[m] = grpc.unary_unary_rpc_method_handler(
                self._write(m, resp_t, count, n), request_deserializer=req_t.FromString,
                response_serializer=resp_t.SerializeToString)
        handlers["Import"] = grpc.stream_unary_rpc_method_handler(
            self._import, request_deserializer=zoom_pb2.ImportRequest.FromString,
            response_serializer=zoom_pb2.ImportResponse.SerializeToString)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("zoom.v1.VectorSearch", handlers),))
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _note(self, method, req):
        with self.lock:
            self.got.append((method, req))

    def writes(self):
        return [(m, r) for m, r in self.got if m != "GetCollection"]

    @staticmethod
    def _answered(asked):
        return asked or zoom_pb2.WRITE_CONCERN_MAJORITY

    def _write(self, method, resp_t, count, n):
        def handle(req, ctx):
            self._note(method, req)
            return resp_t(**{count: n(req)}, tokens=TOKENS,
                          write_concern=self._answered(req.write_concern))
        return handle

    def _import(self, requests, ctx):
        reqs = list(requests)
        for r in reqs:
            self._note("Import", r)
        return zoom_pb2.ImportResponse(imported=sum(len(r.points) for r in reqs),
                                       tokens=TOKENS[:1],
                                       write_concern=self._answered(reqs[0].write_concern))


@pytest.fixture(scope="module")
def stand_in():
    s = StandIn()
    yield s
    s.server.stop(None)


def _sync_write(c, method, value, tokens):
    """One call of `method` with write_concern=value; its result."""
    if method == "upsert":
        return c.upsert("c", [1, 2], np.ones((2, 2)), tokens=tokens, write_concern=value)
    if method == "delete":
        return c.delete("c", ids=[1, 2, 3], tokens=tokens, write_concern=value)
    if method == "set_payload":
        return c.set_payload("c", [1], {"a": 1}, tokens=tokens, write_concern=value)
    if method == "delete_payload":
        return c.delete_payload("c", [1, 2], ["a"], tokens=tokens, write_concern=value)
    return c.import_points("c", np.ones((5, 2)), batch_size=2, progress=False,
                           write_concern=value)


async def _async_write(a, method, value, tokens):
    if method == "upsert":
        return await a.upsert("c", [1, 2], np.ones((2, 2)), tokens=tokens, write_concern=value)
    if method == "delete":
        return await a.delete("c", ids=[1, 2, 3], tokens=tokens, write_concern=value)
    if method == "set_payload":
        return await a.set_payload("c", [1], {"a": 1}, tokens=tokens, write_concern=value)
    if method == "delete_payload":
        return await a.delete_payload("c", [1, 2], ["a"], tokens=tokens, write_concern=value)
    return await a.import_points("c", np.ones((5, 2)), batch_size=2, progress=False,
                                 write_concern=value)


COUNTS = {"upsert": 2, "delete": 3, "set_payload": 1, "delete_payload": 2}
WANT_TOKENS = [zoomd.WriteToken(0, 11), zoomd.WriteToken(3, 4)]
WANT_ACKS = [("node-a", "node-b"), ("node-c",)]


def _check(stand_in, method, number, result, tokens):
    sent = stand_in.writes()
    if method == "import_points":
        # Three batches; the first carries the concern (the server's rule).
        assert [len(r.points) for _, r in sent] == [2, 2, 1]
        assert [r.write_concern for _, r in sent] == [number, 0, 0]
        assert isinstance(result, zoomd.ImportResult) and result.imported == 5
        assert result.write_concern == REPORTED[number]
        return
    assert len(sent) == 1 and sent[0][1].write_concern == number
    # The counts stay ints; the tokens (and who acked them) are merged.
    assert type(result) is int and result == COUNTS[method]
    assert tokens == WANT_TOKENS
    assert [t.acknowledged_by for t in tokens] == WANT_ACKS


@pytest.mark.parametrize("method", WRITES)
@pytest.mark.parametrize("value,number", FORMS)
def test_stand_in_sync(stand_in, method, value, number):
    with zoomd.Client(stand_in.target, timeout=30) as c:
        del stand_in.got[:]
        tokens = []
        result = _sync_write(c, method, value, tokens)
        _check(stand_in, method, number, result, tokens)


@pytest.mark.asyncio
@pytest.mark.parametrize("method", WRITES)
@pytest.mark.parametrize("value,number", FORMS[:4] + FORMS[-2:])
async def test_stand_in_async(stand_in, method, value, number):
    async with zoomd.AsyncClient(stand_in.target, timeout=30) as a:
        del stand_in.got[:]
        tokens = []
        result = await _async_write(a, method, value, tokens)
        _check(stand_in, method, number, result, tokens)


@pytest.mark.parametrize("method", WRITES)
def test_stand_in_bad_values_send_nothing_sync(stand_in, method):
    with zoomd.Client(stand_in.target, timeout=30) as c:  # no cached shape either
        for value in BAD:
            del stand_in.got[:]
            with pytest.raises(zoomd.InvalidArgument, match="write_concern: expected"):
                _sync_write(c, method, value, [])
            assert stand_in.got == []  # not even the GetCollection of the shape


@pytest.mark.asyncio
@pytest.mark.parametrize("method", WRITES)
async def test_stand_in_bad_values_send_nothing_async(stand_in, method):
    async with zoomd.AsyncClient(stand_in.target, timeout=30) as a:
        for value in BAD:
            del stand_in.got[:]
            with pytest.raises(zoomd.InvalidArgument, match="write_concern: expected"):
                await _async_write(a, method, value, [])
            assert stand_in.got == []


# ---- A real standalone zoomd -----------------------------------------------------------

from test_validation import Counter  # noqa: E402  (the tests' directory is on the path)


def _points(client, name):
    client.create_collection(name, dim=4, metric="l2")
    client.upsert(name, list(range(1, 11)), np.ones((10, 4)),
                  payloads=[{"a": i, "b": "x"} for i in range(10)])


@pytest.mark.parametrize("value,number", FORMS)
def test_zoomd_sync_each_form(client, name, value, number):
    _points(client, name)
    tokens = []
    assert client.upsert(name, [11, 12], np.zeros((2, 4)), tokens=tokens,
                         write_concern=value) == 2
    assert client.set_payload(name, [1, 2, 99], {"c": True}, tokens=tokens,
                              write_concern=value) == 2
    assert client.delete_payload(name, [1], ["a"], tokens=tokens, write_concern=value) == 1
    assert client.get(name, [1])[0].payload == {"b": "x", "c": True}
    assert client.delete(name, ids=[2, 3, 999], tokens=tokens, write_concern=value) == 2
    assert tokens == []  # a standalone zoomd has no tokens
    r = client.import_points(name, np.full((30, 4), 0.5), start_id=100, batch_size=7,
                             progress=False, write_concern=value)
    assert r.imported == 30 and r.write_concern == REPORTED[number]
    assert client.count(name) == 10 + 2 - 2 + 30


def test_zoomd_import_reports_majority_by_default_and_all_when_asked(client, name):
    client.create_collection(name, dim=4, metric="l2")
    x = np.random.default_rng(9).random((500, 4), dtype=np.float32)
    assert client.import_points(name, x, progress=False).write_concern == "majority"
    assert client.import_points(name, x, progress=False,
                                write_concern="all").write_concern == "all"
    assert client.import_points(name, x, progress=False,
                                write_concern=zoom_pb2.WRITE_CONCERN_LOG).write_concern == "log"
    assert client.count(name) == 500


def test_zoomd_payload_tokens_stay_empty(client, name):
    _points(client, name)
    tokens = []
    assert client.set_payload(name, [1], {"t": 1}, tokens=tokens) == 1
    assert client.delete_payload(name, [1], tokens=tokens) == 1
    assert tokens == []
    # A list that already holds tokens keeps them (nothing added).
    kept = [zoomd.WriteToken(0, 5)]
    client.set_payload(name, [2], {"t": 2}, overwrite=True, tokens=kept)
    client.delete_payload(name, [2], ["t"], tokens=kept)
    assert kept == [zoomd.WriteToken(shard=0, sequence=5)]


@pytest.mark.parametrize("method", WRITES)
def test_zoomd_bad_values_raise_before_any_rpc(server, name, method):
    counter = Counter()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), counter)
    with zoomd.Client(channel=channel, timeout=60) as c:
        c.create_collection(name, dim=2, metric="l2")
        c.upsert(name, [1], np.ones((1, 2)))
        c._shapes.clear()  # not even the collection's shape may be read first
        counter.calls.clear()
        for value in BAD:
            with pytest.raises(zoomd.InvalidArgument, match="write_concern: expected") as e:
                _sync_write_named(c, name, method, value)
            assert e.value.client_side
        assert counter.calls == []
        assert c.count(name) == 1 and c.get(name, [1])[0].payload == {}


def _sync_write_named(c, name, method, value):
    if method == "upsert":
        return c.upsert(name, [1, 2], np.ones((2, 2)), write_concern=value)
    if method == "delete":
        return c.delete(name, ids=[1], write_concern=value)
    if method == "set_payload":
        return c.set_payload(name, [1], {"a": 1}, write_concern=value)
    if method == "delete_payload":
        return c.delete_payload(name, [1], write_concern=value)
    return c.import_points(name, np.ones((5, 2)), progress=False, write_concern=value)


@pytest.mark.asyncio
async def test_zoomd_async(server, name):
    async with zoomd.AsyncClient(server.target, timeout=120) as a:
        await a.create_collection(name, dim=4, metric="l2")
        r = await a.import_points(name, np.ones((20, 4)), batch_size=6, progress=False)
        assert r.imported == 20 and r.write_concern == "majority"
        r = await a.import_points(name, np.ones((20, 4)), start_id=20, progress=False,
                                  write_concern="ALL")
        assert r.imported == 20 and r.write_concern == "all"
        tokens = []
        for value, _ in FORMS:
            assert await a.upsert(name, [100], np.zeros((1, 4)), tokens=tokens,
                                  write_concern=value) == 1
            assert await a.set_payload(name, [100, 5], {"v": 1}, tokens=tokens,
                                       write_concern=value) == 2
            assert await a.delete_payload(name, [5], ["v"], tokens=tokens,
                                          write_concern=value) == 1
            assert await a.delete(name, ids=[100], tokens=tokens, write_concern=value) == 1
        assert tokens == []
        assert await a.count(name) == 40
        for value in BAD:
            with pytest.raises(zoomd.InvalidArgument, match="write_concern: expected"):
                await a.set_payload(name, [1], {"v": 1}, write_concern=value)
            with pytest.raises(zoomd.InvalidArgument, match="write_concern: expected"):
                await a.import_points(name, np.ones((1, 4)), progress=False,
                                      write_concern=value)
        assert await a.count(name) == 40
        await a.drop_collection(name)
