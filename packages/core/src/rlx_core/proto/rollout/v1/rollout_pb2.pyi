from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sample(_message.Message):
    __slots__ = ("token_ids", "sampler_logp", "finish_reason", "text", "status", "reward", "judgement")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_LOGP_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    JUDGEMENT_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampler_logp: bytes
    finish_reason: str
    text: str
    status: str
    reward: float
    judgement: Judgement
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., sampler_logp: _Optional[bytes] = ..., finish_reason: _Optional[str] = ..., text: _Optional[str] = ..., status: _Optional[str] = ..., reward: _Optional[float] = ..., judgement: _Optional[_Union[Judgement, _Mapping]] = ...) -> None: ...

class Judgement(_message.Message):
    __slots__ = ("message", "compile_output", "tests_passed", "tests_total", "first_failed", "compile_s", "run_s", "check_s")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPILE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TESTS_PASSED_FIELD_NUMBER: _ClassVar[int]
    TESTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILED_FIELD_NUMBER: _ClassVar[int]
    COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    RUN_S_FIELD_NUMBER: _ClassVar[int]
    CHECK_S_FIELD_NUMBER: _ClassVar[int]
    message: str
    compile_output: str
    tests_passed: int
    tests_total: int
    first_failed: int
    compile_s: float
    run_s: float
    check_s: float
    def __init__(self, message: _Optional[str] = ..., compile_output: _Optional[str] = ..., tests_passed: _Optional[int] = ..., tests_total: _Optional[int] = ..., first_failed: _Optional[int] = ..., compile_s: _Optional[float] = ..., run_s: _Optional[float] = ..., check_s: _Optional[float] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("prompt", "prompt_ids", "samples")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    prompt_ids: _containers.RepeatedScalarFieldContainer[int]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    def __init__(self, prompt: _Optional[str] = ..., prompt_ids: _Optional[_Iterable[int]] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ...) -> None: ...

class Unit(_message.Message):
    __slots__ = ("unit_json", "version", "generated_tokens", "groups", "verify_s")
    UNIT_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_S_FIELD_NUMBER: _ClassVar[int]
    unit_json: str
    version: int
    generated_tokens: int
    groups: _containers.RepeatedCompositeFieldContainer[Group]
    verify_s: float
    def __init__(self, unit_json: _Optional[str] = ..., version: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[Group, _Mapping]]] = ..., verify_s: _Optional[float] = ...) -> None: ...
