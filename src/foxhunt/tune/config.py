"""The ``[tune]`` config section: search space, objective, sampler, pruner, storage, hold-out.

``[tune.space]`` maps any config key (``section.key``) to a range or a list of choices::

    [tune.space]
    dqn.lr = { low = 1e-4, high = 3e-3, log = true }    # float range, log scale
    dqn.gamma = { low = 0.0, high = 0.9 }                # float range
    dqn.batch_size = { low = 64, high = 512, step = 64 } # int range (both ends integers)
    dqn.hidden = [[64, 64], [128, 128]]                  # categorical (any TOML values)
    dqn.sampler = { choices = ["uniform", "proportional"] }

(TOML dotted keys nest, so ``dqn.lr = …`` inside ``[tune.space]`` is the table ``space.dqn.lr``;
both spellings are accepted.) Entries are checked when the config is read: an unknown key, an
empty range, low > high or a log scale with low <= 0 is a one-line ConfigError naming the entry.
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from foxhunt.config import Config, Section, build_config, register_section
from foxhunt.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_SPEC_KEYS = {"low", "high", "log", "step", "choices"}


@dataclass(frozen=True)
class SpaceEntry:
    """One searched key. kind: "float" | "int" | "categorical"; choices hold TOML values."""

    key: str
    kind: Literal["float", "int", "categorical"]
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def flatten_space(raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"dqn": {"lr": {...}}}`` and ``{"dqn.lr": {...}}`` both become ``{"dqn.lr": {...}}``."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and not (set(v) & _SPEC_KEYS):
            out.update(flatten_space(v, key + "."))
        else:
            out[key] = v
    return out


def parse_entry(key: str, spec: Any) -> SpaceEntry:
    """One ``[tune.space]`` entry → SpaceEntry; ValueError with the rule broken otherwise."""
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, dict):
        raise ValueError(f"{key}: expected {{ low = …, high = … }} or a list of choices, got {spec!r}")
    extra = sorted(set(spec) - _SPEC_KEYS)
    if extra:
        raise ValueError(f"{key}: unknown field '{extra[0]}' (known: {', '.join(sorted(_SPEC_KEYS))})")
    if "choices" in spec:
        if set(spec) - {"choices"}:
            raise ValueError(f"{key}: choices cannot be combined with low/high/log/step")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"{key}: choices must be a non-empty list")
        return SpaceEntry(key, "categorical", choices=tuple(choices))
    if "low" not in spec or "high" not in spec:
        raise ValueError(f"{key}: a range needs both low and high")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")
    if not _is_num(low) or not _is_num(high):
        raise ValueError(f"{key}: low and high must be finite numbers (got low={low!r}, high={high!r})")
    if not isinstance(log, bool):
        raise ValueError(f"{key}: log must be true or false (got {log!r})")
    if low > high:
        raise ValueError(f"{key}: low {low} > high {high}")
    if low == high:
        raise ValueError(f"{key}: empty range (low = high = {low}); give a fixed value in its own section instead")
    if log and low <= 0:
        raise ValueError(f"{key}: log scale needs low > 0 (got low={low})")
    kind: Literal["float", "int"] = "int" if _is_int(low) and _is_int(high) else "float"
    if step is not None:
        if not _is_num(step) or step <= 0:
            raise ValueError(f"{key}: step must be a number > 0 (got {step!r})")
        if log:
            raise ValueError(f"{key}: step and log cannot be combined")
        if kind == "int" and not _is_int(step):
            raise ValueError(f"{key}: an integer range needs an integer step (got {step!r})")
    return SpaceEntry(key, kind, low=low, high=high, log=log, step=step)


def _check_key(key: str) -> None:
    from foxhunt.config import _registered_sections

    sections = _registered_sections()
    parts = key.split(".")
    if len(parts) != 2:
        raise ValueError(f"{key}: unknown key (expected section.key, e.g. dqn.lr)")
    section, field = parts
    if section == "tune" or section not in sections:
        known = ", ".join(sorted(s for s in sections if s != "tune"))
        raise ValueError(f"{key}: unknown key (section '{section}' is not searchable; sections: {known})")
    if field not in sections[section].model_fields:
        raise ValueError(f"{key}: unknown key (section '{section}' has no key '{field}')")


def parse_space(raw: dict[str, Any]) -> dict[str, SpaceEntry]:
    """Every entry of ``[tune.space]`` parsed and its key checked against the config sections."""
    out: dict[str, SpaceEntry] = {}
    for key, spec in flatten_space(raw).items():
        _check_key(key)
        out[key] = parse_entry(key, spec)
    return out


class TuneConfig(Section):
    """``foxhunt tune``: the ``[tune]`` section (units in the descriptions)."""

    study: str = Field("default", min_length=1, max_length=120, description="study name (and directory under out_dir)")
    out_dir: str = Field("runs/tune", description="parent of the study directory")
    trials: int = Field(12, ge=0, le=1_000_000, description="finished trials (complete + pruned) the study stops at, across all workers")
    timeout_s: float = Field(0.0, ge=0.0, description="each worker asks no new trial after this many seconds (0: no limit)")
    storage: str = Field("", description="Optuna storage URL: empty = SQLite file study.db in the study directory; "
                                           "journal:PATH = a journal file; any SQLAlchemy URL (postgresql://…)")
    workers: int = Field(0, ge=0, le=1024, description="local worker processes (0: one per GPU, one in-process worker without CUDA)")
    population: int = Field(1, ge=1, le=256, description="trials a worker asks at once and runs as one walk-forward, their "
                            "trainers in one lockstep (foxhunt.tune.population; 1: one trial at a time)")
    objective: Literal["mean", "median", "worst"] = Field("mean", description="fold aggregation of the validation Sharpe")
    spread_penalty: float = Field(0.5, ge=0.0, description="score = aggregate − spread_penalty × std of fold Sharpes")
    min_trades: float = Field(0.0, ge=0.0, description="constraint: mean round trips per fold at least this")
    max_drawdown: float = Field(1.0, gt=0.0, le=1.0, description="constraint: every fold's max drawdown at most this (fraction)")
    constraint_penalty: float = Field(10.0, ge=0.0, description="subtracted from an infeasible trial's score (Sharpe units)")
    sampler: Literal["tpe", "cmaes", "random"] = "tpe"
    seed: int = Field(0, ge=0, description="sampler seed")
    startup_trials: int = Field(4, ge=0, description="random trials before TPE / CMA-ES model the space; also the pruner's startup")
    pruner: Literal["median", "wilcoxon", "none"] = "median"
    prune_warmup_folds: int = Field(1, ge=0, description="folds every trial runs before it may be pruned")
    holdout: float = Field(0.2, ge=0.0, le=0.8, description="fraction of the bars at the end that the search never sees (0: none)")
    universe_weights: Literal["inverse_vol", "equal"] = Field("inverse_vol", description="a universe of several symbols: the "
                                                             "portfolio whose validation returns score a fold (weights from "
                                                             "each fold's training volatilities, or equal)")
    heartbeat_s: int = Field(5, ge=1, le=3600, description="RDB storages: seconds between a running trial's heartbeats")
    grace_s: int = Field(20, ge=2, le=86_400, description="RDB storages: a running trial silent this long is marked FAIL")
    max_retry: int = Field(2, ge=0, le=100, description="times a trial failed by a lost heartbeat is re-queued")
    space: dict[str, Any] = Field(default_factory=dict, description="searched keys (see foxhunt.tune.config)")

    @field_validator("study")
    @classmethod
    def _study_name(cls, v: str) -> str:
        if "/" in v or v.startswith(".") or v != v.strip():
            raise ValueError(f"study name {v!r}: no '/', no leading '.', no surrounding spaces")
        return v

    @field_validator("space")
    @classmethod
    def _space_ok(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            parse_space(v)
        except ValueError as exc:
            raise PydanticCustomError("tune_space", "{msg}", {"msg": str(exc)}) from None
        return v

    def entries(self) -> dict[str, SpaceEntry]:
        return parse_space(self.space)


register_section("tune", TuneConfig)


def apply_params(data: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of the nested config dict with ``section.key`` values set (config values)."""
    out = copy.deepcopy(data)
    for key, v in values.items():
        section, field = key.split(".", 1)
        out.setdefault(section, {})[field] = v
    return out


