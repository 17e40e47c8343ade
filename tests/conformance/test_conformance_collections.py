"""API conformance (issue 46): collections. CreateCollection, DropCollection,
ListCollections, GetCollection, field indexes, BuildIndex, Compact and
GetServerInfo: their error cases, then their happy paths."""

from __future__ import annotations

from typing import List

import pytest

from conformance_data import (BUILT, BUILT_IDS, BUILT_N, DIM, N, SMALL_DIM, SMALL_N, WIDE_DIM, C,
                              F, close, pvals)
from conformance_drift import over_backends
from conformance_harness import (Case, Env, Err, both, check, covers, create, env_fresh,
                                 error_params, filled, info_view, ok, outcome, run_error_case,
                                 upsert)
import backends as B
from zoomd._proto import zoom_pb2 as pb


ERROR_CASES: List[Case] = [
    # -- CreateCollection
    Case("CreateCollection.empty_name", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="", dim=4, metric=pb.L2)),
         "INVALID_ARGUMENT", "an empty one"),
    Case("CreateCollection.bad_name", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="bad name!", dim=4,
                                                                   metric=pb.L2)),
         "INVALID_ARGUMENT", "has the character"),
    Case("CreateCollection.name_65", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="x" * 65, dim=4,
                                                                   metric=pb.L2)),
         "INVALID_ARGUMENT", "1..64 characters"),
    Case("CreateCollection.dim_0", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="cc_dim0", dim=0,
                                                                   metric=pb.L2)),
         "INVALID_ARGUMENT", "dim must be at least 1"),
    Case("CreateCollection.dim_over_max", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="cc_dimbig", dim=4097,
                                                                   metric=pb.L2)),
         "INVALID_ARGUMENT", "--max_dim"),
    Case("CreateCollection.no_metric", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="cc_nometric", dim=4)),
         "INVALID_ARGUMENT", "metric is required"),
    Case("CreateCollection.unknown_metric", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="cc_m7", dim=4, metric=7)),
         "INVALID_ARGUMENT", "unknown metric value 7"),
    Case("CreateCollection.unknown_dtype", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="cc_d9", dim=4,
                                                                   metric=pb.L2, dtype=9)),
         "INVALID_ARGUMENT", "unknown dtype value 9"),
    Case("CreateCollection.unknown_index_kind", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_k9", dim=4, metric=pb.L2, index=pb.IndexSpec(kind=9))),
         "INVALID_ARGUMENT", "unknown index kind value 9"),
    Case("CreateCollection.unknown_quantizer", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_q9", dim=4, metric=pb.L2, index=pb.IndexSpec(quantizer=9))),
         "INVALID_ARGUMENT", "unknown quantizer value 9"),
    Case("CreateCollection.cosine_uint8", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_cu8", dim=4, metric=pb.COSINE, dtype=pb.UINT8)),
         "INVALID_ARGUMENT", "osine"),
    Case("CreateCollection.pq_nbits_5", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_nb5", dim=4, metric=pb.L2, index=pb.IndexSpec(pq_nbits=5))),
         "INVALID_ARGUMENT", "nbits"),
    Case("CreateCollection.default_rerank_stop_sd", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_sd", dim=4, metric=pb.L2, default_knobs=pb.SearchKnobs(rerank_stop_sd=2))),
         "INVALID_ARGUMENT", "not a collection default"),
    Case("CreateCollection.default_band_confidence", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_band", dim=4, metric=pb.L2, default_knobs=pb.SearchKnobs(band_confidence=2))),
         "INVALID_ARGUMENT", "default_knobs.band_confidence"),
    Case("CreateCollection.default_ef_over_max", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_ef", dim=4, metric=pb.L2, default_knobs=pb.SearchKnobs(ef=10001))),
         "INVALID_ARGUMENT", "default ef 10001 is above this server's limit"),
    Case("CreateCollection.cache_over_max", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(
             name="cc_cache", dim=4, metric=pb.L2, cache_bytes=(1 << 30) + 1)),
         "INVALID_ARGUMENT", "--max_cache_bytes"),
    Case("CreateCollection.duplicate", "CreateCollection",
         lambda: pb.CreateCollectionRequest(spec=pb.CollectionSpec(name="docs", dim=DIM,
                                                                   metric=pb.L2)),
         "ALREADY_EXISTS", "docs"),
    # -- DropCollection / GetCollection
    Case("DropCollection.unknown", "DropCollection",
         lambda: pb.DropCollectionRequest(name="nosuch"), "NOT_FOUND", "nosuch"),
    Case("DropCollection.bad_name", "DropCollection",
         lambda: pb.DropCollectionRequest(name="bad name!"), "INVALID_ARGUMENT",
         "has the character"),
    Case("GetCollection.unknown", "GetCollection",
         lambda: pb.GetCollectionRequest(name="nosuch"), "NOT_FOUND", "nosuch"),
    Case("GetCollection.bad_name", "GetCollection",
         lambda: pb.GetCollectionRequest(name="bad name!"), "INVALID_ARGUMENT",
         "has the character"),
    # -- CreateFieldIndex / DeleteFieldIndex
    Case("CreateFieldIndex.unknown_type", "CreateFieldIndex",
         lambda: pb.CreateFieldIndexRequest(collection="scratch", field="x", type=9),
         "INVALID_ARGUMENT", ""),
    Case("CreateFieldIndex.no_type", "CreateFieldIndex",
         lambda: pb.CreateFieldIndexRequest(collection="scratch", field="x"),
         "INVALID_ARGUMENT", ""),
    Case("CreateFieldIndex.empty_field", "CreateFieldIndex",
         lambda: pb.CreateFieldIndexRequest(collection="scratch", field="", type=pb.KEYWORD),
         "INVALID_ARGUMENT", ""),
    Case("CreateFieldIndex.other_type", "CreateFieldIndex",
         lambda: pb.CreateFieldIndexRequest(collection="scratch", field="cat", type=pb.INTEGER),
         "FAILED_PRECONDITION", ""),
    Case("CreateFieldIndex.unknown_collection", "CreateFieldIndex",
         lambda: pb.CreateFieldIndexRequest(collection="nosuch", field="x", type=pb.KEYWORD),
         "NOT_FOUND", "nosuch"),
    Case("DeleteFieldIndex.not_indexed", "DeleteFieldIndex",
         lambda: pb.DeleteFieldIndexRequest(collection="scratch", field="price"), "NOT_FOUND", ""),
    Case("DeleteFieldIndex.unknown_collection", "DeleteFieldIndex",
         lambda: pb.DeleteFieldIndexRequest(collection="nosuch", field="x"), "NOT_FOUND",
         "nosuch"),
    # -- BuildIndex / Compact
    Case("BuildIndex.too_few_points", "BuildIndex",
         lambda: pb.BuildIndexRequest(collection="ipc", wait=True), "FAILED_PRECONDITION", ""),
    Case("BuildIndex.unknown_collection", "BuildIndex",
         lambda: pb.BuildIndexRequest(collection="nosuch"), "NOT_FOUND", "nosuch"),
    Case("Compact.unknown_collection", "Compact", lambda: pb.CompactRequest(collection="nosuch"),
         "NOT_FOUND", "nosuch"),
]
assert len({c.id for c in ERROR_CASES}) == len(ERROR_CASES)


