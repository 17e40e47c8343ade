"""API conformance (issue 46): points. Upsert, Get, Delete, Import,
SetPayload and DeletePayload: their error cases, then their happy paths."""

from __future__ import annotations

import itertools
from typing import List

import pytest

from conformance_data import (BAD_FILTERS, DIM, MB, SMALL_DIM, C, F, U, point, pvals, small_points,
                              val)
from conformance_drift import over_backends
from conformance_harness import (Case, Env, both, check, covers, create, env_fresh, error_params,
                                 filled, ok, outcome, point_view, run_error_case, same, upsert)
import backends as B
from zoomd._proto import zoom_pb2 as pb

_big_runs, _list_runs = itertools.count(), itertools.count()


def big_fields() -> dict:
    """1,040,000 bytes of fields (under the 1 MiB limit, over the router's
    old cap of 1,000,000), others at each build: each run changes point 77001
    (filled in scratch), so that `updated` is 1 on either backend (what the
    case is about is the size taken, not which points a router counts)."""
    return {"big": val("yz"[next(_big_runs) % 2] * 1040000)}


def int_lists(value: int) -> dict:
    """Typed fields the request counts as just under 1 MiB (255 lists of
    1,024 small integers: 1,046,265 bytes) and the cluster's log stores at
    2.25 times that (~2.3 MB at DIM): over nats-server's default max_payload
    (1 MB), within the 8 MB docs/cluster.md asks for."""
    return {f"l{i:03d}": val([value] * 1024) for i in range(255)}


