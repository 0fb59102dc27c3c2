"""Code rewards through the controller's scoring path and the real verifier (bubblewrap sandbox):
a code prompt's program is run against its tests, never compared as a math answer; a response
without a program scores 0 without reaching the verifier; and the reward hacks a policy could
learn (exiting early, always-equal objects, printing the visible example's answer) score 0 on
stdin/stdout and assert-style problems alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlx_controller.driver import Driver
from rlx_controller.scoring import score_responses
from rlx_core.clients.inference import GenerateResult, Rollout
from rlx_core.clients.verifier import VerifySample
from rlx_core.configs.run import loads_run_config
from rlx_core.rollout import RolloutUnit
from rlx_data import base_model_dir
from rlx_launch import open_services
from rlx_verifier.config import JudgeConfig, VerifierConfig
from rlx_verifier.service import VerifierService

SUM_PROMPT = (
    "Read two integers a and b from one line and print a + b.\nExample input: 2 3\n"
    "Example output: 5"
)
# hidden tests: none of them is the visible example
SUM_TESTS = [{"input": "10 20\n", "output": "30\n"}, {"input": "-4 9\n", "output": "5\n"}]
DOUBLE_PROMPT = "Write f(x) returning 2 * x. Example: f(2) == 4"
DOUBLE_HARNESS = "assert f(5) == 10\nassert f(-3) == -6\nassert f(0) == 0\n"

RIGHT_SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
RIGHT_DOUBLE = "```python\ndef f(x):\n    return 2 * x\n```"
EXIT = "```python\nimport sys; sys.exit(0)\n```"
OS_EXIT = "```python\nimport os; os._exit(0)\n```"  # skips even the interpreter's exit hooks
EXAMPLE_ONLY = "```python\nprint(5)\n```"  # the visible example's output
ALWAYS_EQUAL = (
    "```python\nclass Any:\n    def __eq__(self, other):\n        return True\n"
    "    def __ne__(self, other):\n        return False\n\ndef f(x):\n    return Any()\n```"
)
EXAMPLE_DOUBLE = "```python\ndef f(x):\n    return 4\n```"  # right on the visible example only


def _driver(tmp_path: Path) -> Driver:
    rows = [{"prompt": SUM_PROMPT, "tests": SUM_TESTS}]
    (tmp_path / "stdio.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = [{"prompt": DOUBLE_PROMPT, "harness": DOUBLE_HARNESS}]
    (tmp_path / "assert.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "math.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    text = f"""
run_dir = {json.dumps(str(tmp_path / "run"))}
steps = 1
[model]
path = {json.dumps(str(base_model_dir()))}
[[datasets]]
name = "math"
path = {json.dumps(str(tmp_path / "math.jsonl"))}
[[datasets]]
name = "stdio"
path = {json.dumps(str(tmp_path / "stdio.jsonl"))}
reward = "code"
[[datasets]]
name = "partial"
path = {json.dumps(str(tmp_path / "stdio.jsonl"))}
reward = "code"
partial_credit = true
[[datasets]]
name = "assert"
path = {json.dumps(str(tmp_path / "assert.jsonl"))}
reward = "code"
harness_field = "harness"
[batch]
prompts = 1
group_size = 1
max_prompt_tokens = 200
max_new_tokens = 8
"""
    return Driver(
        loads_run_config(text), tmp_path / "run", open_services=open_services, log=lambda _m: None
    )


@pytest.fixture(scope="module")
def service() -> Iterator[VerifierService]:
    s = VerifierService(VerifierConfig(judge=JudgeConfig(workers=2, math_workers=1)))
    yield s
    s.close()


def _score(
    d: Driver, service: VerifierService, dataset: str, responses: list[str]
) -> tuple[list[Any], list[VerifySample]]:
    """The verdicts on `responses` to `dataset`'s first prompt, and what reached the verifier."""
    sent: list[VerifySample] = []

    def verify(samples: list[VerifySample], key: int) -> list[Any]:
        sent.extend(samples)
        return service.verify(samples)

    prompt = d.datasets[dataset].prompt(0)
    return score_responses("u", [prompt], responses, lambda s: verify(s, 0), lambda _m: None), sent


