"""Typed clients of every rlx service. Services never import each other; they talk through these.

One module per service; each joins `__all__` here in the issue that builds that service.
"""

from rlx_core.clients.controller import ControllerClient, ControllerStatus
from rlx_core.clients.inference import GenerateResult, InferenceClient, Rollout, Sampling, WorkUnit
from rlx_core.clients.lifecycle import LifecycleClient
from rlx_core.clients.paramserver import ParamServerClient, ReplicatedPushClient, replica_for
from rlx_core.clients.trainer import StepResult, TrainBatch, TrainerClient
from rlx_core.clients.verifier import SampleResult, VerifierClient, VerifySample

__all__ = [
    "ControllerClient",
    "ControllerStatus",
    "GenerateResult",
    "InferenceClient",
    "LifecycleClient",
    "ParamServerClient",
    "ReplicatedPushClient",
    "Rollout",
    "SampleResult",
    "Sampling",
    "StepResult",
    "TrainBatch",
    "TrainerClient",
    "VerifierClient",
    "VerifySample",
    "WorkUnit",
    "replica_for",
]