ERROR_CASES: List[Case] = [
    # -- Upsert
    Case("Upsert.empty_batch", "Upsert", lambda: U([]), "INVALID_ARGUMENT",
         "the batch has no points"),
    Case("Upsert.wrong_dim", "Upsert", lambda: U([point(0, vector=[1.0] * (DIM - 1))]),
         "INVALID_ARGUMENT", "has 15 dimensions"),
    Case("Upsert.nan", "Upsert", lambda: U([point(0, vector=[float("nan")] + [0.0] * (DIM - 1))]),
         "INVALID_ARGUMENT", "point 1"),
    Case("Upsert.inf", "Upsert", lambda: U([point(0, vector=[float("inf")] + [0.0] * (DIM - 1))]),
         "INVALID_ARGUMENT", "point 1"),
    Case("Upsert.magnitude", "Upsert", lambda: U([point(0, vector=[1e19] + [0.0] * (DIM - 1))]),
         "INVALID_ARGUMENT", "point 1"),
    Case("Upsert.vector_and_bytes", "Upsert",
         lambda: U([point(0, vector=[1.0] * DIM, vector_bytes=bytes(DIM))]),
         "INVALID_ARGUMENT", "give one"),
    Case("Upsert.no_vector", "Upsert", lambda: U([pb.Point(id=1)]), "INVALID_ARGUMENT",
         "dimensions"),
    Case("Upsert.payload_over_limit", "Upsert",
         lambda: U([point(0, payload=b"x" * (MB + 1))]), "INVALID_ARGUMENT",
         "the limit is 1048576"),
    Case("Upsert.payload_under_limit_over_log_entry", "Upsert",
         lambda: U([point(0, payload=b"x" * 1040000, id=77000)], collection="scratch"),
         "OK", ""),
    # At the limit: log entries over nats-server's default max_payload (1 MB).
    Case("Upsert.payload_at_limit", "Upsert",
         lambda: U([point(0, payload=b"x" * MB, id=77002)]), "OK", ""),
    Case("Upsert.int_lists_at_limit", "Upsert",
         lambda: U([point(0, fields=int_lists(0), id=77003)]), "OK", ""),
    Case("Upsert.fields_over_limit", "Upsert",
         lambda: U([point(0, fields={"big": val("y" * MB)})]), "INVALID_ARGUMENT",
         "the limit is 1048576"),
    Case("Upsert.list_in_list", "Upsert",
         lambda: U([point(0, fields={"l": val([[1]])})]), "INVALID_ARGUMENT", "a list inside"),
    Case("Upsert.null_in_list", "Upsert",
         lambda: U([point(0, fields={"l": pb.Value(list_value=pb.ListValue(
             values=[val(1), val(None)]))})]), "INVALID_ARGUMENT", "null inside a list"),
    Case("Upsert.nan_field", "Upsert",
         lambda: U([point(0, fields={"d": val(float("nan"))})]), "INVALID_ARGUMENT", "point 1"),
    Case("Upsert.geo_off_globe", "Upsert",
         lambda: U([point(0, fields={"g": val((95.0, 0.0))})]), "INVALID_ARGUMENT", "point 1"),
    Case("Upsert.empty_field_name", "Upsert",
         lambda: U([point(0, fields={"": val(1)})]), "INVALID_ARGUMENT", "empty name"),
    Case("Upsert.list_1025", "Upsert",
         lambda: U([point(0, fields={"l": val(list(range(1025)))})]), "INVALID_ARGUMENT",
         "1024"),
    Case("Upsert.value_no_kind", "Upsert",
         lambda: U([point(0, fields={"v": pb.Value()})]), "INVALID_ARGUMENT", "no kind"),
    Case("Upsert.too_many_points", "Upsert",
         lambda: U([point(i, vector=[0.0] * DIM) for i in range(10001)]), "INVALID_ARGUMENT",
         "at most 10000"),
    Case("Upsert.uint8_not_integer", "Upsert",
         lambda: U([pb.Point(id=1, vector=[0.5] * SMALL_DIM)], collection="u8"),
         "INVALID_ARGUMENT", ""),
    Case("Upsert.uint8_over_255", "Upsert",
         lambda: U([pb.Point(id=1, vector=[256.0] * SMALL_DIM)], collection="u8"),
         "INVALID_ARGUMENT", ""),
    Case("Upsert.cosine_zero", "Upsert",
         lambda: U([pb.Point(id=1, vector=[0.0] * SMALL_DIM)], collection="cosc"),
         "INVALID_ARGUMENT", ""),
    Case("Upsert.bad_write_concern", "Upsert",
         lambda: pb.UpsertRequest(collection="scratch", points=[point(0)], write_concern=7),
         "INVALID_ARGUMENT", "write_concern 7 is not one of"),
    Case("Upsert.unknown_collection", "Upsert", lambda: U([point(0)], collection="nosuch"),
         "NOT_FOUND", "nosuch"),
    Case("Upsert.bad_collection_name", "Upsert", lambda: U([point(0)], collection="bad name!"),
         "INVALID_ARGUMENT", "has the character"),
    # -- Delete
    Case("Delete.nothing", "Delete", lambda: pb.DeleteRequest(collection="scratch"),
         "INVALID_ARGUMENT", "no ids (or filter) to delete"),
    Case("Delete.ids_and_filter", "Delete",
         lambda: pb.DeleteRequest(collection="scratch", ids=[1], filter=F(
             must=[C(key="cat", match=pb.Match(keyword="c1"))])),
         "INVALID_ARGUMENT", "not both"),
    Case("Delete.too_many_ids", "Delete",
         lambda: pb.DeleteRequest(collection="scratch", ids=list(range(100001))),
         "INVALID_ARGUMENT", "100001"),
    Case("Delete.filter_matches_all_by_form", "Delete",
         lambda: pb.DeleteRequest(collection="scratch", filter=F()), "INVALID_ARGUMENT", ""),
    Case("Delete.filter_matches_every_point", "Delete",
         lambda: pb.DeleteRequest(collection="ipc", filter=F(
             must=[C(is_empty=pb.FieldKey(key="zz"))])), "FAILED_PRECONDITION", ""),
    Case("Delete.bad_filter", "Delete",
         lambda: pb.DeleteRequest(collection="scratch", filter=BAD_FILTERS["no_key"][0]),
         "INVALID_ARGUMENT", "needs a key"),
    Case("Delete.bad_write_concern", "Delete",
         lambda: pb.DeleteRequest(collection="scratch", ids=[1], write_concern=4),
         "INVALID_ARGUMENT", "write_concern 4 is not one of"),
    Case("Delete.unknown_collection", "Delete",
         lambda: pb.DeleteRequest(collection="nosuch", ids=[1]), "NOT_FOUND", "nosuch"),
    # -- Get
    Case("Get.no_ids", "Get", lambda: pb.GetRequest(collection="docs"), "INVALID_ARGUMENT",
         "no ids to get"),
    Case("Get.too_many_ids", "Get",
         lambda: pb.GetRequest(collection="docs", ids=list(range(100001))), "INVALID_ARGUMENT",
         "100001"),
    Case("Get.unknown_collection", "Get", lambda: pb.GetRequest(collection="nosuch", ids=[1]),
         "NOT_FOUND", "nosuch"),
    # -- Import
    Case("Import.no_messages", "Import", lambda: [], "OK", ""),
    Case("Import.no_collection", "Import",
         lambda: [pb.ImportRequest(points=[point(0)])], "INVALID_ARGUMENT", ""),
    Case("Import.wrong_dim_second_message", "Import",
         lambda: [pb.ImportRequest(collection="scratch", points=[point(0, id=50001)]),
                  pb.ImportRequest(points=[point(1, vector=[1.0] * 3, id=50002)])],
         "INVALID_ARGUMENT", "has 3 dimensions"),
    Case("Import.bad_write_concern", "Import",
         lambda: [pb.ImportRequest(collection="scratch", points=[point(0, id=50003)],
                                   write_concern=5)],
         "INVALID_ARGUMENT", "write_concern 5 is not one of"),
    Case("Import.empty_message", "Import",
         lambda: [pb.ImportRequest(collection="scratch")], "INVALID_ARGUMENT", ""),
    Case("Import.unknown_collection", "Import",
         lambda: [pb.ImportRequest(collection="nosuch", points=[point(0)])], "NOT_FOUND",
         "nosuch"),
    # -- SetPayload
    Case("SetPayload.no_ids", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", fields={"a": val(1)}),
         "INVALID_ARGUMENT", "no ids to set the payload of"),
    Case("SetPayload.too_many_ids", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=list(range(100001)),
                                      fields={"a": val(1)}),
         "INVALID_ARGUMENT", "number of ids 100001 is above this server's limit of 100000"),
    Case("SetPayload.fields_over_limit", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[1],
                                      fields={"big": val("y" * MB)}),
         "INVALID_ARGUMENT", "the limit is 1048576"),
    Case("SetPayload.fields_under_limit_over_log_entry", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[77001], fields=big_fields()),
         "OK", ""),
    Case("SetPayload.int_lists_at_limit", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[77001],
                                      fields=int_lists(next(_list_runs) % 2)),
         "OK", ""),
    Case("SetPayload.nan_field", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[1],
                                      fields={"d": val(float("nan"))}),
         "INVALID_ARGUMENT", ""),
    Case("SetPayload.list_in_list", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[1],
                                      fields={"l": val([[1]])}),
         "INVALID_ARGUMENT", "a list inside"),
    Case("SetPayload.empty_field_name", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[1], fields={"": val(1)}),
         "INVALID_ARGUMENT", "empty name"),
    Case("SetPayload.bad_write_concern", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="scratch", ids=[1], fields={"a": val(1)},
                                      write_concern=-1),
         "INVALID_ARGUMENT", "write_concern -1 is not one of"),
    Case("SetPayload.unknown_collection", "SetPayload",
         lambda: pb.SetPayloadRequest(collection="nosuch", ids=[1], fields={"a": val(1)}),
         "NOT_FOUND", "nosuch"),
    # -- DeletePayload
    Case("DeletePayload.no_ids", "DeletePayload",
         lambda: pb.DeletePayloadRequest(collection="scratch", keys=["a"]),
         "INVALID_ARGUMENT", "no ids to delete the payload of"),
    Case("DeletePayload.too_many_ids", "DeletePayload",
         lambda: pb.DeletePayloadRequest(collection="scratch", ids=list(range(100001))),
         "INVALID_ARGUMENT", "number of ids 100001"),
    Case("DeletePayload.too_many_keys", "DeletePayload",
         lambda: pb.DeletePayloadRequest(collection="scratch", ids=[123456789],
                                         keys=[f"k{i}" for i in range(1025)]),
         "INVALID_ARGUMENT", "number of keys 1025"),
    Case("DeletePayload.bad_write_concern", "DeletePayload",
         lambda: pb.DeletePayloadRequest(collection="scratch", ids=[1], write_concern=9),
         "INVALID_ARGUMENT", "write_concern 9 is not one of"),
    Case("DeletePayload.unknown_collection", "DeletePayload",
         lambda: pb.DeletePayloadRequest(collection="nosuch", ids=[1]), "NOT_FOUND", "nosuch"),
]
assert len({c.id for c in ERROR_CASES}) == len(ERROR_CASES)


