from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

BOOL: FieldIndexType
BUILDING: IndexState
COSINE: Metric
DESCRIPTOR: _descriptor.FileDescriptor
DTYPE_UNSPECIFIED: DType
EVENTUAL: Consistency
FAILED: IndexState
FIELD_INDEX_TYPE_UNSPECIFIED: FieldIndexType
FLOAT: FieldIndexType
FLOAT32: DType
GEO: FieldIndexType
HNSW_PQ: IndexKind
INDEX_KIND_UNSPECIFIED: IndexKind
INDEX_STATE_UNSPECIFIED: IndexState
INNER_PRODUCT: Metric
INTEGER: FieldIndexType
IVF_HNSW_PQ: IndexKind
KEYWORD: FieldIndexType
L2: Metric
METRIC_UNSPECIFIED: Metric
NONE: IndexState
NULL_VALUE: NullValue
QUANTIZER_PQ: Quantizer
QUANTIZER_RABITQ: Quantizer
QUANTIZER_UNSPECIFIED: Quantizer
READY: IndexState
SESSION: Consistency
UINT8: DType
WRITE_CONCERN_ALL: WriteConcern
WRITE_CONCERN_DEFAULT: WriteConcern
WRITE_CONCERN_LOG: WriteConcern
WRITE_CONCERN_MAJORITY: WriteConcern

