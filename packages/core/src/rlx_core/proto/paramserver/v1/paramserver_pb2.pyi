from rlx_core.proto.common.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorSpec(_message.Message):
    __slots__ = ("name", "dtype", "shape", "shard_axis", "chunk_shape", "digest", "nbytes", "chunk_crc32c", "store_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    SHARD_AXIS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SHAPE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CRC32C_FIELD_NUMBER: _ClassVar[int]
    STORE_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    shard_axis: int
    chunk_shape: _containers.RepeatedScalarFieldContainer[int]
    digest: str
    nbytes: int
    chunk_crc32c: _containers.RepeatedScalarFieldContainer[int]
    store_key: str
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., shard_axis: _Optional[int] = ..., chunk_shape: _Optional[_Iterable[int]] = ..., digest: _Optional[str] = ..., nbytes: _Optional[int] = ..., chunk_crc32c: _Optional[_Iterable[int]] = ..., store_key: _Optional[str] = ...) -> None: ...

class PushHeader(_message.Message):
    __slots__ = ("version", "tensors", "commit")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    version: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    commit: bool
    def __init__(self, version: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., commit: _Optional[bool] = ...) -> None: ...

class PushShmRequest(_message.Message):
    __slots__ = ("header", "shm")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    header: PushHeader
    shm: ShmRef
    def __init__(self, header: _Optional[_Union[PushHeader, _Mapping]] = ..., shm: _Optional[_Union[ShmRef, _Mapping]] = ...) -> None: ...

class ShmRef(_message.Message):
    __slots__ = ("path", "entries")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    path: str
    entries: _containers.RepeatedCompositeFieldContainer[ShmEntry]
    def __init__(self, path: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ShmEntry, _Mapping]]] = ...) -> None: ...

class ShmEntry(_message.Message):
    __slots__ = ("name", "offset", "nbytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    nbytes: int
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ...) -> None: ...

class PushInPlaceRequest(_message.Message):
    __slots__ = ("header", "written")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    header: PushHeader
    written: InPlaceWritten
    def __init__(self, header: _Optional[_Union[PushHeader, _Mapping]] = ..., written: _Optional[_Union[InPlaceWritten, _Mapping]] = ...) -> None: ...

class InPlaceWritten(_message.Message):
    __slots__ = ("tensors",)
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSums]
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorSums, _Mapping]]] = ...) -> None: ...

class TensorSums(_message.Message):
    __slots__ = ("name", "digest", "chunk_crc32c")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CRC32C_FIELD_NUMBER: _ClassVar[int]
    name: str
    digest: str
    chunk_crc32c: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ..., chunk_crc32c: _Optional[_Iterable[int]] = ...) -> None: ...

