"""The objective presets of DESIGN §5 as data: each preset's name, the overrides it accepts and the
default of each, and `ObjectiveConfig`, the trainer's `[objective]` section checked against them.

The JAX side (`rlx_trainer.objective.preset`) builds its `RLObjective`s from this table; the run
config (no JAX) validates against it. Adding a preset or an override means adding it here (and,
for an override, a field of `ObjectiveConfig`) and to the preset's builder in rlx_trainer.

Overrides (None in `ObjectiveConfig` = the preset's default):
- `eps_low`, `eps_high`: the bounds of the preset's clip (the PPO mask for grpo, dapo, dr_grpo,
  reinforce_pp, ppo, decoupled_ppo and gspo, the IS clip for cispo);
- `beta`: the KL coefficient, 0 = no KL term (a preset without one gets K3KL(beta));
- `tis_cap`: C of truncated IS (seeds/004); None = off;
- `dual_clip` (the PPO-mask presets but gspo), `scaled` (rloo), `group_baseline` (reinforce_pp),
  `gamma`, `lam`, `whiten`, `vf_coef`, `vf_clip` (ppo).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType

from rlx_core.configs.checks import suggest
from rlx_core.errors import ConfigError

__all__ = [
    "COMMON_OVERRIDES",
    "OVERRIDES",
    "PRESETS",
    "PRESET_DEFAULTS",
    "ObjectiveConfig",
    "presets_taking",
]

Value = float | bool | None

_CLIP = {"eps_low": 0.2, "eps_high": 0.2}
_NONE: dict[str, Value] = {"beta": 0.0, "tis_cap": None}

# preset -> {override it accepts: its default}, in the order of DESIGN §5
PRESET_DEFAULTS: Mapping[str, Mapping[str, Value]] = MappingProxyType(
    {
        name: MappingProxyType(defaults)
        for name, defaults in {
            "grpo": {**_CLIP, "beta": 0.04, "tis_cap": None, "dual_clip": None},
            "dapo": {"eps_low": 0.2, "eps_high": 0.28, **_NONE, "dual_clip": None},
            "dr_grpo": {**_CLIP, **_NONE, "dual_clip": None},
            "reinforce": {**_NONE},
            "token_reinforce": {**_NONE},
            "rloo": {**_NONE, "scaled": False},
            "reinforce_pp": {
                **_CLIP,
                "beta": 0.01,
                "tis_cap": None,
                "dual_clip": None,
                "group_baseline": False,
            },
            "cispo": {"eps_low": 1.0, "eps_high": 0.28, **_NONE},
            "gspo": {"eps_low": 3e-4, "eps_high": 4e-4, **_NONE},
            "ppo": {
                **_CLIP,
                **_NONE,
                "dual_clip": None,
                "gamma": 1.0,
                "lam": 0.95,
                "whiten": False,
                "vf_coef": 0.5,
                "vf_clip": 0.2,
            },
            "decoupled_ppo": {**_CLIP, **_NONE, "dual_clip": None},
        }.items()
    }
)
PRESETS: tuple[str, ...] = tuple(PRESET_DEFAULTS)
COMMON_OVERRIDES = ("eps_low", "eps_high", "beta", "tis_cap")  # what the presets share


def presets_taking(name: str) -> list[str]:
    """The presets that accept override `name`."""
    return [p for p, defaults in PRESET_DEFAULTS.items() if name in defaults]


def _suggest(word: str, choices: list[str]) -> str:
    hint = suggest(word, choices)
    return f"; {hint}" if hint else ""


@dataclass(frozen=True, kw_only=True)
class ObjectiveConfig:
    """`rlx_trainer.objective.preset(preset, **overrides())`; unset overrides keep the preset's
    defaults (PRESET_DEFAULTS). An override the preset has no use for is refused."""

    preset: str = "grpo"  # a preset of DESIGN §5 (PRESETS); not ppo, which needs a value head
    eps_low: float | None = None  # lower clip bound ε_low of the preset's clip, 0-1
    eps_high: float | None = None  # upper clip bound ε_high, >= 0
    beta: float | None = None  # KL coefficient, >= 0; 0 = no KL term (no reference model)
    tis_cap: float | None = None  # truncated-IS cap C (seeds/004), > 0; unset = off
    dual_clip: float | None = None  # dual-clip PPO's c for A < 0, > 1; unset = off
    scaled: bool | None = None  # rloo: multiply the advantage by (G−1)/G
    group_baseline: bool | None = None  # reinforce_pp: subtract the group mean before whitening
    gamma: float | None = None  # ppo: GAE discount γ, 0-1
    lam: float | None = None  # ppo: GAE λ, 0-1
    whiten: bool | None = None  # ppo: whiten the advantages over the batch's response tokens
    vf_coef: float | None = None  # ppo: weight of the value loss, >= 0
    vf_clip: float | None = None  # ppo: clip range of the value around V_old, >= 0

    def __post_init__(self) -> None:
        if self.preset not in PRESET_DEFAULTS:
            raise ConfigError(
                f"unknown objective preset {self.preset!r}{_suggest(self.preset, list(PRESETS))} "
                f"(known: {', '.join(PRESETS)})",
                field="preset",
                value=self.preset,
                allowed=", ".join(PRESETS),
            )
        if self.preset == "ppo":
            raise ConfigError(
                "the ppo preset needs a value head, which rlx_model does not have; "
                "use decoupled_ppo or grpo",
                field="preset",
                value=self.preset,
            )
        accepted = PRESET_DEFAULTS[self.preset]
        for name, value in self.overrides().items():
            if name not in accepted:
                what = f"has no clip for {name} to bound" if name.startswith("eps_") else ""
                raise ConfigError(
                    f"preset {self.preset!r} {what or f'takes no {name}'} (presets taking it: "
                    f"{', '.join(presets_taking(name))}; this one takes "
                    f"{', '.join(accepted)})",
                    field=name,
                    value=value,
                    allowed=", ".join(accepted),
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError("must be finite", field=name, value=value)
        self._check_ranges()

    def _check_ranges(self) -> None:
        bounds = {
            "eps_low": (0.0, 1.0),
            "gamma": (0.0, 1.0),
            "lam": (0.0, 1.0),
            "eps_high": (0.0, math.inf),
            "beta": (0.0, math.inf),
            "vf_coef": (0.0, math.inf),
            "vf_clip": (0.0, math.inf),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                allowed = f"{low:g}-{high:g}" if high < math.inf else f">= {low:g}"
                raise ConfigError(f"must be {allowed}", field=name, value=value, allowed=allowed)
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise ConfigError("must be > 0", field="tis_cap", value=self.tis_cap)
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ConfigError("must be > 1", field="dual_clip", value=self.dual_clip)

    def overrides(self) -> dict[str, float | bool]:
        """The overrides that are set, by name: what `preset(self.preset, **...)` takes."""
        out: dict[str, float | bool] = {}
        for name in OVERRIDES:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def effective(self) -> dict[str, Value]:
        """Every parameter of the preset with its value: the override, else the default."""
        return {**PRESET_DEFAULTS[self.preset], **self.overrides()}

    @property
    def has_kl(self) -> bool:
        """Whether the objective has a KL term (its effective beta > 0): it needs a reference
        model."""
        beta = self.effective()["beta"]  # every preset has a beta (0 = no KL term)
        return beta is not None and float(beta) > 0


# The override names: the fields of ObjectiveConfig but the preset. Every preset's table takes
# only these (checked once, here, so a name added to one place and not the other fails at import).
OVERRIDES: tuple[str, ...] = tuple(f.name for f in fields(ObjectiveConfig) if f.name != "preset")
_unknown = {n for d in PRESET_DEFAULTS.values() for n in d} ^ set(OVERRIDES)
if _unknown:
    raise TypeError(f"PRESET_DEFAULTS and ObjectiveConfig disagree on overrides {sorted(_unknown)}")
