"""The verifier service's logic, as plain Python (no grpc here).

Rewards: math answers and sandboxed code judging. The methods arrive with the issue that builds
this service; until then the service runs its lifecycle and answers health checks.
"""

from __future__ import annotations

from rlx_core.lifecycle import Lifecycle
from rlx_verifier._version import __version__
from rlx_verifier.config import VerifierConfig

__all__ = ["VerifierService"]


class VerifierService:
    """Owns the verifier's state and its lifecycle."""

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("verifier", __version__)