def check_space_bounds(cfg: Config) -> None:
    """Each range end and each choice, set alone on the config, passes the target key's own rules
    (e.g. dqn.lr's high <= 1): a bad bound is an error before any trial runs."""
    base = cfg.to_dict()
    for key, e in cfg.tune.entries().items():
        values = list(e.choices) if e.kind == "categorical" else [e.low, e.high]
        for v in values:
            try:
                build_config(apply_params(base, {key: v}), source="<space check>")
            except ConfigError as exc:
                rule = str(exc).split(": ", 2)[-1]
                raise ConfigError(f"tune.space.{key}: value {v!r} breaks the key's rule: {rule}") from None


DEFAULT_TUNE_TOML = """\
# Built-in configuration of `foxhunt tune` (used when no --config is given).
# Sized for a 2-core CPU: 12 trials × 3 walk-forward folds of synthetic daily bars, median pruning,
# then the best configuration retrained and evaluated once on the last 20 % (the hold-out).
# This file is a copy of foxhunt.tune.config.DEFAULT_TUNE_TOML (a test keeps them identical).

[run]
seed = 0

[data]
source = "synthetic"
bars = 12000
bar_seconds = 86400
seed = 7
signal = 0.2

[folds]
train = 4000
val = 800
purge = 60
max_folds = 3

[env]
capital = 10000.0
action_mode = "exposure"
reward_scale = 100.0
barrier_profit_scale = 0.0
barrier_stop_scale = 0.0
episode_length = 128

[dqn]
n_envs = 32
hidden = [32, 32]
head_hidden = 16
gamma = 0.5
rollout_len = 8
rounds_per_epoch = 8
train_steps_per_round = 2
batch_size = 64
buffer_capacity = 16384
warmup_transitions = 512

[train]
epochs = 3
tensorboard = false
progress = false

[tune]
study = "default"
trials = 12
sampler = "tpe"
pruner = "median"
holdout = 0.2

[tune.space]
dqn.lr = { low = 1e-4, high = 1e-2, log = true }
dqn.gamma = { low = 0.0, high = 0.9 }
dqn.eps_decay_steps = { low = 20, high = 400, log = true }
"""


def default_tune_config(overrides: list[str] | tuple[str, ...] = (), values: dict[str, dict[str, Any]] | None = None) -> Config:
    """The built-in ``foxhunt tune`` configuration with ``section.key=value`` overrides, then ``values``
    ({section: {key: value}}, e.g. ``--data``'s paths), applied."""
    from foxhunt.train.config import config_from_dict

    return config_from_dict(tomllib.loads(DEFAULT_TUNE_TOML), overrides, source="<built-in tune defaults>", values=values)
