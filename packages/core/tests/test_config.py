"""rlx_core.config: TOML and plain dicts into frozen config dataclasses, overrides, and back."""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from rlx_core.config import (
    Override,
    apply_overrides,
    config_field,
    describe,
    from_dict,
    load_config,
    loads_config,
    parse_override,
    to_dict,
    to_toml,
)
from rlx_core.errors import ConfigError

# --- a small, realistic schema -------------------------------------------------------------------


class Mode(enum.Enum):
    SYNC = "sync"
    ASYNC = "async"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    lr: float = config_field(default=1e-3, doc="learning rate, 1/step, > 0")
    warmup_steps: int = 0  # linear warm-up, steps, >= 0
    schedule: Literal["constant", "cosine"] = "constant"  # lr schedule after warm-up

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ConfigError("must be > 0", field="lr", value=self.lr, allowed="> 0")
        if self.warmup_steps < 0:
            raise ConfigError("must be >= 0", field="warmup_steps", value=self.warmup_steps)


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    optim: OptimConfig = field(default_factory=OptimConfig)  # optimizer
    dtype: Literal["float32", "bfloat16"]  # parameter dtype


@dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    path: str  # a JSONL file
    weight: float = 1.0  # sampling weight, >= 0

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ConfigError("must be >= 0", field="weight", value=self.weight, allowed=">= 0")


@dataclass(frozen=True, kw_only=True)
class RefConfig:
    checkpoint: Path  # reference model weights
    kl_coef: float = config_field(default=0.1, doc="KL penalty weight, >= 0")  # not the doc


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    name: str  # run name
    seed: int = 0  # RNG seed
    trainer: TrainerConfig  # trainer settings
    datasets: tuple[DatasetConfig, ...] = ()  # prompt sources
    tags: dict[str, str] = field(default_factory=dict)  # free-form labels
    staleness: tuple[int, int] = (1, 1)  # (min, max) policy lag, steps
    ref: RefConfig | None = None  # reference model; unset: no KL term
    mode: Mode = Mode.SYNC  # rollout mode

    def __post_init__(self) -> None:
        if self.staleness[0] > self.staleness[1]:
            raise ConfigError("min must be <= max", field="staleness", value=self.staleness)


RUN_TOML = """\
name = "grpo-math"
seed = 7
tags = { team = "rl", "a.b" = "dotted" }
staleness = [0, 2]
mode = "async"

[trainer]
dtype = "bfloat16"

[trainer.optim]
lr = 3e-4
warmup_steps = 10
schedule = "cosine"

[[datasets]]
path = "gsm8k.jsonl"

[[datasets]]
path = "math.jsonl"
weight = 2

[ref]
checkpoint = "/ckpt/base"
"""

EXPECTED_RUN = RunConfig(
    name="grpo-math",
    seed=7,
    trainer=TrainerConfig(
        optim=OptimConfig(lr=3e-4, warmup_steps=10, schedule="cosine"), dtype="bfloat16"
    ),
    datasets=(DatasetConfig(path="gsm8k.jsonl"), DatasetConfig(path="math.jsonl", weight=2.0)),
    tags={"team": "rl", "a.b": "dotted"},
    staleness=(0, 2),
    ref=RefConfig(checkpoint=Path("/ckpt/base")),
    mode=Mode.ASYNC,
)


def minimal() -> dict[str, Any]:
    return {"name": "r", "trainer": {"dtype": "float32"}}


