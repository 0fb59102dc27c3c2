import sys
from pathlib import Path

# the tests share trainer_helpers.py (import mode is importlib, so the directory is not on sys.path)
sys.path.insert(0, str(Path(__file__).parent))


import os
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture
def s3_uri(new_root: Callable[[str, str], str]) -> str:
    """A fresh bucket on the moto server (rlx_testing.plugin); returns s3://bucket/ckpt."""
    return new_root("s3", "ckpt")


_GCS_VARS = ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING")


@pytest.fixture(scope="session")
def gcs_endpoint(gcs_server: str) -> Iterator[str]:
    """gcp-storage-emulator (rlx_testing.plugin) reachable for the whole session by
    google-cloud-storage, gcsfs (STORAGE_EMULATOR_HOST) and TensorStore's gcs driver
    (TENSORSTORE_GCS_HTTP_URL plus GOOGLE_AUTH_TOKEN_FOR_TESTING, DESIGN §10)."""
    saved = {k: os.environ.get(k) for k in _GCS_VARS}
    os.environ.update(
        STORAGE_EMULATOR_HOST=gcs_server,
        TENSORSTORE_GCS_HTTP_URL=gcs_server,
        GOOGLE_AUTH_TOKEN_FOR_TESTING="x",
    )
    yield gcs_server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def gcs_uri(gcs_endpoint: str, new_root: Callable[[str, str], str]) -> str:
    return new_root("gcs", "ckpt")
