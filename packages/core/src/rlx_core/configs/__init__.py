"""The config classes of every rlx service, and the objective presets' table, without JAX.

Each service re-exports its own (`rlx_trainer.config`, `rlx_inference.config`,
`rlx_verifier.config`, `rlx_paramserver.config`); the controller's run config composes them, so a
field exists in one place and reaches the service that reads it:

- `rlx_core.configs.trainer`: TrainerConfig and its sections (ObjectiveConfig, OptimizerConfig,
  UpdateConfig, ModelOptions, MeshConfig, MetricsConfig, CheckpointConfig, ParamServerLink);
- `rlx_core.configs.objective`: PRESET_DEFAULTS (each preset's overrides and their defaults),
  OVERRIDES, ObjectiveConfig;
- `rlx_core.configs.inference`: InferenceConfig, EngineConfig, UnitLimits, ModelSource, ...;
- `rlx_core.configs.verifier`: VerifierConfig, JudgeConfig, RepositoryConfig, LambdaConfig;
- `rlx_core.configs.paramserver`: ParamServerConfig;
- `rlx_core.configs.server`: ServerConfig, the `[server]` section of every service;
- `rlx_core.configs.provision`: ProvisionConfig and PoolConfig, a gcp-tpu run's `[provision]`;
- `rlx_core.configs.checks`: at_least ("must be >= N") and suggest ("did you mean"), used by all.
"""
