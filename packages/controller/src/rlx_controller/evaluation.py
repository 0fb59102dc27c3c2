"""Evaluation: greedy accuracy and sampled pass@k of a weight version on the eval datasets.

    samples = evaluate_version(runner, cfg, eval_sets, eval_ids, version, samples=8)
    samples = evaluate_model(cfg, work_dir, open_services=..., samples=8)  # `rlx eval`
    figures = summarize(samples, k=8)                         # per dataset: EvalSummary
    fields = metric_fields(samples, k=8)                      # {"heldout": ..., "eval/<d>/..."}

The figures per dataset (`summarize`): greedy accuracy (one greedy answer per prompt), pass@1 and
pass@k (the unbiased estimator of Chen et al. 2021 over the sampled answers, `pass_at_k`), avg@k
(the mean score of the sampled answers), the mean response length, and the count of every
verdict; `rlx eval` prints them as tables (rlx_cli.eval_cmd). A sample the verifier could not
judge (INFRA / ERROR: no score) is left out of every figure and counted apart, never as a
failure. `evaluate_version` generates and verifies the answers through a session of the run's
services and the unit runner (rlx_controller.units); its sampled seeds are a pure function of
(seed, dataset, row, sample), so a resumed run evaluates exactly as before. `evaluate_model`
(`rlx eval`) starts the services with `[model] path` as version 0 and evaluates it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlx_controller.inputs import eval_prompts, run_tokenizer
from rlx_controller.prompts import PromptIds
from rlx_controller.rundir import RunPaths
from rlx_controller.service_set import OpenServices
from rlx_controller.session import base_model_session
from rlx_controller.units import UnitRunner
from rlx_core.clients import Sampling
from rlx_core.clients.verifier import EXCLUDED
from rlx_core.configs.run import RunConfig
from rlx_core.rng import sample_seed
from rlx_data import Dataset, Prompt

__all__ = [
    "EvalSample",
    "EvalSummary",
    "evaluate_model",
    "evaluate_version",
    "heldout_accuracy",
    "heldout_figures",
    "metric_fields",
    "pass_at_k",
    "summarize",
]

SOLVED = 1.0  # a score at or above this solves the prompt (the training reward's full marks)
# answers in one sampled eval unit at most: a split of many prompts x k answers goes out in units
# of this size (well inside the workers' UnitLimits), round-robin over the workers
MAX_UNIT_SAMPLES = 4096


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n answers of which c are correct (Chen et al. 2021,
    "Evaluating Large Language Models Trained on Code", eq. 1): the chance that k answers drawn
    without replacement from the n hold at least one correct one,

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

    computed as the product, which stays exact-ish where the binomials overflow; 1 when
    n - c < k (every draw of k holds a correct answer). Needs 0 <= c <= n and 1 <= k <= n."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True, kw_only=True)
class EvalSample:
    """One answer to one eval prompt and its verdict (a line of `rlx eval --out`)."""

    dataset: str
    row: int
    prompt_id: str  # "<dataset>/<row>"
    sample: int  # index among the prompt's sampled answers; 0 for the greedy one
    greedy: bool  # the greedy answer (true) or a sampled one
    text: str  # the response as decoded and judged
    status: str  # the verifier's verdict: AC, WA, TLE, RE, CE, ..., INFRA, ERROR
    score: float | None  # None exactly when the sample could not be judged
    response_tokens: int
    finish_reason: str  # the engine's: "stop", "length", ...

    @property
    def excluded(self) -> bool:
        """Not judged (INFRA / ERROR): left out of every figure, never a failure."""
        return self.score is None or self.status in EXCLUDED

    @property
    def solved(self) -> bool:
        return not self.excluded and (self.score or 0.0) >= SOLVED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class EvalSummary:
    """The figures of one dataset; a figure is None when no sample of its kind was judged."""

    dataset: str
    prompts: int  # prompts evaluated
    k: int  # sampled answers per prompt the pass@k / avg@k figures are for; 0 = none
    greedy: float | None  # fraction of judged greedy answers that solve their prompt
    pass_at_1: float | None  # mean over prompts of c / n (sampled answers)
    pass_at_k: float | None  # mean over prompts with n >= k judged answers of pass_at_k(n, c, k)
    avg_at_k: float | None  # mean over prompts of the mean score of their judged sampled answers
    greedy_tokens: float | None  # mean response length of the greedy answers, in tokens
    sampled_tokens: float | None  # mean response length of the sampled answers, in tokens
    excluded: int  # answers not judged (INFRA / ERROR), in no figure
    short_prompts: int  # prompts left out of pass@k: fewer than k judged answers
    verdicts: dict[str, dict[str, int]] = field(default_factory=dict)  # greedy|sampled -> counts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(samples: Sequence[EvalSample], k: int = 0) -> dict[str, EvalSummary]:
    """The figures of each dataset (in first-seen order) from its samples: greedy accuracy from
    the greedy answers; from the sampled ones (n judged answers, c solved, per prompt) pass@1 =
    mean c / n, pass@k = mean `pass_at_k(n, c, k)` over the prompts with n >= k, avg@k = mean of
    each prompt's mean score; mean lengths; verdict counts per kind. k = 0: the number of sampled
    answers per prompt (the most any prompt has)."""
    by_ds: dict[str, list[EvalSample]] = {}
    for s in samples:
        by_ds.setdefault(s.dataset, []).append(s)
    out: dict[str, EvalSummary] = {}
    for name, group in by_ds.items():
        greedy = [s for s in group if s.greedy]
        sampled = [s for s in group if not s.greedy]
        per_prompt: dict[int, list[EvalSample]] = {}
        for s in sampled:
            per_prompt.setdefault(s.row, []).append(s)
        kk = (k or max(len(v) for v in per_prompt.values())) if per_prompt else 0
        p1, pk, avg = [], [], []
        short = 0
        for answers in per_prompt.values():
            judged = [s for s in answers if not s.excluded]
            n, c = len(judged), sum(s.solved for s in judged)
            if n:
                p1.append(c / n)
                avg.append(sum(s.score or 0.0 for s in judged) / n)
            if n >= kk > 0:
                pk.append(pass_at_k(n, c, kk))
            else:
                short += 1
        verdicts: dict[str, dict[str, int]] = {}
        for kind, these in (("greedy", greedy), ("sampled", sampled)):
            if these:
                counts: dict[str, int] = {}
                for s in these:
                    counts[s.status] = counts.get(s.status, 0) + 1
                verdicts[kind] = dict(sorted(counts.items()))
        judged_greedy = [s for s in greedy if not s.excluded]
        out[name] = EvalSummary(
            dataset=name,
            prompts=len({s.row for s in group}),
            k=kk,
            greedy=_mean([float(s.solved) for s in judged_greedy]),
            pass_at_1=_mean(p1),
            pass_at_k=_mean(pk),
            avg_at_k=_mean(avg),
            greedy_tokens=_mean([float(s.response_tokens) for s in greedy]),
            sampled_tokens=_mean([float(s.response_tokens) for s in sampled]),
            excluded=sum(s.excluded for s in group),
            short_prompts=short,
            verdicts=verdicts,
        )
    return out


def heldout_accuracy(samples: Sequence[EvalSample]) -> float | None:
    """Greedy accuracy over all datasets' judged greedy answers together (metrics' `heldout`)."""
    judged = [s for s in samples if s.greedy and not s.excluded]
    return sum(s.solved for s in judged) / len(judged) if judged else None


def metric_fields(samples: Sequence[EvalSample], k: int = 0) -> dict[str, float | None]:
    """The metrics-line fields of an evaluation: `heldout` and per dataset `eval/<name>/greedy`,
    and with sampled answers `eval/<name>/pass@1`, `eval/<name>/pass@<k>`, `eval/<name>/avg@<k>`."""
    out: dict[str, float | None] = {"heldout": heldout_accuracy(samples)}
    for name, s in summarize(samples, k).items():
        out[f"eval/{name}/greedy"] = s.greedy
        if s.k:
            out[f"eval/{name}/pass@1"] = s.pass_at_1
            out[f"eval/{name}/pass@{s.k}"] = s.pass_at_k
            out[f"eval/{name}/avg@{s.k}"] = s.avg_at_k
    return out


# --- through the services -------------------------------------------------------------------


def _eval_rows(cfg: RunConfig, eval_ids: PromptIds, ds: Dataset) -> list[int]:
    """The rows of an eval dataset that are evaluated: those whose prompt fits, the first
    `eval.max_prompts` of them (all when 0)."""
    rows = eval_ids.fitting(ds.name)
    cap = cfg.eval.max_prompts
    return rows[:cap] if cap else rows


def evaluate_version(
    runner: UnitRunner,
    cfg: RunConfig,
    eval_sets: Sequence[Dataset],
    eval_ids: PromptIds,
    version: int,
    *,
    greedy: bool = True,
    samples: int = 0,
    log: Callable[[str], None] | None = None,
) -> list[EvalSample]:
    """Generate and verify the answers of weight `version` to every eval prompt: one greedy
    answer per prompt (when `greedy`) and `samples` answers with the run's `[sampling]`, their
    seeds `sample_seed(seed, "eval", dataset index, row, sample)`. The prompts of a dataset are
    split into one unit per inference worker (sampled: into units of at most MAX_UNIT_SAMPLES
    answers, round-robin over the workers). `log`, when given, hears the progress."""
    W = max(1, runner.workers)
    s = cfg.sampling
    kinds: list[tuple[bool, int, Sampling]] = []  # (greedy, answers per prompt, sampling)
    if greedy:
        kinds.append((True, 1, Sampling(greedy=True)))
    if samples:
        kinds.append(
            (False, samples, Sampling(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k))
        )
    out: list[EvalSample] = []
    for d, ds in enumerate(eval_sets):
        rows = _eval_rows(cfg, eval_ids, ds)
        n = len(rows)
        if not n:
            continue
        for is_greedy, each, sampling in kinds:
            per = -(-n // W) if is_greedy else min(-(-n // W), max(1, MAX_UNIT_SAMPLES // each))
            chunks = [rows[i : i + per] for i in range(0, n, per)]
            what = "greedy" if is_greedy else f"{each} samples"
            t0 = time.monotonic()
            chunk = _Chunk(runner, cfg.seed, eval_ids, version, d, ds, is_greedy, each, sampling)
            with ThreadPoolExecutor(min(len(chunks), 2 * W)) as pool:
                for result in pool.map(chunk.run, range(len(chunks)), chunks):
                    out.extend(result)
            if log is not None:
                log(
                    f"eval v{version} {ds.name}: {n} prompts, {what} "
                    f"({time.monotonic() - t0:.1f} s)"
                )
    return out


@dataclass(frozen=True)
class _Chunk:
    """The units of one dataset and kind of answer (greedy or sampled) of an evaluation."""

    runner: UnitRunner
    seed: int
    eval_ids: PromptIds
    version: int
    d: int  # the dataset's index among the eval datasets
    ds: Dataset
    is_greedy: bool
    each: int  # answers per prompt
    sampling: Sampling

    def run(self, c: int, rows: list[int]) -> list[EvalSample]:
        """Chunk c (`rows`) as one unit with `each` answers per prompt through inference worker
        c mod W and the verifier."""
        ds, each = self.ds, self.each
        prompts: list[Prompt] = [ds.prompt(r) for r in rows]
        kind = "greedy" if self.is_greedy else "sampled"
        seeds = (
            tuple(range(len(rows)))
            if self.is_greedy
            else tuple(
                sample_seed(self.seed, "eval", self.d, r, g) for r in rows for g in range(each)
            )
        )
        unit = self.runner.gen_unit(
            f"eval.v{self.version}.{ds.name}.{kind}.{c}",
            self.version,
            [self.eval_ids.ids(ds.name, r) for r in rows],
            each,
            self.sampling,
            seeds,
        )
        judged = self.runner.run(c % max(1, self.runner.workers), unit, prompts, c)
        out = []
        for i, p in enumerate(prompts):
            for g in range(each):
                j = i * each + g
                v, r = judged.verdicts[j], judged.result.rollouts[j]
                out.append(
                    EvalSample(
                        dataset=ds.name,
                        row=p.row,
                        prompt_id=p.id,
                        sample=g,
                        greedy=self.is_greedy,
                        text=judged.texts[j],
                        status=v.status,
                        score=None if v.excluded else v.score,
                        response_tokens=len(r.token_ids),
                        finish_reason=r.finish_reason,
                    )
                )
        return out


def heldout_figures(
    runner: UnitRunner,
    cfg: RunConfig,
    eval_sets: Sequence[Dataset],
    eval_ids: PromptIds,
    version: int,
) -> dict[str, float | None] | None:
    """The held-out figures of `version` as metrics-line fields (`metric_fields`): `heldout`
    (greedy accuracy over all eval datasets), per dataset `eval/<name>/greedy` and, with
    `eval.samples` > 0, its pass@1, pass@k and avg@k. None without eval datasets."""
    if not eval_sets:
        return None
    k = cfg.eval.samples
    return metric_fields(evaluate_version(runner, cfg, eval_sets, eval_ids, version, samples=k), k)


def evaluate_model(
    cfg: RunConfig,
    work_dir: str | Path,
    *,
    open_services: OpenServices,
    samples: int = 0,
    log: Callable[[str], None] = print,
) -> list[EvalSample]:
    """`rlx eval`: start the services (their files in `work_dir`), load `[model] path` as
    version 0, and return its `EvalSample`s on the eval datasets (a greedy answer per prompt
    and `samples` sampled ones); the services stop at the end."""
    paths = RunPaths.of(work_dir, None)
    paths.work.mkdir(parents=True, exist_ok=True)
    tokenizer = run_tokenizer(cfg, paths.storage)
    eval_sets, eval_ids = eval_prompts(cfg, tokenizer, log)
    with base_model_session(cfg, paths, open_services, log=log) as session:
        runner = UnitRunner(session, tokenizer, max_new_tokens=cfg.batch.max_new_tokens, log=log)
        return evaluate_version(runner, cfg, eval_sets, eval_ids, 0, samples=samples, log=log)
