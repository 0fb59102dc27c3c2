from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("step", "reason")
    STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    step: int
    reason: str
    def __init__(self, step: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("step", "steps", "phase", "reward", "steps_per_s", "tokens_per_s", "heldout", "staleness", "loaded", "last_snapshot", "eta_s", "components", "run_id", "run_dir", "pid", "messages")
    class HeldoutEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    class StalenessEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class LoadedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    HELDOUT_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ETA_S_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    step: int
    steps: int
    phase: str
    reward: float
    steps_per_s: float
    tokens_per_s: float
    heldout: _containers.ScalarMap[int, float]
    staleness: _containers.ScalarMap[int, int]
    loaded: _containers.ScalarMap[str, int]
    last_snapshot: SnapshotInfo
    eta_s: float
    components: _containers.ScalarMap[str, str]
    run_id: str
    run_dir: str
    pid: int
    messages: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step: _Optional[int] = ..., steps: _Optional[int] = ..., phase: _Optional[str] = ..., reward: _Optional[float] = ..., steps_per_s: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., heldout: _Optional[_Mapping[int, float]] = ..., staleness: _Optional[_Mapping[int, int]] = ..., loaded: _Optional[_Mapping[str, int]] = ..., last_snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., eta_s: _Optional[float] = ..., components: _Optional[_Mapping[str, str]] = ..., run_id: _Optional[str] = ..., run_dir: _Optional[str] = ..., pid: _Optional[int] = ..., messages: _Optional[_Iterable[str]] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("deadline_s",)
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    deadline_s: float
    def __init__(self, deadline_s: _Optional[float] = ...) -> None: ...

class SnapshotReply(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("reason", "wait", "deadline_s")
    REASON_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    reason: str
    wait: bool
    deadline_s: float
    def __init__(self, reason: _Optional[str] = ..., wait: _Optional[bool] = ..., deadline_s: _Optional[float] = ...) -> None: ...

class StopReply(_message.Message):
    __slots__ = ("written", "step")
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    written: bool
    step: int
    def __init__(self, written: _Optional[bool] = ..., step: _Optional[int] = ...) -> None: ...

class StreamMetricsRequest(_message.Message):
    __slots__ = ("from_step",)
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    from_step: int
    def __init__(self, from_step: _Optional[int] = ...) -> None: ...

class MetricsLine(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...