@pytest.mark.parametrize("case,bname", error_params(ERROR_CASES))
def test_error(case: Case, bname: str, env: Env) -> None:
    run_error_case(case, bname, env)


# ---- happy paths -----------------------------------------------------------------------------


@covers("Upsert", "Get")
@pytest.mark.parametrize("bname", over_backends("Upsert+Get"))
def test_upsert_and_get(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("up")
        create(x, name, 4)
        first = small_points(30)
        r1 = upsert(x, name, first)
        again = [pb.Point(id=5, vector=[1, 1, 1, 1], payload=b"new", fields=pvals({"k": 1})),
                 pb.Point(id=6, vector=[2, 2, 2, 2]),  # no payload, no fields: both replaced
                 pb.Point(id=40, vector=[3, 3, 3, 3], payload=b"first"),
                 pb.Point(id=40, vector=[4, 4, 4, 4], payload=b"second")]  # the later wins
        r2 = upsert(x, name, again)
        assert r1.upserted == 30
        full = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[40, 5, 999, 5, 6, 1],
                                                  with_vectors=True, with_payload=True)))
        bare = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[1, 2])))
        got = [point_view(p) for p in full.points]
        want1 = point_view(first[0])
        assert [p["id"] for p in got] == [40, 5, 5, 6, 1]  # request order, 999 left out
        assert got[0]["vector"] == [4, 4, 4, 4] and got[0]["payload"] == b"second"
        assert got[1]["fields"] == {"k": 1} and got[1]["payload"] == b"new"
        assert got[3]["payload"] == b"" and got[3]["fields"] == {}
        same(got[4], want1)
        assert [point_view(p) for p in bare.points] == [
            {"id": i, "vector": [], "payload": b"", "fields": {}} for i in (1, 2)]
        count = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        assert count == 31
        return {"upserted": [r1.upserted, r2.upserted], "full": got, "count": count}
    check(b, ref, run)


