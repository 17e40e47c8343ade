"""API conformance (issue 46): search. Search, SearchBatch, Count and Scroll,
and the filters: their error cases, then their happy paths."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np
import pytest
from google.protobuf import struct_pb2

from conformance_data import (BAD_FILTERS, BUILT, BUILT_IDS, BUILT_N, DIM, FIELDS, IDS, N, QUERIES,
                              RNG_Q8, SMALL, SMALL_DIM, SMALL_IDS, SMALL_Q, U8, VECS, WIDE_DIM, C,
                              F, S, assert_scores, doc_point, exact_top, pvals)
from conformance_drift import keyed_over_backends, over_backends
from conformance_harness import (Case, Env, both, check, covers, error_params, fields_view, ok,
                                 outcome, point_view, run_error_case, same, search_view)
import backends as B
from zoomd._proto import zoom_pb2 as pb


ERROR_CASES: List[Case] = [
    # -- Search
    Case("Search.k_0", "Search", lambda: S(k=0), "INVALID_ARGUMENT", "k must be at least 1"),
    Case("Search.k_over_max", "Search", lambda: S(k=1001), "INVALID_ARGUMENT",
         "k 1001 is above this server's limit of 1000"),
    Case("Search.wrong_dim", "Search", lambda: S(vector=[1.0] * 3), "INVALID_ARGUMENT",
         "query has 3 dimensions"),
    Case("Search.empty_vector", "Search", lambda: S(vector=[]), "INVALID_ARGUMENT",
         "the query vector is empty"),
    Case("Search.nan", "Search", lambda: S(vector=[float("nan")] * DIM), "INVALID_ARGUMENT",
         "query"),
    Case("Search.inf", "Search", lambda: S(vector=[float("inf")] + [0.0] * (DIM - 1)),
         "INVALID_ARGUMENT", "query"),
    Case("Search.vector_and_bytes", "Search",
         lambda: S(vector=[1.0] * DIM, vector_bytes=bytes(DIM)), "INVALID_ARGUMENT", "give one"),
    Case("Search.ef_over_max", "Search", lambda: S(knobs=pb.SearchKnobs(ef=10001)),
         "INVALID_ARGUMENT", "ef 10001"),
    Case("Search.nprobe_over_max", "Search", lambda: S(knobs=pb.SearchKnobs(nprobe=65537)),
         "INVALID_ARGUMENT", "nprobe 65537"),
    Case("Search.rerank_over_max", "Search",
         lambda: S(knobs=pb.SearchKnobs(rerank_candidates=10001)), "INVALID_ARGUMENT",
         "rerank_candidates 10001"),
    Case("Search.rerank_stop_sd_101", "Search",
         lambda: S(knobs=pb.SearchKnobs(rerank_stop_sd=101)), "INVALID_ARGUMENT",
         "rerank_stop_sd"),
    Case("Search.band_confidence_101", "Search",
         lambda: S(knobs=pb.SearchKnobs(band_confidence=101)), "INVALID_ARGUMENT",
         "band_confidence"),
    Case("Search.band_confidence_and_rerank_stop_sd", "Search",
         lambda: S(knobs=pb.SearchKnobs(band_confidence=2, rerank_stop_sd=2)),
         "INVALID_ARGUMENT", "set one"),
    Case("Search.target_recall_1_5", "Search",
         lambda: S(knobs=pb.SearchKnobs(target_recall=1.5)), "INVALID_ARGUMENT",
         "target_recall"),
    Case("Search.min_coverage_2", "Search", lambda: S(min_coverage=2), "INVALID_ARGUMENT",
         "min_coverage"),
    Case("Search.consistency_5", "Search", lambda: S(consistency=5), "INVALID_ARGUMENT",
         "consistency 5"),
    Case("Search.after_1025", "Search",
         lambda: S(after=[pb.WriteToken(shard=0, sequence=1)] * 1025), "INVALID_ARGUMENT",
         "1,024"),
    Case("Search.uint8_bytes_wrong_dim", "Search",
         lambda: S(collection="u8", vector_bytes=bytes(3)), "INVALID_ARGUMENT", "3 dimensions"),
    Case("Search.cosine_zero", "Search",
         lambda: S(collection="cosc", vector=[0.0] * SMALL_DIM), "INVALID_ARGUMENT", "query"),
    Case("Search.unknown_collection", "Search", lambda: S(collection="nosuch"), "NOT_FOUND",
         "nosuch"),
    Case("Search.bad_collection_name", "Search", lambda: S(collection="bad name!"),
         "INVALID_ARGUMENT", "has the character"),
    *[Case(f"Search.filter_{name}", "Search", lambda f=f: S(filter=f), code, frag)
      for name, (f, code, frag) in BAD_FILTERS.items()],
    # -- SearchBatch
    Case("SearchBatch.empty", "SearchBatch", lambda: pb.SearchBatchRequest(collection="docs"),
         "INVALID_ARGUMENT", "the batch has no queries"),
    Case("SearchBatch.too_many", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="docs", queries=[S(k=1)] * 10001),
         "INVALID_ARGUMENT", "10001"),
    Case("SearchBatch.second_query_bad", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="docs", queries=[S(), S(k=0)]),
         "INVALID_ARGUMENT", "query #1: k must be at least 1"),
    Case("SearchBatch.same_shape_bad_dim", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="docs", queries=[S(vector=[1.0] * 3)] * 2),
         "INVALID_ARGUMENT", "3 dimensions"),
    Case("SearchBatch.answer_over_message_limit", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="wide", queries=[
             S(collection="", vector=[0.5] * WIDE_DIM, k=1000, with_vectors=True)] * 5),
         "RESOURCE_EXHAUSTED", "more than the 63 MiB"),
    Case("SearchBatch.unknown_collection", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="nosuch", queries=[S()]), "NOT_FOUND",
         "nosuch"),
    Case("SearchBatch.bad_filter", "SearchBatch",
         lambda: pb.SearchBatchRequest(collection="docs", queries=[
             S(filter=BAD_FILTERS["range_on_keyword_index"][0])]), "INVALID_ARGUMENT",
         "keyword index"),
    # -- Count
    *[Case(f"Count.filter_{name}", "Count", lambda f=f: pb.CountRequest(collection="docs",
                                                                        filter=f), code, frag)
      for name, (f, code, frag) in BAD_FILTERS.items()],
    Case("Count.unknown_collection", "Count", lambda: pb.CountRequest(collection="nosuch"),
         "NOT_FOUND", "nosuch"),
    # -- Scroll
    Case("Scroll.limit_over_max", "Scroll", lambda: pb.ScrollRequest(collection="docs",
                                                                     limit=10001),
         "INVALID_ARGUMENT", "limit 10001"),
    Case("Scroll.bad_filter", "Scroll", lambda: pb.ScrollRequest(
        collection="docs", filter=BAD_FILTERS["too_deep"][0]), "INVALID_ARGUMENT", "deep"),
    Case("Scroll.unknown_collection", "Scroll", lambda: pb.ScrollRequest(collection="nosuch"),
         "NOT_FOUND", "nosuch"),
]
assert len({c.id for c in ERROR_CASES}) == len(ERROR_CASES)


@pytest.mark.parametrize("case,bname", error_params(ERROR_CASES))
def test_error(case: Case, bname: str, env: Env) -> None:
    run_error_case(case, bname, env)


# ---- happy paths -----------------------------------------------------------------------------


# -- Search

METRIC_DATA = {"docs": (VECS, IDS, "l2", QUERIES), "ipc": (SMALL, SMALL_IDS, "ip", SMALL_Q),
               "cosc": (SMALL, SMALL_IDS, "cos", SMALL_Q)}


@covers("Search")
@pytest.mark.parametrize("k", [1, 10, 1000])
@pytest.mark.parametrize("collection", sorted(METRIC_DATA))
@pytest.mark.parametrize("bname", over_backends("Search.exact"))
def test_search(env: Env, bname: str, collection: str, k: int) -> None:
    """An unindexed collection: every search is exact (stats.exact), k past
    the points answers them all."""
    b, ref = both(env, bname)
    vectors, ids, metric, queries = METRIC_DATA[collection]

    def run(x: B.Backend):
        out = []
        for q in queries[:3]:
            r = ok(outcome(x, "Search", pb.SearchRequest(collection=collection,
                                                         vector=q.tolist(), k=k)))
            want_ids, want_scores = exact_top(vectors, ids, q, k, metric)
            assert [h.id for h in r.hits] == want_ids
            assert_scores([h.score for h in r.hits], want_scores)
            assert r.coverage == 1.0 and not r.degraded and r.stats.exact
            out.append(search_view(r))
        return out
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Search.payload_vectors"))
def test_search_with_payload_and_vectors(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        r = ok(outcome(x, "Search", S(k=5, with_payload=True, with_vectors=True)))
        want, _ = exact_top(VECS, IDS, QUERIES[0], 5, "l2")
        for h in r.hits:
            i = IDS.index(h.id)
            assert h.payload == b"p%d" % i and fields_view(h.fields) == fields_view(
                pvals(FIELDS[i]))
            np.testing.assert_allclose(list(h.vector), VECS[i], rtol=1e-6)
        bare = ok(outcome(x, "Search", S(k=5)))
        assert all(h.payload == b"" and not h.vector and not h.fields for h in bare.hits)
        assert [h.id for h in r.hits] == want == [h.id for h in bare.hits]
        return [search_view(r), search_view(bare)]
    check(b, ref, run)


@covers("Search")
@pytest.mark.parametrize("bname", over_backends("Search.partial_session_fields"))
def test_search_partial_and_session_fields(env: Env, bname: str) -> None:
    """allow_partial, min_coverage and SESSION (without tokens) change nothing
    when every shard answers (a standalone is one shard)."""
    b, ref = both(env, bname)
    want, _ = exact_top(VECS, IDS, QUERIES[2], 5, "l2")

    def run(x: B.Backend):
        out = []
        for kw in ({}, {"allow_partial": True}, {"min_coverage": 1.0},
                   {"min_coverage": 0.5}, {"consistency": pb.SESSION}):
            r = ok(outcome(x, "Search", S(vector=QUERIES[2].tolist(), **kw)))
            assert [h.id for h in r.hits] == want and r.coverage == 1.0 and not r.degraded
            out.append(search_view(r))
        return out
    check(b, ref, run)


def loc_in_radius(i: int, lat: float, lon: float, metres: float) -> bool:
    la, lo = FIELDS[i]["loc"]
    p1, p2 = math.radians(lat), math.radians(la)
    dp, dl = p2 - p1, math.radians(lo - lon)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371008.8 * math.asin(math.sqrt(a)) <= metres


GOOD_FILTERS = {
    # name: (filter, predicate over the point's index)
    "keyword_indexed": (F(must=[C(key="cat", match=pb.Match(keyword="c1"))]),
                        lambda i: i % 5 == 1),
    "json_value_string": (F(must=[C(key="cat", match=pb.Match(value=struct_pb2.Value(
        string_value="c2")))]), lambda i: i % 5 == 2),
    "json_value_integer": (F(must=[C(key="n", match=pb.Match(value=struct_pb2.Value(
        number_value=42)))]), lambda i: i == 42),
    "integer_range_indexed": (F(must=[C(key="n", range=pb.Range(gte=100, lt=150))]),
                              lambda i: 100 <= i < 150),
    "float_range_scan": (F(must=[C(key="price", range=pb.Range(gt=10.0, lte=20.0))]),
                         lambda i: 10.0 < i * 0.5 <= 20.0),
    "bool_scan": (F(must=[C(key="flag", match=pb.Match(boolean=True))]), lambda i: i % 2 == 0),
    "json_any_strings": (F(must=[C(key="tags", match=pb.Match(any=struct_pb2.ListValue(
        values=[struct_pb2.Value(string_value="t1"), struct_pb2.Value(string_value="u6")])))]),
        lambda i: i % 3 == 1 or i % 7 == 6),
    "json_except_strings": (F(must=[C(key="cat", match=pb.Match(**{"except": struct_pb2.ListValue(
        values=[struct_pb2.Value(string_value="c0"), struct_pb2.Value(string_value="c1")])}))]),
        lambda i: i % 5 >= 2),
    "list_keyword": (F(must=[C(key="tags", match=pb.Match(keyword="u3"))]), lambda i: i % 7 == 3),
    "integers_any": (F(must=[C(key="n", match=pb.Match(integers=pb.Integers(
        values=[3, 5, 500, 9999])))]), lambda i: i in (3, 5, 500)),
    "except_integers": (F(must=[C(key="n", match=pb.Match(except_integers=pb.Integers(
        values=list(range(0, 590)))))]), lambda i: i >= 590),
    "must_not_has_id": (F(must_not=[C(has_id=IDS[:590])]), lambda i: i >= 590),
    "has_id": (F(must=[C(has_id=[IDS[7], IDS[300], 5])]), lambda i: i in (7, 300)),
    "should": (F(should=[C(key="cat", match=pb.Match(keyword="c0")),
                         C(key="n", range=pb.Range(lt=3))]),
               lambda i: i % 5 == 0 or i < 3),
    "min_should": (F(min_should=pb.MinShould(conditions=[
        C(key="cat", match=pb.Match(keyword="c0")), C(key="flag", match=pb.Match(boolean=True)),
        C(key="tags", match=pb.Match(keyword="t0"))], min_count=2)),
        lambda i: int(i % 5 == 0) + int(i % 2 == 0) + int(i % 3 == 0) >= 2),
    "is_null": (F(must=[C(is_null=pb.FieldKey(key="opt"))]), lambda i: i % 10 == 0),
    "is_empty": (F(must=[C(is_empty=pb.FieldKey(key="opt"))]), lambda i: i % 10 != 1),
    "is_empty_list": (F(must=[C(is_empty=pb.FieldKey(key="empty"))]), lambda i: True),
    "values_count": (F(must=[C(key="tags", values_count=pb.Range(gte=2))]), lambda i: True),
    "geo_radius": (F(must=[C(key="loc", geo_radius=pb.GeoRadius(
        center=pb.GeoPoint(lat=0, lon=0), radius=3_000_000))]),
        lambda i: loc_in_radius(i, 0, 0, 3_000_000)),
    "geo_box": (F(must=[C(key="loc", geo_bounding_box=pb.GeoBoundingBox(
        top_left=pb.GeoPoint(lat=30, lon=-100), bottom_right=pb.GeoPoint(lat=-30, lon=100)))]),
        lambda i: -30 <= FIELDS[i]["loc"][0] <= 30 and -100 <= FIELDS[i]["loc"][1] <= 100),
    "nested": (F(must=[C(filter=F(must_not=[C(key="cat", match=pb.Match(keyword="c1"))])),
                       C(key="n", range=pb.Range(lt=40))]),
               lambda i: i % 5 != 1 and i < 40),
    "matches_nothing": (F(must=[C(key="cat", match=pb.Match(keyword="nope"))]), lambda i: False),
}


@pytest.mark.parametrize("fname,bname", keyed_over_backends("Search.filter", sorted(GOOD_FILTERS)))
def test_search_filtered(env: Env, bname: str, fname: str) -> None:
    b, ref = both(env, bname)
    f, pred = GOOD_FILTERS[fname]
    matches = sum(1 for i in range(N) if pred(i))

    def run(x: B.Backend):
        r = ok(outcome(x, "Search", S(k=10, filter=f)))
        want_ids, want_scores = exact_top(VECS, IDS, QUERIES[0], 10, "l2", pred)
        assert [h.id for h in r.hits] == want_ids, fname
        assert_scores([h.score for h in r.hits], want_scores)
        assert r.stats.filter_matches == matches
        return search_view(r)
    check(b, ref, run)


@covers("Count")
@pytest.mark.parametrize("fname,bname", keyed_over_backends("Count.filter", sorted(GOOD_FILTERS)))
def test_count(env: Env, bname: str, fname: str) -> None:
    b, ref = both(env, bname)
    f, pred = GOOD_FILTERS[fname]

    def run(x: B.Backend):
        r = ok(outcome(x, "Count", pb.CountRequest(collection="docs", filter=f)))
        assert r.count == sum(1 for i in range(N) if pred(i))
        return {"count": r.count, "filter_scan": r.filter_scan, "warning": r.warning}
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Count.all"))
def test_count_all(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        r = ok(outcome(x, "Count", pb.CountRequest(collection="docs")))
        scan = ok(outcome(x, "Count", pb.CountRequest(collection="docs", filter=GOOD_FILTERS[
            "bool_scan"][0])))
        indexed = ok(outcome(x, "Count", pb.CountRequest(collection="docs", filter=GOOD_FILTERS[
            "keyword_indexed"][0])))
        assert r.count == N and not r.filter_scan
        assert scan.filter_scan and "'flag'" in scan.warning and not indexed.filter_scan
        return [str(r), str(scan), str(indexed)]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Search.vector_bytes"))
def test_search_vector_bytes(env: Env, bname: str) -> None:
    b, ref = both(env, bname)
    q = RNG_Q8

    def run(x: B.Backend):
        as_bytes = ok(outcome(x, "Search", pb.SearchRequest(collection="u8", k=7,
                                                            vector_bytes=q.tobytes())))
        as_floats = ok(outcome(x, "Search", pb.SearchRequest(
            collection="u8", k=7, vector=q.astype(np.float32).tolist(), with_vectors=True)))
        want_ids, want_scores = exact_top(U8.astype(np.float32), SMALL_IDS, q.astype(np.float32),
                                          7, "l2")
        assert [h.id for h in as_bytes.hits] == want_ids == [h.id for h in as_floats.hits]
        assert_scores([h.score for h in as_bytes.hits], want_scores)
        i = SMALL_IDS.index(want_ids[0])
        assert list(as_floats.hits[0].vector) == U8[i].astype(np.float32).tolist()
        return [search_view(as_bytes), search_view(as_floats)]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Search.indexed"))
def test_search_indexed(env: Env, bname: str) -> None:
    """The built collection, with knobs that scan every list and re-rank every
    point: the exact answer through the index (stats.exact false)."""
    b, ref = both(env, bname)
    knobs = pb.SearchKnobs(ef=1000, nprobe=10000, rerank_candidates=BUILT_N)

    def run(x: B.Backend):
        out = []
        for q in QUERIES[:4]:
            r = ok(outcome(x, "Search", pb.SearchRequest(collection="built", vector=q.tolist(),
                                                         k=10, knobs=knobs)))
            want_ids, want_scores = exact_top(BUILT, BUILT_IDS, q, 10, "l2")
            assert [h.id for h in r.hits] == want_ids
            assert_scores([h.score for h in r.hits], want_scores)
            assert not r.stats.exact and r.coverage == 1.0
            out.append(search_view(r))
        return out
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Search.preview_only"))
def test_search_preview_only_and_default_knobs(env: Env, bname: str) -> None:
    """Answers whose ranking depends on each index's codes (a shard's index is
    trained on its half): compared by count and shape, not ids."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        out = []
        for kw in ({"preview_only": True}, {}, {"knobs": pb.SearchKnobs(rerank_stop_sd=2)},
                   {"knobs": pb.SearchKnobs(band_confidence=2)},
                   {"knobs": pb.SearchKnobs(band_confidence=2), "exact_scores": True}):
            r = ok(outcome(x, "Search", pb.SearchRequest(collection="built",
                                                         vector=QUERIES[1].tolist(), k=10, **kw)))
            assert len(r.hits) == 10 and len({h.id for h in r.hits}) == 10
            assert not r.degraded and r.coverage == 1.0 and not r.stats.exact
            # The band: estimated hits are certain-in ones (a router's merge
            # may keep fewer than its shards counted); none with exact_scores.
            estimated = sum(h.estimated for h in r.hits)
            assert estimated <= r.stats.certain_in
            if kw.get("exact_scores") or "knobs" not in kw or not kw["knobs"].band_confidence:
                assert estimated == 0
            out.append({"hits": len(r.hits), "fullview": r.stats.ssd_reads > 0})
        return out
    check(b, ref, run)


