"""A checkpoint's own tokenizer, without JAX: `tokenizer.json` through the `tokenizers` library,
the chat template (Jinja2, the semantics of transformers' `apply_chat_template`), the special
tokens and the ids that end generation.

    tok = load_tokenizer("models/qwen2.5-0.5b-instruct")     # a path, or s3:// / gs:// URI
    ids = tok.prompt_ids([{"role": "user", "content": "2+2?"}])   # rendered, then encoded
    ids = tok.prompt_ids("Q: 2+2?\\nA:", chat=False)          # plain text, the tokenizer's rules
    tok.stop_ids            # generation_config.json's eos_token_id(s) and the eos_token
    tok.decode(ids)         # special tokens left out

The files a checkpoint directory needs: `tokenizer.json`; `tokenizer_config.json` (its
`eos_token`, `bos_token`, `pad_token`, and the `chat_template` older checkpoints embed there);
`chat_template.jinja` (where transformers >= 4.51 saves the template; it wins over the embedded
one); `generation_config.json` (its `eos_token_id`, an id or a list of ids, says where
generation stops). Only tokenizer.json is required; a chat prompt needs a template.

Rendering follows transformers (`add_generation_prompt=True`, `tokenize=False`, then encoding
without adding special tokens, since the template writes them): a sandboxed, immutable Jinja2
environment with `trim_blocks`, `lstrip_blocks` and loop controls; `raise_exception`,
`strftime_now` and a `tojson` that keeps non-ASCII text. `strftime_now` answers with the
tokenizer's `now` (fixed when it is loaded, or given), so a resumed run renders the same
prompts as the run it continues. A template is bounded in time and size, and `|random` and
`lipsum` are refused (`rlx_core.chat_template`): a hostile one fails with an InvalidArgument
naming it instead of hanging or filling memory.

The `tokenizers` library panics (a `pyo3_runtime.PanicException`, a BaseException) on some
inputs, a tokenizer.json regex that exhausts its matcher for one; encoding and decoding turn any
such error into an InvalidArgument naming the tokenizer.json.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlx_core.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from rlx_core.chat_template import BoundedTemplate

__all__ = ["TOKENIZER_FILES", "Tokenizer", "load_tokenizer"]

# The files of a checkpoint directory that describe its tokenizer and generation (what `rlx
# export` copies next to the weights).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
)
# what a native call's error handler lets through: Ctrl-C and interpreter exit
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)
_MAX_JSON_INDENT = 64  # the largest `tojson(indent=...)` a chat template may ask for
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token")


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: "<s>" or {"content": "<s>", ...}."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any, field: str, source: str) -> tuple[int, ...]:
    """An id or a list of ids (generation_config.json's eos_token_id)."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
        raise InvalidArgument(f"{source}: {field} must be a token id or a list of ids: {value!r}")
    return tuple(items)


class Tokenizer:
    """The tokenizer of one checkpoint directory (see the module docstring)."""

    def __init__(
        self,
        tokenizer_json: str,
        *,
        config: Mapping[str, Any] | None = None,
        generation: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        source: str = "tokenizer",
        now: _dt.datetime | None = None,
    ) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        try:
            self._tok = _Tokenizer.from_str(tokenizer_json)
        except _PASS_THROUGH:
            raise
        except BaseException as e:  # the library's own Exception type, or a Rust panic
            raise InvalidArgument(f"{source}/tokenizer.json does not load: {e}") from None
        self.source = source
        self.config: dict[str, Any] = dict(config or {})
        self.generation: dict[str, Any] = dict(generation or {})
        template = chat_template or self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.now = now or _dt.datetime.now(_dt.UTC)
        self.vocab_size: int = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_tokens: dict[str, str] = {}
        for key in _SPECIAL_KEYS:
            text = _token_text(self.config.get(key))
            if text is not None:
                self.special_tokens[key] = text
        self.bos_token = self.special_tokens.get("bos_token")
        self.eos_token = self.special_tokens.get("eos_token")
        eos_id = self.token_id(self.eos_token) if self.eos_token else None
        stops = list(_ids(self.generation.get("eos_token_id"), "eos_token_id", source))
        if eos_id is not None and eos_id not in stops:
            stops.append(eos_id)
        for i in stops:
            if i >= self.vocab_size:
                raise InvalidArgument(
                    f"{source}/generation_config.json: eos_token_id {i} is outside the "
                    f"vocabulary ({self.vocab_size} tokens)"
                )
        # where generation stops: generation_config.json's ids first, then the eos_token
        self.stop_ids: tuple[int, ...] = tuple(stops)
        pad = self.special_tokens.get("pad_token")
        pad_id = self.token_id(pad) if pad else None
        # a filler id for padded positions (never attended to, never trained on)
        self.pad_id: int = pad_id if pad_id is not None else (stops[0] if stops else 0)
        self._template: BoundedTemplate | None = None

    @classmethod
    def from_dir(cls, directory: str, *, now: _dt.datetime | None = None) -> Tokenizer:
        """Load the tokenizer files of a checkpoint directory (a path or a URI)."""
        from rlx_core.storage import open_storage

        storage = open_storage(directory)

        def read(name: str) -> str | None:
            if not storage.exists(name):
                return None
            return storage.get(name).decode("utf-8")

        def read_json(name: str) -> dict[str, Any]:
            text = read(name)
            if text is None:
                return {}
            try:
                data = json.loads(text)
            except ValueError as e:
                raise InvalidArgument(f"{directory}/{name} is not valid JSON: {e}") from None
            if not isinstance(data, dict):
                raise InvalidArgument(f"{directory}/{name} must hold a JSON object")
            return data

        body = read("tokenizer.json")
        if body is None:
            raise NotFound(
                f"{directory} has no tokenizer.json: a checkpoint directory needs its tokenizer "
                "(tokenizer.json, tokenizer_config.json, generation_config.json)"
            )
        return cls(
            body,
            config=read_json("tokenizer_config.json"),
            generation=read_json("generation_config.json"),
            chat_template=read("chat_template.jinja"),
            source=directory,
            now=now,
        )

    # --- ids ------------------------------------------------------------------------------------
    def token_id(self, token: str) -> int | None:
        """The id of a token of the vocabulary (special tokens included), or None."""
        found = self._tok.token_to_id(token)
        return int(found) if found is not None else None

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Ids of `text`. With add_special_tokens the tokenizer's post-processor adds what the
        model expects around plain text (Llama's BOS, for one), as transformers' `encode` does."""
        try:
            return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)
        except _PASS_THROUGH:
            raise
        except BaseException as e:  # a Rust panic (pyo3_runtime.PanicException) included
            raise InvalidArgument(
                f"{self.source}/tokenizer.json fails to encode {text[:40]!r}: "
                f"{type(e).__name__}: {e}"
            ) from None

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The text of `ids`, special tokens (EOS, chat markers) left out by default."""
        try:
            return str(
                self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
            )
        except _PASS_THROUGH:
            raise
        except BaseException as e:  # a Rust panic (pyo3_runtime.PanicException) included
            raise InvalidArgument(
                f"{self.source}/tokenizer.json fails to decode: {type(e).__name__}: {e}"
            ) from None

    # --- chat -----------------------------------------------------------------------------------
    def _compiled(self) -> BoundedTemplate:
        if self._template is None:
            from rlx_core.chat_template import BoundedTemplate

            def raise_exception(message: str) -> None:
                raise InvalidArgument(f"{self.source}: chat template: {message}")

            def tojson(
                value: Any,
                ensure_ascii: bool = False,
                indent: int | None = None,
                separators: tuple[str, str] | None = None,
                sort_keys: bool = False,
            ) -> str:
                if indent is not None and not 0 <= indent <= _MAX_JSON_INDENT:
                    raise InvalidArgument(
                        f"{self.source}: chat template: tojson indent {indent} "
                        f"(0 to {_MAX_JSON_INDENT})"
                    )
                return json.dumps(
                    value,
                    ensure_ascii=ensure_ascii,
                    indent=indent,
                    separators=separators,
                    sort_keys=sort_keys,
                )

            def strftime_now(fmt: str) -> str:
                return self.now.strftime(fmt)

            self._template = BoundedTemplate(
                self.chat_template or "",
                source=self.source,
                globals={"raise_exception": raise_exception, "strftime_now": strftime_now},
                filters={"tojson": tojson},
            )
        return self._template

    def render(
        self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
    ) -> str:
        """The chat template applied to `messages` (transformers' `apply_chat_template(...,
        tokenize=False)`), within the bounds of `rlx_core.chat_template`."""
        if not self.chat_template:
            raise InvalidArgument(
                f"{self.source} has no chat template (tokenizer_config.json `chat_template` or "
                "chat_template.jinja): give the dataset `chat_template = false` and a `template`"
            )
        return self._compiled().render(
            messages=[dict(m) for m in messages],
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens,
        )

    def prompt_ids(
        self, prompt: str | Sequence[Mapping[str, Any]], *, chat: bool = True
    ) -> list[int]:
        """The ids a prompt is generated from: chat turns (or one text as the user's turn)
        rendered with the chat template and encoded as is (the template writes the special
        tokens), or, with chat=False, plain text encoded with the tokenizer's own rules."""
        if not chat:
            if not isinstance(prompt, str):
                raise InvalidArgument("a prompt without the chat template must be text")
            return self.encode(prompt, add_special_tokens=True)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return self.encode(self.render(messages), add_special_tokens=False)


def load_tokenizer(directory: str, *, now: _dt.datetime | None = None) -> Tokenizer:
    """`Tokenizer.from_dir(directory)`."""
    return Tokenizer.from_dir(directory, now=now)