@covers("Delete")
@pytest.mark.parametrize("bname", over_backends("Delete.ids"))
def test_delete_by_ids(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "del")
        r = ok(outcome(x, "Delete", pb.DeleteRequest(collection=name, ids=[1, 2, 3])))
        x.sync(name, r.tokens)
        count = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        left = [p.id for p in ok(outcome(x, "Get", pb.GetRequest(collection=name,
                                                                 ids=[1, 4]))).points]
        assert (r.deleted, count, left) == (3, 27, [4])
        return r.deleted
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("WriteConcern.answered"))
def test_write_concerns_are_answered(env: Env, bname: str) -> None:
    """Every write answers the concern it was acknowledged under (DEFAULT is
    MAJORITY; a standalone under --sync=always meets each one); on the
    cluster its tokens name the replicas that had it on disk: under MAJORITY
    more than half of the shard's, under ALL every one, under LOG none."""
    b, ref = both(env, bname)
    replicas = 2  # the conformance cluster: S = 2, R = 2

    def run(x: B.Backend):
        name = filled(x, "wc", 10)
        views = []
        for wc in (pb.WRITE_CONCERN_DEFAULT, pb.WRITE_CONCERN_LOG, pb.WRITE_CONCERN_MAJORITY,
                   pb.WRITE_CONCERN_ALL):
            want = pb.WRITE_CONCERN_MAJORITY if wc == pb.WRITE_CONCERN_DEFAULT else wc
            answers = [
                ok(outcome(x, "Upsert", pb.UpsertRequest(
                    collection=name, points=small_points(3), write_concern=wc))),
                ok(outcome(x, "SetPayload", pb.SetPayloadRequest(
                    collection=name, ids=[1, 2], fields=pvals({"w": wc}), write_concern=wc))),
                ok(outcome(x, "DeletePayload", pb.DeletePayloadRequest(
                    collection=name, ids=[2], keys=["w"], write_concern=wc))),
                ok(outcome(x, "Delete", pb.DeleteRequest(
                    collection=name, ids=[3], write_concern=wc))),
            ]
            for r in answers:
                assert r.write_concern == want, (wc, r)
                for t in r.tokens:  # the cluster's
                    need = {pb.WRITE_CONCERN_LOG: 0, pb.WRITE_CONCERN_MAJORITY: replicas // 2 + 1,
                            pb.WRITE_CONCERN_ALL: replicas}[want]
                    assert len(t.acknowledged_by) >= need, (wc, t)
                    assert len(set(t.acknowledged_by)) == len(t.acknowledged_by)
            views.append([r.write_concern for r in answers])
        return views
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("Delete.ids_missing"))
def test_delete_counts_only_existing_ids(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "delm")
        r = ok(outcome(x, "Delete", pb.DeleteRequest(collection=name, ids=[4, 4000, 4001])))
        assert r.deleted == 1  # "ids that existed"
        return r.deleted
    check(b, ref, run)