@covers("SearchBatch")
@pytest.mark.parametrize("bname", over_backends("SearchBatch"))
def test_search_batch(env: Env, bname: str) -> None:
    b, ref = both(env, bname)
    same_shape = [S(vector=q.tolist(), k=5) for q in QUERIES[:4]]
    mixed = [S(vector=QUERIES[0].tolist(), k=3),
             S(vector=QUERIES[1].tolist(), k=7, filter=GOOD_FILTERS["keyword_indexed"][0]),
             S(vector=QUERIES[2].tolist(), k=2, with_payload=True)]
    preds = [None, GOOD_FILTERS["keyword_indexed"][1], None]

    def run(x: B.Backend):
        out = []
        for queries, ps in ((same_shape, [None] * 4), (mixed, preds)):
            r = ok(outcome(x, "SearchBatch", pb.SearchBatchRequest(collection="docs",
                                                                   queries=queries)))
            assert len(r.results) == len(queries)
            for q, res, p in zip(queries, r.results, ps):
                want_ids, want_scores = exact_top(VECS, IDS, np.array(q.vector, np.float32),
                                                  q.k, "l2", p)
                assert [h.id for h in res.hits] == want_ids
                assert_scores([h.score for h in res.hits], want_scores)
                out.append(search_view(res))
        return out
    check(b, ref, run)


