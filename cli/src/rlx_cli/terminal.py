"""Untrusted text made safe for a terminal: responses, prompts, dataset fields, template and
error messages reach the screen only through these.

A control character (C0, DEL, C1), a line or paragraph separator and a bidirectional override
would move the cursor, clear the screen, set the clipboard (OSC 52), forge a line or reorder what
is shown; each is written as a Python-style escape instead (ESC as `\\x1b`, U+202E as `\\u202e`).
Backslashes stay as they are (LaTeX and paths read as written).

    escape("a\\x1b[2Jb")                    # 'a\\\\x1b[2Jb'
    escape("line 1\\nline 2", newlines=True)  # the newline kept (a multi-line table cell)
    one_line("bad\\n  value\\r")            # 'bad value\\x0d': spaces, tabs, newlines as one space
    cell(response, newlines=True)            # a rich Text: no markup is interpreted in it
"""

from __future__ import annotations

import re

from rich.text import Text

__all__ = ["cell", "escape", "escape_json", "one_line"]


def _code(c: int) -> str:
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


_UNSAFE = [
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    0x200E,  # left-to-right and right-to-left marks
    0x200F,
    0x2028,  # line and paragraph separators
    0x2029,
    *range(0x202A, 0x202F),  # bidirectional embeddings and overrides
    *range(0x2066, 0x206A),  # bidirectional isolates
]
_TABLE = {c: _code(c) for c in _UNSAFE}
_TABLE_MULTILINE = {c: v for c, v in _TABLE.items() if c not in (0x0A, 0x09)}
_TABLE_JSON = {c: f"\\u{c:04x}" for c in _UNSAFE}


def escape(text: str, *, newlines: bool = False) -> str:
    """`text` with every character that steers a terminal written as an escape; with
    `newlines`, line feeds and tabs are kept (the text is shown as several lines of a cell)."""
    return text.translate(_TABLE_MULTILINE if newlines else _TABLE)


def escape_json(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) with the characters that steer a
    terminal and that JSON leaves as they are (DEL, C1, separators, bidirectional controls)
    written as `\\uXXXX` escapes: the same value once parsed."""
    return text.translate(_TABLE_JSON)


def cell(text: str, *, newlines: bool = False, style: str = "") -> Text:
    """`text` escaped as a Rich Text (so `[red]`-style markup in it is shown, not applied)."""
    return Text(escape(text, newlines=newlines), style=style)


_SPACES = re.compile(r"[ \t\n]+")


def one_line(text: str) -> str:
    """`text` as one escaped line: each run of spaces, tabs and newlines one space, every other
    character that steers a terminal (a carriage return included) an escape."""
    return escape(_SPACES.sub(" ", text).strip())
