"""Gold answers as datasets write them: the final number of a GSM8K worked solution, the last
`\\boxed{}` of a MATH solution. Pure functions; None when the text holds no such answer.

    gsm8k_answer("She makes 9 * 2 = $18.\\n#### 18")       # "18"
    boxed_answer("so $x = \\\\boxed{\\\\frac{1}{2}}$.")      # "\\\\frac{1}{2}"
"""

from __future__ import annotations

import re

__all__ = ["ANSWER_FORMATS", "boxed_answer", "gold_answer", "gsm8k_answer"]

ANSWER_FORMATS = ("plain", "gsm8k", "math")

# GSM8K writes integers, some with thousands separators (#### 1,000) or a sign; a few
# derivatives write decimals or fractions.
_GSM8K_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:/\d+)?")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def gsm8k_answer(text: str) -> str | None:
    """The number after the final `####` of a GSM8K answer, commas removed: "... #### 1,000" ->
    "1000". None when there is no `####` or no number after it."""
    _, sep, tail = text.rpartition("####")
    if not sep:
        return None
    found = tail.strip().replace(",", "")
    return found if _GSM8K_NUMBER.fullmatch(found) else None


def boxed_answer(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (also `\\boxed {...}` and `\\fbox{...}`), braces
    balanced, stripped: "so \\boxed{\\frac{1}{2}}." -> "\\frac{1}{2}". Escaped braces (`\\{`,
    `\\}`) are text, not grouping. None when there is none or its braces never close."""
    starts = list(_BOXED.finditer(text))
    if not starts:
        return None
    begin = starts[-1].end()
    depth = 1
    i = begin
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2  # a control sequence's first character, e.g. the brace of \{, is not a group
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                found = text[begin:i].strip()
                return found or None
        i += 1
    return None


def gold_answer(text: str, answer_format: str) -> str | None:
    """The gold answer held by a dataset's answer field written in `answer_format` (one of
    ANSWER_FORMATS): "plain" is the text as it is."""
    if answer_format == "gsm8k":
        return gsm8k_answer(text)
    if answer_format == "math":
        return boxed_answer(text)
    if answer_format == "plain":
        return text
    raise ValueError(f"answer_format {answer_format!r} is not one of {', '.join(ANSWER_FORMATS)}")
