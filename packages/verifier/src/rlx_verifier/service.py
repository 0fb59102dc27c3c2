"""The verifier service's logic, as plain Python (no grpc here).

It owns one `Verifier` (sandbox, worker pool, toolchains detected at start) and reports the
languages it found and the sandbox mode in its Lifecycle status. The Verify RPC is not built yet.
"""

from __future__ import annotations

from rlx_core.lifecycle import Lifecycle
from rlx_verifier._version import __version__
from rlx_verifier.config import VerifierConfig
from rlx_verifier.judge import Verifier

__all__ = ["VerifierService"]


class VerifierService:
    """Owns the verifier's state and its lifecycle."""

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config
        self.lifecycle = Lifecycle("verifier", __version__)
        self.verifier = Verifier(config.judge)
        self.lifecycle.info.update(
            {
                "languages": ",".join(sorted(self.verifier.languages)),
                "sandbox": self.verifier.sandbox.mode,
                "workers": str(self.verifier.workers),
                **{f"toolchain.{n}": lang.version for n, lang in self.verifier.languages.items()},
            }
        )

    def close(self) -> None:
        self.verifier.close()
