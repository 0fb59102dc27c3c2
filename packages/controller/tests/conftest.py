"""Fixtures of the controller suite: run-directory roots on each storage backend (a local
directory, moto's S3 server, gcp-storage-emulator, all on 127.0.0.1, from rlx_testing.plugin)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture(params=["local", "s3", "gcs"])
def run_root(request: pytest.FixtureRequest, new_root: Callable[[str, str], str]) -> str:
    """A fresh, empty run-directory URI on each backend."""
    return new_root(request.param, "runs/r1")
