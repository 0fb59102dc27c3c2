"""Scoring one unit's responses: the verifier sample of each, one Verify call, and a verdict
per response, whatever the verifier makes of them (training, evaluation and pre-filtering).

    verdicts = score_responses(unit_id, prompts, texts, verify, log)

A math prompt's response is compared with its gold answer; a code prompt's program (its
dataset's `program` rule) is run against its tests, and a response without one scores 0 as
NO_CODE without reaching the verifier. Scoring never raises on a sample: one that cannot be
sent, or that the verifier refuses (InvalidArgument: a limit over its caps, a bad link), is an
ERROR verdict (no score: left out of training, counted in the step's `verifier_errors`), and
every verdict without a score is named in the controller log with its prompt and the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlx_core.clients.verifier import EXCLUDED, SampleResult, VerifySample
from rlx_core.errors import InvalidArgument
from rlx_data import Prompt, no_code_result

__all__ = ["refused", "score_responses"]

Verify = Callable[[list[VerifySample]], list[SampleResult]]


def refused(sample_id: str, why: str) -> SampleResult:
    """The verdict of a sample the verifier would not (or did not) judge: ERROR, no score."""
    return SampleResult(sample_id=sample_id, status="ERROR", score=None, error=why)


def _sample(p: Prompt, sample_id: str, text: str) -> VerifySample | SampleResult:
    """The verifier sample judging `text`, or the verdict it has without one (NO_CODE, or
    ERROR when no sample can be made of it)."""
    try:
        if p.code is None:
            return VerifySample.math(sample_id, text, p.answer or "", extractor=p.math_extractor)
        sample = p.code.sample(sample_id, text)
    except (InvalidArgument, ValueError) as e:
        return refused(sample_id, f"the sample cannot be sent: {e}")
    if sample is None:
        return no_code_result(sample_id, p.code.language, p.code.program)
    return sample


def _verified(samples: list[VerifySample], verify: Verify) -> list[SampleResult]:
    """verify(samples); when the call as a whole is refused (a sample the client cannot encode,
    or one the server rejects), each sample alone, so only the refused ones are ERROR."""
    try:
        return verify(samples)
    except (InvalidArgument, ValueError) as e:
        if len(samples) == 1:
            return [refused(samples[0].sample_id, f"the verifier refused it: {e}")]
    return [r for s in samples for r in _verified([s], verify)]


def score_responses(
    unit_id: str,
    prompts: Sequence[Prompt],
    texts: Sequence[str],
    verify: Verify,
    log: Callable[[str], None],
) -> list[SampleResult]:
    """The verdict on every response of a unit: texts[i * G + g] answers prompts[i]; sample ids
    are `<unit_id>/<i>/<g>`. Verdicts without a score are logged, one line per prompt."""
    G = len(texts) // len(prompts)
    results: list[SampleResult | VerifySample] = [
        _sample(p, f"{unit_id}/{i}/{g}", texts[i * G + g])
        for i, p in enumerate(prompts)
        for g in range(G)
    ]
    slots = [k for k, r in enumerate(results) if isinstance(r, VerifySample)]
    if slots:
        samples = [r for r in results if isinstance(r, VerifySample)]
        for k, verdict in zip(slots, _verified(samples, verify), strict=True):
            results[k] = verdict
    verdicts = [r for r in results if isinstance(r, SampleResult)]
    assert len(verdicts) == len(results), "every sample has its verdict"
    for i, p in enumerate(prompts):
        unjudged = [v for v in verdicts[i * G : (i + 1) * G] if v.status in EXCLUDED]
        if unjudged:
            first = unjudged[0]
            log(
                f"{p.id} (unit {unit_id}): {len(unjudged)} of {G} samples not judged, left out "
                f"of training: {first.status}: {first.error or first.message}"
            )
    return verdicts
