"""The only active component: prompt mixture, deterministic schedule, staleness policy, snapshots
and exact resume. Never imports JAX.

`__all__` is the package's face: what the CLI, tools and other packages import, always from here
(`from rlx_controller import Driver, RunPaths`); the modules behind it are internal.
"""

from rlx_controller._version import __version__
from rlx_controller.batching import build_batch
from rlx_controller.config import ControllerConfig
from rlx_controller.driver import Driver, Progress
from rlx_controller.evaluation import (
    EvalSample,
    EvalSummary,
    evaluate_model,
    heldout_accuracy,
    summarize,
)
from rlx_controller.lease import LeaseHolder, read_holder
from rlx_controller.metrics import METRICS_FILE, METRICS_PARTS, read_uploaded
from rlx_controller.mixture import (
    MixtureSource,
    MixtureState,
    PromptMixture,
    PromptRef,
    mixture_sources,
)
from rlx_controller.prefilter import write_pass_rates
from rlx_controller.rollout_log import LogScan, RolloutLog, decode_record, encode_record
from rlx_controller.rundir import (
    CONFIG_FILE,
    CONTROLLER_PID,
    RUN_INFO,
    RunPaths,
    default_work_dir,
    read_run_info,
    read_text,
    sweep_temporaries,
)
from rlx_controller.schedule import (
    BatchPlan,
    GroupRef,
    Schedule,
    Selection,
    WorkUnit,
    check_staleness,
    parse_unit_id,
    select_groups,
    version_for_batch,
)
from rlx_controller.server import read_controller, serve, serve_run
from rlx_controller.service import ControllerService, RunControl
from rlx_controller.service_set import Clients, ServiceSet
from rlx_controller.snapshot import Snapshot, SnapshotEntry, SnapshotStore
from rlx_core.configs.run import (
    RunConfig,
    check_run_inputs,
    config_hash,
    load_run_config,
    loads_run_config,
)
from rlx_core.rng import KeyedPermutation, randbelow, random_u64, sample_seed, uniform
from rlx_data import (
    AdditionTask,
    Dataset,
    Prompt,
    addition_answer_correct,
    addition_splits,
    boxed_answer,
    gsm8k_answer,
    load_dataset,
    load_prefilter,
    read_jsonl,
    read_parquet,
    write_addition_jsonl,
)

__all__ = [
    "CONFIG_FILE",
    "CONTROLLER_PID",
    "METRICS_FILE",
    "METRICS_PARTS",
    "RUN_INFO",
    "AdditionTask",
    "BatchPlan",
    "Clients",
    "ControllerConfig",
    "ControllerService",
    "Dataset",
    "Driver",
    "EvalSample",
    "EvalSummary",
    "GroupRef",
    "KeyedPermutation",
    "LeaseHolder",
    "LogScan",
    "MixtureSource",
    "MixtureState",
    "Progress",
    "Prompt",
    "PromptMixture",
    "PromptRef",
    "RolloutLog",
    "RunConfig",
    "RunControl",
    "RunPaths",
    "Schedule",
    "Selection",
    "ServiceSet",
    "Snapshot",
    "SnapshotEntry",
    "SnapshotStore",
    "WorkUnit",
    "__version__",
    "addition_answer_correct",
    "addition_splits",
    "boxed_answer",
    "build_batch",
    "check_run_inputs",
    "check_staleness",
    "config_hash",
    "decode_record",
    "default_work_dir",
    "encode_record",
    "evaluate_model",
    "gsm8k_answer",
    "heldout_accuracy",
    "load_dataset",
    "load_prefilter",
    "load_run_config",
    "loads_run_config",
    "mixture_sources",
    "parse_unit_id",
    "randbelow",
    "random_u64",
    "read_controller",
    "read_holder",
    "read_jsonl",
    "read_parquet",
    "read_run_info",
    "read_text",
    "read_uploaded",
    "sample_seed",
    "select_groups",
    "serve",
    "serve_run",
    "summarize",
    "sweep_temporaries",
    "uniform",
    "version_for_batch",
    "write_addition_jsonl",
    "write_pass_rates",
]
