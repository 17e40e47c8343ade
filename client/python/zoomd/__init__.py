"""zoomd: the Python client of the zoomd vector search server.

    import numpy as np, zoomd
    with zoomd.Client("127.0.0.1:50051") as client:
        client.create_collection("docs", dim=100, metric="cosine")
        client.import_points("docs", np.random.rand(10000, 100).astype("float32"))
        client.build_index("docs")
        hits = client.search("docs", np.random.rand(100), k=10, rerank=40)
        print(hits[0].id, hits[0].score, hits.stats.ssd_reads)

zoomd.AsyncClient has the same methods as coroutines (grpc.aio). Errors are
zoomd.ZoomError subclasses named after their gRPC codes (zoomd.NotFound,
zoomd.InvalidArgument, ...).
"""

from zoomd._channel import TLS
from zoomd._ops import RetryPolicy
from zoomd.aio import AsyncClient, AsyncTopKStream
from zoomd.client import Client, TopKStream
from zoomd.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                          FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                          PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable,
                          Unimplemented, Unknown, ZoomError)
from zoomd.io import read_bvecs, read_fvecs, read_ivecs, read_vecs
from zoomd.models import (Calibration, CalibrationPoint, CollectionInfo, FieldIndexInfo,
                          GeoPoint, ImportResult, IndexSpec, ModelInfo, QueryStats, Record,
                          ScoredPoint, SearchKnobs, SearchResult, ServerInfo, TopKResult,
                          TopKStep, WriteToken)

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "TopKStream", "AsyncTopKStream", "TLS", "RetryPolicy",
    "ZoomError", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable", "Unimplemented",
    "Unknown",
    "Calibration", "CalibrationPoint", "CollectionInfo", "FieldIndexInfo", "GeoPoint",
    "ImportResult", "IndexSpec", "ModelInfo",
    "QueryStats", "Record", "ScoredPoint", "SearchKnobs", "SearchResult", "ServerInfo",
    "TopKResult", "TopKStep",
    "read_vecs", "read_fvecs", "read_bvecs", "read_ivecs", "WriteToken"]