@pytest.mark.parametrize("case,bname", error_params(ERROR_CASES))
def test_error(case: Case, bname: str, env: Env) -> None:
    run_error_case(case, bname, env)


# ---- happy paths -----------------------------------------------------------------------------


@covers("GetServerInfo")
@pytest.mark.parametrize("bname", over_backends("GetServerInfo"))
def test_get_server_info(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        r = ok(outcome(x, "GetServerInfo", pb.GetServerInfoRequest()))
        assert r.version and r.simd_level in ("avx512", "avx2", "scalar") and r.started_unix_ms > 0
        return {"version": r.version, "simd_level": r.simd_level}
    check(b, ref, run)


CREATE_SPECS = {
    "defaults": dict(dim=8, metric=pb.L2),
    "explicit": dict(dim=8, metric=pb.COSINE, index=pb.IndexSpec(
        kind=pb.HNSW_PQ, m=8, ef_construction=64, pq_m=4, compact_links=True),
        default_knobs=pb.SearchKnobs(ef=32, rerank_candidates=50, target_recall=0.9)),
    "rabitq": dict(dim=8, metric=pb.INNER_PRODUCT, index=pb.IndexSpec(
        kind=pb.IVF_HNSW_PQ, quantizer=pb.QUANTIZER_RABITQ, nlist=4)),
    "uint8": dict(dim=8, metric=pb.L2, dtype=pb.UINT8, cache_bytes=1 << 20),
}


@covers("CreateCollection", "GetCollection", "DropCollection")
@pytest.mark.parametrize("spec", sorted(CREATE_SPECS))
@pytest.mark.parametrize("bname", over_backends("CreateCollection"))
def test_create_collection(env: Env, bname: str, spec: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("cc")
        created = ok(outcome(x, "CreateCollection", pb.CreateCollectionRequest(
            spec=x.spec(name=name, **CREATE_SPECS[spec]))))
        assert created.info.spec.name == name and created.info.points == 0
        assert created.info.index_state == pb.NONE
        got = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))).info
        if x.name == "cluster":
            assert (got.spec.shards, got.spec.replicas) == (B.SHARDS, B.REPLICAS)
        view = {"created": info_view(created.info), "got": info_view(got)}
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=name)))
        return view
    check(b, ref, run)


