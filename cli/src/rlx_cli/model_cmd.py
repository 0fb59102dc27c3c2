"""`rlx model score` and `rlx model generate`: run a checkpoint directly, without services.

JAX and rlx_model are imported inside the commands, so `rlx --help` stays fast and JAX-free.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from rlx_cli.terminal import escape, one_line
from rlx_core.errors import InvalidArgument, RlxError

__all__ = ["model_app"]

model_app = typer.Typer(
    help="Score and sample with a model checkpoint (HF directory: config.json + safetensors).",
    no_args_is_help=True,
)

_BUCKET = 64  # sequence lengths are padded to a multiple of this, so few shapes get compiled


def _fail(message: str) -> None:
    typer.echo("rlx model: " + one_line(message), err=True)
    raise typer.Exit(2)


def _load(checkpoint: Path, dtype: str) -> tuple[Any, Any, Any]:
    from rlx_model import load_checkpoint, load_tokenizer

    cfg, params = load_checkpoint(checkpoint, param_dtype=dtype, compute_dtype=dtype)
    return cfg, params, load_tokenizer(checkpoint)


def _ids_of(record: dict[str, Any], key: str, tokenizer: Any, where: str) -> list[int]:
    if f"{key}_ids" in record:
        ids = record[f"{key}_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise InvalidArgument(f"{where}: {key}_ids must be a list of integers")
        return ids
    if key in record:
        if tokenizer is None:
            raise InvalidArgument(
                f"{where}: {key!r} is text but the checkpoint has no tokenizer.json; "
                f"give {key}_ids instead"
            )
        return list(tokenizer.encode(record[key], add_special_tokens=False))
    raise InvalidArgument(f"{where}: needs {key}_ids (or {key} with a tokenizer)")


@model_app.command()
def score(
    checkpoint: Path = typer.Argument(..., help="HF checkpoint directory."),
    input: Path = typer.Option(
        ...,
        "--input",
        help='JSONL: {"prompt_ids": [...], "completion_ids": [...]} or {"prompt", "completion"}.',
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    dtype: str = typer.Option("float32", help="float32 or bfloat16 (params and compute)."),
) -> None:
    """Log-probability of each completion token given everything before it, one line per input:
    {"logprobs": [...]}."""
    if dtype not in ("float32", "bfloat16"):
        _fail(f"--dtype must be float32 or bfloat16, got {dtype!r}")
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np

        from rlx_model import token_logprobs

        cfg, params, tokenizer = _load(checkpoint, dtype)
        scorer = jax.jit(token_logprobs, static_argnums=(1,))
        sink = open(output, "w") if output else sys.stdout  # noqa: SIM115 - stdout is not ours
        try:
            with open(input) as lines:
                for n, line in enumerate(lines, 1):
                    if not line.strip():
                        continue
                    where = f"{input}:{n}"
                    try:
                        record = json.loads(line)
                    except ValueError as e:
                        raise InvalidArgument(f"{where}: not JSON: {e}") from None
                    prompt = _ids_of(record, "prompt", tokenizer, where)
                    completion = _ids_of(record, "completion", tokenizer, where)
                    if not prompt or not completion:
                        raise InvalidArgument(f"{where}: prompt and completion must be non-empty")
                    seq = prompt + completion
                    bad = [i for i in seq if not 0 <= i < cfg.vocab_size]
                    if bad:
                        raise InvalidArgument(
                            f"{where}: ids {bad[:5]} outside the vocabulary [0, {cfg.vocab_size})"
                        )
                    length = -(-len(seq) // _BUCKET) * _BUCKET
                    tokens = np.zeros((1, length), np.int32)
                    tokens[0, : len(seq)] = seq
                    targets = np.roll(tokens, -1, axis=1)
                    logp, _ = scorer(params, cfg, jnp.asarray(tokens), jnp.asarray(targets))
                    start = len(prompt) - 1
                    values = np.asarray(logp[0, start : start + len(completion)])
                    sink.write(json.dumps({"logprobs": [float(v) for v in values]}) + "\n")
        finally:
            if sink is not sys.stdout:
                sink.close()
    except (RlxError, OSError) as e:
        _fail(str(e))


def _engine_for(cfg: Any, params: Any, positions: int, samples: int) -> Any:
    """An engine sized for one prompt: `samples` slots, a context of `positions` rounded up to a
    whole number of blocks, and just the cache memory that needs (the persistent compilation
    cache makes a second run start fast)."""
    from rlx_inference import Engine
    from rlx_inference.config import EngineConfig

    block = 16
    context = -(-positions // block) * block
    itemsize = 2 if cfg.compute_dtype == "bfloat16" else 4
    block_bytes = 2 * cfg.num_layers * block * cfg.num_kv_heads * cfg.head_dim * itemsize
    blocks = (context // block) * samples + 2
    cache_mib = max(1, -(-(blocks * block_bytes) // (1 << 20)))
    config = EngineConfig(
        slots=min(samples, 32),
        block_size=block,
        cache_mib=cache_mib,
        max_context=context,
        span_bucket=context,
        steps_per_call=4,
    )
    return Engine(cfg, params, config)


@model_app.command()
def generate(
    checkpoint: Path = typer.Argument(..., help="HF checkpoint directory."),
    prompt_ids: str | None = typer.Option(None, help="Comma-separated token ids: 1,2,3."),
    prompt: str | None = typer.Option(None, help="Prompt text (needs the checkpoint's tokenizer)."),
    max_new_tokens: int = typer.Option(..., min=1, help="How many tokens to generate at most."),
    greedy: bool = typer.Option(False, "--greedy", help="Always take the most likely token."),
    temperature: float = typer.Option(1.0, help="Sampling temperature, > 0."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling mass, (0, 1]."),
    top_k: int = typer.Option(0, help="Keep the k most likely tokens; 0 keeps all."),
    seed: int = typer.Option(0, help="Sampling seed (sample i draws with seed * 2^20 + i)."),
    samples: int = typer.Option(1, min=1, help="How many samples of the prompt."),
    stop_at_eos: bool = typer.Option(True, help="Stop at the checkpoint's EOS token."),
    dtype: str = typer.Option("float32", help="float32 or bfloat16."),
    json_output: bool = typer.Option(
        False,
        "--json",
        help='Print {"ids": [...], "text": ..., "logprobs": [...], "finish": ...} per sample.',
    ),
) -> None:
    """Generate continuations of a prompt, through the inference engine (paged KV cache,
    continuous batching), one line per sample."""
    if (prompt_ids is None) == (prompt is None):
        _fail("give exactly one of --prompt-ids and --prompt")
    if dtype not in ("float32", "bfloat16"):
        _fail(f"--dtype must be float32 or bfloat16, got {dtype!r}")
    try:
        from rlx_core.clients.inference import Sampling, WorkUnit, seeds_for

        cfg, params, tokenizer = _load(checkpoint, dtype)
        if prompt_ids is not None:
            try:
                ids = [int(x) for x in prompt_ids.split(",") if x.strip()]
            except ValueError:
                raise InvalidArgument(f"--prompt-ids must be integers: {prompt_ids!r}") from None
        else:
            if tokenizer is None:
                raise InvalidArgument(
                    f"{checkpoint} has no tokenizer.json; use --prompt-ids instead of --prompt"
                )
            ids = tokenizer.encode(prompt, add_special_tokens=False)
        if not ids:
            raise InvalidArgument("the prompt is empty")
        sampling = Sampling(greedy=greedy, temperature=temperature, top_p=top_p, top_k=top_k)
        stops = (tokenizer.stop_ids if tokenizer else cfg.eos_token_ids) if stop_at_eos else ()
        unit = WorkUnit(
            unit_id="cli",
            version=0,
            prompts=(tuple(ids),),
            samples_per_prompt=samples,
            sampling=sampling,
            seeds=seeds_for(seed, samples),
            max_new_tokens=max_new_tokens,
            stop_token_ids=tuple(stops),
        )
        unit.check(vocab_size=cfg.vocab_size, max_context=len(ids) + max_new_tokens)
        engine = _engine_for(cfg, params, len(ids) + max_new_tokens, samples)
        result = engine.generate(unit)
    except RlxError as e:
        _fail(str(e))
    for r in result.rollouts:
        out = list(r.token_ids)
        text = tokenizer.decode(out) if tokenizer is not None else None
        if json_output:
            record = {
                "ids": out,
                "text": text,
                "logprobs": list(r.sampler_logprobs),
                "finish": r.finish_reason,
            }
            typer.echo(json.dumps(record))
        else:
            # the model's text, escaped (`--json` gives it as it is)
            typer.echo(escape(text, newlines=True) if text is not None else ",".join(map(str, out)))
