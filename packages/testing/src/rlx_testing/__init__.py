"""Fixtures and test doubles for rlx's tests (never imported by runtime code).

The pytest plugin `rlx_testing.plugin` (loaded by the root conftest.py) holds the fixtures; this
module the helpers a test imports: the shared `TOKEN`, services in threads and child processes,
the outage proxy, `tree`. The fake Google Cloud APIs are `rlx_testing.fake_tpu` and
`rlx_testing.fake_compute`.
"""

from rlx_testing._version import __version__
from rlx_testing.auth import TOKEN, WRONG_TOKEN, write_token_file
from rlx_testing.files import tree
from rlx_testing.outage import OutageProxy
from rlx_testing.processes import (
    ChildProcesses,
    ServiceProcess,
    ServiceThread,
    console_script,
    free_port,
    serve_in_thread,
)

__all__ = [
    "TOKEN",
    "WRONG_TOKEN",
    "ChildProcesses",
    "OutageProxy",
    "ServiceProcess",
    "ServiceThread",
    "__version__",
    "console_script",
    "free_port",
    "serve_in_thread",
    "tree",
    "write_token_file",
]
