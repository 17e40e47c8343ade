"""Deadlines. Against a stand-in server in this process (no zoomd needed),
which records the time each call had left (None: no deadline) and answers
at once or never: the calls that wait for a job on the server have no
deadline unless given one (not the client's per-call default), timeout=None
is no deadline on any call, and a waiting call past its deadline says the
job goes on. Then on a real zoomd: a client whose default deadline is spent
still builds, indexes, compacts and snapshots."""

import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

import zoomd
from zoomd._proto import decoder_pb2, zoom_pb2

INFO = zoom_pb2.CollectionInfo(spec=zoom_pb2.CollectionSpec(name="c", dim=2, metric=zoom_pb2.L2))

VECTOR_SEARCH = {
    "GetCollection": zoom_pb2.GetCollectionResponse(info=INFO),
    "ListCollections": zoom_pb2.ListCollectionsResponse(),
    "Search": zoom_pb2.SearchResponse(),
    "Count": zoom_pb2.CountResponse(),
    "BuildIndex": zoom_pb2.BuildIndexResponse(info=INFO),
    "CreateFieldIndex": zoom_pb2.CreateFieldIndexResponse(info=INFO),
    "Compact": zoom_pb2.CompactResponse(info=INFO),
    "CreateSnapshot": zoom_pb2.CreateSnapshotResponse(),
}
DECODER = {"LoadModel": decoder_pb2.LoadModelResponse(),
           "ListModels": decoder_pb2.ListModelsResponse()}


class StandIn:
    """A gRPC server with zoomd's method names: `left[method]` lists the
    seconds each call had left when it arrived (None: no deadline); the
    methods in `hang` never answer (they return once the call is over)."""

    def __init__(self):
        self.left = {}
        self.hang = set()
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        for service, methods in (("zoom.v1.VectorSearch", VECTOR_SEARCH),
                                 ("zoom.v1.Decoder", DECODER)):
            handlers = {m: grpc.unary_unary_rpc_method_handler(
                self._unary(m, resp), response_serializer=type(resp).SerializeToString)
                for m, resp in methods.items()}
            if service == "zoom.v1.VectorSearch":
                handlers["Import"] = grpc.stream_unary_rpc_method_handler(
                    self._import, response_serializer=zoom_pb2.ImportResponse.SerializeToString)
            self.server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"
        self.server.start()

    def _arrived(self, method, context):
        with self.lock:
            left = context.time_remaining()  # (no deadline: None, or about 2^63 s)
            self.left.setdefault(method, []).append(None if left is None or left > 1e9 else left)
        while method in self.hang and context.is_active():
            time.sleep(0.01)

    def _unary(self, method, resp):
        def handle(request, context):
            self._arrived(method, context)
            return resp
        return handle

    def _import(self, requests, context):
        if "Import" in self.hang:
            next(requests, None)  # the first batch, then nothing more is read
            self._arrived("Import", context)
            return zoom_pb2.ImportResponse()
        self._arrived("Import", context)
        return zoom_pb2.ImportResponse(imported=sum(
            len(zoom_pb2.ImportRequest.FromString(r).points) for r in requests))

    def last(self, method):
        with self.lock:
            return self.left[method][-1]


# The clients' default timeout here, and what the stand-in sees of it or of a
# timeout of 20 s (the deadline travels as a duration: a little more or less
# may arrive).
CLIENT_TIMEOUT = 1000


def default(left):
    return left is not None and 100 < left < 2 * CLIENT_TIMEOUT


def given(left):
    return left is not None and 0 < left < 50


@pytest.fixture()
def stand_in():
    s = StandIn()
    yield s
    s.server.stop(None)


def waiting_calls(c):
    """Each call that waits for a job, by its RPC."""
    return {
        "BuildIndex": lambda **t: c.build_index("c", **t),
        "CreateFieldIndex": lambda **t: c.create_field_index("c", "tag", "keyword", **t),
        "Compact": lambda **t: c.compact("c", **t),
        "CreateSnapshot": lambda **t: c.create_snapshot("c", **t),
        "LoadModel": lambda **t: c.load_model("m", "dir", **t),
        "Import": lambda **t: c.import_points("c", np.zeros((10, 2)), progress=False, **t),
    }


def test_waiting_calls_have_no_deadline_unless_given_one(stand_in):
    with zoomd.Client(stand_in.target, timeout=CLIENT_TIMEOUT) as c:
        for method, call in waiting_calls(c).items():
            call()
            assert stand_in.last(method) is None, method  # not the client's default
            call(timeout=20)
            assert given(stand_in.last(method)), method
            call(timeout=None)
            assert stand_in.last(method) is None, method
        # import_points reads the collection's dim first: a round trip, under
        # the client's default.
        assert default(stand_in.left["GetCollection"][0])
        # Without wait the calls answer at once: the client's default.
        c.build_index("c", wait=False)
        assert default(stand_in.last("BuildIndex"))
        c.create_field_index("c", "tag", wait=False)
        assert default(stand_in.last("CreateFieldIndex"))
        c.load_model("m", "dir", wait=False)
        assert default(stand_in.last("LoadModel"))


