from rlx_core.proto.common.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckpointSource(_message.Message):
    __slots__ = ("uri", "step")
    URI_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    uri: str
    step: int
    def __init__(self, uri: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class InitRequest(_message.Message):
    __slots__ = ("checkpoint", "hf_dir", "builtin", "seed")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    HF_DIR_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    checkpoint: CheckpointSource
    hf_dir: str
    builtin: str
    seed: int
    def __init__(self, checkpoint: _Optional[_Union[CheckpointSource, _Mapping]] = ..., hf_dir: _Optional[str] = ..., builtin: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class InitReply(_message.Message):
    __slots__ = ("step", "version", "num_params", "model")
    STEP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    step: int
    version: int
    num_params: int
    model: str
    def __init__(self, step: _Optional[int] = ..., version: _Optional[int] = ..., num_params: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class TrainStepHeader(_message.Message):
    __slots__ = ("kind", "version", "max_len", "expected_step")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STEP_FIELD_NUMBER: _ClassVar[int]
    kind: str
    version: int
    max_len: int
    expected_step: int
    def __init__(self, kind: _Optional[str] = ..., version: _Optional[int] = ..., max_len: _Optional[int] = ..., expected_step: _Optional[int] = ...) -> None: ...

class TrainStepRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: TrainStepHeader
    chunk: _tensor_pb2.TensorChunk
    def __init__(self, header: _Optional[_Union[TrainStepHeader, _Mapping]] = ..., chunk: _Optional[_Union[_tensor_pb2.TensorChunk, _Mapping]] = ...) -> None: ...

class TrainStepReply(_message.Message):
    __slots__ = ("step", "version", "metrics", "warnings")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    step: int
    version: int
    metrics: _containers.ScalarMap[str, float]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step: _Optional[int] = ..., version: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class SaveCheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SaveCheckpointReply(_message.Message):
    __slots__ = ("step", "uri")
    STEP_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    step: int
    uri: str
    def __init__(self, step: _Optional[int] = ..., uri: _Optional[str] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class RestoreReply(_message.Message):
    __slots__ = ("step", "version")
    STEP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    step: int
    version: int
    def __init__(self, step: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("initialized", "step", "model", "num_params", "kept_versions", "checkpoint_steps", "last_metrics", "mesh_shape", "checkpoint_uri")
    class LastMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_FIELD_NUMBER: _ClassVar[int]
    KEPT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEPS_FIELD_NUMBER: _ClassVar[int]
    LAST_METRICS_FIELD_NUMBER: _ClassVar[int]
    MESH_SHAPE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    initialized: bool
    step: int
    model: str
    num_params: int
    kept_versions: _containers.RepeatedScalarFieldContainer[int]
    checkpoint_steps: _containers.RepeatedScalarFieldContainer[int]
    last_metrics: _containers.ScalarMap[str, float]
    mesh_shape: _containers.RepeatedScalarFieldContainer[int]
    checkpoint_uri: str
    def __init__(self, initialized: _Optional[bool] = ..., step: _Optional[int] = ..., model: _Optional[str] = ..., num_params: _Optional[int] = ..., kept_versions: _Optional[_Iterable[int]] = ..., checkpoint_steps: _Optional[_Iterable[int]] = ..., last_metrics: _Optional[_Mapping[str, float]] = ..., mesh_shape: _Optional[_Iterable[int]] = ..., checkpoint_uri: _Optional[str] = ...) -> None: ...
