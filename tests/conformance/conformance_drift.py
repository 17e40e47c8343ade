"""The drift inventory of the API conformance suite (issue 46): what the
router answers differently from the standalone today, case by case, and the
backends' parameters that turn an entry into a strict xfail of the cluster's
case. DRIFT lives here only: every test module takes its backends from
`over_backends` / `keyed_over_backends`.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import pytest

# ---- drift: what the router answers differently today ----------------------------------
# case id -> what differs (read against main at 8792410,
# the redesign's inventory). A cluster case listed here is xfail(strict=True): when
# the router is fixed, the case passes, the xfail turns it red, and its entry goes.

_UNKNOWN = ("unknown collection: the router says \"collection 'nosuch' not found in "
            "cluster conf\" (MapOf), the standalone \"collection 'nosuch' does not exist\"")
_MAX_IDS = ("max_ids message: the router says '100001 ids; this server takes at most 100000 "
            "per call' (PublishByIds), the standalone 'number of ids 100001 is above this "
            "server's limit of 100000'")
_RESOURCE_EXHAUSTED = (
    "a node's RESOURCE_EXHAUSTED (filter limits) is not a request error to the router "
    "(RequestError takes INVALID_ARGUMENT, OUT_OF_RANGE, PERMISSION_DENIED, UNAUTHENTICATED "
    "only): it fails over to every replica, marks each suspect for 2 s, and answers "
    "UNAVAILABLE '2 of 2 shards did not answer: shard 0 (n0: RESOURCE_EXHAUSTED ...)' where "
    "the standalone answers RESOURCE_EXHAUSTED with the filter's message")
_SNAPSHOT_UNROUTED_UNARY = (
    "snapshots are not routed, and RouterService does not override this method: gRPC's "
    "default UNIMPLEMENTED (empty message) is rewritten by the parse-error interceptor into "
    "INVALID_ARGUMENT 'could not parse the request: it is not a valid zoom.v1.<Request> "
    "message (check the client's protos)'")
_SNAPSHOT_UNROUTED_RESTORE = ("snapshots are not routed: RestoreSnapshot answers gRPC's "
                              "default UNIMPLEMENTED with an empty message")
_MODEL_NODE_REFUSED = (
    "the router checks only the model's name and the dir's length before recording it; the "
    "nodes refuse it, and the router answers FAILED_PRECONDITION 'model X did not load on "
    "node nK: it was refused there (its log says why). It was removed from the cluster...' "
    "where the standalone answers INVALID_ARGUMENT with the reason")
_MODEL_LOAD_FAILED = (
    "a load that fails on the nodes: the router answers FAILED_PRECONDITION 'model X did not "
    "load on node nK: <reason>. It was removed from the cluster: ...' where the standalone "
    "answers the load's own code (NOT_FOUND, INVALID_ARGUMENT) \"model 'X' cannot be loaded: "
    "<reason>\"")

DRIFT: Dict[str, str] = {
    # -- collections
    "CreateCollection.cache_over_max":
        "the router does not check cache_bytes against --max_cache_bytes (the standalone's "
        "CollectionConfig::Validate does): it records the collection and answers OK",
    "CreateCollection.duplicate":
        "ALREADY_EXISTS message: the router says 'collection docs exists in cluster conf', the "
        "standalone \"collection 'docs' already exists; drop it first or pick another name\"",
    "DropCollection.unknown": _UNKNOWN + " (DropCollection: the name without quotes, from "
                              "ClusterCatalog::DropCollection)",
    "GetCollection.unknown": _UNKNOWN,
    "GetCollection.field_index_points":
        "FieldIndexInfo.points (and .bytes) is the last answering shard's, not summed over "
        "the shards (RouterService::Impl::Info copies one shard's field_indexes): 285 of 600",
    "GetCollection.default_target_recall":
        "CollectionInfo.default_target_recall is 0 in every router answer (InfoOf / Info never "
        "set it); the standalone reports 0.95 (--default_target_recall) or the collection's "
        "own default_knobs.target_recall",
    # -- points
    "Upsert.unknown_collection": _UNKNOWN,
    "Upsert.payload_under_limit_over_log_entry":
        "the router refuses a point whose log entry passes the NATS max payload (1,000,000 "
        "bytes) although its payload is within --max_payload_bytes (1 MiB), which the "
        "standalone takes: INVALID_ARGUMENT \"point 77000 (#0) is 1040100 bytes in the "
        "cluster's log; a log entry is at most 1000000 bytes ...\"",
    "Delete.nothing": "message: the router says 'no ids to delete', the standalone 'no ids (or "
                      "filter) to delete'",
    "Delete.too_many_ids": _MAX_IDS,
    "Delete.filter_matches_every_point":
        "FAILED_PRECONDITION message: the router's lacks the standalone's suffix '(0 points "
        "passing the filter were deleted before it)'",
    "Delete.unknown_collection": _UNKNOWN,
    "Delete.ids_missing":
        "DeleteResponse.deleted counts the ids sent, not the ids that existed (the router "
        "does not read before it writes; zoom.proto documents it for clustered collections)",
    "Get.no_ids": "Get with no ids: the router answers OK with no points, the standalone "
                  "INVALID_ARGUMENT 'no ids to get'",
    "Get.too_many_ids": "max_ids message: the router says '100001 ids; at most 100000 per "
                        "call', the standalone 'number of ids 100001 is above this server's "
                        "limit of 100000'",
    "Get.unknown_collection": _UNKNOWN,
    "Import.unknown_collection": _UNKNOWN + " (inside 'Import message #0: ...')",
    "SetPayload.too_many_ids": _MAX_IDS,
    "SetPayload.fields_over_limit":
        "SetPayload does not check --max_payload_bytes before it publishes: refused only by "
        "the log entry's cap, with another message and byte count ('the request's fields are "
        "1048594 bytes; a log entry is at most 1000000'; the standalone 'the fields take "
        "1048583 bytes; the limit is 1048576')",
    "SetPayload.fields_under_limit_over_log_entry":
        "SetPayload fields within --max_payload_bytes (1 MiB) but over the log entry's cap "
        "(1,000,000 bytes): the router refuses them (INVALID_ARGUMENT 'the request's fields "
        "are 1040018 bytes; a log entry is at most 1000000'), the standalone takes them",
    "SetPayload.unknown_collection": _UNKNOWN,
    "SetPayload.missing_ids":
        "SetPayloadResponse.updated is the number of ids sent, not the points changed as "
        "the proto promises (ids that do not exist are counted)",
    "DeletePayload.no_ids": "message: the router says 'no ids to delete fields of', the "
                            "standalone 'no ids to delete the payload of'",
    "DeletePayload.too_many_ids": _MAX_IDS,
    "DeletePayload.too_many_keys":
        "the router does not check the 1024-key limit (FieldLimits::max_fields): it publishes "
        "and answers OK (updated = ids sent); the standalone answers INVALID_ARGUMENT 'number "
        "of keys 1025 is above this server's limit of 1024'",
    "DeletePayload.unknown_collection": _UNKNOWN,
    "DeletePayload.missing_ids":
        "DeletePayloadResponse.updated is the number of ids sent, not the points changed",
    # -- search
    "Search.unknown_collection": _UNKNOWN,
    "Search.filter_any_1025_values": _RESOURCE_EXHAUSTED,
    "Search.filter_has_id_65537": _RESOURCE_EXHAUSTED,
    "Search.filter.json_value_integer":
        "QueryStats.exact is merged as the AND over the shards, and a shard where the filter "
        "matches nothing reports exact=false: a filtered search whose matches lie on one "
        "shard answers exact=false where the standalone (one match, searched exactly) says true",
    "SearchBatch.too_many": "message: the router says 'the batch has 10001 queries; at most "
                            "10000', the standalone 'number of queries 10001 is above this "
                            "server's limit of 10000'",
    "SearchBatch.answer_over_message_limit":
        "the router does not refuse a batch whose answer would pass the message limit "
        "(the standalone's RESOURCE_EXHAUSTED 'the answer to 5 queries would take about 78 "
        "MiB...' before it runs): it runs the queries one by one and answers OK",
    "SearchBatch.unknown_collection": _UNKNOWN + ", and prefixed 'query #0: ' (the router "
                                                 "resolves the collection per query)",
    "Count.filter_any_1025_values": _RESOURCE_EXHAUSTED,
    "Count.filter_has_id_65537": _RESOURCE_EXHAUSTED,
    "Count.unknown_collection": _UNKNOWN,
    "Scroll.limit_over_max": "message: the router says 'limit 10001 is above 10000', the "
                             "standalone 'limit 10001 is above this server's limit of 10000'",
    "Scroll.unknown_collection": _UNKNOWN,
    # -- field indexes, builds, compaction
    "CreateFieldIndex.other_type":
        "message: the router says \"field 'cat' has an index of another type; delete it "
        "first\", the standalone \"field 'cat' has a keyword index; delete it first\"",
    "CreateFieldIndex.unknown_collection": _UNKNOWN,
    "CreateFieldIndex.answer":
        "CreateFieldIndex answers right after publishing, whatever `wait` says, with the "
        "shard map's spec only (points 0, no field_indexes); the standalone with wait answers "
        "the collection's info with the index built (ready, its points)",
    "DeleteFieldIndex.not_indexed":
        "message: the router says \"collection scratch has no index of field 'price'\", the "
        "standalone \"field 'price' has no payload index\"",
    "DeleteFieldIndex.unknown_collection": _UNKNOWN,
    "DeleteFieldIndex.answer":
        "DeleteFieldIndex answers with the shard map's spec only (points 0), not the "
        "collection's info",
    "BuildIndex.too_few_points":
        "the router wraps every replica's refusal: 'collection ipc: the build did not start "
        "on shard 0 (n0: FAILED_PRECONDITION collection 'ipc_s0_<uid>' has 46 points; ...); "
        "... A replica builds over what it has applied ...' (per-shard counts, 4 times); the "
        "standalone \"collection 'ipc' has 100 points; an index needs at least 256 to train "
        "(searches are exact until then)\"",
    "BuildIndex.unknown_collection": _UNKNOWN,
    "Compact.unknown_collection": _UNKNOWN,
    # -- snapshots
    "CreateSnapshot.unknown_collection":
        "snapshots are not routed: CreateSnapshot answers UNIMPLEMENTED 'CreateSnapshot is "
        "not routed to a clustered collection (yet): ...' whatever the collection",
    "ListSnapshots.unknown_collection": _SNAPSHOT_UNROUTED_UNARY,
    "DeleteSnapshot.unknown": _SNAPSHOT_UNROUTED_UNARY,
    "DeleteSnapshot.bad_name": _SNAPSHOT_UNROUTED_UNARY,
    "DownloadSnapshot.unknown": _SNAPSHOT_UNROUTED_UNARY,
    "RestoreSnapshot.no_message": _SNAPSHOT_UNROUTED_RESTORE,
    "RestoreSnapshot.bad_name": _SNAPSHOT_UNROUTED_RESTORE,
    "RestoreSnapshot.source_and_data": _SNAPSHOT_UNROUTED_RESTORE,
    "RestoreSnapshot.unknown_source": _SNAPSHOT_UNROUTED_RESTORE,
    "RestoreSnapshot.garbage": _SNAPSHOT_UNROUTED_RESTORE,
    "Snapshots": "snapshots are not routed (CreateSnapshot UNIMPLEMENTED; List/Delete/Download "
                 "INVALID_ARGUMENT 'could not parse the request'; Restore UNIMPLEMENTED)",
    # -- decoder
    "LoadModel.empty_dir":
        "message: the router says \"a model's dir must be 1..1024 bytes without line breaks "
        "or NUL: ...\" (ValidateModelSpec), the standalone 'the model directory is required'",
    "LoadModel.dir_outside": _MODEL_NODE_REFUSED,
    "LoadModel.default_ef_over_max": _MODEL_NODE_REFUSED,
    "LoadModel.m_1": _MODEL_NODE_REFUSED,
    "LoadModel.dir_missing": _MODEL_LOAD_FAILED,
    "LoadModel.broken_files": _MODEL_LOAD_FAILED,
    "LoadModel.same_again":
        "LoadModel of a name already loaded with the same spec: the router answers OK (the "
        "catalog's AddModel is idempotent), the standalone ALREADY_EXISTS \"model 'tiny' is "
        "already loaded; unload it first\"",
    "LoadModel.name_taken_other_dir":
        "ALREADY_EXISTS message: the router says \"model tiny is loaded in cluster conf from "
        "dir 'tiny' (m 0, ef_construction 0): unload it first, or choose another name\" (m "
        "and ef_construction as requested, 0, not the 16 / 200 in force), the standalone "
        "\"model 'tiny' is already loaded; unload it first\"",
    "UnloadModel.unknown":
        "message: the router says 'model nosuch is not loaded in cluster conf', the standalone "
        "\"model 'nosuch' is not loaded\"",
    "UnloadModel.bad_name":
        "the router validates the model name first (INVALID_ARGUMENT \"model name 'bad name!' "
        "has the character ' '...\"); the standalone answers NOT_FOUND \"model 'bad name!' is "
        "not loaded\"",
    "UnloadModel.then_TopK":
        "UnloadModel is asynchronous on a cluster: it removes the model from the bucket and "
        "answers; until the nodes unload it and heartbeat, the router still sends TopK to "
        "them and it answers OK (after: NOT_FOUND with the router's own message, see "
        "TopK.unknown_model), where the standalone answers NOT_FOUND \"model 'X' is not "
        "loaded (LoadModel it)\" at once",
    "TopK.unknown_model":
        "message: the router says 'model nosuch is not loaded in cluster conf (LoadModel "
        "through a router loads it on every node)', the standalone \"model 'nosuch' is not "
        "loaded (LoadModel it)\"",
    "TopK.bad_model_name":
        "the router validates the model name first (INVALID_ARGUMENT); the standalone answers "
        "NOT_FOUND \"model 'bad name!' is not loaded (LoadModel it)\"",
    "StreamTopK.unknown_model":
        "message (inside 'step 0: '): the router's 'model nosuch is not loaded in cluster conf "
        "(...)', the standalone's \"model 'nosuch' is not loaded (LoadModel it)\"",
}

BACKENDS = ["standalone", "cluster"]


def keyed_over_backends(prefix: str, keys: Iterable[str]) -> List[Any]:
    """(key, backend) parameters, the case id of each `prefix.key`."""
    out = []
    for key in keys:
        for p in over_backends(f"{prefix}.{key}"):
            out.append(pytest.param(key, p.values[0], marks=p.marks, id=f"{p.values[0]}-{key}"))
    return out


def over_backends(case_id: str) -> List[Any]:
    """The two backends as parameters, the cluster's marked when DRIFT names the case."""
    out = []
    for b in BACKENDS:
        marks = []
        if b == "cluster" and case_id in DRIFT:
            marks.append(pytest.mark.xfail(strict=True,
                                           reason=f"issue 46: router drift: {DRIFT[case_id]}"))
        out.append(pytest.param(b, marks=marks, id=b))
    return out

