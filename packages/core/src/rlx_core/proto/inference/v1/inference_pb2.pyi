from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sampling(_message.Message):
    __slots__ = ("greedy", "temperature", "top_k", "top_p")
    GREEDY_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    def __init__(self, greedy: _Optional[bool] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ...) -> None: ...

class Prompt(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class WorkUnit(_message.Message):
    __slots__ = ("unit_id", "version", "prompts", "samples_per_prompt", "sampling", "seeds", "max_new_tokens", "stop_token_ids", "stop_sequences")
    UNIT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    unit_id: str
    version: int
    prompts: _containers.RepeatedCompositeFieldContainer[Prompt]
    samples_per_prompt: int
    sampling: Sampling
    seeds: _containers.RepeatedScalarFieldContainer[int]
    max_new_tokens: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    stop_sequences: _containers.RepeatedCompositeFieldContainer[Prompt]
    def __init__(self, unit_id: _Optional[str] = ..., version: _Optional[int] = ..., prompts: _Optional[_Iterable[_Union[Prompt, _Mapping]]] = ..., samples_per_prompt: _Optional[int] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ..., seeds: _Optional[_Iterable[int]] = ..., max_new_tokens: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., stop_sequences: _Optional[_Iterable[_Union[Prompt, _Mapping]]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("unit",)
    UNIT_FIELD_NUMBER: _ClassVar[int]
    unit: WorkUnit
    def __init__(self, unit: _Optional[_Union[WorkUnit, _Mapping]] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("prompt_index", "sample_index", "token_ids", "sampler_logprobs", "model_logprobs", "finish_reason", "versions")
    PROMPT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MODEL_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    prompt_index: int
    sample_index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampler_logprobs: _containers.RepeatedScalarFieldContainer[float]
    model_logprobs: _containers.RepeatedScalarFieldContainer[float]
    finish_reason: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, prompt_index: _Optional[int] = ..., sample_index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampler_logprobs: _Optional[_Iterable[float]] = ..., model_logprobs: _Optional[_Iterable[float]] = ..., finish_reason: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateReply(_message.Message):
    __slots__ = ("unit_id", "version", "rollouts", "generated_tokens", "elapsed_s", "recomputed")
    UNIT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTED_FIELD_NUMBER: _ClassVar[int]
    unit_id: str
    version: int
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    generated_tokens: int
    elapsed_s: float
    recomputed: int
    def __init__(self, unit_id: _Optional[str] = ..., version: _Optional[int] = ..., rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ..., generated_tokens: _Optional[int] = ..., elapsed_s: _Optional[float] = ..., recomputed: _Optional[int] = ...) -> None: ...

class LoadVersionRequest(_message.Message):
    __slots__ = ("version", "force")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    version: int
    force: bool
    def __init__(self, version: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class LoadVersionReply(_message.Message):
    __slots__ = ("version", "previous", "pull_s", "nbytes")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    PULL_S_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    version: int
    previous: int
    pull_s: float
    nbytes: int
    def __init__(self, version: _Optional[int] = ..., previous: _Optional[int] = ..., pull_s: _Optional[float] = ..., nbytes: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("loaded_version", "queue_depth", "active", "free_blocks", "total_blocks", "tokens_per_s", "units_done", "tokens_done", "discarded_partial", "interruptible", "slots", "block_size")
    LOADED_VERSION_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    UNITS_DONE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_DONE_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_PARTIAL_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTIBLE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    loaded_version: int
    queue_depth: int
    active: int
    free_blocks: int
    total_blocks: int
    tokens_per_s: float
    units_done: int
    tokens_done: int
    discarded_partial: int
    interruptible: bool
    slots: int
    block_size: int
    def __init__(self, loaded_version: _Optional[int] = ..., queue_depth: _Optional[int] = ..., active: _Optional[int] = ..., free_blocks: _Optional[int] = ..., total_blocks: _Optional[int] = ..., tokens_per_s: _Optional[float] = ..., units_done: _Optional[int] = ..., tokens_done: _Optional[int] = ..., discarded_partial: _Optional[int] = ..., interruptible: _Optional[bool] = ..., slots: _Optional[int] = ..., block_size: _Optional[int] = ...) -> None: ...
