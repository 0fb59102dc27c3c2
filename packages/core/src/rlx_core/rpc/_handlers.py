"""Rebuilding a gRPC method handler with new behaviour, keeping its kind and serializers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Behavior = Callable[..., Any]


def rebuild(handler: grpc.RpcMethodHandler, wrap: Callable[[Behavior, bool], Behavior]) -> Any:
    """A handler like `handler` whose behaviour is `wrap(old_behaviour, response_streaming)`."""
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(wrap(handler.stream_stream, True), **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(wrap(handler.stream_unary, False), **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream, True), **kwargs)
    return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary, False), **kwargs)
