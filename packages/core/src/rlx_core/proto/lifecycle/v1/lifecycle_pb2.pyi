from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_UNSPECIFIED: _ClassVar[State]
    PENDING: _ClassVar[State]
    STARTING: _ClassVar[State]
    READY: _ClassVar[State]
    DRAINING: _ClassVar[State]
    STOPPED: _ClassVar[State]
    ERROR: _ClassVar[State]
STATE_UNSPECIFIED: State
PENDING: State
STARTING: State
READY: State
DRAINING: State
STOPPED: State
ERROR: State

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ("reason", "grace_s")
    REASON_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    reason: str
    grace_s: float
    def __init__(self, reason: _Optional[str] = ..., grace_s: _Optional[float] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("service", "version", "state", "message", "instance_id", "pid", "uptime_s", "info")
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    service: str
    version: str
    state: State
    message: str
    instance_id: str
    pid: int
    uptime_s: float
    info: _containers.ScalarMap[str, str]
    def __init__(self, service: _Optional[str] = ..., version: _Optional[str] = ..., state: _Optional[_Union[State, str]] = ..., message: _Optional[str] = ..., instance_id: _Optional[str] = ..., pid: _Optional[int] = ..., uptime_s: _Optional[float] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...