def test_timeout_none_lifts_the_clients_default(stand_in):
    with zoomd.Client(stand_in.target, timeout=CLIENT_TIMEOUT) as c:
        c.list_collections()
        assert default(stand_in.last("ListCollections"))
        c.list_collections(timeout=None)
        assert stand_in.last("ListCollections") is None
        c.list_collections(timeout=5)
        assert given(stand_in.last("ListCollections"))
        c.search("c", [0, 0], timeout=None)
        assert stand_in.last("Search") is None
        assert stand_in.last("GetCollection") is None  # the dim, read under the same timeout
        c.count("c", timeout=None)
        assert stand_in.last("Count") is None
        with pytest.raises(zoomd.InvalidArgument, match="timeout: expected seconds"):
            c.count("c", timeout="30")
    with pytest.raises(zoomd.InvalidArgument, match="timeout: expected seconds"):
        zoomd.Client(stand_in.target, timeout="30")


def test_a_waiting_call_past_its_deadline_says_the_job_goes_on(stand_in):
    stand_in.hang.update(["BuildIndex", "Compact", "LoadModel", "Count", "Import"])
    with zoomd.Client(stand_in.target, timeout=CLIENT_TIMEOUT) as c:
        with pytest.raises(zoomd.DeadlineExceeded) as e:
            c.build_index("c", timeout=0.2)
        assert not e.value.client_side
        assert "the build goes on on the server if it had started; call get_collection to see " \
               "its state" in e.value.message
        with pytest.raises(zoomd.DeadlineExceeded, match="the compaction goes on on the server"):
            c.compact("c", timeout=0.2)
        with pytest.raises(zoomd.DeadlineExceeded, match="the model goes on loading .*list_models"):
            c.load_model("m", "dir", timeout=0.2)
        with pytest.raises(zoomd.DeadlineExceeded, match="the import stopped there"):
            c.import_points("c", np.zeros((10, 2)), batch_size=1, progress=False, timeout=0.2)
        # A call that does not wait for a job says nothing of one.
        with pytest.raises(zoomd.DeadlineExceeded) as e:
            c.count("c", timeout=0.2)
        assert "goes on" not in e.value.message
        # A deadline past before sending: nothing was started.
        with pytest.raises(zoomd.DeadlineExceeded) as e:
            c.build_index("c", timeout=0)
        assert e.value.client_side and "goes on" not in e.value.message


@pytest.mark.asyncio
async def test_the_asyncio_client_keeps_the_same_deadlines(stand_in):
    async with zoomd.AsyncClient(stand_in.target, timeout=CLIENT_TIMEOUT) as a:
        calls = {
            "BuildIndex": lambda **t: a.build_index("c", **t),
            "CreateFieldIndex": lambda **t: a.create_field_index("c", "tag", "keyword", **t),
            "Compact": lambda **t: a.compact("c", **t),
            "CreateSnapshot": lambda **t: a.create_snapshot("c", **t),
            "LoadModel": lambda **t: a.load_model("m", "dir", **t),
            "Import": lambda **t: a.import_points("c", np.zeros((10, 2)), progress=False, **t),
        }
        for method, call in calls.items():
            await call()
            assert stand_in.last(method) is None, method
            await call(timeout=20)
            assert given(stand_in.last(method)), method
        await a.list_collections()
        assert default(stand_in.last("ListCollections"))
        await a.list_collections(timeout=None)
        assert stand_in.last("ListCollections") is None
        await a.build_index("c", wait=False)
        assert default(stand_in.last("BuildIndex"))

        stand_in.hang.update(["BuildIndex", "Import"])
        with pytest.raises(zoomd.DeadlineExceeded, match="the build goes on on the server"):
            await a.build_index("c", timeout=0.2)
        with pytest.raises(zoomd.DeadlineExceeded, match="the import stopped there"):
            await a.import_points("c", np.zeros((10, 2)), batch_size=1, progress=False,
                                  timeout=0.2)


def test_jobs_wait_past_a_spent_client_default(server, client, name):
    """On a real zoomd: a client whose default deadline is 0 (every round
    trip refused before it is sent) still waits for a build, a field index, a
    compaction and a snapshot: they have no deadline unless given one."""
    client.create_collection(name, dim=4, metric="l2")
    x = np.random.default_rng(5).random((3000, 4), dtype=np.float32)
    client.upsert(name, range(3000), x, payloads=[{"t": i % 3} for i in range(3000)])
    with zoomd.Client(server.target, timeout=0) as spent:
        with pytest.raises(zoomd.DeadlineExceeded) as e:
            spent.get_collection(name)
        assert e.value.client_side
        assert spent.build_index(name).index_state == "ready"
        info = spent.create_field_index(name, "t", "integer")
        assert [(f.field, f.ready) for f in info.field_indexes] == [("t", True)]
        assert spent.compact(name).points == 3000
        snapshot = spent.create_snapshot(name)
        assert snapshot.points == 3000
        assert spent.count(name, {"must": [{"key": "t", "match": {"value": 1}}]},
                           timeout=None) == 1000
    client.delete_snapshot(name, snapshot.name)
