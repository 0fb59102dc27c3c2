"""Every prompt's token ids, computed once, with the run's own tokenizer.

A prompt of a dataset with `chat_template = true` (the default) is its chat turns rendered with
the checkpoint's chat template (`add_generation_prompt=True`) and encoded as is; one with
`chat_template = false` is its template text encoded with the tokenizer's own rules. The ids
are what the work units carry, what the rollout log records and what the trainer's batch holds:
nothing after this point tokenizes again.

    table = PromptIds(tokenizer, datasets, max_tokens=cfg.batch.max_prompt_tokens, log=print)
    table.ids("gsm8k", 17)        # (151644, 872, ...)
    table.fitting("gsm8k")        # the rows whose prompt fits in max_tokens

A prompt longer than `batch.max_prompt_tokens` cannot be generated from; such rows are left
out of the mixture (and of evaluation), counted and logged once at start, as verl's
`filter_overlong_prompts` does. Encoding shows progress on a dataset that takes a while.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from rlx_core.errors import ConfigError, InvalidArgument
from rlx_core.tokenizer import Tokenizer
from rlx_data import Dataset, Prompt

__all__ = ["PromptIds", "prompt_ids"]

_PROGRESS_S = 5.0  # seconds between progress lines while a large dataset is encoded


def prompt_ids(tokenizer: Tokenizer, prompt: Prompt) -> tuple[int, ...]:
    """The ids the model generates `prompt`'s answers from."""
    if prompt.chat:
        return tuple(tokenizer.prompt_ids(prompt.messages, chat=True))
    return tuple(tokenizer.prompt_ids(prompt.text, chat=False))


class PromptIds:
    """The ids of every row of the given datasets, and which rows fit in `max_tokens`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        datasets: Mapping[str, Dataset],
        *,
        max_tokens: int,
        field_path: str = "datasets",
        log: Callable[[str], None] = print,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self._ids: dict[str, list[tuple[int, ...]]] = {}
        self._fitting: dict[str, list[int]] = {}
        for i, (name, ds) in enumerate(datasets.items()):
            where = f"{field_path}[{i}]"
            self._ids[name] = self._encode(ds, where, log)
            fits = [r for r, x in enumerate(self._ids[name]) if len(x) <= max_tokens]
            self._fitting[name] = fits
            left = len(ds) - len(fits)
            if not fits:
                longest = min(len(x) for x in self._ids[name])
                raise ConfigError(
                    f"none of {name!r}'s {len(ds)} prompts fits in batch.max_prompt_tokens = "
                    f"{max_tokens} (the shortest has {longest} tokens)",
                    field="batch.max_prompt_tokens",
                    value=max_tokens,
                )
            if left:
                log(
                    f"{name}: {left} of {len(ds)} prompts are longer than "
                    f"batch.max_prompt_tokens = {max_tokens} tokens and are left out"
                )

    def _encode(self, ds: Dataset, where: str, log: Callable[[str], None]) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        start = shown = time.monotonic()
        for row in range(len(ds)):
            prompt = ds.prompt(row)
            try:
                out.append(prompt_ids(self.tokenizer, prompt))
            except InvalidArgument as e:
                raise ConfigError(f"{ds.name} row {row}: {e}", field=where) from None
            now = time.monotonic()
            if now - shown >= _PROGRESS_S:
                shown = now
                log(f"tokenizing {ds.name}: {row + 1}/{len(ds)} prompts ({now - start:.0f} s)")
        return out

    def ids(self, dataset: str, row: int) -> tuple[int, ...]:
        """The prompt ids of `row` of `dataset`."""
        return self._ids[dataset][row]

    def fitting(self, dataset: str) -> list[int]:
        """The rows of `dataset` whose prompt fits in max_tokens."""
        return self._fitting[dataset]
