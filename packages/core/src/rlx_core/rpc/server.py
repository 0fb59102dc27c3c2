"""Building a gRPC server the rlx way: authenticated, error-mapped, bound to loopback by default."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent import futures

import grpc

from rlx_core.errors import InvalidArgument, Unavailable
from rlx_core.rpc.auth import AuthServerInterceptor
from rlx_core.rpc.status import ErrorMappingInterceptor

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "build_server", "channel_options"]

# 1 MiB tensor chunks plus framing fit easily; big enough for manifests and rollout batches.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """The options rlx sets explicitly on every server and channel (gRPC's default receive limit
    is 4 MiB, too small for a 4 MiB chunk plus framing)."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def build_server(
    register: Iterable[Callable[[grpc.Server], None]],
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    max_workers: int = 16,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> tuple[grpc.Server, str]:
    """A started-ready (not yet started) server with every servicer registered, and its address.

    `register` holds callables like `lambda s: add_LifecycleServicer_to_server(impl, s)`. Every
    call is checked for the bearer `token` before any servicer code runs, and RlxErrors raised by
    servicers become the matching gRPC status. Port 0 picks a free port; the returned address is
    the real `host:port`.
    """
    if not token:
        raise InvalidArgument("a server needs a non-empty auth token")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rlx-rpc"),
        interceptors=[AuthServerInterceptor(token), ErrorMappingInterceptor()],
        options=channel_options(max_message_bytes),
    )
    for add in register:
        add(server)
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(bind)
    except RuntimeError as e:
        raise Unavailable(f"cannot bind {bind}: {e}") from None
    if bound == 0:
        raise Unavailable(f"cannot bind {bind} (address in use or not local)")
    address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
    return server, address
