"""Bad input is caught on the client, with a message that says what to fix,
before any request goes out (counted by an interceptor on the channel)."""

import grpc
import numpy as np
import pytest

import zoomd


class Counter(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):
    def __init__(self):
        self.calls = []

    def intercept_unary_unary(self, continuation, details, request):
        self.calls.append(details.method)
        return continuation(details, request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        self.calls.append(details.method)
        return continuation(details, request_iterator)


@pytest.fixture()
def counted(server, name):
    counter = Counter()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.target), counter)
    c = zoomd.Client(channel=channel, timeout=60)
    c.create_collection(name, dim=8, metric="l2")
    c.upsert(name, [0], np.zeros((1, 8)))
    counter.calls.clear()
    yield c, counter
    c.close()


BAD_QUERIES = [
    (np.zeros(7), "wrong dimension.*dim 8.*got 7"),
    (np.zeros((1, 8)), "1-d array.*shape \\(1, 8\\).*search_batch"),
    (np.array([np.nan] + [0.0] * 7), "NaN or infinity at index \\(0,\\)"),
    (np.array([np.inf] + [0.0] * 7), "NaN or infinity"),
    (np.array([1e300] + [0.0] * 7), "float32's range"),
    (["a"] * 8, "expected numbers"),
    ([[1, 2], [3]], "not an array of numbers|expected numbers"),
]


@pytest.mark.parametrize("query,message", BAD_QUERIES)
def test_bad_query_vectors(counted, name, query, message):
    c, counter = counted
    with pytest.raises(zoomd.InvalidArgument, match=message) as e:
        c.search(name, query)
    assert e.value.client_side and isinstance(e.value, ValueError)
    # A wrong dimension re-reads the collection's info once (it may have been
    # re-created); the query itself never goes out.
    assert counter.calls == (["/zoom.v1.VectorSearch/GetCollection"]
                             if "dimension" in message else [])


BAD_UPSERTS = [
    (dict(ids=[1], vectors=np.zeros(8)), "2-d array.*shape \\(8,\\)"),
    (dict(ids=[1], vectors=np.zeros((1, 9))), "wrong dimension"),
    (dict(ids=[1, 2], vectors=np.zeros((1, 8))), "2 ids for 1 vectors"),
    (dict(ids=[-1], vectors=np.zeros((1, 8))), "not a uint64 id"),
    (dict(ids=[1.5], vectors=np.zeros((1, 8))), "expected integers"),
    (dict(ids=[1], vectors=np.full((1, 8), np.nan)), "NaN"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": float("nan")}]), "not finite"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": {"b": 1}}]), "nested objects"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": [[1]]}]), "lists of lists"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": [1, None]}]), "null inside a list"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": 2 ** 64}]), "int64"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"a": b"x"}]), "raw_payloads"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{"": 1}]), "field names"),
    (dict(ids=[1], vectors=np.zeros((1, 8)), payloads=[{}, {}]), "2 payloads for 1"),
]


@pytest.mark.parametrize("kwargs,message", BAD_UPSERTS)
def test_bad_upserts(counted, name, kwargs, message):
    c, counter = counted
    with pytest.raises(zoomd.InvalidArgument, match=message):
        c.upsert(name, **kwargs)
    assert counter.calls == (["/zoom.v1.VectorSearch/GetCollection"]
                             if "dimension" in message else [])


def test_bad_arguments(counted, name):
    c, counter = counted
    cases = [
        (lambda: c.search(name, np.zeros(8), k=0), "k: expected a positive integer"),
        (lambda: c.search(name, np.zeros(8), ef=-1), "ef: expected a non-negative"),
        (lambda: c.search(name, np.zeros(8), rerank_stop_sd=-1), "rerank_stop_sd: expected"),
        (lambda: c.search(name, np.zeros(8), rerank_stop_sd=float("nan")), "rerank_stop_sd"),
        (lambda: c.search(name, np.zeros(8), band_confidence=-1), "band_confidence: expected"),
        (lambda: c.search(name, np.zeros(8), band_confidence=float("nan")),
         "band_confidence: expected"),
        (lambda: c.search(name, np.zeros(8), band_confidence=True), "band_confidence: expected"),
        (lambda: c.search(name, np.zeros(8), filter={"must": [{"nokey": 1}]}), "filter"),
        (lambda: c.search(name, np.zeros(8), filter="tag=a"), "filter: expected a dict"),
        (lambda: c.search_batch(name, np.zeros(8)), "2-d array"),
        (lambda: c.delete(name), "exactly one of ids and filter"),
        (lambda: c.create_collection("x", dim=8, metric="manhattan"), "unknown metric"),
        (lambda: c.create_collection("x", dim=0), "dim: expected a positive"),
        (lambda: c.create_field_index(name, "f", "text"), "unknown field index type"),
        (lambda: c.topk("m", np.zeros(4)), "2-d array"),
        (lambda: c.import_points(name, np.zeros(8)), "2-d array"),
        (lambda: c.search(name, np.zeros(8), min_coverage=1.5), "min_coverage: expected"),
        (lambda: c.search(name, np.zeros(8), min_coverage=True), "min_coverage: expected"),
        (lambda: c.create_collection("x", dim=8, shards=-1), "shards: expected"),
        (lambda: c.create_collection("x", dim=8, replicas=2.5), "replicas: expected"),
    ]
    for fn, message in cases:
        with pytest.raises(zoomd.InvalidArgument, match=message):
            fn()
    assert counter.calls == []


def test_shape_cache_follows_a_recreated_collection(counted, name):
    c, counter = counted
    other = zoomd.Client(channel=c._channel)  # another client re-creates it with dim 4
    other.drop_collection(name)
    other.create_collection(name, dim=4, metric="l2")
    other.upsert(name, [1], np.ones((1, 4)))
    # The first client's cached dim (8) is stale: it fetches the info once
    # more, then searches.
    assert [h.id for h in c.search(name, np.ones(4), k=1)] == [1]
    with pytest.raises(zoomd.InvalidArgument, match="dim 4"):
        c.search(name, np.ones(8))


def test_cluster_fields_on_a_standalone_zoomd(counted, name):
    """A standalone zoomd: every answer covers the whole collection, session
    tokens are accepted (nothing to wait for), shards are refused saying
    where they belong, and writes carry no tokens."""
    c, _ = counted
    res = c.search(name, np.zeros(8), after=[zoomd.WriteToken(shard=0, sequence=5)],
                   min_coverage=0.5)
    assert res.coverage == 1.0 and not res.degraded
    assert c.search_batch(name, np.zeros((2, 8)))[1].coverage == 1.0
    tokens = []
    assert c.upsert(name, [1], np.ones((1, 8)), tokens=tokens) == 1
    assert tokens == []
    info = c.get_collection(name)
    assert (info.shards, info.replicas) == (0, 0)
    with pytest.raises(zoomd.InvalidArgument, match="router"):
        c.create_collection(name + "_sharded", dim=8, shards=2)