@pytest.mark.integration
def test_code_prompts_run_in_the_sandbox_and_hacks_score_zero(
    tmp_path: Path, service: VerifierService
) -> None:
    d = _driver(tmp_path)

    responses = [RIGHT_SUM, EXIT, OS_EXIT, EXAMPLE_ONLY, "a + b", "```py"]
    got, sent = _score(d, service, "stdio", responses)
    assert [(v.status, v.score) for v in got] == [
        ("AC", 1.0),
        ("WA", 0.0),  # exits before printing anything
        ("WA", 0.0),
        ("WA", 0.0),  # the visible example's answer fails the hidden tests
        ("NO_CODE", 0.0),  # no fenced block
        ("NO_CODE", 0.0),  # an unclosed one
    ]
    # only the four programs reached the sandbox, as stdin/stdout samples with the tests
    assert [(s.kind, s.language) for s in sent] == [("stdio", "python")] * 4
    assert all(len(s.tests) == 2 for s in sent)
    assert "no program" in got[4].message

    responses = [RIGHT_DOUBLE, EXIT, OS_EXIT, ALWAYS_EQUAL, EXAMPLE_DOUBLE]
    got, _ = _score(d, service, "assert", responses)
    assert [v.score for v in got] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert got[0].status == "AC" and all(v.status in ("RE", "WA") for v in got[1:])
    # the judge, a process of its own, sees the candidate's process end before the tests
    assert "the candidate's process ended" in got[2].tests[0].stderr
    # only plain data crosses back from the candidate's process
    assert "returned a __main__.Any, not plain data" in got[3].tests[0].stderr

    # partial credit: the fraction of tests passed (a program right on the second test only)
    second_only = "```python\ninput()\nprint(5)\n```"
    got, sent = _score(d, service, "partial", [RIGHT_SUM, second_only])
    assert [(v.status, v.score) for v in got] == [("AC", 1.0), ("WA", 0.5)]
    assert all(s.partial_credit for s in sent) and len(got[1].tests) == 2

    # a math prompt in the same run is still a math comparison
    got, sent = _score(d, service, "math", ["2", "3"])
    assert [(v.status, v.score) for v in got] == [("AC", 1.0), ("WA", 0.0)]
    assert [s.kind for s in sent] == ["math", "math"]


@pytest.mark.integration
def test_code_verdicts_are_logged_with_their_details(
    tmp_path: Path, service: VerifierService
) -> None:
    d = _driver(tmp_path)
    prompt = d.datasets["stdio"].prompt(0)
    texts = [RIGHT_SUM, EXAMPLE_ONLY, "```python\nprint(\n```", "nothing"]
    got, _ = _score(d, service, "stdio", texts)
    rollouts = tuple(
        Rollout(
            prompt_index=0,
            sample_index=g,
            token_ids=(1, 2),
            sampler_logprobs=(-0.5, -0.25),
            model_logprobs=(-0.5, -0.25),
            finish_reason="stop",
            versions=(3, 3),
        )
        for g in range(4)
    )
    result = GenerateResult(
        unit_id="u", version=3, rollouts=rollouts, generated_tokens=8, elapsed_s=0.1
    )
    record = RolloutUnit.of(
        {"unit_id": "u"},
        prompts=[prompt.id],
        prompt_ids=[(1, 2)],
        result=result,
        texts=texts,
        verdicts=got,
        tests_total=[prompt.code.total_tests if prompt.code else 0],
        verify_s=0.25,
    )
    again = RolloutUnit.from_bytes(record.to_bytes())
    assert again == record and again.verify_s == 0.25
    ac, wa, syntax, none = (s.judgement for s in again.groups[0].samples)
    assert (ac.tests_passed, ac.tests_total, ac.first_failed) == (2, 2, None)
    assert (wa.tests_passed, wa.tests_total, wa.first_failed) == (0, 2, 0)
    assert again.groups[0].samples[2].status in ("RE", "CE")
    assert "SyntaxError" in (syntax.compile_output + again.groups[0].samples[2].text + str(got[2]))
    assert (none.tests_total, none.tests_passed, none.first_failed) == (2, 0, None)
    assert "no program" in none.message
