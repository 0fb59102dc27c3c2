"""The checks every config class shares: a lower bound on numeric fields, and the "did you mean"
hint of a word that is not one of the choices.

    at_least(self, 1, "workers", "slots")       # ConfigError: workers: must be >= 1 (got 0)
    suggest("grop", PRESETS)                    # "did you mean 'grpo'?", or "" when none is close
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from rlx_core.errors import ConfigError

__all__ = ["at_least", "suggest"]


def at_least(owner: object, minimum: float, *names: str, prefix: str = "") -> None:
    """Raise `must be >= minimum` for the first of the fields `names` of `owner` below `minimum`
    (unset ones, None, are not checked), naming it as `prefix + name`."""
    for name in names:
        value = getattr(owner, name)
        if value is not None and value < minimum:
            raise ConfigError(f"must be >= {minimum:g}", field=prefix + name, value=value)


def suggest(word: str, choices: Iterable[str]) -> str:
    """`did you mean 'x'?` for the closest choice and those `word` begins (case-insensitive), or
    "" when none is close."""
    by_lower = {c.lower(): c for c in choices}
    low = word.lower()
    close = difflib.get_close_matches(low, list(by_lower), n=1, cutoff=0.6)
    close += [c for c in by_lower if low and c.startswith(low) and c not in close]
    if not close:
        return ""
    return "did you mean " + " or ".join(repr(by_lower[c]) for c in close[:3]) + "?"
