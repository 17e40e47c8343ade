"""The values the zoomd client takes and returns (plain dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = [
    "IndexSpec",
    "SearchKnobs",
    "FieldIndexInfo",
    "Calibration",
    "CalibrationPoint",
    "CollectionInfo",
    "QueryStats",
    "ScoredPoint",
    "Record",
    "SearchResult",
    "ImportResult",
    "ModelInfo",
    "TopKResult",
    "TopKStep",
    "ServerInfo",
    "GeoPoint",
    "Payload",
]

#: A point's typed payload: field name -> str, int, float, bool, None, a geo
#: point ({"lat": .., "lon": ..}) or a list of those.
Payload = Dict[str, Any]


@dataclass(frozen=True)
class GeoPoint:
    """A geo point for a payload (a {"lat": .., "lon": ..} dict works too)."""
    lat: float
    lon: float


@dataclass(frozen=True)
class WriteToken:
    """Where a write to a clustered collection landed: its shard and the
    sequence the shard's log gave it. Collect them (upsert's `tokens=`) and
    pass them to search's `after=` to read your own writes (SESSION).

    acknowledged_by: the node ids of the shard's replicas that had the write
    on disk when it was acknowledged (write concern "majority" or "all";
    empty under "log"). Informational: it takes no part in equality or
    hashing (two tokens of the same shard and sequence are equal), and the
    repr shows it only when it is not empty."""
    shard: int
    sequence: int
    acknowledged_by: Tuple[str, ...] = field(default=(), compare=False)

    def __repr__(self) -> str:
        extra = f", acknowledged_by={self.acknowledged_by!r}" if self.acknowledged_by else ""
        return f"WriteToken(shard={self.shard!r}, sequence={self.sequence!r}{extra})"


@dataclass
class IndexSpec:
    """How a collection's preview is built; zero fields take the server's defaults.

    kind: "ivf_hnsw_pq" (the Zoom paper's layout: HNSW over k-means
    centroids) or "hnsw_pq" (HNSW over all vectors, PQ distances).
    m: HNSW links per node (16). ef_construction: 200. pq_m: PQ bytes per
    vector (about dim / 2). pq_nbits: 8, or 4 (ivf_hnsw_pq: the SIMD fast
    scan). nlist: clusters (about 4 sqrt(n)). opq: learn a rotation first.
    compact_links: hnsw_pq's level-0 links bit-packed. quantizer: "pq", or
    "rabitq" (ivf_hnsw_pq, dim <= 1024: one 4-bit level a dimension with a
    scale per vector, extended RaBitQ's code; a smaller distance error than
    PQ at the same bytes, so fewer SSD reads reach a recall; pq_m and
    pq_nbits are then dim and 4).
    """
    kind: str = "ivf_hnsw_pq"
    m: int = 0
    ef_construction: int = 0
    pq_m: int = 0
    pq_nbits: int = 0
    nlist: int = 0
    opq: bool = False
    compact_links: bool = False
    quantizer: str = "pq"


@dataclass
class SearchKnobs:
    """Search knobs; zero takes the collection's (or the server's) default.

    ef: the HNSW beam. nprobe: ivf_hnsw_pq lists scanned. rerank: K', the
    candidates whose full vectors are read from the SSD and re-ranked.
    target_recall: the recall@10 to aim at (the knobs left 0 are the
    cheapest that reached it in the index's calibration; 0: the default).
    """
    ef: int = 0
    nprobe: int = 0
    rerank: int = 0
    target_recall: float = 0.0


@dataclass
class CalibrationPoint:
    """One knob setting of a calibration: its mean recall@k over the
    calibration queries, the one-sided 95% lower bound a target is compared
    with, its time (one search, one thread) when measured, and its counted
    work (preview distance evaluations + 600 x SSD reads: what a target's
    choice ranks by; 0 from a server before it, then mean_us ranks), and
    the band's confidence at this point (0: every candidate read) with the
    mean hits certainly in the top k (returned unread, estimated)."""
    ef: int
    nprobe: int
    rerank: int
    recall: float
    recall_lower: float
    mean_us: float
    ssd_reads: float
    work: float = 0.0
    band_confidence: float = 0.0
    certain_in: float = 0.0


@dataclass
class Calibration:
    """The recall curve of a collection's index (GetCollection): `queries`
    stored points searched as queries (the point itself excluded) against
    their exact k nearest neighbours, over a grid of knobs."""
    k: int
    queries: int
    indexed_points: int
    created_unix_ms: int
    points: List[CalibrationPoint] = field(default_factory=list)

    def choose(self, target_recall: float) -> Optional[CalibrationPoint]:
        """What the server picks for `target_recall`: the cheapest point whose
        lower bound reaches it (None when none does: the server then runs the
        highest-recall point)."""
        ok = [p for p in self.points if p.recall_lower + 1e-12 >= target_recall]
        if not ok:
            return None
        counted = all(p.work > 0 for p in self.points)
        # The server's order: cost, then the higher lower bound, then the
        # smaller knobs.
        return min(ok, key=lambda p: (p.work if counted else p.mean_us, -p.recall_lower,
                                      p.nprobe, p.ef, p.rerank))


@dataclass
class FieldIndexInfo:
    """A payload index: its field, type, whether it is built, its points and RAM."""
    field: str
    type: str
    ready: bool
    points: int
    bytes: int


@dataclass
class CollectionInfo:
    """A collection: its spec and state (GetCollection)."""
    name: str
    dim: int
    metric: str
    dtype: str
    index: IndexSpec
    default_knobs: SearchKnobs
    points: int
    deleted_points: int
    stored_records: int
    index_state: str
    indexed_points: int
    resident_bytes: int
    disk_bytes: int
    build_progress: float
    index_error: str
    compaction_error: str
    field_indexes: List[FieldIndexInfo] = field(default_factory=list)
    trained_points: int = 0
    auto_retrains: int = 0
    code_error_ratio: float = 0.0
    drift_retrains: int = 0
    cache_bytes: int = 0  # the collection's own DRAM cache budget (0: the server's)
    # A clustered collection (created through a router): its shards and the
    # replicas of each (0 on a standalone zoomd).
    shards: int = 0
    replicas: int = 0
    # Recall as a knob: the index's recall curve (None before the first
    # calibration), whether it was measured on the index serving now, why
    # the last measurement failed, and the target a search that names no
    # knobs aims at (0: none).
    calibration: Optional[Calibration] = None
    calibration_current: bool = False
    calibration_error: str = ""
    default_target_recall: float = 0.0


@dataclass
class QueryStats:
    """How one query was answered (the server's QueryStats).

    ssd_reads: full vectors read for the re-rank. candidates: K' actually
    re-ranked. degraded: the preview's ranking (allow_partial under a
    deadline). filter_strategy: "exact", "match_scan", "filtered_preview"
    or "post_filter" (empty without a filter); filter_matches: the points
    that pass it; filter_scan: the filter was evaluated from the stored
    payloads (a field without a ready index; `warning` names it).
    fullview_rounds: batches of reads the re-rank waited for (1; more with
    rerank_stop_sd; 0 without a fullview). certain_in / certain_out
    (band_confidence): candidates certainly in the top k (returned unread,
    ScoredPoint.estimated, unless exact_scores) and certainly out (not read).
    """
    preview_us: int = 0
    fullview_us: int = 0
    rerank_us: int = 0
    ssd_reads: int = 0
    bytes_read: int = 0
    candidates: int = 0
    distance_evals: int = 0
    cache_hits: int = 0
    degraded: bool = False
    exact: bool = False
    filter_strategy: str = ""
    filter_matches: int = 0
    filter_expansions: int = 0
    filter_scan: bool = False
    warning: str = ""
    fullview_rounds: int = 0
    # target_recall: the recall the knobs were chosen for (0: none);
    # calibrated_recall: what those knobs reached in the calibration (0 when
    # the request set knobs itself or no calibration exists); knobs: the
    # knobs the search started with.
    target_recall: float = 0.0
    calibrated_recall: float = 0.0
    target_reached: bool = False
    knobs: Optional[SearchKnobs] = None
    certain_in: int = 0
    certain_out: int = 0


@dataclass
class ScoredPoint:
    """One search hit. score: squared L2 distance (lower is better) or inner
    product / cosine similarity (higher is better), as the collection's metric.
    payload: the typed payload (with_payload), raw_payload: the opaque bytes,
    vector: a float32 array (with_vectors). estimated: the score is the
    index's estimate, not computed from the full vector (band_confidence
    without exact_scores)."""
    id: int
    score: float
    payload: Optional[Payload] = None
    vector: Optional[np.ndarray] = None
    raw_payload: bytes = b""
    estimated: bool = False


@dataclass
class Record:
    """A stored point (get, scroll)."""
    id: int
    vector: Optional[np.ndarray] = None
    payload: Optional[Payload] = None
    raw_payload: bytes = b""


class SearchResult(List[ScoredPoint]):
    """The hits of one query, best first (a list), with the query's ``stats``."""

    def __init__(self, hits: List[ScoredPoint], stats: QueryStats, coverage: float = 1.0,
                 degraded: bool = False) -> None:
        super().__init__(hits)
        self.stats = stats
        # Through a cluster's router: the share of the collection's shards
        # that answered, and whether it is short of 1 (a partial answer,
        # returned only with allow_partial or min_coverage). Not
        # stats.degraded (a preview-only answer).
        self.coverage = coverage
        self.degraded = degraded

    @property
    def ids(self) -> np.ndarray:
        """The hits' ids as a uint64 array."""
        return np.fromiter((h.id for h in self), dtype=np.uint64, count=len(self))

    @property
    def scores(self) -> np.ndarray:
        """The hits' scores as a float32 array."""
        return np.fromiter((h.score for h in self), dtype=np.float32, count=len(self))

    def __repr__(self) -> str:
        return f"SearchResult({list.__repr__(self)}, stats={self.stats!r})"


