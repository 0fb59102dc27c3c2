"""The paramserver's gRPC servicers: proto messages <-> ParamServerService calls.

RlxErrors raised by the service become gRPC statuses through rlx_core's error interceptor.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from rlx_paramserver.service import ParamServerService

__all__ = ["registrations"]


def registrations(service: ParamServerService) -> list[Callable[[grpc.Server], None]]:
    """The servicers to add to the server, besides Lifecycle (which every server has)."""
    del service  # the paramserver's own RPCs are added with the issue that builds them
    return []
