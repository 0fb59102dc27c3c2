"""The verifier service's logic, as plain Python (no grpc here).

Backends: `local` owns one `Verifier` (bubblewrap sandbox, a pool of `workers` concurrent
samples, toolchains detected at start) and the test repositories; `lambda` sends the samples to
an AWS Lambda function running the same runner (`rlx_verifier.lambda_handler`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import cast

from rlx_core.clients.verifier import SampleResult, TestLink, VerifierStatus, VerifySample
from rlx_core.lifecycle import Lifecycle
from rlx_verifier._version import __version__
from rlx_verifier.config import VerifierConfig
from rlx_verifier.judge import Verdict, Verifier
from rlx_verifier.lambda_backend import LambdaBackend
from rlx_verifier.repository import Repositories
from rlx_verifier.runner import PhaseOne, check_outputs, judge_sample, quick_result, run_outputs
from rlx_verifier.sandbox import Cancel, cancelled_by

__all__ = ["VerifierService"]


class VerifierService:
    """Owns the verifier's state and its lifecycle."""

    def __init__(self, config: VerifierConfig, *, lambda_client: object | None = None) -> None:
        """`lambda_client`: a boto3 Lambda client to use instead of a new one (tests stub it)."""
        self.config = config
        self.lifecycle = Lifecycle("verifier", __version__)
        self.verifier: Verifier | None = None
        self.backend: LambdaBackend | None = None
        self.repos = Repositories(config.repository)
        if config.backend == "lambda":
            self.backend = LambdaBackend(
                config.aws_lambda, infra_retries=config.judge.infra_retries, client=lambda_client
            )
        else:
            self.verifier = Verifier(config.judge)
        self._lock = threading.Lock()
        self._queued = 0
        self._running = 0
        self._judged = 0
        v = self.verifier
        self.lifecycle.info.update(
            {
                "backend": config.backend,
                "languages": ",".join(sorted(v.languages)) if v else "",
                "sandbox": v.sandbox.mode if v else "lambda",
                "bwrap": v.sandbox.bwrap_description if v else "",
                "workers": str(v.workers if v else config.aws_lambda.concurrency),
                **(
                    {f"toolchain.{n}": lang.version for n, lang in v.languages.items()} if v else {}
                ),
            }
        )

    # --- Verify -----------------------------------------------------------------------------
    def verify(
        self, samples: Sequence[VerifySample], *, cancel: Cancel | None = None
    ) -> list[SampleResult]:
        """One result per sample, in order (INFRA and ERROR results carry no score). Once
        `cancel` is set (the caller gave up) the samples' sandboxed runs are killed and the
        samples not judged yet are skipped: their results (ERROR, Cancelled) reach no one."""
        with self._lock:
            self._queued += len(samples)
        try:
            if self.backend is not None:
                with self._counting(len(samples)):
                    return self.backend.verify(samples)
            verifier = self.verifier
            assert verifier is not None
            results = [quick_result(s) for s in samples]  # plain-integer math: inline
            rest = [i for i, r in enumerate(results) if r is None]
            with self._lock:
                self._queued -= len(samples) - len(rest)
            judged = verifier.map(lambda s: self._one(s, cancel), [samples[i] for i in rest])
            for i, r in zip(rest, judged, strict=True):
                results[i] = r
            return cast(list[SampleResult], results)  # every entry is filled now
        finally:
            with self._lock:
                self._judged += len(samples)

    def _one(self, sample: VerifySample, cancel: Cancel | None) -> SampleResult:
        assert self.verifier is not None
        with self._counting(1), cancelled_by(cancel):
            if cancel is not None and cancel.is_set():
                error = "Cancelled: the request was cancelled or ran out of time"
                return SampleResult(
                    sample_id=sample.sample_id, status="ERROR", score=None, error=error
                )
            return judge_sample(self.verifier, self.repos, sample)

    class _Count:
        def __init__(self, service: VerifierService, n: int) -> None:
            self.service, self.n = service, n

        def __enter__(self) -> None:
            with self.service._lock:
                self.service._queued -= self.n
                self.service._running += self.n

        def __exit__(self, *exc: object) -> None:
            with self.service._lock:
                self.service._running -= self.n

    def _counting(self, n: int) -> VerifierService._Count:
        return VerifierService._Count(self, n)

    # --- the two Oubliette phases, separately -----------------------------------------------
    def run_outputs(
        self,
        language: str,
        code: str,
        inputs: Sequence[str],
        *,
        time_limit_s: float = 2.0,
        memory_mb: int = 256,
        partial_credit: bool = False,
    ) -> PhaseOne:
        """Phase 1: outputs of `code` on the input links, stored under a transient prefix."""
        return run_outputs(
            self._local(),
            self.repos,
            language,
            code,
            inputs,
            time_limit_s=time_limit_s,
            memory_mb=memory_mb,
            partial_credit=partial_credit,
        )

    def check_outputs(
        self,
        phase: PhaseOne,
        tests: Sequence[TestLink],
        *,
        checker: str = "",
        comparator: str = "",
        partial_credit: bool = False,
    ) -> Verdict:
        """Phase 2: only the verdict of phase 1's outputs against the tests."""
        return check_outputs(
            self._local(),
            self.repos,
            phase,
            tests,
            checker=checker,
            comparator=comparator,
            partial_credit=partial_credit,
        )

    def clean_transient(self, root: str) -> int:
        """Delete the expired phase-1 outputs of the repository `root`; how many runs."""
        return self.repos.clean(root)

    def _local(self) -> Verifier:
        if self.verifier is None:
            from rlx_core.errors import FailedPrecondition

            raise FailedPrecondition("the phases run only on the local backend")
        return self.verifier

    # --- Status -----------------------------------------------------------------------------
    def status(self) -> VerifierStatus:
        v = self.verifier
        with self._lock:
            queued, running, judged = self._queued, self._running, self._judged
        return VerifierStatus(
            toolchains={n: lang.version for n, lang in v.languages.items()} if v else {},
            sandbox=v.sandbox.mode if v else "lambda",
            sandboxed=not v.sandbox.unsafe if v else True,
            workers=v.workers if v else self.config.aws_lambda.concurrency,
            queued=queued,
            running=running,
            backend=self.config.backend,
            judged=judged,
            cache_entries=len(v._cache) if v else 0,
            infra_retries=self.config.judge.infra_retries,
            bwrap=v.sandbox.bwrap_description if v else "",
        )

    def close(self) -> None:
        if self.verifier is not None:
            self.verifier.close()
        if self.backend is not None:
            self.backend.close()
        self.repos.close()
