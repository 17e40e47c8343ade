"""Points: upsert, get, payloads, delete, count, scroll."""

import numpy as np
import pytest

import zoomd

RNG = np.random.default_rng(3)


def test_upsert_get_numpy_and_lists(client, name):
    client.create_collection(name, dim=8, metric="l2")
    x = RNG.random((50, 8), dtype=np.float32)
    assert client.upsert(name, np.arange(50, dtype=np.uint64), x) == 50
    assert client.upsert(name, [100], [[0.5] * 8]) == 1  # lists work too
    recs = client.get(name, [3, 100, 7777], with_vectors=True)
    assert [r.id for r in recs] == [3, 100]  # missing ids left out, request order kept
    np.testing.assert_array_equal(recs[0].vector, x[3])
    assert recs[0].vector.dtype == np.float32
    np.testing.assert_array_equal(recs[1].vector, np.full(8, 0.5, np.float32))
    assert client.get(name, [3])[0].vector is None  # vectors only when asked


def test_typed_payloads_round_trip(client, name):
    client.create_collection(name, dim=4, metric="cosine")
    payload = {"s": "laptop", "i": -(2 ** 62), "f": 2.5, "b": True, "n": None,
               "geo": {"lat": 52.5, "lon": 13.4}, "geo2": zoomd.GeoPoint(-33.9, 151.2),
               "list": ["a", "b"], "nums": [1, 2, 3], "np": np.int64(7), "npf": np.float32(0.25)}
    client.upsert(name, [1, 2], np.ones((2, 4)), payloads=[payload, None],
                  raw_payloads=[b"\x00opaque", None])
    r1, r2 = client.get(name, [1, 2])
    want = dict(payload, geo2={"lat": -33.9, "lon": 151.2}, np=7, npf=0.25)
    assert r1.payload == want
    assert r1.raw_payload == b"\x00opaque"
    assert r2.payload == {} and r2.raw_payload == b""
    assert client.set_payload(name, [1, 2, 99], {"s": "phone", "new": 1}) == 2
    assert client.get(name, [1])[0].payload["s"] == "phone"
    assert client.get(name, [2])[0].payload == {"s": "phone", "new": 1}
    assert client.set_payload(name, [2], {"only": True}, overwrite=True) == 1
    assert client.get(name, [2])[0].payload == {"only": True}
    assert client.delete_payload(name, [1], ["list", "nums"]) == 1
    assert "list" not in client.get(name, [1])[0].payload
    assert client.delete_payload(name, [1]) == 1
    assert client.get(name, [1])[0].payload == {}
    # Search returns payloads and vectors when asked.
    hits = client.search(name, [1, 1, 1, 1], k=2, with_payload=True, with_vectors=True)
    assert {h.id for h in hits} == {1, 2}
    assert all(h.vector.shape == (4,) for h in hits)
    assert {h.id: h.payload for h in hits}[2] == {"only": True}


def test_count_scroll_delete_with_filters(client, name):
    client.create_collection(name, dim=4, metric="l2")
    n = 1000
    payloads = [{"tag": "even" if i % 2 == 0 else "odd", "price": i} for i in range(n)]
    client.upsert(name, range(n), RNG.random((n, 4)), payloads=payloads)
    client.create_field_index(name, "tag", "keyword")
    client.create_field_index(name, "price", "integer")
    even = {"must": [{"key": "tag", "match": {"value": "even"}}]}
    cheap = {"must": [{"key": "price", "range": {"lt": 100}}]}
    assert client.count(name) == n
    assert client.count(name, even) == 500
    assert client.count(name, {"must": even["must"] + cheap["must"]}) == 50
    # Scroll pages through the matches in id order.
    seen, offset = [], 0
    while offset is not None:
        page, offset = client.scroll(name, even, offset=offset, limit=64)
        seen += [p.id for p in page]
    assert seen == list(range(0, n, 2))
    # A filtered search returns only matches and says how.
    hits = client.search(name, [0.5] * 4, k=10, filter=cheap)
    assert len(hits) == 10 and all(h.id < 100 for h in hits)
    assert hits.stats.filter_matches == 100 and hits.stats.filter_strategy
    # A filter on a field without an index works, flagged.
    unindexed = {"must": [{"is_empty": {"key": "nope"}}]}
    hits = client.search(name, [0.5] * 4, k=5, filter=unindexed)
    assert len(hits) == 5 and hits.stats.filter_scan and "nope" in hits.stats.warning
    assert client.count(name, unindexed) == n
    assert client.delete(name, filter=cheap) == 100
    assert client.delete(name, ids=[100, 101, 5]) == 2  # 5 was deleted by the filter
    assert client.count(name) == n - 102