def with_(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with `value` at `dotted` (`a.b`, `a[1].b`), made without the code
    under test; missing tables are created."""
    out = copy.deepcopy(data)
    parts: list[str | int] = []
    for name in dotted.split("."):
        head, *indices = name.replace("]", "").split("[")
        parts += [head, *map(int, indices)]
    obj: Any = out
    for part in parts[:-1]:
        obj = obj.setdefault(part, {}) if isinstance(part, str) else obj[part]
    obj[parts[-1]] = value
    return out


# --- loading ----------------------------------------------------------------------------------


def test_load_config_reads_every_kind_of_field(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_TOML)
    cfg = load_config(RunConfig, path)
    assert cfg == EXPECTED_RUN
    assert type(cfg.trainer.optim.lr) is float
    assert type(cfg.datasets[1].weight) is float  # TOML int 2 became 2.0
    assert isinstance(cfg.datasets, tuple)
    assert cfg.ref is not None and isinstance(cfg.ref.checkpoint, Path)
    assert cfg.mode is Mode.ASYNC
    assert load_config(RunConfig, str(path)) == cfg  # a str path too


def test_defaults_fill_absent_keys() -> None:
    cfg = from_dict(RunConfig, minimal())
    assert cfg == RunConfig(name="r", trainer=TrainerConfig(dtype="float32"))
    assert cfg.trainer.optim == OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant")
    assert cfg.ref is None and cfg.tags == {} and cfg.staleness == (1, 1)
    assert cfg.mode is Mode.SYNC


def test_load_config_applies_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_TOML)
    cfg = load_config(RunConfig, path, overrides=["trainer.optim.lr=1e-5", "name=other"])
    assert cfg == dataclasses.replace(
        EXPECTED_RUN,
        name="other",
        trainer=dataclasses.replace(
            EXPECTED_RUN.trainer,
            optim=dataclasses.replace(EXPECTED_RUN.trainer.optim, lr=1e-5),
        ),
    )


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="not found") as e:
        load_config(RunConfig, path)
    assert str(path) in str(e.value)


def test_directory_instead_of_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file") as e:
        load_config(RunConfig, tmp_path)
    assert str(tmp_path) in str(e.value)


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n\n[trainer]\ndtype = bfloat16\n')
    with pytest.raises(ConfigError) as e:
        load_config(RunConfig, path)
    assert str(e.value).startswith(f"{path}: invalid TOML at line 4, column 9")


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(RunConfig, path)


def test_loads_config_names_its_source_in_syntax_errors() -> None:
    with pytest.raises(ConfigError, match=r"^flags: invalid TOML at line 1, column 8"):
        loads_config(RunConfig, "name = ", source="flags")
    assert loads_config(RunConfig, RUN_TOML) == EXPECTED_RUN


def test_configs_are_frozen() -> None:
    cfg = from_dict(RunConfig, minimal())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.trainer.optim.lr = 1.0  # type: ignore[misc]


# --- unknown and missing keys --------------------------------------------------------------------


def test_unknown_top_level_key_suggests_the_closest() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, minimal() | {"sed": 3})
    assert str(e.value) == "sed: unknown field; did you mean 'seed'?"
    assert e.value.field == "sed"


def test_unknown_nested_key_names_the_dotted_path() -> None:
    data = with_(minimal(), "trainer.optim", {"lrr": 0.1})
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert str(e.value) == "trainer.optim.lrr: unknown field; did you mean 'lr'?"
    assert e.value.field == "trainer.optim.lrr"


def test_unknown_key_matches_case_insensitively() -> None:
    with pytest.raises(ConfigError, match="did you mean 'name'"):
        from_dict(RunConfig, {"NAME": "x", "trainer": {"dtype": "float32"}})


def test_unknown_key_without_close_match_lists_valid_fields() -> None:
    data = with_(minimal(), "trainer.optim", {"momentum": 0.9})
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert str(e.value) == (
        "trainer.optim.momentum: unknown field; valid fields: lr, warmup_steps, schedule"
    )


def test_unknown_key_in_array_element_has_the_index() -> None:
    data = minimal() | {"datasets": [{"path": "a"}, {"path": "b", "wieght": 2.0}]}
    with pytest.raises(
        ConfigError, match=r"^datasets\[1\]\.wieght: unknown field; did you mean 'weight'"
    ):
        from_dict(RunConfig, data)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"trainer": {"dtype": "float32"}}, "name"),
        ({"name": "r"}, "trainer"),
        ({"name": "r", "trainer": {}}, "trainer.dtype"),
        (minimal() | {"datasets": [{"path": "a"}, {"weight": 1.0}]}, "datasets[1].path"),
        (minimal() | {"ref": {}}, "ref.checkpoint"),
    ],
)
def test_missing_required_field_names_the_path(data: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert e.value.field == path
    assert str(e.value).startswith(f"{path}: missing required field")


def test_missing_required_literal_says_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, {"name": "r", "trainer": {}})
    assert str(e.value) == (
        "trainer.dtype: missing required field; expected one of 'float32' | 'bfloat16'"
    )


# --- wrong types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "allowed"),
    [
        ("trainer.optim.lr", "fast", "a number (float)"),  # str for float
        ("trainer.optim.lr", True, "a number (float)"),  # bool for float
        ("seed", True, "an integer"),  # bool for int
        ("seed", 1.5, "an integer"),  # float for int
        ("seed", 2.0, "an integer"),  # even an integral float
        ("seed", "7", "an integer"),
        ("name", 3, "a string"),
        ("trainer.optim", [1, 2], "a table (OptimConfig)"),  # list for table
        ("trainer", "big", "a table (TrainerConfig)"),
        ("datasets", {"path": "a"}, "an array of DatasetConfig"),  # table for array
        ("datasets[0].weight", "heavy", "a number (float)"),
        ("tags", ["a"], "a table of str"),
        ("tags.team", 1, "a string"),
        ("staleness", [1, 2, 3], "an array of 2 items (int, int)"),
        ("staleness", [1], "an array of 2 items (int, int)"),
        ("staleness[1]", 2.5, "an integer"),
        ("ref.checkpoint", 5, "a path (string)"),
    ],
)
def test_wrong_type_names_path_value_and_allowed(path: str, value: Any, allowed: str) -> None:
    data = minimal() | {"datasets": [{"path": "a"}], "staleness": [1, 1]}
    data = with_(data, path, value)
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert e.value.field == path
    assert e.value.value == value
    assert e.value.allowed == allowed
    assert str(e.value) == f"{path}: expected {allowed}, got {value!r}"


def test_integers_are_accepted_for_floats_and_converted() -> None:
    cfg = from_dict(RunConfig, with_(minimal(), "trainer.optim.lr", 1))
    assert cfg.trainer.optim.lr == 1.0 and type(cfg.trainer.optim.lr) is float


def test_bool_field_takes_only_booleans() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Flags:
        debug: bool = False

    assert from_dict(Flags, {"debug": True}).debug is True
    for bad in (1, 0, "true"):
        with pytest.raises(ConfigError, match=r"^debug: expected a boolean \(true or false\)"):
            from_dict(Flags, {"debug": bad})


def test_literal_violation_lists_allowed_and_suggests() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, with_(minimal(), "trainer.dtype", "bfloat61"))
    assert str(e.value) == (
        "trainer.dtype: expected one of 'float32' | 'bfloat16', got 'bfloat61'; "
        "did you mean 'bfloat16'?"
    )
    assert e.value.allowed == "one of 'float32' | 'bfloat16'"


def test_enum_by_value_or_name_and_rejects_others() -> None:
    assert from_dict(RunConfig, minimal() | {"mode": "async"}).mode is Mode.ASYNC
    assert from_dict(RunConfig, minimal() | {"mode": "ASYNC"}).mode is Mode.ASYNC
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, minimal() | {"mode": "asynch"})
    assert str(e.value) == (
        "mode: expected one of 'sync' | 'async' (Mode), got 'asynch'; did you mean 'async'?"
    )


def test_int_valued_enum_rejects_bools_and_strings_of_digits() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Prio:
        level: Level = Level.LOW

    assert from_dict(Prio, {"level": 2}).level is Level.HIGH
    assert from_dict(Prio, {"level": "HIGH"}).level is Level.HIGH
    for bad in (True, "2", 3):
        with pytest.raises(ConfigError, match=r"^level: expected one of 1 \| 2 \(Level\)"):
            from_dict(Prio, {"level": bad})


def test_top_level_data_must_be_a_table() -> None:
    with pytest.raises(ConfigError, match=r"expected a table, got \[1\]"):
        from_dict(RunConfig, [1])  # type: ignore[arg-type]


def test_instances_of_child_configs_pass_through() -> None:
    optim = OptimConfig(lr=0.5)
    cfg = from_dict(RunConfig, {"name": "r", "trainer": {"dtype": "float32", "optim": optim}})
    assert cfg.trainer.optim is optim


# --- errors from __post_init__ -------------------------------------------------------------------


def test_post_init_error_gets_the_full_dotted_path() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, with_(minimal(), "trainer.optim.lr", -1e-3))
    assert e.value.field == "trainer.optim.lr"
    assert str(e.value) == "trainer.optim.lr: must be > 0"
    assert e.value.value == -1e-3 and e.value.allowed == "> 0"
    assert isinstance(e.value.__cause__, ConfigError)  # the original, chained


def test_post_init_error_in_array_element_gets_the_index() -> None:
    data = minimal() | {"datasets": [{"path": "a"}, {"path": "b"}, {"path": "c", "weight": -2}]}
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert e.value.field == "datasets[2].weight"
    assert str(e.value) == "datasets[2].weight: must be >= 0"


def test_post_init_error_at_top_level_is_unchanged() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, minimal() | {"staleness": [3, 1]})
    assert str(e.value) == "staleness: min must be <= max"
    assert e.value.value == (3, 1)


@dataclass(frozen=True, kw_only=True)
class Interval:
    lo: int = 0
    hi: int = 0

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ConfigError("lo must not exceed hi")


@dataclass(frozen=True, kw_only=True)
class Window:
    interval: Interval = field(default_factory=Interval)


def test_post_init_error_without_field_gets_the_table_path() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(Window, {"interval": {"lo": 2}})
    assert str(e.value) == "interval: lo must not exceed hi"
    assert e.value.field == "interval"


def test_config_classes_local_to_a_function_get_a_clear_type_error() -> None:
    @dataclass(frozen=True, kw_only=True)
    class LocalChild:
        n: int = 0

    @dataclass(frozen=True, kw_only=True)
    class Local:
        child: LocalChild = field(default_factory=LocalChild)

    with pytest.raises(TypeError, match="Local: cannot resolve an annotation"):
        from_dict(Local, {})


# --- schema errors are programming errors --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AnyField:
    x: Any = None


@dataclass(frozen=True, kw_only=True)
class UnionField:
    x: int | str = 0


@dataclass(frozen=True, kw_only=True)
class SetField:
    x: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True)
class OptionalWithValue:
    x: int | None = 3


@dataclass(frozen=True, kw_only=True)
class NestedOptional:
    x: tuple[int | None, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BadChildHolder:
    child: UnionField | None = None


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (AnyField, "AnyField.x: unsupported config field type"),
        (UnionField, r"UnionField.x: unsupported union"),
        (SetField, "SetField.x: unsupported config field type"),
        (OptionalWithValue, "must default to None"),
        (NestedOptional, "NestedOptional.x: unsupported union"),
        (BadChildHolder, "UnionField.x: unsupported union"),  # found without any data for it
    ],
)
def test_unsupported_field_types_raise_type_error(cls: type, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        from_dict(cls, {})
    with pytest.raises(TypeError, match=match):  # every time, not only the first
        from_dict(cls, {})


@dataclass(frozen=True, kw_only=True)
class Chain:
    value: int = 0
    next: Chain | None = None


def test_recursive_configs_are_supported() -> None:
    cfg = from_dict(Chain, {"value": 1, "next": {"value": 2, "next": {"value": 3}}})
    assert cfg == Chain(value=1, next=Chain(value=2, next=Chain(value=3)))
    assert from_dict(Chain, tomllib.loads(to_toml(cfg))) == cfg
    with pytest.raises(ConfigError, match=r"^next\.next\.value: expected an integer"):
        from_dict(Chain, {"next": {"next": {"value": "x"}}})


# --- overrides -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("seed=3", ("seed",), 3),
        ("trainer.optim.lr=1e-4", ("trainer", "optim", "lr"), 1e-4),
        ("debug=true", ("debug",), True),
        ('name="quoted"', ("name",), "quoted"),
        ("name=bare words", ("name",), "bare words"),
        ("x = [1, 2]", ("x",), [1, 2]),
        ("x={a = 1}", ("x",), {"a": 1}),
        ("path=/data/x=1.jsonl", ("path",), "/data/x=1.jsonl"),
        ("name=", ("name",), ""),
        ("datasets[2].weight=0.5", ("datasets", 2, "weight"), 0.5),
        ('tags."a.b"=c', ("tags", "a.b"), "c"),
        ('tags."k=v"=c', ("tags", "k=v"), "c"),
        ("name=x\nseed = 4", ("name",), "x\nseed = 4"),  # no second key smuggled in
    ],
)
def test_parse_override(text: str, path: tuple[str | int, ...], value: Any) -> None:
    override = parse_override(text)
    assert override.path == path
    assert override.value == value
    assert type(override.value) is type(value)


def test_override_key_is_the_dotted_path() -> None:
    assert parse_override('datasets[2].tags."a b"=1').key == 'datasets[2].tags."a b"'
    assert parse_override("a.b = 1") == Override(("a", "b"), 1, "1")


@pytest.mark.parametrize("text", ["seed", "a..b=1", ".a=1", "a b=1", "a[x]=1", "=1"])
def test_malformed_overrides_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="override"):
        parse_override(text)


def test_apply_overrides_sets_typed_nested_values() -> None:
    data = apply_overrides(
        minimal(),
        [
            "seed=42",
            "trainer.optim.lr=3e-4",
            "trainer.optim.schedule=cosine",
            "trainer.dtype=bfloat16",
            "staleness=[0, 4]",
            "mode=async",
            "tags.owner=alice",
            "datasets=[{path = 'a.jsonl'}, {path = 'b.jsonl', weight = 3}]",
            "datasets[1].weight=0.25",
            "ref.checkpoint=/ckpt/x",
        ],
        cls=RunConfig,
    )
    cfg = from_dict(RunConfig, data)
    assert cfg == RunConfig(
        name="r",
        seed=42,
        trainer=TrainerConfig(optim=OptimConfig(lr=3e-4, schedule="cosine"), dtype="bfloat16"),
        datasets=(DatasetConfig(path="a.jsonl"), DatasetConfig(path="b.jsonl", weight=0.25)),
        tags={"owner": "alice"},
        staleness=(0, 4),
        ref=RefConfig(checkpoint=Path("/ckpt/x")),
        mode=Mode.ASYNC,
    )


def test_apply_overrides_returns_a_new_dict_and_leaves_the_input_alone() -> None:
    data = minimal() | {"datasets": [{"path": "a"}]}
    before = repr(data)
    out = apply_overrides(data, ["trainer.dtype=bfloat16", "datasets[0].weight=2"], cls=RunConfig)
    assert repr(data) == before
    assert out["trainer"] == {"dtype": "bfloat16"}
    assert out["datasets"] == [{"path": "a", "weight": 2}]


def test_later_overrides_win() -> None:
    out = apply_overrides({}, ["seed=1", "seed=2"], cls=RunConfig)
    assert out == {"seed": 2}


def test_string_fields_take_the_override_text_even_when_it_parses() -> None:
    data = apply_overrides(
        minimal(),
        ["name=123", "tags.year=2024", "tags.flag=true", "ref.checkpoint=1.5", 'tags.q="7"'],
        cls=RunConfig,
    )
    assert data["name"] == "123"
    assert data["tags"] == {"year": "2024", "flag": "true", "q": "7"}
    assert from_dict(RunConfig, data).ref == RefConfig(checkpoint=Path("1.5"))
    # Without a schema there is nothing to say the field is a string.
    assert apply_overrides({}, ["name=123"]) == {"name": 123}


def test_unknown_override_path_is_rejected_with_a_hint() -> None:
    with pytest.raises(ConfigError) as e:
        apply_overrides(minimal(), ["trainer.optim.lrr=1"], cls=RunConfig)
    assert str(e.value) == "trainer.optim.lrr: unknown field; did you mean 'lr'?"
    with pytest.raises(ConfigError, match=r"^trainr: unknown field; did you mean 'trainer'"):
        apply_overrides(minimal(), ["trainr.dtype=float32"], cls=RunConfig)
    with pytest.raises(ConfigError, match=r"^ref\.kl: unknown field; did you mean 'kl_coef'"):
        apply_overrides(minimal(), ["ref.kl=1"], cls=RunConfig)  # through the optional child
    with pytest.raises(ConfigError, match=r"^datasets\[0\]\.wait: unknown field"):
        apply_overrides(minimal(), ["datasets[0].wait=1"], cls=RunConfig)


def test_override_cannot_go_below_a_scalar() -> None:
    with pytest.raises(ConfigError, match=r"^seed: cannot go below an integer"):
        apply_overrides(minimal(), ["seed.x=1"], cls=RunConfig)
    with pytest.raises(ConfigError, match=r"^staleness: cannot go below"):
        apply_overrides(minimal(), ["staleness[2]=1"], cls=RunConfig)


def test_override_index_must_exist_in_the_data() -> None:
    data = minimal() | {"datasets": [{"path": "a"}]}
    with pytest.raises(ConfigError) as e:
        apply_overrides(data, ["datasets[1].weight=2"], cls=RunConfig)
    assert str(e.value) == "datasets[1]: index out of range: the array has 1 items"


def test_override_with_a_wrong_type_is_rejected_naming_the_field() -> None:
    data = apply_overrides(minimal(), ["trainer.optim.lr=fast"], cls=RunConfig)
    with pytest.raises(ConfigError) as e:
        from_dict(RunConfig, data)
    assert str(e.value) == "trainer.optim.lr: expected a number (float), got 'fast'"
    with pytest.raises(ConfigError, match=r"^seed: expected an integer, got 1\.5"):
        load_config_text(minimal_toml(), ["seed=1.5"])


def minimal_toml() -> str:
    return 'name = "r"\n[trainer]\ndtype = "float32"\n'


def load_config_text(text: str, overrides: list[str]) -> RunConfig:
    return loads_config(RunConfig, text, overrides=overrides)


# --- dumping and round trips ---------------------------------------------------------------------


def test_to_dict_gives_plain_toml_values() -> None:
    assert to_dict(EXPECTED_RUN) == {
        "name": "grpo-math",
        "seed": 7,
        "trainer": {
            "optim": {"lr": 3e-4, "warmup_steps": 10, "schedule": "cosine"},
            "dtype": "bfloat16",
        },
        "datasets": [{"path": "gsm8k.jsonl", "weight": 1.0}, {"path": "math.jsonl", "weight": 2.0}],
        "tags": {"team": "rl", "a.b": "dotted"},
        "staleness": [0, 2],
        "ref": {"checkpoint": "/ckpt/base", "kl_coef": 0.1},
        "mode": "async",
    }
    assert "ref" not in to_dict(from_dict(RunConfig, minimal()))  # None is left out


def test_to_dict_and_to_toml_need_an_instance() -> None:
    with pytest.raises(TypeError):
        to_dict(RunConfig)
    with pytest.raises(TypeError):
        to_toml({"a": 1})


ROUND_TRIP_CONFIGS = [
    EXPECTED_RUN,
    RunConfig(name="r", trainer=TrainerConfig(dtype="float32")),
    RunConfig(
        name='quotes " and \\ and\nnewline # not a comment',
        seed=-(2**63),
        trainer=TrainerConfig(
            optim=OptimConfig(lr=1e-300, warmup_steps=2**63 - 1), dtype="bfloat16"
        ),
        datasets=(DatasetConfig(path="", weight=0.0),),
        tags={"": "empty key", "with space": "ü→✓", "a.b.c": "", "x": "1e3"},
        staleness=(0, 0),
        ref=RefConfig(checkpoint=Path("relative/dir"), kl_coef=float("inf")),
        mode=Mode.SYNC,
    ),
]


@pytest.mark.parametrize("cfg", ROUND_TRIP_CONFIGS)
def test_round_trip_through_dict_and_toml(cfg: RunConfig) -> None:
    assert from_dict(RunConfig, to_dict(cfg)) == cfg
    text = to_toml(cfg)
    assert from_dict(RunConfig, tomllib.loads(text)) == cfg
    assert loads_config(RunConfig, to_toml(cfg, comments=False)) == cfg


def test_to_toml_writes_docs_as_comments_and_sections() -> None:
    text = to_toml(EXPECTED_RUN)
    assert "# learning rate, 1/step, > 0\nlr = 0.0003\n" in text
    assert "[trainer.optim]\n" in text
    assert text.count("[[datasets]]\n") == 2
    assert "# KL penalty weight, >= 0\nkl_coef = 0.1\n" in text
    assert "#" not in to_toml(EXPECTED_RUN, comments=False)
    assert text.startswith('# run name\nname = "grpo-math"\n# RNG seed\nseed = 7\n')
    assert "# reference model; unset: no KL term\n[ref]\n" in text  # source comment of a table
    assert "\n\n[[datasets]]\n" in text  # a blank line before each section


# Every supported type, to round-trip random values through to_dict and to_toml.


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclass(frozen=True, kw_only=True)
class Tiny:
    b: bool = False


@dataclass(frozen=True, kw_only=True)
class Leaf:
    n: int = 0
    doc: str = config_field(default="", doc="a string\nover two lines")
    attrs: dict[str, list[int]] = field(default_factory=dict)  # a table inside [[leaves]]
    tinies: tuple[Tiny, ...] = config_field(default=(), doc="arrays of tables inside arrays")
    tiny: Tiny | None = None


@dataclass(frozen=True, kw_only=True)
class Everything:
    i: int
    f: float
    s: str
    b: bool
    p: Path
    lit: Literal["a", "b", 3, True]
    color: Color
    level: Level
    maybe_i: int | None = None
    maybe_leaf: Leaf | None = None
    ints: tuple[int, ...] = ()
    pair: tuple[str, float] = ("", 0.0)
    floats: list[float] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    nested: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    leaves: tuple[Leaf, ...] = ()
    leaf_map: dict[str, Leaf] = field(default_factory=dict)
    rows: list[dict[str, str]] = field(default_factory=list)
    leaf: Leaf = field(default_factory=Leaf)


def random_config(rng: random.Random) -> Everything:
    alphabet = 'ab Z09_-."\\#=[]{}\n\t\r\x00\x1f\x7fé✓𝄞'

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))

    def integer() -> int:
        return rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(10**6), 10**6)])

    def real() -> float:
        specials = [0.0, -0.0, 1.0, 5e-324, 1.7976931348623157e308, math.inf, -math.inf, 0.1]
        return rng.choice([*specials, rng.uniform(-1e6, 1e6), rng.gauss(0, 1e-8)])

    def tiny() -> Tiny:
        return Tiny(b=rng.random() < 0.5)

    def leaf() -> Leaf:
        return Leaf(
            n=integer(),
            doc=text(),
            attrs={text(): some(integer) for _ in range(rng.randrange(3))},
            tinies=tuple(some(tiny)),
            tiny=rng.choice([None, tiny()]),
        )

    def some(make: Any) -> list[Any]:
        return [make() for _ in range(rng.randrange(4))]

    return Everything(
        i=integer(),
        f=real(),
        s=text(),
        b=rng.random() < 0.5,
        p=Path(text().replace("\x00", "") or "."),
        lit=rng.choice(["a", "b", 3, True]),
        color=rng.choice(list(Color)),
        level=rng.choice(list(Level)),
        maybe_i=rng.choice([None, integer()]),
        maybe_leaf=rng.choice([None, leaf()]),
        ints=tuple(some(integer)),
        pair=(text(), real()),
        floats=some(real),
        table={text(): integer() for _ in range(rng.randrange(4))},
        nested={text(): [tuple(some(integer)) for _ in range(rng.randrange(3))]},
        leaves=tuple(some(leaf)),
        leaf_map={text(): leaf() for _ in range(rng.randrange(3))},
        rows=[{text(): text()} for _ in range(rng.randrange(3))],
        leaf=leaf(),
    )


def test_random_configs_round_trip_exactly() -> None:
    rng = random.Random(1234)
    for _ in range(300):
        cfg = random_config(rng)
        assert from_dict(Everything, to_dict(cfg)) == cfg
        back = from_dict(Everything, tomllib.loads(to_toml(cfg)))
        assert back == cfg
        assert type(back.floats) is list and type(back.ints) is tuple
        assert all(type(x) is float for x in back.floats)
        assert type(back.lit) is type(cfg.lit)  # True stays a bool, 3 an int


def test_literal_keeps_bool_and_int_apart() -> None:
    assert from_dict(Everything, to_dict(random_config(random.Random(0))) | {"lit": 3}).lit == 3
    with pytest.raises(ConfigError, match=r"^lit: expected one of 'a' \| 'b' \| 3 \| true, got 1"):
        from_dict(Everything, to_dict(random_config(random.Random(0))) | {"lit": 1})


# --- describe ------------------------------------------------------------------------------------


def test_describe_lists_every_field_with_type_default_and_doc() -> None:
    rows = {row[0]: row[1:] for row in describe(RunConfig)}
    assert rows["name"] == ("str", "required", "run name")
    assert rows["seed"] == ("int", "0", "RNG seed")
    assert rows["trainer"] == ("TrainerConfig", "required", "trainer settings")
    assert rows["trainer.optim"] == ("OptimConfig", "", "optimizer")
    assert rows["trainer.optim.lr"] == ("float", "0.001", "learning rate, 1/step, > 0")
    assert rows["trainer.optim.schedule"] == (
        "'constant' | 'cosine'",
        '"constant"',
        "lr schedule after warm-up",
    )
    assert rows["trainer.dtype"] == ("'float32' | 'bfloat16'", "required", "parameter dtype")
    assert rows["datasets"] == ("tuple[DatasetConfig, ...]", "[]", "prompt sources")
    assert rows["datasets[].weight"] == ("float", "1.0", "sampling weight, >= 0")
    assert rows["tags"] == ("dict[str, str]", "{}", "free-form labels")
    assert rows["staleness"] == ("tuple[int, int]", "[1, 1]", "(min, max) policy lag, steps")
    assert rows["ref"] == ("RefConfig | None", "unset", "reference model; unset: no KL term")
    assert rows["ref.checkpoint"] == ("path", "required", "reference model weights")
    # config_field(doc=...) wins over the trailing comment
    assert rows["ref.kl_coef"] == ("float", "0.1", "KL penalty weight, >= 0")
    assert rows["mode"] == ("Mode", '"sync"', "rollout mode")
    assert list(rows)[:4] == ["name", "seed", "trainer", "trainer.optim"]
    assert len(rows) == 17


def test_describe_without_docs_leaves_them_empty() -> None:
    assert describe(Chain) == [
        ("value", "int", "0", ""),
        ("next", "Chain | None", "unset", ""),  # not unrolled
    ]


def test_config_field_rejects_both_defaults() -> None:
    with pytest.raises(TypeError):
        config_field(default=1, default_factory=list)
    f = config_field(doc="required, with a doc")
    assert f.default is dataclasses.MISSING and f.metadata["doc"] == "required, with a doc"


# --- merged defaults and moved fields ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Store:
    keep: int = 2  # versions kept, >= 1
    chunk: int = 8  # chunk size, KiB
    inner: OptimConfig = field(default_factory=OptimConfig)  # a nested section


def _big_store() -> Store:
    return Store(keep=8, inner=OptimConfig(lr=0.5, warmup_steps=3))


@dataclass(frozen=True, kw_only=True)
class Host:
    """A parent whose defaults for `store` differ from Store's own; `plain` starts from Store's."""

    store: Store = config_field(default_factory=_big_store, merge=True, doc="merged")
    plain: Store = config_field(default_factory=_big_store, doc="not merged")
    MOVED_FIELDS: ClassVar[dict[str, str]] = {"old": "[old] moved to [store] (keep = ...)"}


def test_a_merged_field_table_sets_fields_of_the_default() -> None:
    assert from_dict(Host, {}).store == _big_store()
    got = from_dict(Host, {"store": {"chunk": 4, "inner": {"lr": 0.25}}})
    assert got.store == Store(keep=8, chunk=4, inner=OptimConfig(lr=0.25, warmup_steps=3))
    # without merge a table starts from the class's defaults
    assert from_dict(Host, {"plain": {"chunk": 4}}).plain == Store(chunk=4)
    # the written TOML reads back the same, and unknown keys are still refused under the path
    assert from_dict(Host, tomllib.loads(to_toml(got))) == got
    with pytest.raises(ConfigError, match=r"^store\.inner\.lrr: unknown field; did you mean 'lr'"):
        from_dict(Host, {"store": {"inner": {"lrr": 1.0}}})
    assert loads_config(Host, "", overrides=["store.keep=3"]).store == dataclasses.replace(
        _big_store(), keep=3
    )


def test_describe_shows_a_merged_fields_defaults() -> None:
    rows = {row[0]: row[1:] for row in describe(Host)}
    assert rows["store.keep"] == ("int", "8", "versions kept, >= 1")
    assert rows["store.inner.lr"] == ("float", "0.5", "learning rate, 1/step, > 0")
    assert rows["plain.keep"] == ("int", "2", "versions kept, >= 1")


def test_merge_needs_a_config_field_with_a_default() -> None:
    @dataclass(frozen=True, kw_only=True)
    class Bad:
        n: int = config_field(default=1, merge=True)

    with pytest.raises(TypeError, match="merge needs a config-class field"):
        from_dict(Bad, {})


def test_a_moved_field_says_where_it_went() -> None:
    with pytest.raises(ConfigError, match=r"^old: \[old\] moved to \[store\] \(keep = \.\.\.\)$"):
        from_dict(Host, {"old": {"keep": 1}})
    with pytest.raises(ConfigError, match=r"^old: \[old\] moved to \[store\]"):
        loads_config(Host, "", overrides=["old.keep=1"])