# -- Scroll


def scroll_all(x: B.Backend, limit: int, flt: Optional[pb.Filter] = None, offset: int = 0):
    pages = []
    while True:
        r = ok(outcome(x, "Scroll", pb.ScrollRequest(collection="docs", limit=limit, filter=flt,
                                                     offset=offset)))
        nxt = r.next_offset if r.HasField("next_offset") else None
        pages.append(([p.id for p in r.points], nxt))
        if nxt is None:
            return pages
        assert nxt > pages[-1][0][-1]
        offset = nxt
        assert len(pages) < 1000


def oracle_pages(limit: int, pred=lambda i: True, offset: int = 0):
    ids = [IDS[i] for i in range(N) if pred(i) and IDS[i] >= offset]
    pages = []
    for lo in range(0, max(len(ids), 1), limit):
        page = ids[lo:lo + limit]
        pages.append((page, ids[lo + limit] if lo + limit < len(ids) else None))
    return pages


@covers("Scroll")
@pytest.mark.parametrize("limit", [1, 50, 64, 600, 0])
@pytest.mark.parametrize("bname", over_backends("Scroll.pages"))
def test_scroll_pages(env: Env, bname: str, limit: int) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        pages = scroll_all(x, limit)
        assert pages == oracle_pages(limit or 100)
        return pages
    check(b, ref, run)


