"""The only active component: prompt mixture, deterministic schedule, staleness policy, snapshots
and exact resume. Never imports JAX.
"""

from rlx_controller._version import __version__
from rlx_controller.config import ControllerConfig
from rlx_controller.datasets import (
    Dataset,
    Prompt,
    load_dataset,
    load_prefilter,
    mixture_sources,
    read_jsonl,
    read_parquet,
)
from rlx_controller.demo import (
    AdditionTask,
    addition_answer_correct,
    addition_splits,
    write_addition_jsonl,
)
from rlx_controller.gold_answers import boxed_answer, gsm8k_answer
from rlx_controller.mixture import MixtureSource, MixtureState, PromptMixture, PromptRef
from rlx_controller.rng import KeyedPermutation, randbelow, random_u64, sample_seed, uniform
from rlx_controller.rollout_log import LogScan, RolloutLog
from rlx_controller.run_config import (
    RunConfig,
    check_run_inputs,
    config_hash,
    load_run_config,
    loads_run_config,
)
from rlx_controller.schedule import (
    BatchPlan,
    GroupRef,
    Schedule,
    Selection,
    WorkUnit,
    check_staleness,
    select_groups,
    version_for_batch,
)
from rlx_controller.server import read_controller, serve, serve_run
from rlx_controller.service import ControllerService, RunControl
from rlx_controller.snapshot import Snapshot, SnapshotEntry, SnapshotStore

__all__ = [
    "AdditionTask",
    "BatchPlan",
    "ControllerConfig",
    "ControllerService",
    "Dataset",
    "GroupRef",
    "KeyedPermutation",
    "LogScan",
    "MixtureSource",
    "MixtureState",
    "Prompt",
    "PromptMixture",
    "PromptRef",
    "RolloutLog",
    "RunConfig",
    "RunControl",
    "Schedule",
    "Selection",
    "Snapshot",
    "SnapshotEntry",
    "SnapshotStore",
    "WorkUnit",
    "__version__",
    "addition_answer_correct",
    "addition_splits",
    "boxed_answer",
    "check_run_inputs",
    "check_staleness",
    "config_hash",
    "gsm8k_answer",
    "load_dataset",
    "load_prefilter",
    "load_run_config",
    "loads_run_config",
    "mixture_sources",
    "randbelow",
    "random_u64",
    "read_controller",
    "read_jsonl",
    "read_parquet",
    "sample_seed",
    "select_groups",
    "serve",
    "serve_run",
    "uniform",
    "version_for_batch",
    "write_addition_jsonl",
]
