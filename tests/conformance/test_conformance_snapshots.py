"""API conformance (issue 46): snapshots. CreateSnapshot, ListSnapshots,
DownloadSnapshot, RestoreSnapshot and DeleteSnapshot: their error cases, then
their happy path (snapshots are not routed by the router yet: see DRIFT)."""

from __future__ import annotations

import hashlib
from typing import List

import numpy as np
import pytest

from conformance_data import RNG_Q8, SMALL_IDS, SMALL_N, U8, exact_top
from conformance_drift import over_backends
from conformance_harness import (Case, Env, Err, both, check, covers, env_fresh, error_params, ok,
                                 outcome, run_error_case)
import backends as B
from zoomd._proto import zoom_pb2 as pb


ERROR_CASES: List[Case] = [
    # -- snapshots
    Case("CreateSnapshot.unknown_collection", "CreateSnapshot",
         lambda: pb.CreateSnapshotRequest(collection="nosuch"), "NOT_FOUND", "nosuch"),
    Case("ListSnapshots.unknown_collection", "ListSnapshots",
         lambda: pb.ListSnapshotsRequest(collection="nosuch"), "OK", ""),
    Case("DeleteSnapshot.unknown", "DeleteSnapshot",
         lambda: pb.DeleteSnapshotRequest(collection="docs", name="nosuch.zsnap"),
         "NOT_FOUND", ""),
    Case("DeleteSnapshot.bad_name", "DeleteSnapshot",
         lambda: pb.DeleteSnapshotRequest(collection="docs", name="../x"),
         "INVALID_ARGUMENT", ""),
    Case("DownloadSnapshot.unknown", "DownloadSnapshot",
         lambda: pb.DownloadSnapshotRequest(collection="docs", name="nosuch.zsnap"),
         "NOT_FOUND", ""),
    Case("RestoreSnapshot.no_message", "RestoreSnapshot", lambda: [], "INVALID_ARGUMENT",
         "no RestoreSnapshot message"),
    Case("RestoreSnapshot.bad_name", "RestoreSnapshot",
         lambda: [pb.RestoreSnapshotRequest(collection="bad name!", data=b"x")],
         "INVALID_ARGUMENT", "has the character"),
    Case("RestoreSnapshot.source_and_data", "RestoreSnapshot",
         lambda: [pb.RestoreSnapshotRequest(collection="rs1", source="docs/x.zsnap",
                                            data=b"x")],
         "INVALID_ARGUMENT", "not both"),
    Case("RestoreSnapshot.unknown_source", "RestoreSnapshot",
         lambda: [pb.RestoreSnapshotRequest(collection="rs2", source="docs/nosuch.zsnap")],
         "NOT_FOUND", ""),
    Case("RestoreSnapshot.garbage", "RestoreSnapshot",
         lambda: [pb.RestoreSnapshotRequest(collection="rs3", data=b"not an archive")],
         "DATA_LOSS", "corrupt or truncated"),
]
assert len({c.id for c in ERROR_CASES}) == len(ERROR_CASES)


@pytest.mark.parametrize("case,bname", error_params(ERROR_CASES))
def test_error(case: Case, bname: str, env: Env) -> None:
    run_error_case(case, bname, env)


# ---- happy paths -----------------------------------------------------------------------------


@covers("CreateSnapshot", "ListSnapshots", "DownloadSnapshot", "RestoreSnapshot", "DeleteSnapshot")
@pytest.mark.parametrize("bname", over_backends("Snapshots"))
def test_snapshots(env: Env, bname: str) -> None:
    """Create, list, download (its SHA-256), restore from the upload and from
    the server's copy, delete."""
    b, ref = both(env, bname)

    def run(x: B.Backend):
        made = ok(outcome(x, "CreateSnapshot", pb.CreateSnapshotRequest(collection="u8")))
        info = made.snapshot
        assert info.collection == "u8" and info.points == SMALL_N and info.size_bytes > 0
        listed = ok(outcome(x, "ListSnapshots", pb.ListSnapshotsRequest(collection="u8")))
        assert info.name in [s.name for s in listed.snapshots]
        chunks = ok(outcome(x, "DownloadSnapshot", pb.DownloadSnapshotRequest(
            collection="u8", name=info.name)))
        data = b"".join(c.data for c in chunks)
        assert chunks[0].info.sha256 == info.sha256 == hashlib.sha256(data).hexdigest()
        target = env_fresh("rs")
        up = [pb.RestoreSnapshotRequest(collection=target)] + [
            pb.RestoreSnapshotRequest(data=data[i:i + 65536]) for i in range(0, len(data), 65536)]
        restored = ok(outcome(x, "RestoreSnapshot", up)).info
        assert restored.points == SMALL_N and restored.spec.name == target
        exists = outcome(x, "RestoreSnapshot", up)
        assert isinstance(exists, Err) and exists.code == "ALREADY_EXISTS"
        again = ok(outcome(x, "RestoreSnapshot", [pb.RestoreSnapshotRequest(
            collection=target, overwrite=True, source=f"u8/{info.name}.zsnap")])).info
        hits = ok(outcome(x, "Search", pb.SearchRequest(collection=target, k=3,
                                                        vector_bytes=RNG_Q8.tobytes())))
        want, _ = exact_top(U8.astype(np.float32), SMALL_IDS, RNG_Q8.astype(np.float32), 3, "l2")
        assert [h.id for h in hits.hits] == want
        ok(outcome(x, "DeleteSnapshot", pb.DeleteSnapshotRequest(collection="u8",
                                                                 name=info.name)))
        after = ok(outcome(x, "ListSnapshots", pb.ListSnapshotsRequest(collection="u8")))
        assert info.name not in [s.name for s in after.snapshots]
        ok(outcome(x, "DropCollection", pb.DropCollectionRequest(name=target)))
        return [info.points, restored.points, again.points, exists.code]
    check(b, ref, run)