def test_delete_by_filter_never_wipes_by_accident(client, name):
    client.create_collection(name, dim=4, metric="l2")
    client.upsert(name, np.arange(6), RNG.random((6, 4), dtype=np.float32),
                  payloads=[{"cat": "lamp" if i < 3 else "desk"} for i in range(6)])
    for f in ({"must": [{"filter": {}}]}, {}, {"should": [{"filter": {}}]}):
        with pytest.raises(zoomd.InvalidArgument, match="all=True|all: true"):
            client.delete(name, filter=f)
    with pytest.raises(zoomd.FailedPrecondition, match="matches all 6 live points"):
        client.delete(name, filter={"must": [{"key": "cat", "match": {"any": ["lamp", "desk"]}}]})
    assert client.count(name) == 6
    assert client.delete(name, filter={"must": [{"key": "cat", "match": {"value": "lamp"}}]}) == 3
    assert client.delete(name, filter={"must": [{"key": "cat", "match": {"value": "desk"}}]},
                         all=True) == 3
    client.upsert(name, [9], [[1, 2, 3, 4]])
    assert client.delete(name, all=True) == 1
    assert client.count(name) == 0
    with pytest.raises(zoomd.InvalidArgument, match="not with ids"):
        client.delete(name, ids=[1], all=True)


def test_a_missing_collection_names_the_call_made(client):
    for call, method in ((lambda: client.search("no_such_collection", [0.0] * 4), "Search"),
                         (lambda: client.search_batch("no_such_collection", [[0.0] * 4]),
                          "SearchBatch"),
                         (lambda: client.upsert("no_such_collection", [1], [[0.0] * 4]),
                          "Upsert")):
        with pytest.raises(zoomd.NotFound) as e:
            call()
        assert e.value.method == method
        assert str(e.value).startswith(f"{method}: NOT_FOUND")


def test_numpy_values_in_filters(client, name):
    client.create_collection(name, dim=4, metric="l2")
    payloads = [{"cls": i % 10, "tag": "ab"[i % 2], "price": i / 10} for i in range(100)]
    client.upsert(name, range(100), RNG.random((100, 4)), payloads=payloads)
    assert client.count(name, {"must": [{"key": "cls", "match": {"value": np.int64(7)}}]}) == 10
    assert client.count(name, {"must": [{"has_id": np.arange(5)}]}) == 5
    assert client.count(name, {"must": [{"key": "cls", "match": {"any": np.array([1, 2])}},
                                        {"key": "tag", "match": {"value": np.str_("a")}}]}) == 10
    page, _ = client.scroll(name, {"must": [{"key": "price", "range": {
        "gte": np.float32(2.0), "lt": np.float64(2.5)}}]})
    assert [p.id for p in page] == [20, 21, 22, 23, 24]
    hits = client.search(name, [0.5] * 4, k=10,
                         filter={"must": [{"has_id": np.array([3, 4], dtype=np.uint64)}]})
    assert sorted(h.id for h in hits) == [3, 4]
    assert client.delete(name, filter={"must_not": [{"has_id": np.arange(90)}]}) == 10


def test_uint8_collection(client, name, sift):
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.upsert(name, [0, 1], sift["base"][:2])  # uint8 arrays go in as they are
    got = client.get(name, [1], with_vectors=True)[0].vector
    np.testing.assert_array_equal(got, sift["base"][1].astype(np.float32))
    with pytest.raises(zoomd.InvalidArgument, match="uint8"):
        client.upsert(name, [2], np.full((1, 128), 0.5))


def test_uint8_vectors_go_as_bytes(client, name, sift):
    """A uint8 collection's vectors and queries are sent as vector_bytes (a
    quarter of the floats' size), and answer as the floats would."""
    from zoomd import _convert as cv
    base = sift["base"][:300]
    msg = cv.points_message(name, list(range(300)), base.astype(np.float32), None, None, "uint8")
    floats = cv.points_message(name, list(range(300)), base.astype(np.float32), None, None)
    assert len(msg) < 0.3 * len(floats)
    client.create_collection(name, dim=128, metric="l2", dtype="uint8")
    client.upsert(name, np.arange(300), base)
    got = client.get(name, [7], with_vectors=True)[0].vector
    np.testing.assert_array_equal(got, base[7].astype(np.float32))
    q = sift["query"][0]
    hits = client.search(name, q, k=5, exact=True)
    d = ((base.astype(np.float64) - q.astype(np.float64)) ** 2).sum(axis=1)
    assert [h.id for h in hits] == [int(i) for i in np.argsort(d, kind="stable")[:5]]
    batch = client.search_batch(name, sift["query"][:3], k=5, exact=True)
    assert [h.id for h in batch[0]] == [h.id for h in hits]
