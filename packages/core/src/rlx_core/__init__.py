"""rlx core: errors, config, storage URIs, gRPC plumbing, protos and typed clients (no JAX).

Submodules load on demand so that `import rlx_core` stays cheap: `rlx_core.config`,
`rlx_core.storage`, `rlx_core.rpc`, `rlx_core.serving`, `rlx_core.clients`, `rlx_core.lifecycle`.
"""

from rlx_core._version import __version__
from rlx_core.errors import (
    AlreadyExists,
    Cancelled,
    ConfigError,
    Corrupt,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    RlxError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

# The rlx distributions a service machine installs, in the order of the README's tour (the CLI,
# rlx-cli, comes on top of them).
DISTRIBUTIONS = (
    "rlx-core",
    "rlx-model",
    "rlx-paramserver",
    "rlx-inference",
    "rlx-trainer",
    "rlx-verifier",
    "rlx-controller",
    "rlx-launch",  # the node agent (`python -m rlx_launch.node`)
)

__all__ = [
    "DISTRIBUTIONS",
    "AlreadyExists",
    "Cancelled",
    "ConfigError",
    "Corrupt",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "RlxError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "__version__",
]
