"""JSON from untrusted files, with its nesting bounded (no JAX, no recursion).

    record = loads_bounded(line)        # ValueError: not JSON, or nested deeper than the cap

`json.loads` recurses once per level of nesting: a line of 100,000 `[` raises RecursionError
(not a ValueError), and a record nested just under the interpreter's limit makes whatever walks
it next (repr, copy, json.dumps) fail instead. So the depth is measured first, by a scan of the
bytes that skips strings, and a document deeper than `max_depth` is refused before parsing. The
scan runs only when the text holds more brackets than `max_depth`, which a real record's
structure never needs.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "json_depth", "loads_bounded"]

# deepest nesting of arrays and objects accepted; a dataset record, a manifest or a pre-filter
# line needs fewer than 10 levels
MAX_JSON_DEPTH = 100

# a JSON string (escapes included: `\"` does not end it; an unterminated one runs to the end,
# so the scan stays linear), or one bracket outside strings
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def json_depth(data: bytes, stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in JSON text `data` (0 for a scalar), counted
    without recursion; the scan stops once the depth passes `stop_above`."""
    depth = deepest = 0
    for m in _TOKEN.finditer(data):
        c = data[m.start()]
        if c == 0x22:  # '"': a string, whose brackets do not count
            continue
        if c in (0x5B, 0x7B):  # '[' or '{'
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        else:
            depth -= 1
    return deepest


def loads_bounded(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(data)`, refusing a document nested deeper than `max_depth` with a ValueError
    that says so (as for any text that is not JSON)."""
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        depth = json_depth(raw, stop_above=max_depth)
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels of arrays and objects")
    try:
        return json.loads(raw)
    except RecursionError:  # not reached after the scan; kept so no caller sees a traceback
        raise ValueError(f"nested deeper than {max_depth} levels of arrays and objects") from None
