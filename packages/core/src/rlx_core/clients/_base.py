"""What every typed client shares: its address, one authenticated channel, close, `with`."""

from __future__ import annotations

from typing import Self

import grpc

from rlx_core.rpc.client import connect

__all__ = ["ServiceClient"]


class ServiceClient:
    """Base of the typed clients: a channel to `address` carrying the bearer token (from `token`,
    `token_file`, or the usual lookup), or a given `channel`; `timeout` is the default deadline
    of the quick calls. Close it, or use it in a `with` block."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        channel: grpc.Channel | None = None,
        timeout: float,
    ) -> None:
        self.address = address
        self._channel = channel or connect(address, token=token, token_file=token_file)
        self._timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
