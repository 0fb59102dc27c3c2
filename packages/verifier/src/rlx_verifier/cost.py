"""What judging one sample costs: wall seconds spent compiling, running and checking.

The judge charges each sandboxed step to the meter of the thread it runs on; `Verifier.map`
judges one sample per pool thread, so a meter opened around one sample's verdict sees exactly
that sample's work, even when the steps are spread over helpers (the linked two-phase runner).

    with metered() as cost:
        ...                          # code that calls charged("compile") / "run" / "check"
    cost.compile_s, cost.run_s, cost.check_s
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

__all__ = ["Cost", "Part", "charged", "metered"]

Part = Literal["compile", "run", "check"]


@dataclass
class Cost:
    """Wall seconds, accumulated over every attempt (INFRA retries included)."""

    compile_s: float = 0.0  # building the program (a toolchain run in the sandbox)
    run_s: float = 0.0  # running the program on tests (or once, assert style)
    check_s: float = 0.0  # the special checker or the comparator; math: the answer comparison

    def add(self, part: Part, seconds: float) -> None:
        name = f"{part}_s"
        setattr(self, name, getattr(self, name) + seconds)


_local = threading.local()


@contextmanager
def metered() -> Iterator[Cost]:
    """A fresh meter for this thread for the duration of the block. A meter opened inside
    another passes its total on to the outer one when it closes."""
    outer: Cost | None = getattr(_local, "cost", None)
    cost = Cost()
    _local.cost = cost
    try:
        yield cost
    finally:
        _local.cost = outer
        if outer is not None:
            outer.compile_s += cost.compile_s
            outer.run_s += cost.run_s
            outer.check_s += cost.check_s


@contextmanager
def charged(part: Part) -> Iterator[None]:
    """Charge the block's wall time to `part` of this thread's meter (nothing when none is open)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        cost: Cost | None = getattr(_local, "cost", None)
        if cost is not None:
            cost.add(part, time.perf_counter() - start)