@pytest.mark.parametrize("fname", ["keyword_indexed", "bool_scan", "has_id", "matches_nothing"])
@pytest.mark.parametrize("bname", over_backends("Scroll.filter"))
def test_scroll_filtered(env: Env, bname: str, fname: str) -> None:
    b, ref = both(env, bname)
    f, pred = GOOD_FILTERS[fname]

    def run(x: B.Backend):
        pages = scroll_all(x, 37, f, offset=IDS[3])
        assert pages == oracle_pages(37, pred, offset=IDS[3])
        return pages
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Scroll.payload_vectors"))
def test_scroll_payload_vectors_and_offsets(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        full = ok(outcome(x, "Scroll", pb.ScrollRequest(collection="docs", limit=3,
                                                        offset=IDS[10] - 3, with_payload=True,
                                                        with_vectors=True)))
        same([point_view(p) for p in full.points], [point_view(doc_point(i)) for i in (10, 11, 12)])
        assert full.next_offset == IDS[13]
        past = ok(outcome(x, "Scroll", pb.ScrollRequest(collection="docs", offset=IDS[-1] + 1)))
        assert not past.points and not past.HasField("next_offset")
        last = ok(outcome(x, "Scroll", pb.ScrollRequest(collection="docs", offset=IDS[-1])))
        assert [p.id for p in last.points] == [IDS[-1]] and not last.HasField("next_offset")
        return [[point_view(p) for p in full.points], full.next_offset, str(past), str(last)]
    check(b, ref, run)
