"""JSON from untrusted files: nesting is measured without recursion (brackets inside strings,
escaped quotes among them, do not count) and a document past the cap is a ValueError, never a
RecursionError."""

from __future__ import annotations

import pytest

from rlx_core.jsonlimits import MAX_JSON_DEPTH, json_depth, loads_bounded


def test_depth_counts_arrays_and_objects_outside_strings() -> None:
    assert json_depth(b"3") == 0 and json_depth(b"[1]") == 1
    assert json_depth(rb'[["]]]\"[", {"a": [1]}]]') == 4
    assert json_depth(b'"[[[') == 0  # an unterminated string runs to the end
    assert json_depth(b"[" * 50 + b"]" * 50, stop_above=10) == 11


def test_too_deep_is_a_value_error_and_strings_are_text() -> None:
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        loads_bounded(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="nested deeper than 3 levels"):
        loads_bounded('{"a": [[[1]]]}', max_depth=3)
    assert loads_bounded('{"a": [[1]]}', max_depth=3) == {"a": [[1]]}
    text = "[" * 5000
    assert loads_bounded('{"p": "' + text + '"}') == {"p": text}
    with pytest.raises(ValueError):
        loads_bounded(b"{not json")