@covers("DropCollection", "ListCollections")
@pytest.mark.parametrize("bname", over_backends("DropCollection"))
def test_drop_collection(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("dc")
        create(x, name, 4)
        upsert(x, name, [pb.Point(id=1, vector=[1, 2, 3, 4])])
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=name)))
        gone = outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))
        assert isinstance(gone, Err) and gone.code == "NOT_FOUND"
        assert name not in [c.spec.name for c in ok(outcome(
            x, "ListCollections", pb.ListCollectionsRequest())).collections]
        again = create(x, name, 4)  # the name is free again, and the new one is empty
        n = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=name)))
        return {"points": again.points, "count": n}
    assert check(b, ref, run) == {"points": 0, "count": 0}


FILLED = {"docs": (N, DIM), "ipc": (SMALL_N, SMALL_DIM), "cosc": (SMALL_N, SMALL_DIM),
          "u8": (SMALL_N, SMALL_DIM), "built": (BUILT_N, DIM), "wide": (0, WIDE_DIM)}


@covers("ListCollections")
@pytest.mark.parametrize("bname", over_backends("ListCollections"))
def test_list_collections(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        got = ok(outcome(x, "ListCollections", pb.ListCollectionsRequest())).collections
        mine = {c.spec.name: (c.points, c.spec.dim, c.spec.metric, c.index_state)
                for c in got if c.spec.name in FILLED}
        assert {k: v[:2] for k, v in mine.items()} == FILLED
        return mine
    check(b, ref, run)


@covers("GetCollection")
@pytest.mark.parametrize("name", ["docs", "built", "u8"])
@pytest.mark.parametrize("bname", over_backends("GetCollection"))
def test_get_collection(env: Env, bname: str, name: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        info = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))).info
        assert info.points == FILLED[name][0] and info.deleted_points == 0
        if name == "built":
            assert info.index_state == pb.READY and info.indexed_points == BUILT_N
        else:
            assert info.index_state == pb.NONE
        if name == "docs":  # (their point counts: test_collection_info_field_index_points)
            assert sorted((f.field, f.type, f.ready) for f in info.field_indexes) == [
                ("cat", pb.KEYWORD, True), ("n", pb.INTEGER, True)]
        return info_view(info)
    check(b, ref, run)


# -- field indexes


def tagged(x: B.Backend, prefix: str) -> str:
    name = env_fresh(prefix)
    create(x, name, 4)
    upsert(x, name, [pb.Point(id=i, vector=[i, 1, 2, 3], fields=pvals({"tag": f"t{i % 3}"}))
                     for i in range(1, 31)])
    return name


TAG = F(must=[C(key="tag", match=pb.Match(keyword="t1"))])


@pytest.mark.parametrize("bname", over_backends("CreateFieldIndex.answer"))
def test_create_field_index_answer(env: Env, bname: str) -> None:
    """With wait the answer says the index is there and ready."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = tagged(x, "fi")
        r = ok(outcome(x, "CreateFieldIndex", pb.CreateFieldIndexRequest(
            collection=name, field="tag", type=pb.KEYWORD, wait=True)))
        assert [(f.field, f.type, f.ready, f.points) for f in r.info.field_indexes] == [
            ("tag", pb.KEYWORD, True, 30)]
        assert r.info.points == 30
        return info_view(r.info) | {"spec": None}
    check(b, ref, run)


@covers("CreateFieldIndex")
@pytest.mark.parametrize("bname", over_backends("CreateFieldIndex.effect"))
def test_create_field_index_effect(env: Env, bname: str) -> None:
    """Filters on the field stop scanning; the same index again is OK."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = tagged(x, "fie")
        before = ok(outcome(x, "Count", pb.CountRequest(collection=name, filter=TAG)))
        ok(outcome(x, "CreateFieldIndex", pb.CreateFieldIndexRequest(
            collection=name, field="tag", type=pb.KEYWORD, wait=True)))
        ok(outcome(x, "CreateFieldIndex", pb.CreateFieldIndexRequest(
            collection=name, field="tag", type=pb.KEYWORD, wait=True)))
        x.barrier(name)
        after = ok(outcome(x, "Count", pb.CountRequest(collection=name, filter=TAG)))
        info = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))).info
        assert (before.count, before.filter_scan, after.count, after.filter_scan) == (
            10, True, 10, False)
        assert [(f.field, f.ready) for f in info.field_indexes] == [("tag", True)]
        return [before.count, after.count, after.filter_scan, info_view(info)["field_indexes"]]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("GetCollection.field_index_points"))
