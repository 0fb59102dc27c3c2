"""The bearer token every test's services and clients share, and a token file holding it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TOKEN", "WRONG_TOKEN", "write_token_file"]

TOKEN = "rlx-test-token-0123456789abcdef"
WRONG_TOKEN = "wrong-" + TOKEN  # long enough to be a token, but not the one servers expect


def write_token_file(path: Path, token: str = TOKEN) -> Path:
    """Write `token` to `path` with mode 0600 (a server reads it without warnings); `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return path
