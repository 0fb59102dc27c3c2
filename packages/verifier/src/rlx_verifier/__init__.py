"""Rewards: math answers and code judged in a bubblewrap sandbox with testlib-style checkers."""

from rlx_verifier._version import __version__
from rlx_verifier.config import VerifierConfig
from rlx_verifier.server import serve
from rlx_verifier.service import VerifierService

__all__ = ["VerifierConfig", "VerifierService", "__version__", "serve"]
