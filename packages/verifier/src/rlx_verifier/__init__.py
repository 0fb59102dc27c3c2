"""Rewards: math answers and code judged in a bubblewrap sandbox with testlib-style checkers.

    from rlx_verifier import Verifier, TestCase
    v = Verifier()
    v.judge("cpp", source, tests=[TestCase(stdin="1 2\\n", answer="3\\n")]).status  # "AC"

`Verifier(JudgeConfig(...))` takes its settings from `rlx_verifier.config.JudgeConfig`.
"""

from rlx_verifier._version import __version__
from rlx_verifier.config import VerifierConfig
from rlx_verifier.judge import STATUSES, TestCase, TestResult, Verdict, Verifier
from rlx_verifier.math_answers import extract_answer
from rlx_verifier.repository import Repositories
from rlx_verifier.runner import judge_sample
from rlx_verifier.server import serve
from rlx_verifier.service import VerifierService

__all__ = [
    "STATUSES",
    "Repositories",
    "TestCase",
    "TestResult",
    "Verdict",
    "Verifier",
    "VerifierConfig",
    "VerifierService",
    "__version__",
    "extract_answer",
    "judge_sample",
    "serve",
]