def test_collection_info_field_index_points(env: Env, bname: str) -> None:
    """FieldIndexInfo.points: the collection's records with a value of the field."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        info = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name="docs"))).info
        got = sorted((f.field, f.points) for f in info.field_indexes)
        assert got == [("cat", N), ("n", N)]
        return got
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("GetCollection.default_target_recall"))
def test_collection_info_default_target_recall(env: Env, bname: str) -> None:
    """What a search naming no knobs aims at: the server's --default_target_recall
    (0.95) for a collection with the built-in default knobs, else the
    collection's own target."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        docs = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name="docs"))).info
        name = env_fresh("dtr")
        own = create(x, name, 4, default_knobs=pb.SearchKnobs(target_recall=0.9))
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=name)))
        assert close(docs.default_target_recall, 0.95) and close(own.default_target_recall, 0.9)
        return [docs.default_target_recall, own.default_target_recall]
    check(b, ref, run)
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("DeleteFieldIndex.answer"))
def test_delete_field_index_answer(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = tagged(x, "dfi")
        ok(outcome(x, "CreateFieldIndex", pb.CreateFieldIndexRequest(
            collection=name, field="tag", type=pb.KEYWORD, wait=True)))
        x.barrier(name)
        r = ok(outcome(x, "DeleteFieldIndex", pb.DeleteFieldIndexRequest(collection=name,
                                                                          field="tag")))
        assert not r.info.field_indexes and r.info.points == 30
        return info_view(r.info) | {"spec": None}
    check(b, ref, run)


@covers("DeleteFieldIndex")
@pytest.mark.parametrize("bname", over_backends("DeleteFieldIndex.effect"))
def test_delete_field_index_effect(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = tagged(x, "dfe")
        ok(outcome(x, "CreateFieldIndex", pb.CreateFieldIndexRequest(
            collection=name, field="tag", type=pb.KEYWORD, wait=True)))
        x.barrier(name)
        ok(outcome(x, "DeleteFieldIndex", pb.DeleteFieldIndexRequest(collection=name,
                                                                      field="tag")))
        x.barrier(name)
        after = ok(outcome(x, "Count", pb.CountRequest(collection=name, filter=TAG)))
        info = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))).info
        again = outcome(x, "DeleteFieldIndex", pb.DeleteFieldIndexRequest(collection=name,
                                                                           field="tag"))
        assert (after.count, after.filter_scan, len(info.field_indexes)) == (10, True, 0)
        assert isinstance(again, Err) and again.code == "NOT_FOUND"
        return [after.count, after.filter_scan, again.code]
    check(b, ref, run)


# -- BuildIndex, Compact


@covers("BuildIndex")
@pytest.mark.parametrize("bname", over_backends("BuildIndex"))
def test_build_index(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        r = ok(outcome(x, "BuildIndex", pb.BuildIndexRequest(collection="built", wait=True),
                       timeout=120))
        assert r.info.index_state == pb.READY and r.info.indexed_points == BUILT_N
        assert r.info.points == BUILT_N and r.info.trained_points == BUILT_N
        return info_view(r.info)
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("BuildIndex.no_wait"))
def test_build_index_without_wait(env: Env, bname: str) -> None:
    """Answered at once; the build runs on (a later wait joins it)."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("bnw")
        create(x, name, DIM)
        upsert(x, name, [pb.Point(id=BUILT_IDS[i], vector=BUILT[i].tolist())
                         for i in range(BUILT_N)])
        r = ok(outcome(x, "BuildIndex", pb.BuildIndexRequest(collection=name), timeout=120))
        assert r.info.points == BUILT_N
        done = ok(outcome(x, "BuildIndex", pb.BuildIndexRequest(collection=name, wait=True),
                          timeout=120))
        assert done.info.index_state == pb.READY and done.info.indexed_points == BUILT_N
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=name)))
        return info_view(done.info) | {"spec": None}
    check(b, ref, run)


@covers("Compact")
@pytest.mark.parametrize("bname", over_backends("Compact"))
def test_compact(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "cp", 40)
        r = ok(outcome(x, "Delete", pb.DeleteRequest(collection=name, ids=list(range(1, 11)))))
        x.sync(name, r.tokens)
        before = ok(outcome(x, "GetCollection", pb.GetCollectionRequest(name=name))).info
        c = ok(outcome(x, "Compact", pb.CompactRequest(collection=name), timeout=120)).info
        assert (before.points, before.deleted_points) == (30, 10)
        assert (c.points, c.deleted_points, c.stored_records) == (30, 0, 30)
        got = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[10, 11, 40],
                                                 with_payload=True))).points
        assert [p.id for p in got] == [11, 40] and got[0].payload == b"x11"
        return [info_view(before) | {"spec": None}, info_view(c) | {"spec": None}]
    check(b, ref, run)