class PushInPlaceReply(_message.Message):
    __slots__ = ("targets", "result")
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    targets: PullHeader
    result: PushReply
    def __init__(self, targets: _Optional[_Union[PullHeader, _Mapping]] = ..., result: _Optional[_Union[PushReply, _Mapping]] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("header", "chunk", "shm")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    header: PushHeader
    chunk: _tensor_pb2.TensorChunk
    shm: ShmRef
    def __init__(self, header: _Optional[_Union[PushHeader, _Mapping]] = ..., chunk: _Optional[_Union[_tensor_pb2.TensorChunk, _Mapping]] = ..., shm: _Optional[_Union[ShmRef, _Mapping]] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("version", "bytes", "used_shm", "committed", "evicted")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_SHM_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    version: int
    bytes: int
    used_shm: bool
    committed: bool
    evicted: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, version: _Optional[int] = ..., bytes: _Optional[int] = ..., used_shm: _Optional[bool] = ..., committed: _Optional[bool] = ..., evicted: _Optional[_Iterable[int]] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class CommitReply(_message.Message):
    __slots__ = ("version", "evicted")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    version: int
    evicted: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, version: _Optional[int] = ..., evicted: _Optional[_Iterable[int]] = ...) -> None: ...

class TensorSlice(_message.Message):
    __slots__ = ("name", "start", "stop")
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    name: str
    start: _containers.RepeatedScalarFieldContainer[int]
    stop: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., start: _Optional[_Iterable[int]] = ..., stop: _Optional[_Iterable[int]] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("latest", "version", "names", "slices", "map_store")
    LATEST_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    MAP_STORE_FIELD_NUMBER: _ClassVar[int]
    latest: bool
    version: int
    names: _containers.RepeatedScalarFieldContainer[str]
    slices: _containers.RepeatedCompositeFieldContainer[TensorSlice]
    map_store: bool
    def __init__(self, latest: _Optional[bool] = ..., version: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ..., slices: _Optional[_Iterable[_Union[TensorSlice, _Mapping]]] = ..., map_store: _Optional[bool] = ...) -> None: ...

class PullHeader(_message.Message):
    __slots__ = ("version", "tensors", "created_unix", "store_dir")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    STORE_DIR_FIELD_NUMBER: _ClassVar[int]
    version: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    created_unix: float
    store_dir: str
    def __init__(self, version: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., created_unix: _Optional[float] = ..., store_dir: _Optional[str] = ...) -> None: ...

class PullReply(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: PullHeader
    chunk: _tensor_pb2.TensorChunk
    def __init__(self, header: _Optional[_Union[PullHeader, _Mapping]] = ..., chunk: _Optional[_Union[_tensor_pb2.TensorChunk, _Mapping]] = ...) -> None: ...

class ManifestRequest(_message.Message):
    __slots__ = ("latest", "version", "names")
    LATEST_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    latest: bool
    version: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, latest: _Optional[bool] = ..., version: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ("consumer_id", "version")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    consumer_id: str
    version: int
    def __init__(self, consumer_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ConfirmReply(_message.Message):
    __slots__ = ("evicted",)
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    evicted: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, evicted: _Optional[_Iterable[int]] = ...) -> None: ...

class VersionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VersionInfo(_message.Message):
    __slots__ = ("version", "bytes", "created_unix", "num_tensors", "confirmed_by")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_BY_FIELD_NUMBER: _ClassVar[int]
    version: int
    bytes: int
    created_unix: float
    num_tensors: int
    confirmed_by: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[int] = ..., bytes: _Optional[int] = ..., created_unix: _Optional[float] = ..., num_tensors: _Optional[int] = ..., confirmed_by: _Optional[_Iterable[str]] = ...) -> None: ...

class VersionsReply(_message.Message):
    __slots__ = ("versions", "consumers", "staged", "replica_id", "max_versions", "instance_id", "started_unix", "bytes_read")
    class ConsumersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[VersionInfo]
    consumers: _containers.ScalarMap[str, int]
    staged: _containers.RepeatedScalarFieldContainer[int]
    replica_id: int
    max_versions: int
    instance_id: str
    started_unix: float
    bytes_read: int
    def __init__(self, versions: _Optional[_Iterable[_Union[VersionInfo, _Mapping]]] = ..., consumers: _Optional[_Mapping[str, int]] = ..., staged: _Optional[_Iterable[int]] = ..., replica_id: _Optional[int] = ..., max_versions: _Optional[int] = ..., instance_id: _Optional[str] = ..., started_unix: _Optional[float] = ..., bytes_read: _Optional[int] = ...) -> None: ...

class DropRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class DropReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProbeShmRequest(_message.Message):
    __slots__ = ("path", "nonce")
    PATH_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    nonce: bytes
    def __init__(self, path: _Optional[str] = ..., nonce: _Optional[bytes] = ...) -> None: ...

class ProbeShmReply(_message.Message):
    __slots__ = ("ok", "reason", "store_root")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STORE_ROOT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    store_root: str
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., store_root: _Optional[str] = ...) -> None: ...
