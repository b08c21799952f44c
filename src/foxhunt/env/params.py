"""Environment parameters: the validated config section ``[env]`` and its per-env device form.

``EnvParams`` is the parameters table of docs/ENV_SPEC.md as a frozen pydantic model; every rule of
the table is checked at construction with a message naming the parameter, its value and the rule.
``EnvTensors`` is what the device step reads: one ``[N]`` tensor per numeric parameter (scalars
broadcast, optional per-env overrides validated element by element, errors naming the env index),
with a few derived quantities precomputed (bps → fractions). Its tensors are updated in place by
``EnvTensors.update_`` so that captured CUDA graphs stay valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal, Mapping

import numpy as np
import torch
from pydantic import Field, field_validator

from foxhunt.config import Section, register_section
from foxhunt.errors import ConfigError

BPS = 1e-4
DIVERSITY_WINDOW = 100
LOG2_3 = math.log2(3.0)


class EnvConfigError(ConfigError, ValueError):
    """A per-env parameter override or the fold binding broke a rule (a ConfigError and a ValueError)."""


@dataclass(frozen=True)
class Rule:
    """An interval rule: ``lo < x`` / ``lo <= x`` and ``x < hi`` / ``x <= hi`` (None: unbounded)."""

    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False

    def text(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"

    def ok(self, x: np.ndarray) -> np.ndarray:
        """Elementwise: x satisfies the rule (NaN never does; ±inf only where unbounded)."""
        x = np.asarray(x, dtype=np.float64)
        good = np.isfinite(x)
        if self.lo is not None:
            good &= (x > self.lo) if self.lo_open else (x >= self.lo)
        if self.hi is not None:
            good &= (x < self.hi) if self.hi_open else (x <= self.hi)
        return good


RULES: dict[str, Rule] = {
    "capital": Rule(0, True),
    "max_position": Rule(0, True, 10, False),
    "reserve": Rule(0, False, 1, True),
    "cost_bps": Rule(0),
    "spread_bps": Rule(0),
    "impact_eta": Rule(0),
    "max_impact": Rule(0),
    "participation": Rule(0, True, 1, False),
    "vol_lambda": Rule(0, True, 1, True),
    "profit_bps": Rule(0, True),
    "stop_bps": Rule(0, True, 10_000, True),
    "max_holding": Rule(1),
    "barrier_profit_scale": Rule(-1),
    "barrier_stop_scale": Rule(-1),
    "risk_threshold": Rule(0, False, 10, False),
    "risk_weight": Rule(0),
    "diversity_threshold": Rule(0, False, LOG2_3, False),
    "diversity_penalty": Rule(0),
    "curiosity_weight": Rule(0),
    "curiosity_max": Rule(0),
    "dsr_eta": Rule(0, True, 1, True),
    "dsr_clip": Rule(0, True),
    "reward_scale": Rule(0, True),
    "kelly_fraction": Rule(0, True, 1, False),
    "kelly_min_mult": Rule(0, True, 1, False),
    "kelly_min_trades": Rule(1),
    "kelly_alpha": Rule(0, True, 1, True),
    "episode_length": Rule(1),
    "bust_fraction": Rule(0, False, 1, True),
}
INT_PARAMS = ("max_holding", "kelly_min_trades", "episode_length")
BOOL_PARAMS = ("end_on_barrier", "kelly")
PER_ENV_PARAMS = tuple(RULES) + BOOL_PARAMS
"""Parameters that may vary across envs (everything but reward_mode, action_mode, diversity_window)."""


class EnvParams(Section):
    """The ``[env]`` config section: one value per parameter of ENV_SPEC.md's table."""

    capital: float = 1e6
    max_position: float = 1.0
    reserve: float = 0.05
    cost_bps: float = 1.0
    spread_bps: float = 1.0
    impact_eta: float = 0.1
    max_impact: float = 0.05
    participation: float = 0.1
    vol_lambda: float = 0.94
    profit_bps: float = 50.0
    stop_bps: float = 50.0
    max_holding: int = 60
    barrier_profit_scale: float = 0.5
    barrier_stop_scale: float = -0.5
    end_on_barrier: bool = False
    risk_threshold: float = 0.8
    risk_weight: float = 0.001
    diversity_window: Literal[100] = DIVERSITY_WINDOW
    diversity_threshold: float = 1.0
    diversity_penalty: float = 1e-4
    curiosity_weight: float = 1.0
    curiosity_max: float = 1e-4
    reward_mode: Literal["return", "pnl", "dsr"] = "return"
    dsr_eta: float = 0.01
    dsr_clip: float = 10.0
    reward_scale: float = 1.0
    kelly: bool = False
    kelly_fraction: float = 0.5
    kelly_min_mult: float = 0.1
    kelly_min_trades: int = 10
    kelly_alpha: float = 0.05
    episode_length: int = 256
    bust_fraction: float = 0.1
    action_mode: Literal["factored", "exposure"] = "factored"
    decision_interval: int = Field(1, ge=1, le=1024)
    """k: the agent chooses an action every k bars and the env holds it in between (execution, costs,
    barriers, sizing and penalties stay per bar); a learner's transition spans one decision. A host
    fact, the same for every env (not per-env)."""

    @field_validator(*RULES)
    @classmethod
    def _check_rule(cls, v: Any, info: Any) -> Any:
        rule = RULES[info.field_name]
        if not bool(rule.ok(np.asarray(float(v)))):
            raise ValueError(f"{info.field_name} = {v!r} breaks the rule: must be {rule.text()} and finite")
        return v

    @property
    def n_actions(self) -> int:
        """45 in factored mode, 5 in exposure mode."""
        return 45 if self.action_mode == "factored" else 5