@covers("Delete")
@pytest.mark.parametrize("bname", over_backends("Delete.filter"))
def test_delete_by_filter(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "delf")
        g1 = F(must=[C(key="g", match=pb.Match(keyword="g1"))])
        r = ok(outcome(x, "Delete", pb.DeleteRequest(collection=name, filter=g1)))
        x.sync(name, r.tokens)
        left = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        left_g1 = ok(outcome(x, "Count", pb.CountRequest(collection=name, filter=g1))).count
        every = ok(outcome(x, "Delete", pb.DeleteRequest(collection=name, all=True)))
        x.sync(name, every.tokens)
        none = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        assert (r.deleted, left, left_g1, every.deleted, none) == (10, 20, 0, 20, 0)
        return [r.deleted, left, every.deleted]
    check(b, ref, run)


@covers("Import")
@pytest.mark.parametrize("bname", over_backends("Import"))
def test_import(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = env_fresh("imp")
        create(x, name, 4)
        pts = small_points(30)
        msgs = [pb.ImportRequest(collection=name, points=pts[:10]),
                pb.ImportRequest(points=pts[10:20]), pb.ImportRequest(points=pts[20:])]
        r = ok(outcome(x, "Import", msgs))
        x.sync(name, r.tokens)
        count = ok(outcome(x, "Count", pb.CountRequest(collection=name))).count
        got = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[30, 11],
                                                 with_vectors=True, with_payload=True)))
        same([point_view(p) for p in got.points], [point_view(pts[29]), point_view(pts[10])])
        assert (r.imported, count) == (30, 30)
        return [r.imported, count]
    check(b, ref, run)


@covers("SetPayload")
@pytest.mark.parametrize("bname", over_backends("SetPayload"))
def test_set_payload(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "sp", 10)
        merged = ok(outcome(x, "SetPayload", pb.SetPayloadRequest(
            collection=name, ids=[1, 2], fields=pvals({"g": "new", "c": True}))))
        over = ok(outcome(x, "SetPayload", pb.SetPayloadRequest(
            collection=name, ids=[3], fields=pvals({"z": 5}), overwrite=True)))
        x.barrier(name)
        got = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[1, 3, 4],
                                                 with_payload=True))).points
        views = [point_view(p) for p in got]
        assert [v["fields"] for v in views] == [{"c": True, "g": "new", "i": 1}, {"z": 5},
                                                {"g": "g1", "i": 4}]
        assert views[0]["payload"] == b"x1"  # the opaque bytes are kept
        c = ok(outcome(x, "Count", pb.CountRequest(collection=name, filter=F(
            must=[C(key="c", match=pb.Match(boolean=True))])))).count
        assert (merged.updated, over.updated, c) == (2, 1, 2)
        return [merged.updated, over.updated, views, c]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("SetPayload.missing_ids"))
def test_set_payload_counts_points_changed(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "spm", 10)
        r = ok(outcome(x, "SetPayload", pb.SetPayloadRequest(
            collection=name, ids=[1, 1000, 1001], fields=pvals({"c": 1}))))
        assert r.updated == 1  # "`updated` counts the points changed"
        return r.updated
    check(b, ref, run)


@covers("DeletePayload")
@pytest.mark.parametrize("bname", over_backends("DeletePayload"))
def test_delete_payload(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "dp", 10)
        some = ok(outcome(x, "DeletePayload", pb.DeletePayloadRequest(
            collection=name, ids=[1, 2], keys=["g", "nothere"])))
        every = ok(outcome(x, "DeletePayload", pb.DeletePayloadRequest(collection=name, ids=[3])))
        x.barrier(name)
        got = ok(outcome(x, "Get", pb.GetRequest(collection=name, ids=[1, 3, 4],
                                                 with_payload=True))).points
        views = [point_view(p) for p in got]
        assert [v["fields"] for v in views] == [{"i": 1}, {}, {"g": "g1", "i": 4}]
        assert views[1]["payload"] == b"x3"  # the opaque bytes are not fields
        assert (some.updated, every.updated) == (2, 1)
        return [some.updated, every.updated, views]
    check(b, ref, run)


@pytest.mark.parametrize("bname", over_backends("DeletePayload.missing_ids"))
def test_delete_payload_counts_points_changed(env: Env, bname: str) -> None:
    b, ref = both(env, bname)

    def run(x: B.Backend):
        name = filled(x, "dpm", 10)
        r = ok(outcome(x, "DeletePayload", pb.DeletePayloadRequest(
            collection=name, ids=[1, 1000], keys=["g"])))
        assert r.updated == 1
        return r.updated
    check(b, ref, run)
