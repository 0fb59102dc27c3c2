"""Deciding whether one output is right: built-in comparators, and special checkers that follow
the testlib protocol (`checker input output answer`; exit 0 OK, 1 WA, 2 PE, 3 FAIL, 7 points,
message on stderr). A checker that FAILs or crashes is the verifier's problem (INFRA), never the
submission's; one that runs out of time on an output is the output's fault (WA) unless it also runs
out of time on the jury's answer (`check_output`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
from dataclasses import dataclass

from rlx_core.errors import InvalidArgument
from rlx_verifier.sandbox import Limits, Sandbox, SandboxError

__all__ = [
    "CHECKER_LIMITS",
    "COMPARATORS",
    "CheckResult",
    "CheckerFailed",
    "CheckerTimeout",
    "check_output",
    "compare",
    "run_checker",
]

COMPARATORS = ("exact", "tokens", "float")

# testlib exit codes
OK, WA, PE, FAIL, POINTS, UNEXPECTED_EOF = 0, 1, 2, 3, 7, 8


class CheckerFailed(SandboxError):
    """The checker reported FAIL, crashed, or could not run: an INFRA verdict."""


class CheckerTimeout(CheckerFailed):
    """The checker ran out of CPU time or the wall clock."""


@dataclass(frozen=True)
class CheckResult:
    status: str  # "AC", "WA" or "PE"
    score: float  # 1.0 for AC, a fraction for testlib points
    message: str = ""


def _lines_rstripped(data: bytes) -> list[bytes]:
    lines = [line.rstrip() for line in data.split(b"\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare(
    output: bytes,
    answer: bytes,
    *,
    mode: str = "tokens",
    abs_tol: float = 1e-6,
    rel_tol: float = 1e-6,
) -> CheckResult:
    """Built-in comparison of a program's output with the expected answer.

    exact: the same lines after stripping trailing whitespace of each line and trailing blank
    lines (so Windows line ends and a missing final newline do not matter); tokens: the same
    whitespace-separated tokens; float: the same tokens, where tokens that both parse as numbers
    may differ by `abs_tol` or `rel_tol`. Right tokens laid out differently give PE in exact mode.
    """
    if mode not in COMPARATORS:
        raise InvalidArgument(f"comparator {mode!r} is not one of {', '.join(COMPARATORS)}")
    got, want = output.split(), answer.split()
    if mode == "exact":
        if _lines_rstripped(output) == _lines_rstripped(answer):
            return CheckResult("AC", 1.0)
        if got == want:
            return CheckResult("PE", 0.0, "right tokens, wrong layout")
        return CheckResult("WA", 0.0, _first_difference(got, want))
    if len(got) != len(want):
        return CheckResult("WA", 0.0, f"expected {len(want)} tokens, got {len(got)}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g == w:
            continue
        if mode == "float" and _close(g, w, abs_tol, rel_tol):
            continue
        return CheckResult("WA", 0.0, f"token {i + 1}: expected {_short(w)}, got {_short(g)}")
    return CheckResult("AC", 1.0)


_NUMBER = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _close(got: bytes, want: bytes, abs_tol: float, rel_tol: float) -> bool:
    if not (_NUMBER.fullmatch(got) and _NUMBER.fullmatch(want)):
        return False
    g, w = float(got), float(want)
    if not (math.isfinite(g) and math.isfinite(w)):
        return False
    return abs(g - w) <= abs_tol or abs(g - w) <= rel_tol * abs(w)


def _short(token: bytes) -> str:
    text = token.decode(errors="replace")
    return text if len(text) <= 40 else text[:37] + "..."


def _first_difference(got: list[bytes], want: list[bytes]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"token {i + 1}: expected {_short(w)}, got {_short(g)}"
    return f"expected {len(want)} tokens, got {len(got)}"


CHECKER_LIMITS = Limits(cpu_s=10.0, wall_s=20.0, memory_mb=1024, nproc=16, output_mb=16)


def run_checker(
    sandbox: Sandbox,
    checker: str,
    input_path: str,
    output_path: str,
    answer_path: str,
    *,
    limits: Limits = CHECKER_LIMITS,
) -> CheckResult:
    """Run a testlib-protocol checker executable (host path) in the sandbox."""
    if not os.path.isfile(checker) or not os.access(checker, os.X_OK):
        raise InvalidArgument(f"checker {checker!r} is not an executable file")
    if shutil.which(checker) is None and not os.path.isabs(checker):
        checker = os.path.abspath(checker)
    binds = [
        (checker, "/checker/check"),
        (input_path, "/data/input"),
        (output_path, "/data/output"),
        (answer_path, "/data/answer"),
    ]
    result = sandbox.run(
        ["/checker/check", "/data/input", "/data/output", "/data/answer"],
        limits=limits,
        ro_binds=binds,
        keep_stdout=True,
    )
    message = (result.stderr or result.stdout).decode(errors="replace").strip()[:500]
    code = result.exit_code
    if code == OK:
        return CheckResult("AC", 1.0, message)
    if code in (WA, UNEXPECTED_EOF):
        return CheckResult("WA", 0.0, message)
    if code == PE:
        return CheckResult("PE", 0.0, message)
    if code == POINTS:
        points = _points(message)
        return CheckResult("AC" if points >= 1.0 else "WA", points, message)
    if result.wall_timeout or result.signal == signal.SIGXCPU:
        how = "wall-clock timeout" if result.wall_timeout else "CPU time limit"
        raise CheckerTimeout(f"checker timed out ({how}): {message or 'no message'}")
    how = f"signal {result.signal}" if result.signal else f"exit code {code}"
    raise CheckerFailed(f"checker failed ({how}): {message or 'no message'}")


def check_output(
    sandbox: Sandbox,
    checker: str,
    input_path: str,
    output_path: str,
    answer_path: str,
    *,
    limits: Limits = CHECKER_LIMITS,
) -> CheckResult:
    """`run_checker`, where a checker that times out on the program's output is run once more
    with the jury's answer as the output: if it finishes there, the output hung it (WA, so an
    output cannot escape its 0 by hanging the checker); if it times out there too, the checker is
    broken (CheckerTimeout: INFRA)."""
    try:
        return run_checker(sandbox, checker, input_path, output_path, answer_path, limits=limits)
    except CheckerTimeout as e:
        run_checker(sandbox, checker, input_path, answer_path, answer_path, limits=limits)
        return CheckResult("WA", 0.0, f"the checker timed out on this output ({e})")


def _points(message: str) -> float:
    """testlib's `quitp` prints the points first; read them as a fraction of 1, clamped."""
    match = re.search(r"[-+]?\d+(\.\d+)?", message)
    if match is None:
        return 0.0
    return min(1.0, max(0.0, float(match.group())))