register_section("env", EnvParams)


def _as_host_array(name: str, value: Any, n_envs: int) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        arr = value.detach().to("cpu", torch.float64).numpy()
    else:
        arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n_envs, float(arr))
    if arr.shape != (n_envs,):
        raise EnvConfigError(f"per_env[{name!r}]: expected a scalar or shape [{n_envs}], got shape {list(arr.shape)}")
    return arr


def validate_per_env(params: EnvParams, n_envs: int, per_env: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Host float64 [N] array of every per-env parameter: params' value, or the override, checked.

    Errors name the parameter, the first offending env index, its value and the rule.
    """
    per_env = dict(per_env or {})
    unknown = sorted(set(per_env) - set(PER_ENV_PARAMS))
    if unknown:
        raise EnvConfigError(
            f"per_env[{unknown[0]!r}]: not a per-env parameter (allowed: {', '.join(PER_ENV_PARAMS)})"
        )
    out: dict[str, np.ndarray] = {}
    for name in PER_ENV_PARAMS:
        if name not in per_env:
            out[name] = np.full(n_envs, float(getattr(params, name)))
            continue
        arr = _as_host_array(name, per_env[name], n_envs)
        if name in BOOL_PARAMS:
            bad = ~np.isin(arr, (0.0, 1.0))
            rule_text = "a bool (0 or 1)"
        else:
            rule = RULES[name]
            bad = ~rule.ok(arr)
            rule_text = rule.text() + " and finite"
            if name in INT_PARAMS:
                bad |= np.isfinite(arr) & (arr != np.round(arr))
                rule_text += " and a whole number"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise EnvConfigError(f"per_env[{name!r}][{i}] = {arr[i]!r} breaks the rule: must be {rule_text} (env {i})")
        out[name] = arr
    return out


@dataclass
class EnvTensors:
    """Per-env parameters on the device, each [N]; what the step reads.

    float32: capital, max_position, reserve, cost_rate (cost_bps·bps), half_spread (½·spread_bps·bps),
    impact_eta, max_impact, participation, vol_lambda, profit_frac, stop_frac (bps·bps), max_holding_f,
    barrier_profit_scale, barrier_stop_scale, risk_threshold, risk_weight, diversity_threshold,
    diversity_penalty, curiosity_weight, curiosity_max, dsr_eta, dsr_clip, reward_scale,
    kelly_fraction, kelly_min_mult, kelly_alpha, bust_level (bust_fraction·capital).
    int64: max_holding, kelly_min_trades, episode_length.  bool: end_on_barrier, kelly.
    """

    capital: torch.Tensor
    max_position: torch.Tensor
    reserve: torch.Tensor
    cost_rate: torch.Tensor
    half_spread: torch.Tensor
    impact_eta: torch.Tensor
    max_impact: torch.Tensor
    participation: torch.Tensor
    vol_lambda: torch.Tensor
    profit_frac: torch.Tensor
    stop_frac: torch.Tensor
    max_holding_f: torch.Tensor
    barrier_profit_scale: torch.Tensor
    barrier_stop_scale: torch.Tensor
    risk_threshold: torch.Tensor
    risk_weight: torch.Tensor
    diversity_threshold: torch.Tensor
    diversity_penalty: torch.Tensor
    curiosity_weight: torch.Tensor
    curiosity_max: torch.Tensor
    dsr_eta: torch.Tensor
    dsr_clip: torch.Tensor
    reward_scale: torch.Tensor
    kelly_fraction: torch.Tensor
    kelly_min_mult: torch.Tensor
    kelly_alpha: torch.Tensor
    bust_level: torch.Tensor
    max_holding: torch.Tensor
    kelly_min_trades: torch.Tensor
    episode_length: torch.Tensor
    end_on_barrier: torch.Tensor
    kelly: torch.Tensor
    # Static (host) facts: the same for every env, fixed for the life of the tensors.
    base: EnvParams
    n_envs: int
    max_episode_length: int
    decision_bars: torch.Tensor | None = None
    """[N] int64, each env's own bars a decision (1 … ``base.decision_interval``, the largest): the one env of a stack
    of members at different decision intervals (``env.stacked``); None: every env decides every
    ``base.decision_interval`` bars."""

    @property
    def reward_mode(self) -> str:
        return self.base.reward_mode

    @property
    def action_mode(self) -> str:
        return self.base.action_mode

    @property
    def n_actions(self) -> int:
        return self.base.n_actions

    @property
    def decision_interval(self) -> int:
        return self.base.decision_interval

    @property
    def device(self) -> torch.device:
        return self.capital.device

    @staticmethod
    def _host_values(params: EnvParams, n_envs: int, per_env: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
        v = validate_per_env(params, n_envs, per_env)
        return {
            "capital": v["capital"],
            "max_position": v["max_position"],
            "reserve": v["reserve"],
            "cost_rate": v["cost_bps"] * BPS,
            "half_spread": 0.5 * v["spread_bps"] * BPS,
            "impact_eta": v["impact_eta"],
            "max_impact": v["max_impact"],
            "participation": v["participation"],
            "vol_lambda": v["vol_lambda"],
            "profit_frac": v["profit_bps"] * BPS,
            "stop_frac": v["stop_bps"] * BPS,
            "max_holding_f": v["max_holding"],
            "barrier_profit_scale": v["barrier_profit_scale"],
            "barrier_stop_scale": v["barrier_stop_scale"],
            "risk_threshold": v["risk_threshold"],
            "risk_weight": v["risk_weight"],
            "diversity_threshold": v["diversity_threshold"],
            "diversity_penalty": v["diversity_penalty"],
            "curiosity_weight": v["curiosity_weight"],
            "curiosity_max": v["curiosity_max"],
            "dsr_eta": v["dsr_eta"],
            "dsr_clip": v["dsr_clip"],
            "reward_scale": v["reward_scale"],
            "kelly_fraction": v["kelly_fraction"],
            "kelly_min_mult": v["kelly_min_mult"],
            "kelly_alpha": v["kelly_alpha"],
            "bust_level": v["bust_fraction"] * v["capital"],
            "max_holding": v["max_holding"],
            "kelly_min_trades": v["kelly_min_trades"],
            "episode_length": v["episode_length"],
            "end_on_barrier": v["end_on_barrier"],
            "kelly": v["kelly"],
        }

    @staticmethod
    def _dtype(name: str) -> torch.dtype:
        if name in INT_PARAMS:
            return torch.int64
        if name in BOOL_PARAMS:
            return torch.bool
        return torch.float32

    @classmethod
    def build(
        cls,
        params: EnvParams,
        n_envs: int,
        device: torch.device | str = "cpu",
        per_env: Mapping[str, Any] | None = None,
    ) -> "EnvTensors":
        """Validated [N] device tensors from ``params`` and optional per-env overrides (name → [N])."""
        if n_envs < 1:
            raise EnvConfigError(f"n_envs = {n_envs} breaks the rule: must be >= 1")
        host = cls._host_values(params, n_envs, per_env)
        dev = torch.device(device)
        tensors = {
            name: torch.as_tensor(np.ascontiguousarray(arr)).to(dev, cls._dtype(name)).contiguous()
            for name, arr in host.items()
        }
        return cls(**tensors, base=params, n_envs=n_envs, max_episode_length=int(host["episode_length"].max()))

    def update_(self, params: EnvParams, per_env: Mapping[str, Any] | None = None) -> None:
        """Replace every value in place (same N, same device; graphs that read them stay valid).

        reward_mode, action_mode, diversity_window and decision_interval are structural and must not change.
        """
        for key in ("reward_mode", "action_mode", "diversity_window", "decision_interval"):
            if getattr(params, key) != getattr(self.base, key):
                raise EnvConfigError(f"{key} cannot change in place ({getattr(self.base, key)!r} → {getattr(params, key)!r})")
        host = self._host_values(params, self.n_envs, per_env)
        for name, arr in host.items():
            getattr(self, name).copy_(torch.as_tensor(arr).to(self._dtype(name)))
        self.base = params
        self.max_episode_length = int(host["episode_length"].max())

    def tensor_names(self) -> list[str]:
        return [f.name for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)]


def check_episode_length(max_episode_length: int, train_start: int, train_end: int) -> None:
    """episode_length ≤ train length − 1 (random starts need at least one valid bar)."""
    train_len = train_end - train_start
    if max_episode_length > train_len - 1:
        raise EnvConfigError(
            f"episode_length = {max_episode_length} breaks the rule: must be <= train length - 1 = {train_len - 1} "
            f"for the fold's training range [{train_start}, {train_end})"
        )
