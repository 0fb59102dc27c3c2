"""The one retry policy of every storage call: exponential backoff with jitter while the backend
is unavailable, for a bounded total time.

Every storage operation is safe to repeat: a write puts the same bytes under the same key (a
retried write whose first attempt landed changes nothing), a read or listing has no effect, and
a delete of what is already gone counts as done. So each backend request is tried once by its SDK
(boto3, google-cloud-storage) and retried here, and nowhere else.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rlx_core.errors import ConfigError, InvalidArgument, Unavailable

__all__ = ["DEFAULT_RETRY_S", "RETRY_ENV", "Retry"]

log = logging.getLogger("rlx_core.storage")

T = TypeVar("T")

DEFAULT_RETRY_S = 120.0  # ride through an outage of up to two minutes
RETRY_ENV = "RLX_STORAGE_RETRY_S"  # overrides DEFAULT_RETRY_S for every open_storage


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How long to keep trying a storage call that fails with Unavailable."""

    total_s: float = DEFAULT_RETRY_S  # retry until this long after the first failure; 0: never
    first_backoff_s: float = 0.5  # sleep before the first retry (then doubled), > 0
    max_backoff_s: float = 10.0  # the longest sleep between two tries, >= first_backoff_s

    def __post_init__(self) -> None:
        if not (math.isfinite(self.total_s) and self.total_s >= 0):
            raise InvalidArgument(f"retry_s must be a number >= 0, got {self.total_s!r}")
        if not 0 < self.first_backoff_s <= self.max_backoff_s:
            raise InvalidArgument(
                f"backoff must be 0 < first ({self.first_backoff_s}) <= max ({self.max_backoff_s})"
            )

    @classmethod
    def from_env(cls) -> Retry:
        """The default policy, its total time from RLX_STORAGE_RETRY_S when that is set."""
        text = os.environ.get(RETRY_ENV, "").strip()
        if not text:
            return cls()
        try:
            total = float(text)
        except ValueError:
            total = math.nan
        if not (math.isfinite(total) and total >= 0):
            raise ConfigError(
                f"{RETRY_ENV}={text!r}: expected seconds, a number >= 0",
                field=RETRY_ENV,
                value=text,
                allowed="a number of seconds >= 0",
            )
        return cls(total_s=total)

    def call(self, fn: Callable[[], T], where: str) -> T:
        """fn(), retried while it raises Unavailable, for up to `total_s` after the first
        failure. Each retry is logged as one warning line naming `where` (the object's URI);
        the last failure is re-raised with how long it was retried."""
        deadline = 0.0
        backoff = self.first_backoff_s
        tries = 0
        while True:
            tries += 1
            try:
                return fn()
            except Unavailable as e:
                now = time.monotonic()
                deadline = deadline or now + self.total_s
                if now >= deadline:
                    if tries == 1:
                        raise
                    raise type(e)(
                        f"{e} (gave up after {tries} tries in {self.total_s:g} s)", **e.details
                    ) from e
                sleep = min(random.uniform(backoff / 2, backoff), deadline - now)
                text = str(e) if where in str(e) else f"{where}: {e}"
                log.warning(
                    "%s; retry %d in %.1f s (for up to %.0f s more)",
                    " ".join(text.split()),
                    tries,
                    sleep,
                    deadline - now,
                )
                time.sleep(sleep)
                backoff = min(backoff * 2, self.max_backoff_s)
