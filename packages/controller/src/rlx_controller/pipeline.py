"""The generation pipeline of the loop: the schedule's work units go out to the inference
workers ahead of training, their rollouts come back scored and logged, and each batch is
gathered (after dynamic sampling's refills) and built while the batch before it trains.

    pipe = Pipeline(cfg, schedule, units, build, first=step, stop=stop_event)
    pipe.dispatch(b)                    # every batch whose version exists (runs ahead by lag)
    batch, info, refill = pipe.batch(b) # gathered and built ahead, or now
    pipe.prepare_ahead(b)               # batch b+1, gathered while b trains
    pipe.trained(b); pipe.dispatch(new_version)
    pipe.close(stopped)

One generation thread and queue per worker, so a worker's next unit starts the moment its
current one ends (from one shared pool a freed thread took the next unit in dispatch order, and
a worker sat idle until the units queued before its own had been taken), and a small pool that
scores and logs what comes back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rlx_controller.batching import uniform
from rlx_controller.schedule import Schedule, WorkUnit, budget_prompts, refill_count
from rlx_controller.units import TrainingUnits
from rlx_core.clients import TrainBatch
from rlx_core.configs.run import RunConfig
from rlx_core.rollout import RolloutUnit

__all__ = ["Pipeline", "Stop"]

Prepared = tuple[TrainBatch, dict[str, Any], dict[str, Any]]  # batch, its figures, refill cost


class Stop(Exception):
    """SIGTERM / Ctrl-C / a stop request: snapshot and stop."""


class Pipeline:
    """The units of batches `first`, `first` + 1, ... in flight, and the batches built."""

    def __init__(
        self,
        cfg: RunConfig,
        schedule: Schedule,
        units: TrainingUnits,
        build: Callable[[int, Sequence[RolloutUnit]], tuple[TrainBatch, dict[str, Any]]],
        *,
        first: int,
        stop: threading.Event,
    ) -> None:
        self.cfg, self.schedule, self.units, self.build = cfg, schedule, units, build
        self.stop, self.stage = stop, units.stage
        nworkers = max(1, units.runner.workers)
        self.gen_pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gen{i}") for i in range(nworkers)
        ]
        self.post_pool = ThreadPoolExecutor(
            max_workers=max(4, min(64, nworkers)), thread_name_prefix="score"
        )
        # batch b+1's rollouts are gathered, refilled and built on this thread while batch b
        # trains (a pure function of its logged records, so where it runs changes nothing)
        self.prep_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        self.prepared: dict[int, Future[Prepared]] = {}
        self.halt = threading.Event()  # the loop ended: a batch being gathered stops waiting
        self.futures: dict[str, Future[RolloutUnit]] = {}
        self.plans: dict[int, list[WorkUnit]] = {}
        self.dispatched = first - 1
        self.refill_budget = budget_prompts(cfg.batch.prompts, cfg.dynamic_sampling.budget)

    def dispatch(self, newest_version: int) -> None:
        """Submit every batch whose version exists (generation runs ahead by lag)."""
        last = min(self.schedule.last_dispatchable(newest_version), self.cfg.steps - 1)
        while self.dispatched < last:
            self.dispatched += 1
            self.plans[self.dispatched] = list(self.schedule.plan(self.dispatched).units)
            for u in self.plans[self.dispatched]:
                self.futures[u.unit_id] = self._submit(u)

    def batch(self, b: int) -> Prepared:
        """Batch b: built ahead (`prepare_ahead`), or gathered and built now."""
        ahead = self.prepared.pop(b, None)
        return ahead.result() if ahead is not None else self._prepare(b)

    def prepare_ahead(self, b: int) -> None:
        """Gather and build batch b + 1 while b trains, when it is out already (lag >= 1)."""
        if b + 1 < self.cfg.steps and b + 1 in self.plans:
            self.prepared[b + 1] = self.prep_pool.submit(self._prepare, b + 1)

    def trained(self, b: int) -> None:
        """Batch b is trained: forget its units."""
        for u in self.plans.pop(b):
            self.futures.pop(u.unit_id, None)

    def outstanding(self) -> list[WorkUnit]:
        """The units dispatched for batches not trained yet."""
        return [u for units in self.plans.values() for u in units]

    def close(self, stopped: bool) -> None:
        """Stop gathering; cancel what has not started; wait for the rest unless `stopped`."""
        self.halt.set()
        self.prep_pool.shutdown(wait=False, cancel_futures=True)
        for pool in self.gen_pools:
            pool.shutdown(wait=False, cancel_futures=True)
        for pool in self.gen_pools:
            pool.shutdown(wait=not stopped)
        self.post_pool.shutdown(wait=not stopped, cancel_futures=True)

    def _prepare(self, b: int) -> Prepared:
        """Batch b from its units' scored rollouts (waiting for them), after dynamic sampling's
        refills."""
        records = []
        for u in self.plans[b]:
            while True:
                try:
                    records.append(self.futures[u.unit_id].result(timeout=0.5))
                    break
                except TimeoutError:
                    if self.stop.is_set() or self.halt.is_set():
                        raise Stop from None
        refill = self._refill(b, records) if self.cfg.dynamic_sampling_enabled else {}
        with self.stage("build_batch"):
            batch, info = self.build(b, records)
        return batch, info, refill

    def _submit(self, unit: WorkUnit) -> Future[RolloutUnit]:
        """`run_unit` in two stages: generation on its worker's own thread (mostly waiting on
        the RPC), then scoring and logging on the smaller post pool, so a worker's thread is
        free for its next unit the moment its reply is in, and few threads compete for the
        interpreter. The future holds the logged record (or the stage's error)."""
        done: Future[RolloutUnit] = Future()
        units = self.units

        def post(result: Any) -> None:
            try:
                done.set_result(units.score_and_log(unit, result))
            except BaseException as e:
                done.set_exception(e)

        def gen() -> None:
            try:
                logged = units.logged_record(unit)
                if logged is not None:
                    done.set_result(logged)
                    return
                result = units.generate(unit)
                self.post_pool.submit(post, result)
            except BaseException as e:
                done.set_exception(e)

        self.gen_pools[units.worker_of(unit)].submit(gen)
        return done

    def _refill(self, b: int, records: list[RolloutUnit]) -> dict[str, Any]:
        """DAPO dynamic sampling for batch b: while fewer than B groups are informative (rewards
        not all equal), generate refill rounds (prompts a pure function of (b, round, slot), so
        a resume draws the same ones and finds them in the rollout log) within the budget.
        Appends the refill records to `records`; returns the refill cost for the metrics."""
        B = self.cfg.batch.prompts

        def informative(recs: list[RolloutUnit]) -> int:
            return sum(not uniform(g) for rec in recs for g in rec.groups)

        kept, used, rounds, gen_tokens = informative(records), 0, 0, 0
        for r in range(1, self.cfg.dynamic_sampling.max_rounds + 1):
            count = refill_count(B - kept, used, self.refill_budget)
            if count == 0:
                break
            units = self.schedule.refill_units(b, r, count)
            runs = [
                self.gen_pools[self.units.worker_of(u)].submit(self.units.run_unit, u)
                for u in units
            ]
            extra = [f.result() for f in runs]
            records.extend(extra)
            kept += informative(extra)
            used += count
            rounds += 1
            gen_tokens += sum(rec.generated_tokens for rec in extra)
        return {"refill_prompts": used, "refill_rounds": rounds, "refill_gen_tokens": gen_tokens}
