"""The AWS Lambda entry point: `rlx_verifier.lambda_handler.handler`.

Events (JSON), answered with JSON:

    {"op": "verify", "samples": [VerifySample.to_dict(), ...]}  -> {"results": [SampleResult...]}
    {"op": "status"}                                            -> toolchains, sandbox, workers
    {"op": "clean", "root": "s3://bucket/tests"}                -> {"deleted": runs}

It runs the same runner as the local service on a `Verifier` made once per container, with test
data fetched by link and cached in /tmp. Settings come from the environment:
`RLX_VERIFIER_WORKERS` (concurrent samples; default the cores), `RLX_VERIFIER_CACHE_DIR`
(default a temporary directory), `RLX_VERIFIER_INFRA_RETRIES` (default 2), and
`RLX_VERIFIER_UNSAFE_NO_SANDBOX=1`: Lambda's Firecracker micro-VM has no user namespaces for
bubblewrap, so a function that runs one tenant's untrusted code per VM must say so explicitly
(the verifier warns on every request, as locally).
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from typing import Any

from rlx_core.clients.verifier import VerifySample
from rlx_core.errors import InvalidArgument
from rlx_verifier.config import JudgeConfig, RepositoryConfig
from rlx_verifier.judge import Verifier
from rlx_verifier.repository import Repositories
from rlx_verifier.runner import judge_sample

__all__ = ["handler", "reset"]

_state: dict[str, tuple[Verifier, Repositories]] = {}  # "runtime": one per container
_lock = threading.Lock()


def _runtime() -> tuple[Verifier, Repositories]:
    with _lock:
        if "runtime" not in _state:
            env = os.environ
            judge = JudgeConfig(
                workers=int(env.get("RLX_VERIFIER_WORKERS", "0")),
                unsafe_no_sandbox=env.get("RLX_VERIFIER_UNSAFE_NO_SANDBOX", "") == "1",
                infra_retries=int(env.get("RLX_VERIFIER_INFRA_RETRIES", "2")),
            )
            repos = Repositories(RepositoryConfig(cache_dir=env.get("RLX_VERIFIER_CACHE_DIR", "")))
            _state["runtime"] = (Verifier(judge), repos)
        return _state["runtime"]


def reset() -> None:
    """Close the container's verifier (tests; a new one is made on the next event)."""
    with _lock:
        runtime = _state.pop("runtime", None)
    if runtime is not None:
        runtime[0].close()
        runtime[1].close()


def handler(event: dict[str, Any], context: object = None) -> dict[str, Any]:
    """Lambda's entry point (see the module docstring for the events)."""
    op = event.get("op", "verify")
    verifier, repos = _runtime()
    if op == "verify":
        samples = [VerifySample.from_dict(s) for s in event.get("samples", [])]
        results = verifier.map(lambda s: judge_sample(verifier, repos, s), samples)
        return {"results": [r.to_dict() for r in results]}
    if op == "status":
        return {
            "toolchains": {n: lang.version for n, lang in verifier.languages.items()},
            "sandbox": verifier.sandbox.mode,
            "workers": verifier.workers,
            "judge": asdict(verifier.config),
        }
    if op == "clean":
        return {"deleted": repos.clean(str(event["root"]))}
    raise InvalidArgument(f"unknown op {op!r} (verify, status, clean)", field="op")
