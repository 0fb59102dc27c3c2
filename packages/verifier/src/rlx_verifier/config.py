"""Configuration of the rlx verifier: the judge (sandbox, pool, retries, math) and the server.

The classes live in `rlx_core.configs.verifier`, so that the run config composes them.
"""

from rlx_core.configs.verifier import (
    BACKENDS,
    JudgeConfig,
    LambdaConfig,
    RepositoryConfig,
    VerifierConfig,
)

__all__ = ["BACKENDS", "JudgeConfig", "LambdaConfig", "RepositoryConfig", "VerifierConfig"]
