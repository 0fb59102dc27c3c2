from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Limits(_message.Message):
    __slots__ = ("time_limit_s", "memory_mb")
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    time_limit_s: float
    memory_mb: int
    def __init__(self, time_limit_s: _Optional[float] = ..., memory_mb: _Optional[int] = ...) -> None: ...

class InlineTest(_message.Message):
    __slots__ = ("stdin", "answer")
    STDIN_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    stdin: str
    answer: str
    def __init__(self, stdin: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class TestLink(_message.Message):
    __slots__ = ("input", "answer")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    input: str
    answer: str
    def __init__(self, input: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("sample_id", "kind", "language", "code", "gold_answer", "harness", "tests", "test_links", "checker", "comparator", "limits", "extractor", "partial_credit")
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    GOLD_ANSWER_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    TESTS_FIELD_NUMBER: _ClassVar[int]
    TEST_LINKS_FIELD_NUMBER: _ClassVar[int]
    CHECKER_FIELD_NUMBER: _ClassVar[int]
    COMPARATOR_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EXTRACTOR_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_CREDIT_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    kind: str
    language: str
    code: str
    gold_answer: str
    harness: str
    tests: _containers.RepeatedCompositeFieldContainer[InlineTest]
    test_links: _containers.RepeatedCompositeFieldContainer[TestLink]
    checker: str
    comparator: str
    limits: Limits
    extractor: str
    partial_credit: bool
    def __init__(self, sample_id: _Optional[str] = ..., kind: _Optional[str] = ..., language: _Optional[str] = ..., code: _Optional[str] = ..., gold_answer: _Optional[str] = ..., harness: _Optional[str] = ..., tests: _Optional[_Iterable[_Union[InlineTest, _Mapping]]] = ..., test_links: _Optional[_Iterable[_Union[TestLink, _Mapping]]] = ..., checker: _Optional[str] = ..., comparator: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., extractor: _Optional[str] = ..., partial_credit: _Optional[bool] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    def __init__(self, samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ...) -> None: ...

class TestVerdict(_message.Message):
    __slots__ = ("status", "time_s", "memory_kb", "exit_code", "signal", "stderr", "message", "score")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_KB_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    status: str
    time_s: float
    memory_kb: int
    exit_code: int
    signal: int
    stderr: str
    message: str
    score: float
    def __init__(self, status: _Optional[str] = ..., time_s: _Optional[float] = ..., memory_kb: _Optional[int] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., stderr: _Optional[str] = ..., message: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class SampleResult(_message.Message):
    __slots__ = ("sample_id", "status", "score", "error", "message", "compile_output", "attempts", "tests", "compile_s", "run_s", "check_s", "cached")
    SAMPLE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COMPILE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TESTS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    RUN_S_FIELD_NUMBER: _ClassVar[int]
    CHECK_S_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    sample_id: str
    status: str
    score: float
    error: str
    message: str
    compile_output: str
    attempts: int
    tests: _containers.RepeatedCompositeFieldContainer[TestVerdict]
    compile_s: float
    run_s: float
    check_s: float
    cached: bool
    def __init__(self, sample_id: _Optional[str] = ..., status: _Optional[str] = ..., score: _Optional[float] = ..., error: _Optional[str] = ..., message: _Optional[str] = ..., compile_output: _Optional[str] = ..., attempts: _Optional[int] = ..., tests: _Optional[_Iterable[_Union[TestVerdict, _Mapping]]] = ..., compile_s: _Optional[float] = ..., run_s: _Optional[float] = ..., check_s: _Optional[float] = ..., cached: _Optional[bool] = ...) -> None: ...

class VerifyReply(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SampleResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SampleResult, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("toolchains", "sandbox", "sandboxed", "workers", "queued", "running", "backend", "judged", "cache_entries", "infra_retries", "bwrap")
    class ToolchainsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOOLCHAINS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    SANDBOXED_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    JUDGED_FIELD_NUMBER: _ClassVar[int]
    CACHE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    INFRA_RETRIES_FIELD_NUMBER: _ClassVar[int]
    BWRAP_FIELD_NUMBER: _ClassVar[int]
    toolchains: _containers.ScalarMap[str, str]
    sandbox: str
    sandboxed: bool
    workers: int
    queued: int
    running: int
    backend: str
    judged: int
    cache_entries: int
    infra_retries: int
    bwrap: str
    def __init__(self, toolchains: _Optional[_Mapping[str, str]] = ..., sandbox: _Optional[str] = ..., sandboxed: _Optional[bool] = ..., workers: _Optional[int] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., backend: _Optional[str] = ..., judged: _Optional[int] = ..., cache_entries: _Optional[int] = ..., infra_retries: _Optional[int] = ..., bwrap: _Optional[str] = ...) -> None: ...
