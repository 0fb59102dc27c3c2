"""gRPC plumbing shared by every rlx server and client: auth, error mapping, deadlines, retries,
and chunked tensor transfer."""

from rlx_core.rpc.auth import (
    AuthClientInterceptor,
    AuthServerInterceptor,
    default_token_path,
    resolve_token,
)
from rlx_core.rpc.client import DEFAULT_TIMEOUT_S, RetryPolicy, call, call_stream, connect
from rlx_core.rpc.server import DEFAULT_MAX_MESSAGE_BYTES, build_server, channel_options
from rlx_core.rpc.status import ErrorMappingInterceptor, from_rpc_error
from rlx_core.rpc.tensors import (
    DEFAULT_CHUNK_BYTES,
    TensorAssembler,
    chunks_to_tensors,
    dtype_from_name,
    dtype_name,
    tensor_to_chunks,
    tensors_to_chunks,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "AuthClientInterceptor",
    "AuthServerInterceptor",
    "ErrorMappingInterceptor",
    "RetryPolicy",
    "TensorAssembler",
    "build_server",
    "call",
    "call_stream",
    "channel_options",
    "chunks_to_tensors",
    "connect",
    "default_token_path",
    "dtype_from_name",
    "dtype_name",
    "from_rpc_error",
    "resolve_token",
    "tensor_to_chunks",
    "tensors_to_chunks",
]