class BuildIndexRequest(_message.Message):
    __slots__ = ["after", "collection", "wait"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    after: _containers.RepeatedCompositeFieldContainer[WriteToken]
    collection: str
    wait: bool
    def __init__(self, collection: _Optional[str] = ..., wait: bool = ..., after: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ...) -> None: ...

class BuildIndexResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class Calibration(_message.Message):
    __slots__ = ["created_unix_ms", "indexed_points", "k", "points", "queries"]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    INDEXED_POINTS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    created_unix_ms: int
    indexed_points: int
    k: int
    points: _containers.RepeatedCompositeFieldContainer[CalibrationPoint]
    queries: int
    def __init__(self, k: _Optional[int] = ..., queries: _Optional[int] = ..., indexed_points: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., points: _Optional[_Iterable[_Union[CalibrationPoint, _Mapping]]] = ...) -> None: ...

class CalibrationPoint(_message.Message):
    __slots__ = ["band_confidence", "certain_in", "ef", "mean_us", "nprobe", "recall", "recall_lower", "rerank_candidates", "ssd_reads", "work"]
    BAND_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CERTAIN_IN_FIELD_NUMBER: _ClassVar[int]
    EF_FIELD_NUMBER: _ClassVar[int]
    MEAN_US_FIELD_NUMBER: _ClassVar[int]
    NPROBE_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    RECALL_LOWER_FIELD_NUMBER: _ClassVar[int]
    RERANK_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SSD_READS_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    band_confidence: float
    certain_in: float
    ef: int
    mean_us: float
    nprobe: int
    recall: float
    recall_lower: float
    rerank_candidates: int
    ssd_reads: float
    work: float
    def __init__(self, ef: _Optional[int] = ..., nprobe: _Optional[int] = ..., rerank_candidates: _Optional[int] = ..., recall: _Optional[float] = ..., recall_lower: _Optional[float] = ..., mean_us: _Optional[float] = ..., ssd_reads: _Optional[float] = ..., work: _Optional[float] = ..., band_confidence: _Optional[float] = ..., certain_in: _Optional[float] = ...) -> None: ...

class CollectionInfo(_message.Message):
    __slots__ = ["auto_retrains", "build_progress", "calibration", "calibration_current", "calibration_error", "code_error_ratio", "compaction_error", "default_target_recall", "deleted_points", "disk_bytes", "drift_retrains", "field_indexes", "index_error", "index_state", "indexed_points", "maintenance_failures", "maintenance_retry_unix_ms", "points", "resident_bytes", "spec", "stored_records", "trained_points"]
    AUTO_RETRAINS_FIELD_NUMBER: _ClassVar[int]
    BUILD_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_CURRENT_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    CODE_ERROR_RATIO_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TARGET_RECALL_FIELD_NUMBER: _ClassVar[int]
    DELETED_POINTS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DRIFT_RETRAINS_FIELD_NUMBER: _ClassVar[int]
    FIELD_INDEXES_FIELD_NUMBER: _ClassVar[int]
    INDEXED_POINTS_FIELD_NUMBER: _ClassVar[int]
    INDEX_ERROR_FIELD_NUMBER: _ClassVar[int]
    INDEX_STATE_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    MAINTENANCE_RETRY_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STORED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    TRAINED_POINTS_FIELD_NUMBER: _ClassVar[int]
    auto_retrains: int
    build_progress: float
    calibration: Calibration
    calibration_current: bool
    calibration_error: str
    code_error_ratio: float
    compaction_error: str
    default_target_recall: float
    deleted_points: int
    disk_bytes: int
    drift_retrains: int
    field_indexes: _containers.RepeatedCompositeFieldContainer[FieldIndexInfo]
    index_error: str
    index_state: IndexState
    indexed_points: int
    maintenance_failures: int
    maintenance_retry_unix_ms: int
    points: int
    resident_bytes: int
    spec: CollectionSpec
    stored_records: int
    trained_points: int
    def __init__(self, spec: _Optional[_Union[CollectionSpec, _Mapping]] = ..., points: _Optional[int] = ..., deleted_points: _Optional[int] = ..., stored_records: _Optional[int] = ..., index_state: _Optional[_Union[IndexState, str]] = ..., indexed_points: _Optional[int] = ..., resident_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., build_progress: _Optional[float] = ..., index_error: _Optional[str] = ..., compaction_error: _Optional[str] = ..., maintenance_failures: _Optional[int] = ..., maintenance_retry_unix_ms: _Optional[int] = ..., field_indexes: _Optional[_Iterable[_Union[FieldIndexInfo, _Mapping]]] = ..., trained_points: _Optional[int] = ..., auto_retrains: _Optional[int] = ..., code_error_ratio: _Optional[float] = ..., drift_retrains: _Optional[int] = ..., calibration: _Optional[_Union[Calibration, _Mapping]] = ..., calibration_current: bool = ..., calibration_error: _Optional[str] = ..., default_target_recall: _Optional[float] = ...) -> None: ...

class CollectionSpec(_message.Message):
    __slots__ = ["cache_bytes", "default_knobs", "dim", "dtype", "index", "metric", "name", "replicas", "shards"]
    CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_KNOBS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    cache_bytes: int
    default_knobs: SearchKnobs
    dim: int
    dtype: DType
    index: IndexSpec
    metric: Metric
    name: str
    replicas: int
    shards: int
    def __init__(self, name: _Optional[str] = ..., dim: _Optional[int] = ..., metric: _Optional[_Union[Metric, str]] = ..., dtype: _Optional[_Union[DType, str]] = ..., index: _Optional[_Union[IndexSpec, _Mapping]] = ..., default_knobs: _Optional[_Union[SearchKnobs, _Mapping]] = ..., cache_bytes: _Optional[int] = ..., shards: _Optional[int] = ..., replicas: _Optional[int] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ["collection"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ["filter", "geo_bounding_box", "geo_radius", "has_id", "is_empty", "is_null", "key", "match", "range", "values_count"]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    GEO_BOUNDING_BOX_FIELD_NUMBER: _ClassVar[int]
    GEO_RADIUS_FIELD_NUMBER: _ClassVar[int]
    HAS_ID_FIELD_NUMBER: _ClassVar[int]
    IS_EMPTY_FIELD_NUMBER: _ClassVar[int]
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    VALUES_COUNT_FIELD_NUMBER: _ClassVar[int]
    filter: Filter
    geo_bounding_box: GeoBoundingBox
    geo_radius: GeoRadius
    has_id: _containers.RepeatedScalarFieldContainer[int]
    is_empty: FieldKey
    is_null: FieldKey
    key: str
    match: Match
    range: Range
    values_count: Range
    def __init__(self, key: _Optional[str] = ..., match: _Optional[_Union[Match, _Mapping]] = ..., range: _Optional[_Union[Range, _Mapping]] = ..., values_count: _Optional[_Union[Range, _Mapping]] = ..., geo_radius: _Optional[_Union[GeoRadius, _Mapping]] = ..., geo_bounding_box: _Optional[_Union[GeoBoundingBox, _Mapping]] = ..., has_id: _Optional[_Iterable[int]] = ..., is_empty: _Optional[_Union[FieldKey, _Mapping]] = ..., is_null: _Optional[_Union[FieldKey, _Mapping]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ...) -> None: ...

class CountRequest(_message.Message):
    __slots__ = ["collection", "filter"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    collection: str
    filter: Filter
    def __init__(self, collection: _Optional[str] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ...) -> None: ...

class CountResponse(_message.Message):
    __slots__ = ["applied", "count", "filter_scan", "live", "warning"]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FILTER_SCAN_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    applied: int
    count: int
    filter_scan: bool
    live: int
    warning: str
    def __init__(self, count: _Optional[int] = ..., filter_scan: bool = ..., warning: _Optional[str] = ..., live: _Optional[int] = ..., applied: _Optional[int] = ...) -> None: ...

class CreateCollectionRequest(_message.Message):
    __slots__ = ["spec"]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: CollectionSpec
    def __init__(self, spec: _Optional[_Union[CollectionSpec, _Mapping]] = ...) -> None: ...

class CreateCollectionResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class CreateFieldIndexRequest(_message.Message):
    __slots__ = ["collection", "field", "type", "wait"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    collection: str
    field: str
    type: FieldIndexType
    wait: bool
    def __init__(self, collection: _Optional[str] = ..., field: _Optional[str] = ..., type: _Optional[_Union[FieldIndexType, str]] = ..., wait: bool = ...) -> None: ...

class CreateFieldIndexResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ["collection"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class DeleteFieldIndexRequest(_message.Message):
    __slots__ = ["collection", "field"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    collection: str
    field: str
    def __init__(self, collection: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class DeleteFieldIndexResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class DeletePayloadRequest(_message.Message):
    __slots__ = ["collection", "ids", "keys", "write_concern"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    collection: str
    ids: _containers.RepeatedScalarFieldContainer[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    write_concern: WriteConcern
    def __init__(self, collection: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ..., keys: _Optional[_Iterable[str]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class DeletePayloadResponse(_message.Message):
    __slots__ = ["tokens", "updated", "write_concern"]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[WriteToken]
    updated: int
    write_concern: WriteConcern
    def __init__(self, updated: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ["all", "collection", "filter", "ids", "write_concern"]
    ALL_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    all: bool
    collection: str
    filter: Filter
    ids: _containers.RepeatedScalarFieldContainer[int]
    write_concern: WriteConcern
    def __init__(self, collection: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., all: bool = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ["deleted", "tokens", "write_concern"]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    tokens: _containers.RepeatedCompositeFieldContainer[WriteToken]
    write_concern: WriteConcern
    def __init__(self, deleted: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ["collection", "name"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    collection: str
    name: str
    def __init__(self, collection: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DownloadSnapshotRequest(_message.Message):
    __slots__ = ["collection", "name"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    collection: str
    name: str
    def __init__(self, collection: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DropCollectionRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DropCollectionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class FieldIndexInfo(_message.Message):
    __slots__ = ["bytes", "field", "points", "ready", "type"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    field: str
    points: int
    ready: bool
    type: FieldIndexType
    def __init__(self, field: _Optional[str] = ..., type: _Optional[_Union[FieldIndexType, str]] = ..., ready: bool = ..., points: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class FieldKey(_message.Message):
    __slots__ = ["key"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class Filter(_message.Message):
    __slots__ = ["min_should", "must", "must_not", "should"]
    MIN_SHOULD_FIELD_NUMBER: _ClassVar[int]
    MUST_FIELD_NUMBER: _ClassVar[int]
    MUST_NOT_FIELD_NUMBER: _ClassVar[int]
    SHOULD_FIELD_NUMBER: _ClassVar[int]
    min_should: MinShould
    must: _containers.RepeatedCompositeFieldContainer[Condition]
    must_not: _containers.RepeatedCompositeFieldContainer[Condition]
    should: _containers.RepeatedCompositeFieldContainer[Condition]
    def __init__(self, must: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., should: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., must_not: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., min_should: _Optional[_Union[MinShould, _Mapping]] = ...) -> None: ...

class GeoBoundingBox(_message.Message):
    __slots__ = ["bottom_right", "top_left"]
    BOTTOM_RIGHT_FIELD_NUMBER: _ClassVar[int]
    TOP_LEFT_FIELD_NUMBER: _ClassVar[int]
    bottom_right: GeoPoint
    top_left: GeoPoint
    def __init__(self, top_left: _Optional[_Union[GeoPoint, _Mapping]] = ..., bottom_right: _Optional[_Union[GeoPoint, _Mapping]] = ...) -> None: ...

class GeoPoint(_message.Message):
    __slots__ = ["lat", "lon"]
    LAT_FIELD_NUMBER: _ClassVar[int]
    LON_FIELD_NUMBER: _ClassVar[int]
    lat: float
    lon: float
    def __init__(self, lat: _Optional[float] = ..., lon: _Optional[float] = ...) -> None: ...

class GeoRadius(_message.Message):
    __slots__ = ["center", "radius"]
    CENTER_FIELD_NUMBER: _ClassVar[int]
    RADIUS_FIELD_NUMBER: _ClassVar[int]
    center: GeoPoint
    radius: float
    def __init__(self, center: _Optional[_Union[GeoPoint, _Mapping]] = ..., radius: _Optional[float] = ...) -> None: ...

class GetCollectionRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetCollectionResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["collection", "ids", "with_payload", "with_vectors"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    WITH_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    WITH_VECTORS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    ids: _containers.RepeatedScalarFieldContainer[int]
    with_payload: bool
    with_vectors: bool
    def __init__(self, collection: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ..., with_vectors: bool = ..., with_payload: bool = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["points"]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[Point]
    def __init__(self, points: _Optional[_Iterable[_Union[Point, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ["simd_level", "started_unix_ms", "version"]
    SIMD_LEVEL_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    simd_level: str
    started_unix_ms: int
    version: str
    def __init__(self, version: _Optional[str] = ..., simd_level: _Optional[str] = ..., started_unix_ms: _Optional[int] = ...) -> None: ...

class Hit(_message.Message):
    __slots__ = ["estimated", "fields", "id", "payload", "score", "vector"]
    class FieldsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    estimated: bool
    fields: _containers.MessageMap[str, Value]
    id: int
    payload: bytes
    score: float
    vector: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[int] = ..., score: _Optional[float] = ..., payload: _Optional[bytes] = ..., vector: _Optional[_Iterable[float]] = ..., fields: _Optional[_Mapping[str, Value]] = ..., estimated: bool = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ["collection", "points", "write_concern"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    collection: str
    points: _containers.RepeatedCompositeFieldContainer[Point]
    write_concern: WriteConcern
    def __init__(self, collection: _Optional[str] = ..., points: _Optional[_Iterable[_Union[Point, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ["imported", "tokens", "write_concern"]
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    imported: int
    tokens: _containers.RepeatedCompositeFieldContainer[WriteToken]
    write_concern: WriteConcern
    def __init__(self, imported: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class IndexSpec(_message.Message):
    __slots__ = ["compact_links", "ef_construction", "kind", "m", "nlist", "opq", "pq_m", "pq_nbits", "quantizer"]
    COMPACT_LINKS_FIELD_NUMBER: _ClassVar[int]
    EF_CONSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    M_FIELD_NUMBER: _ClassVar[int]
    NLIST_FIELD_NUMBER: _ClassVar[int]
    OPQ_FIELD_NUMBER: _ClassVar[int]
    PQ_M_FIELD_NUMBER: _ClassVar[int]
    PQ_NBITS_FIELD_NUMBER: _ClassVar[int]
    QUANTIZER_FIELD_NUMBER: _ClassVar[int]
    compact_links: bool
    ef_construction: int
    kind: IndexKind
    m: int
    nlist: int
    opq: bool
    pq_m: int
    pq_nbits: int
    quantizer: Quantizer
    def __init__(self, kind: _Optional[_Union[IndexKind, str]] = ..., m: _Optional[int] = ..., ef_construction: _Optional[int] = ..., pq_m: _Optional[int] = ..., pq_nbits: _Optional[int] = ..., nlist: _Optional[int] = ..., opq: bool = ..., compact_links: bool = ..., quantizer: _Optional[_Union[Quantizer, str]] = ...) -> None: ...

class Integers(_message.Message):
    __slots__ = ["values"]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ["collections"]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionInfo]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionInfo, _Mapping]]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ["collection"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ["snapshots"]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class ListValue(_message.Message):
    __slots__ = ["values"]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Match(_message.Message):
    __slots__ = ["any", "boolean", "except_integers", "integer", "integers", "keyword", "value"]
    ANY_FIELD_NUMBER: _ClassVar[int]
    BOOLEAN_FIELD_NUMBER: _ClassVar[int]
    EXCEPT_FIELD_NUMBER: _ClassVar[int]
    EXCEPT_INTEGERS_FIELD_NUMBER: _ClassVar[int]
    INTEGERS_FIELD_NUMBER: _ClassVar[int]
    INTEGER_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    any: _struct_pb2.ListValue
    boolean: bool
    except_integers: Integers
    integer: int
    integers: Integers
    keyword: str
    value: _struct_pb2.Value
    def __init__(self, value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., any: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., keyword: _Optional[str] = ..., integer: _Optional[int] = ..., boolean: bool = ..., integers: _Optional[_Union[Integers, _Mapping]] = ..., except_integers: _Optional[_Union[Integers, _Mapping]] = ..., **kwargs) -> None: ...

class MinShould(_message.Message):
    __slots__ = ["conditions", "min_count"]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    min_count: int
    def __init__(self, conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., min_count: _Optional[int] = ...) -> None: ...

class Point(_message.Message):
    __slots__ = ["fields", "id", "payload", "vector", "vector_bytes"]
    class FieldsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    VECTOR_BYTES_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, Value]
    id: int
    payload: bytes
    vector: _containers.RepeatedScalarFieldContainer[float]
    vector_bytes: bytes
    def __init__(self, id: _Optional[int] = ..., vector: _Optional[_Iterable[float]] = ..., payload: _Optional[bytes] = ..., fields: _Optional[_Mapping[str, Value]] = ..., vector_bytes: _Optional[bytes] = ...) -> None: ...

class QueryStats(_message.Message):
    __slots__ = ["bytes_read", "cache_hits", "calibrated_recall", "candidates", "certain_in", "certain_out", "degraded", "distance_evals", "exact", "filter_expansions", "filter_matches", "filter_scan", "filter_strategy", "fullview_rounds", "fullview_us", "knobs", "preview_us", "rerank_us", "ssd_reads", "target_reached", "target_recall", "warning"]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATED_RECALL_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    CERTAIN_IN_FIELD_NUMBER: _ClassVar[int]
    CERTAIN_OUT_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_EVALS_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    FILTER_EXPANSIONS_FIELD_NUMBER: _ClassVar[int]
    FILTER_MATCHES_FIELD_NUMBER: _ClassVar[int]
    FILTER_SCAN_FIELD_NUMBER: _ClassVar[int]
    FILTER_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FULLVIEW_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    FULLVIEW_US_FIELD_NUMBER: _ClassVar[int]
    KNOBS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_US_FIELD_NUMBER: _ClassVar[int]
    RERANK_US_FIELD_NUMBER: _ClassVar[int]
    SSD_READS_FIELD_NUMBER: _ClassVar[int]
    TARGET_REACHED_FIELD_NUMBER: _ClassVar[int]
    TARGET_RECALL_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    bytes_read: int
    cache_hits: int
    calibrated_recall: float
    candidates: int
    certain_in: int
    certain_out: int
    degraded: bool
    distance_evals: int
    exact: bool
    filter_expansions: int
    filter_matches: int
    filter_scan: bool
    filter_strategy: str
    fullview_rounds: int
    fullview_us: int
    knobs: SearchKnobs
    preview_us: int
    rerank_us: int
    ssd_reads: int
    target_reached: bool
    target_recall: float
    warning: str
    def __init__(self, preview_us: _Optional[int] = ..., fullview_us: _Optional[int] = ..., rerank_us: _Optional[int] = ..., ssd_reads: _Optional[int] = ..., bytes_read: _Optional[int] = ..., candidates: _Optional[int] = ..., distance_evals: _Optional[int] = ..., cache_hits: _Optional[int] = ..., degraded: bool = ..., exact: bool = ..., filter_strategy: _Optional[str] = ..., filter_matches: _Optional[int] = ..., filter_expansions: _Optional[int] = ..., filter_scan: bool = ..., warning: _Optional[str] = ..., fullview_rounds: _Optional[int] = ..., target_recall: _Optional[float] = ..., calibrated_recall: _Optional[float] = ..., target_reached: bool = ..., knobs: _Optional[_Union[SearchKnobs, _Mapping]] = ..., certain_in: _Optional[int] = ..., certain_out: _Optional[int] = ...) -> None: ...

class Range(_message.Message):
    __slots__ = ["gt", "gte", "lt", "lte"]
    GTE_FIELD_NUMBER: _ClassVar[int]
    GT_FIELD_NUMBER: _ClassVar[int]
    LTE_FIELD_NUMBER: _ClassVar[int]
    LT_FIELD_NUMBER: _ClassVar[int]
    gt: float
    gte: float
    lt: float
    lte: float
    def __init__(self, gt: _Optional[float] = ..., gte: _Optional[float] = ..., lt: _Optional[float] = ..., lte: _Optional[float] = ...) -> None: ...

class RestoreSnapshotRequest(_message.Message):
    __slots__ = ["collection", "data", "overwrite", "source"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    collection: str
    data: bytes
    overwrite: bool
    source: str
    def __init__(self, collection: _Optional[str] = ..., overwrite: bool = ..., source: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class RestoreSnapshotResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: CollectionInfo
    def __init__(self, info: _Optional[_Union[CollectionInfo, _Mapping]] = ...) -> None: ...

class ScrollRequest(_message.Message):
    __slots__ = ["collection", "filter", "limit", "offset", "with_payload", "with_vectors"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    WITH_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    WITH_VECTORS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    filter: Filter
    limit: int
    offset: int
    with_payload: bool
    with_vectors: bool
    def __init__(self, collection: _Optional[str] = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ..., with_payload: bool = ..., with_vectors: bool = ...) -> None: ...

class ScrollResponse(_message.Message):
    __slots__ = ["filter_scan", "next_offset", "points"]
    FILTER_SCAN_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    filter_scan: bool
    next_offset: int
    points: _containers.RepeatedCompositeFieldContainer[Point]
    def __init__(self, points: _Optional[_Iterable[_Union[Point, _Mapping]]] = ..., next_offset: _Optional[int] = ..., filter_scan: bool = ...) -> None: ...

class SearchBatchRequest(_message.Message):
    __slots__ = ["collection", "queries"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    queries: _containers.RepeatedCompositeFieldContainer[SearchRequest]
    def __init__(self, collection: _Optional[str] = ..., queries: _Optional[_Iterable[_Union[SearchRequest, _Mapping]]] = ...) -> None: ...

class SearchBatchResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SearchResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[SearchResponse, _Mapping]]] = ...) -> None: ...

class SearchKnobs(_message.Message):
    __slots__ = ["band_confidence", "ef", "nprobe", "rerank_candidates", "rerank_stop_sd", "target_recall"]
    BAND_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    EF_FIELD_NUMBER: _ClassVar[int]
    NPROBE_FIELD_NUMBER: _ClassVar[int]
    RERANK_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    RERANK_STOP_SD_FIELD_NUMBER: _ClassVar[int]
    TARGET_RECALL_FIELD_NUMBER: _ClassVar[int]
    band_confidence: float
    ef: int
    nprobe: int
    rerank_candidates: int
    rerank_stop_sd: float
    target_recall: float
    def __init__(self, ef: _Optional[int] = ..., nprobe: _Optional[int] = ..., rerank_candidates: _Optional[int] = ..., rerank_stop_sd: _Optional[float] = ..., target_recall: _Optional[float] = ..., band_confidence: _Optional[float] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ["after", "allow_partial", "collection", "consistency", "exact", "exact_scores", "filter", "k", "knobs", "min_coverage", "preview_only", "vector", "vector_bytes", "with_payload", "with_vectors"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    EXACT_SCORES_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    KNOBS_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MIN_COVERAGE_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_ONLY_FIELD_NUMBER: _ClassVar[int]
    VECTOR_BYTES_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    WITH_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    WITH_VECTORS_FIELD_NUMBER: _ClassVar[int]
    after: _containers.RepeatedCompositeFieldContainer[WriteToken]
    allow_partial: bool
    collection: str
    consistency: Consistency
    exact: bool
    exact_scores: bool
    filter: Filter
    k: int
    knobs: SearchKnobs
    min_coverage: float
    preview_only: bool
    vector: _containers.RepeatedScalarFieldContainer[float]
    vector_bytes: bytes
    with_payload: bool
    with_vectors: bool
    def __init__(self, collection: _Optional[str] = ..., vector: _Optional[_Iterable[float]] = ..., k: _Optional[int] = ..., knobs: _Optional[_Union[SearchKnobs, _Mapping]] = ..., preview_only: bool = ..., with_payload: bool = ..., with_vectors: bool = ..., allow_partial: bool = ..., exact: bool = ..., filter: _Optional[_Union[Filter, _Mapping]] = ..., min_coverage: _Optional[float] = ..., consistency: _Optional[_Union[Consistency, str]] = ..., after: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., vector_bytes: _Optional[bytes] = ..., exact_scores: bool = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ["coverage", "degraded", "hits", "stats"]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    coverage: float
    degraded: bool
    hits: _containers.RepeatedCompositeFieldContainer[Hit]
    stats: QueryStats
    def __init__(self, hits: _Optional[_Iterable[_Union[Hit, _Mapping]]] = ..., stats: _Optional[_Union[QueryStats, _Mapping]] = ..., coverage: _Optional[float] = ..., degraded: bool = ...) -> None: ...

class SetPayloadRequest(_message.Message):
    __slots__ = ["collection", "fields", "ids", "overwrite", "write_concern"]
    class FieldsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    collection: str
    fields: _containers.MessageMap[str, Value]
    ids: _containers.RepeatedScalarFieldContainer[int]
    overwrite: bool
    write_concern: WriteConcern
    def __init__(self, collection: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ..., fields: _Optional[_Mapping[str, Value]] = ..., overwrite: bool = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class SetPayloadResponse(_message.Message):
    __slots__ = ["tokens", "updated", "write_concern"]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[WriteToken]
    updated: int
    write_concern: WriteConcern
    def __init__(self, updated: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ["data", "info", "offset"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    info: SnapshotInfo
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., info: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ["collection", "created_unix_ms", "name", "points", "records", "sha256", "size_bytes"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    created_unix_ms: int
    name: str
    points: int
    records: int
    sha256: str
    size_bytes: int
    def __init__(self, collection: _Optional[str] = ..., name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., points: _Optional[int] = ..., records: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class UpsertRequest(_message.Message):
    __slots__ = ["collection", "points", "write_concern"]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    collection: str
    points: _containers.RepeatedCompositeFieldContainer[Point]
    write_concern: WriteConcern
    def __init__(self, collection: _Optional[str] = ..., points: _Optional[_Iterable[_Union[Point, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class UpsertResponse(_message.Message):
    __slots__ = ["tokens", "upserted", "write_concern"]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    UPSERTED_FIELD_NUMBER: _ClassVar[int]
    WRITE_CONCERN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[WriteToken]
    upserted: int
    write_concern: WriteConcern
    def __init__(self, upserted: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[WriteToken, _Mapping]]] = ..., write_concern: _Optional[_Union[WriteConcern, str]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ["bool_value", "double_value", "geo_value", "integer_value", "list_value", "null_value", "string_value"]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    GEO_VALUE_FIELD_NUMBER: _ClassVar[int]
    INTEGER_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    bool_value: bool
    double_value: float
    geo_value: GeoPoint
    integer_value: int
    list_value: ListValue
    null_value: NullValue
    string_value: str
    def __init__(self, null_value: _Optional[_Union[NullValue, str]] = ..., string_value: _Optional[str] = ..., integer_value: _Optional[int] = ..., double_value: _Optional[float] = ..., bool_value: bool = ..., geo_value: _Optional[_Union[GeoPoint, _Mapping]] = ..., list_value: _Optional[_Union[ListValue, _Mapping]] = ...) -> None: ...

class WriteToken(_message.Message):
    __slots__ = ["acknowledged_by", "sequence", "shard"]
    ACKNOWLEDGED_BY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    acknowledged_by: _containers.RepeatedScalarFieldContainer[str]
    sequence: int
    shard: int
    def __init__(self, shard: _Optional[int] = ..., sequence: _Optional[int] = ..., acknowledged_by: _Optional[_Iterable[str]] = ...) -> None: ...

class Metric(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class IndexKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Quantizer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class IndexState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FieldIndexType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NullValue(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WriteConcern(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Consistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
