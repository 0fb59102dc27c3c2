"""Math answers: extract the final answer of a response and compare it with the gold answer using
math-verify, in worker processes that are killed when they overrun.

math-verify's own timeouts use signals (they fail off the main thread) and sympy can hang on inputs
like `9^{9^{9^9}}`; so each comparison runs on a worker process's main thread, with math-verify's
timeouts off, and the parent kills the worker after `timeout_s` (the verdict is then WA).
"""

from __future__ import annotations

import json
import queue
import re
import select
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from rlx_core.errors import InvalidArgument

if TYPE_CHECKING:
    from rlx_verifier.judge import Verdict

__all__ = ["EXTRACTORS", "MathPool", "extract_answer"]

EXTRACTORS = ("auto", "boxed", "hash", "answer_is", "last_number")

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?"
_HASH = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_ANSWER_IS = re.compile(r"answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.\s|\.?$)", re.IGNORECASE)
_LAST_NUMBER = re.compile(_NUMBER)


def _boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def extract_answer(text: str, extractor: str = "auto") -> str | None:
    """The final answer in `text`: `\\boxed{}`, `#### N`, "the answer is X", or the last number.

    `auto` tries them in that order; a named extractor uses only that rule.
    """
    if extractor not in EXTRACTORS:
        raise InvalidArgument(f"extractor {extractor!r} is not one of {', '.join(EXTRACTORS)}")
    rules = EXTRACTORS[1:] if extractor == "auto" else (extractor,)
    for rule in rules:
        found: str | None = None
        if rule == "boxed":
            found = _boxed(text)
        elif rule == "hash":
            matches = _HASH.findall(text)
            found = matches[-1] if matches else None
        elif rule == "answer_is":
            matches = _ANSWER_IS.findall(text)
            found = matches[-1].strip() if matches else None
        else:
            numbers = _LAST_NUMBER.findall(text)
            found = numbers[-1] if numbers else None
        if found:
            return found.replace(",", "") if re.fullmatch(_NUMBER, found) else found
    return None


def _wrap(answer: str) -> str:
    """math-verify parses LaTeX inside $...$; plain numbers parse either way."""
    return answer if "$" in answer else f"${answer}$"


_INTEGER = re.compile(r"[+-]?\d{1,100}")


def integers_equal(gold: str, answer: str) -> bool | None:
    """When both are plain integers (up to 100 digits), whether they are equal (what
    math-verify decides for them, without its parser); None otherwise."""
    g, a = gold.strip(), answer.strip()
    if _INTEGER.fullmatch(g) and _INTEGER.fullmatch(a):
        return int(g) == int(a)
    return None


def _compare(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(_wrap(gold), parsing_timeout=None)
    answer_parsed = parse(_wrap(answer), parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return gold.strip() == answer.strip()
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


def serve_worker() -> None:
    """A math worker's main loop: JSON lines [gold, answer] in, [kind, value] out (main thread)."""
    import json
    import logging
    import sys

    import math_verify  # noqa: F401  (import once, before the first request)

    logging.disable(logging.WARNING)  # "timeout is disabled": the parent kills overruns
    sys.stdout.write("ready\n")
    sys.stdout.flush()

    for line in sys.stdin:
        gold, answer = json.loads(line)
        try:
            reply = ["ok", _compare(gold, answer)]
        except Exception as e:  # math-verify raises many kinds on odd input: that is not AC
            reply = ["error", f"{type(e).__name__}: {e}"]
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _gold_answer(gold: str) -> str:
    """The gold answer to compare with: extracted when the gold is a worked solution."""
    extracted = extract_answer(gold, "auto") if "####" in gold or "\\boxed" in gold else gold
    return extracted or gold


def _verdict(answer: str, equal: bool | None, message: str = "") -> Verdict:
    from rlx_verifier.judge import Verdict

    extra = {"extracted": answer[:200]}
    if equal:
        return Verdict(status="AC", score=1.0, extra=extra)
    return Verdict(status="WA", score=0.0, message=message or "different answer", extra=extra)


def _no_answer() -> Verdict:
    from rlx_verifier.judge import Verdict

    return Verdict(status="WA", score=0.0, message="no answer found in the response")


def quick_verdict(response: str, gold: str, *, extractor: str = "auto") -> Verdict | None:
    """The verdict when it needs no math-verify (no answer in the response, or two plain
    integers): microseconds, in the caller's thread. None: ask a math worker."""
    answer = extract_answer(response, extractor)
    if answer is None:
        return _no_answer()
    equal = integers_equal(_gold_answer(gold), answer)
    return None if equal is None else _verdict(answer, equal)


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from rlx_verifier.math_answers import serve_worker as s; s()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.warm = False  # has said "ready" (math-verify imported)

    def ask(self, gold: str, answer: str, timeout_s: float) -> list[Any] | None:
        """The reply, or None when the worker overran `timeout_s` or died."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.warm:  # wait (longer) for the import of math-verify
            ready, _, _ = select.select([self.proc.stdout], [], [], 120.0)
            if not ready or self.proc.stdout.readline() != "ready\n":
                return None
            self.warm = True
        self.proc.stdin.write(json.dumps([gold, answer]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            return None
        reply: list[Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class MathPool:
    """`size` worker processes; a comparison that overruns `timeout_s` kills its worker."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for _ in range(max(1, size)):
            self._idle.put(_Worker())
        self._closed = False

    def compare(self, gold: str, answer: str) -> tuple[bool | None, str]:
        """(equal, message); equal is None when the comparison overran or failed."""
        quick = integers_equal(gold, answer)
        if quick is not None:  # two plain integers: no worker round trip
            return quick, ""
        worker = self._idle.get()
        try:
            try:
                reply = worker.ask(gold, answer, self.timeout_s)
            except (OSError, ValueError):
                reply = None
            if reply is None:
                worker.kill()
                worker = _Worker()
                return None, f"comparison took longer than {self.timeout_s:g} s or crashed"
            if reply[0] == "ok":
                return bool(reply[1]), ""
            return None, str(reply[1])
        finally:
            self._idle.put(worker)

    def judge(self, response: str, gold: str, *, extractor: str = "auto") -> Verdict:
        answer = extract_answer(response, extractor)
        if answer is None:
            return _no_answer()
        equal, message = self.compare(_gold_answer(gold), answer)  # plain integers: no worker
        return _verdict(answer, equal, message)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return
