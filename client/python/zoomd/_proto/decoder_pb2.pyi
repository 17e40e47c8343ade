from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
LOADING: ModelState
MODEL_FAILED: ModelState
MODEL_STATE_UNSPECIFIED: ModelState
SERVING: ModelState
TAIL_ESTIMATE_CLUSTERS: TailEstimate
TAIL_ESTIMATE_DEFAULT: TailEstimate
TAIL_ESTIMATE_NONE: TailEstimate
TAIL_ESTIMATE_SAMPLE: TailEstimate

class Context(_message.Message):
    __slots__ = ["h"]
    H_FIELD_NUMBER: _ClassVar[int]
    h: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, h: _Optional[_Iterable[float]] = ...) -> None: ...

class DecodeStats(_message.Message):
    __slots__ = ["distance_evals", "ef", "micros"]
    DISTANCE_EVALS_FIELD_NUMBER: _ClassVar[int]
    EF_FIELD_NUMBER: _ClassVar[int]
    MICROS_FIELD_NUMBER: _ClassVar[int]
    distance_evals: int
    ef: int
    micros: int
    def __init__(self, micros: _Optional[int] = ..., distance_evals: _Optional[int] = ..., ef: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ["default_ef", "dir", "ef_construction", "m", "name", "wait"]
    DEFAULT_EF_FIELD_NUMBER: _ClassVar[int]
    DIR_FIELD_NUMBER: _ClassVar[int]
    EF_CONSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    M_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    default_ef: int
    dir: str
    ef_construction: int
    m: int
    name: str
    wait: bool
    def __init__(self, name: _Optional[str] = ..., dir: _Optional[str] = ..., m: _Optional[int] = ..., ef_construction: _Optional[int] = ..., wait: bool = ..., default_ef: _Optional[int] = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ModelInfo
    def __init__(self, info: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ["calibration_contexts", "calibration_error", "calibration_p1", "calibration_p5", "default_ef", "default_ef_source", "dim", "dir", "ef_construction", "error", "error_code", "graph_bytes", "graph_from_cache", "m", "name", "progress", "resident_bytes", "state", "vocab_size"]
    CALIBRATION_CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_P1_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_P5_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_EF_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_EF_SOURCE_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    DIR_FIELD_NUMBER: _ClassVar[int]
    EF_CONSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GRAPH_BYTES_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FROM_CACHE_FIELD_NUMBER: _ClassVar[int]
    M_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    calibration_contexts: int
    calibration_error: str
    calibration_p1: float
    calibration_p5: float
    default_ef: int
    default_ef_source: str
    dim: int
    dir: str
    ef_construction: int
    error: str
    error_code: int
    graph_bytes: int
    graph_from_cache: bool
    m: int
    name: str
    progress: float
    resident_bytes: int
    state: ModelState
    vocab_size: int
    def __init__(self, name: _Optional[str] = ..., dir: _Optional[str] = ..., vocab_size: _Optional[int] = ..., dim: _Optional[int] = ..., graph_bytes: _Optional[int] = ..., resident_bytes: _Optional[int] = ..., state: _Optional[_Union[ModelState, str]] = ..., progress: _Optional[float] = ..., error: _Optional[str] = ..., m: _Optional[int] = ..., ef_construction: _Optional[int] = ..., graph_from_cache: bool = ..., default_ef: _Optional[int] = ..., default_ef_source: _Optional[str] = ..., calibration_contexts: _Optional[int] = ..., calibration_p1: _Optional[float] = ..., calibration_p5: _Optional[float] = ..., calibration_error: _Optional[str] = ..., error_code: _Optional[int] = ...) -> None: ...

class TopKRequest(_message.Message):
    __slots__ = ["contexts", "ef", "exact", "k", "model", "return_probs", "return_words", "tail", "tail_samples"]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    EF_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RETURN_PROBS_FIELD_NUMBER: _ClassVar[int]
    RETURN_WORDS_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    TAIL_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    contexts: _containers.RepeatedCompositeFieldContainer[Context]
    ef: int
    exact: bool
    k: int
    model: str
    return_probs: bool
    return_words: bool
    tail: TailEstimate
    tail_samples: int
    def __init__(self, model: _Optional[str] = ..., contexts: _Optional[_Iterable[_Union[Context, _Mapping]]] = ..., k: _Optional[int] = ..., ef: _Optional[int] = ..., return_words: bool = ..., return_probs: bool = ..., exact: bool = ..., tail_samples: _Optional[int] = ..., tail: _Optional[_Union[TailEstimate, str]] = ...) -> None: ...

class TopKResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TopKResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TopKResult, _Mapping]]] = ...) -> None: ...

class TopKResult(_message.Message):
    __slots__ = ["ids", "logits", "probs", "stats", "tail_mass", "words"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    LOGITS_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    TAIL_MASS_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    logits: _containers.RepeatedScalarFieldContainer[float]
    probs: _containers.RepeatedScalarFieldContainer[float]
    stats: DecodeStats
    tail_mass: float
    words: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., words: _Optional[_Iterable[str]] = ..., logits: _Optional[_Iterable[float]] = ..., probs: _Optional[_Iterable[float]] = ..., tail_mass: _Optional[float] = ..., stats: _Optional[_Union[DecodeStats, _Mapping]] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TailEstimate(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