@dataclass
class ImportResult:
    """What import_points did: points the server stored, seconds, the rate,
    and the write concern the server acknowledged the batches under ("log",
    "majority" or "all"; see the README's "Write concerns")."""
    imported: int
    seconds: float
    write_concern: str = "majority"

    @property
    def points_per_s(self) -> float:
        return self.imported / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ModelInfo:
    """A Decoder model (load_model, list_models)."""
    name: str
    dir: str
    vocab_size: int
    dim: int
    graph_bytes: int
    resident_bytes: int
    state: str
    progress: float
    error: str
    m: int
    ef_construction: int
    graph_from_cache: bool
    # The ef a topk with ef=0 runs at for k <= 5 (above: default_ef * k / 5);
    # 0: the built-in max(64, k). default_ef_source: "request", "calibrated"
    # (on the model directory's H.f32 contexts: calibration_contexts of them,
    # mean P@1/P@5 calibration_p1/_p5 at default_ef) or "builtin"
    # (calibration_error says why).
    default_ef: int = 0
    default_ef_source: str = "builtin"
    calibration_contexts: int = 0
    calibration_p1: float = 0.0
    calibration_p5: float = 0.0
    calibration_error: str = ""
    # state "model_failed": the load's own gRPC status code (5 NOT_FOUND for files
    # absent, 3 INVALID_ARGUMENT for bad ones, 8 RESOURCE_EXHAUSTED past the
    # memory budget, ...); 0 otherwise.
    error_code: int = 0


@dataclass
class TopKResult:
    """topk over n contexts: ids and logits (n, k); probs (n, k) and tail_mass
    (n,) with return_probs (the softmax over the k returned, and the estimated
    mass outside them; with exact=True over the whole vocabulary); words
    (n lists of k) with return_words; micros: the server's time per context."""
    ids: np.ndarray
    logits: np.ndarray
    probs: Optional[np.ndarray] = None
    tail_mass: Optional[np.ndarray] = None
    words: Optional[List[List[str]]] = None
    micros: Optional[np.ndarray] = None


@dataclass
class TopKStep:
    """One decoding step of stream_topk: the k best words of one context."""
    ids: np.ndarray
    logits: np.ndarray
    probs: Optional[np.ndarray] = None
    tail_mass: Optional[float] = None
    words: Optional[List[str]] = None


@dataclass
class ServerInfo:
    """The server's version, its SIMD level, when it started (unix ms)."""
    version: str
    simd_level: str
    started_unix_ms: int
