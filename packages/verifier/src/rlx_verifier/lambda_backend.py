"""The AWS Lambda backend: samples go, as JSON, to a function whose handler is
`rlx_verifier.lambda_handler.handler` (the same runner as the local pool), through boto3.

An invocation that fails (the function raised, timed out, was throttled, or cannot be reached)
is retried `infra_retries` times; then its samples come back as INFRA with the reason and no
score, never as a 0.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlx_core.clients.verifier import SampleResult, VerifySample
from rlx_verifier.config import LambdaConfig

__all__ = ["LambdaBackend"]

log = logging.getLogger(__name__)


class LambdaBackend:
    def __init__(
        self, config: LambdaConfig, *, infra_retries: int = 2, client: Any | None = None
    ) -> None:
        """`client`: a boto3 Lambda client (default: a new one for `config.region`)."""
        self.config = config
        self.infra_retries = infra_retries
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.client(
                "lambda",
                region_name=config.region or None,
                config=Config(
                    read_timeout=config.timeout_s,
                    connect_timeout=10,
                    retries={"max_attempts": 0},  # retries are ours, counted as INFRA attempts
                    max_pool_connections=config.concurrency,
                ),
            )
        self.client = client
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="rlx-lambda")

    def verify(self, samples: Sequence[VerifySample]) -> list[SampleResult]:
        size = self.config.batch_size
        batches = [list(samples[i : i + size]) for i in range(0, len(samples), size)]
        return [r for batch in self._pool.map(self._invoke, batches) for r in batch]

    def _invoke(self, batch: list[VerifySample]) -> list[SampleResult]:
        from botocore.exceptions import BotoCoreError, ClientError

        payload = json.dumps({"op": "verify", "samples": [s.to_dict() for s in batch]}).encode()
        attempts = self.infra_retries + 1
        error = ""
        for attempt in range(1, attempts + 1):
            try:
                reply = self.client.invoke(
                    FunctionName=self.config.function_name,
                    InvocationType="RequestResponse",
                    Payload=payload,
                )
                body = reply["Payload"].read()
                if reply.get("FunctionError"):
                    error = f"function error ({reply['FunctionError']}): {body[:500]!r}"
                else:
                    return self._parse(batch, body)
            except (BotoCoreError, ClientError, ValueError, KeyError) as e:
                error = f"{type(e).__name__}: {e}"
            log.warning(
                "verifier: Lambda %s failed (attempt %d/%d): %s",
                self.config.function_name,
                attempt,
                attempts,
                error,
            )
        return [
            SampleResult(
                sample_id=s.sample_id,
                status="INFRA",
                score=None,
                error=f"AWS Lambda {self.config.function_name}: {error}",
                attempts=attempts,
            )
            for s in batch
        ]

    @staticmethod
    def _parse(batch: list[VerifySample], body: bytes) -> list[SampleResult]:
        data = json.loads(body)
        results = [SampleResult.from_dict(r) for r in data["results"]]
        if [r.sample_id for r in results] != [s.sample_id for s in batch]:
            raise ValueError(f"the function answered for {len(results)} other samples")
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True)
