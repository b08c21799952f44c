"""The ``[train]`` config section and the built-in defaults of ``foxhunt train``.

``TrainConfig`` holds what the walk-forward runner needs beyond data, env and agent: epochs per
fold, checkpoint cadence and retention, warm start, evaluation outputs and logging switches.

``DEFAULT_TRAIN_TOML`` is the configuration ``foxhunt train`` uses when no ``--config`` is given:
a small run sized for a 2-core CPU (a few minutes) on built-in synthetic data. It is kept
byte-identical to ``configs/train-default.toml`` (a test checks), so ``foxhunt train`` and
``foxhunt train --config configs/train-default.toml`` are the same run. With ``--config FILE`` the
file is read on top of the plain class defaults (which are sized for a GPU), not on top of these.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, Sequence

from pydantic import Field, model_validator

from foxhunt.accel.config import reject_removed_keys
from foxhunt.agents.registry import names as learner_names

from foxhunt.config import Config, Section, apply_overrides, apply_values, build_config, register_section
from foxhunt.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


LEARNER_NAMES = learner_names()


class TrainConfig(Section):
    """Walk-forward training: the ``[train]`` section. Units in the field descriptions."""

    agent: Literal[LEARNER_NAMES] = Field(  # type: ignore[valid-type]
        "dqn", description="the learner (foxhunt.agents.registry): dqn ([dqn] section), ppo ([ppo] section), direct ([direct] section) or forecast ([forecast] section)")
    epochs: int = Field(10, ge=1, le=100_000, description="training epochs per fold")
    checkpoint_every: int = Field(0, ge=0, description="also checkpoint every this many epochs inside a fold (0: fold ends only)")
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="committed checkpoints kept (older ones are deleted)")
    warm_start: bool = Field(False, description="start each fold from the previous fold's weights instead of re-initialising")
    eval_buy_and_hold: bool = Field(True, description="also backtest buy-and-hold on each validation window")
    eval_chunk: int = Field(64, ge=1, le=4096, description="backtest steps per (captured) chunk")
    save_curves: bool = Field(True, description="write each fold's validation return/position curves")
    save_trades: bool = Field(True, description="write each fold's validation round trips (trades.csv)")
    tensorboard: bool = Field(True, description="write TensorBoard event files (one point per epoch)")
    report: bool = Field(True, description="write report.html at the end")
    progress: bool = Field(True, description="rich progress bars (fed by the epoch readback only)")
    threads: int = Field(0, ge=0, le=1024, description="torch CPU threads (0: torch's default)")
    train_cost_multiplier: float = Field(1.0, ge=1.0, le=100.0, description="the training env charges env.cost_bps and env.spread_bps × this (validation uses the real costs): a regulariser against churning on noise (docs/LEARNING.md)")
    cost_curriculum: int = Field(0, ge=0, le=1000, description="N > 0: the training cost multiplier ramps over each fold's first N epochs, train_cost_multiplier × e / N at epoch e (0-based: the first epoch trains without costs), then stays at train_cost_multiplier; 0: train_cost_multiplier from the start (foxhunt.train.agent.cost_multiplier)")
    mirror: bool = Field(False, description="train on the data and its mirror (every log return negated, foxhunt.data.mirror): half of the training episodes start in the mirrored bars, so no fixed direction earns in training and the policy must read direction from the features; validation, held-back selection and backtests use the data alone; on a pooled universe each symbol's own mirror, drawn with the symbol's weight, normalised with its statistics")
    select: Literal["last", "inner"] = Field("last", description="the network a fold ends with (evaluated, saved): the last epoch's, or (inner) the epoch with the best greedy Sharpe on a held-back tail of the training window: early stopping (foxhunt.train.selection)")
    ensemble: int = Field(1, ge=1, le=64, description="K > 1: train K agents on every fold (run.seed, run.seed + 1, …), each keeping its own selected epoch; the fold's model is their mean-Q (PPO: mean-logit) ensemble as one K-times-wider network (docs/LEARNING.md §10; foxhunt.train.team)")
    lockstep: bool = Field(True, description="K > 1 members (ensemble, gamma_grid, decision_grid): step them round by round, each member's device work on its own CUDA stream, so that they run side by side on the GPU (foxhunt.train.lockstep); false: one member's epoch after another's. Every member's results are the same either way")
    select_score: Literal["sharpe", "timing"] = Field("sharpe", description="select = inner: what an epoch is scored by on the held-back window: the greedy policy's Sharpe, or (timing) the Sharpe of its returns less their regression on the window's buy-and-hold returns, so that holding one exposure scores nothing and only timing counts (foxhunt.backtest.timing.timing_returns; the abstention bar reads the same score)")
    pool: bool = Field(True, description="a universe of several symbols (foxhunt.train.universe_runner): one agent a fold trained on the pooled training bars of every member symbol; false: one agent per symbol, each trained on its own bars as its file alone would be, on the universe's folds, written as the universe's per-symbol rows and pooled rows (foxhunt.train.per_symbol; its run under symbols/<SYMBOL>/)")
    symbol_weighting: Literal["bars", "equal"] = Field("bars", description="a universe: how an episode picks its symbol: in proportion to the symbol's training bars (bars), or each member symbol alike (equal)")
    inner_fraction: float = Field(0.2, gt=0.0, lt=0.9, description="select = inner: the fraction of each fold's training bars held back (after a purge gap of folds.purge bars) to score the epochs on")
    abstain: bool = Field(True, description="select = inner: a fold whose members' mean selected held-back Sharpe is not above abstain_z standard errors of that window gets a flat model (foxhunt.train.abstain)")
    gamma_grid: list[float] = Field(default_factory=list, max_length=8, description="select = inner, ensemble >= len: member k trains with gamma = grid[k mod len] (dqn.gamma or ppo.gamma), and each fold keeps the gamma whose members score best on the held-back window; abstention's bar is raised for the choice (foxhunt.train.gamma_grid). Empty: every member uses the agent section's gamma")
    gamma_grid_normalise: bool = Field(False, description="gamma_grid: member k's env.reward_scale is multiplied by (1 - gamma_k) / (1 - the grid's smallest gamma), so every member's Q-values (or values) have the scale of the shortest discount's; the greedy policy of each member is unchanged by a positive reward scale, its optimisation is not; off by default: on the H200 development family it made the 0.99 members churn (docs/LEARNING.md)")
    decision_grid: list[int] = Field(default_factory=list, max_length=8, description="select = inner, ensemble >= len × max(1, len(gamma_grid)): member m trains with env.decision_interval = grid[(m // G) mod len] (G = len(gamma_grid), at least 1), and each fold keeps the (gamma, interval) group whose members score best on the held-back window; abstention's bar is raised for the choice (foxhunt.train.gamma_grid). Empty: every member uses env.decision_interval")
    abstain_z: float = Field(3.0, ge=0.0, le=10.0, description="abstain: the bar in standard errors of the held-back Sharpe, SE = sqrt(bars per year / held-back bars); 3: on the H200 the planted-edge, regime and leak folds scored >= 4.7 SE, the no-edge and real-data folds <= 2.3 (docs/LEARNING.md §13)")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: object) -> object:
        reject_removed_keys("train", data)
        return data

    @model_validator(mode="after")
    def _grid(self) -> "TrainConfig":
        ks = self.decision_grid
        if ks:
            if any(k < 1 or k > 1024 for k in ks):
                raise ValueError(f"decision_grid {ks}: every interval must be in [1, 1024] bars")
            if len(set(ks)) != len(ks):
                raise ValueError(f"decision_grid {ks}: the intervals must differ")
            if self.select != "inner":
                raise ValueError("decision_grid needs select = \"inner\": the fold's interval is chosen on the held-back window")
            groups = len(ks) * max(1, len(self.gamma_grid))
            if self.ensemble < groups:
                raise ValueError(f"decision_grid has {len(ks)} intervals{f' × {len(self.gamma_grid)} discounts' if self.gamma_grid else ''} "
                                 f"but ensemble = {self.ensemble}: each group needs a member (ensemble >= {groups})")
        grid = self.gamma_grid
        if not grid:
            return self
        if any(not 0.0 <= g < 1.0 for g in grid):
            raise ValueError(f"gamma_grid {grid}: every discount must be in [0, 1)")
        if len(set(grid)) != len(grid):
            raise ValueError(f"gamma_grid {grid}: the discounts must differ")
        if self.select != "inner":
            raise ValueError("gamma_grid needs select = \"inner\": the fold's discount is chosen on the held-back window")
        if self.ensemble < len(grid):
            raise ValueError(f"gamma_grid has {len(grid)} discounts but ensemble = {self.ensemble}: each needs a member "
                             f"(ensemble >= {len(grid)}; a multiple of {len(grid)} gives each the same number)")
        return self


register_section("train", TrainConfig)


DEFAULT_TRAIN_TOML = """\
# Built-in configuration of `foxhunt train` (used when no --config is given).
# Sized for a 2-core CPU: 5 walk-forward folds of synthetic daily bars, 1.5-3 minutes in all.
# This file is a copy of foxhunt.train.config.DEFAULT_TRAIN_TOML (a test keeps them identical);
# `foxhunt train --config configs/train-default.toml` is the same run as `foxhunt train`.

[run]
seed = 0

[data]
source = "synthetic"
bars = 20000
bar_seconds = 86400       # daily bars: a bar's move (~1.3 %) is large against the trading costs
seed = 7
signal = 0.2              # a planted, documented edge: drift += 0.2 sigma * sign(previous return)

[folds]
train = 8000              # bars (expanding window: fold k trains on everything before its val)
val = 1000
purge = 60
max_folds = 5             # the last 5 folds

[env]
capital = 10000.0         # a small account relative to the synthetic volume (~1000 units a bar)
action_mode = "exposure"  # 5 actions: short, half short, flat, half long, long
reward_scale = 100.0      # per-bar returns in percent: rewards O(0.01-1)
barrier_profit_scale = 0.0
barrier_stop_scale = 0.0  # no barrier shaping: the reward is the portfolio return
episode_length = 256

[dqn]
n_envs = 128
hidden = [128, 128]
head_hidden = 64
gamma = 0.5               # short horizon: the edge is one bar ahead (and fits less noise)
rollout_len = 16
rounds_per_epoch = 24
train_steps_per_round = 4
batch_size = 256
buffer_capacity = 100000
warmup_transitions = 4096

[train]
epochs = 12
checkpoint_every = 4
train_cost_multiplier = 3.0  # training charges 3x the costs (validation the real ones): no churning on noise
"""


def default_train_config(overrides: Sequence[str] = (), values: dict[str, dict[str, Any]] | None = None,
                         preset: dict[str, dict[str, Any]] | None = None) -> Config:
    """The built-in ``foxhunt train`` configuration, ``preset`` ({section: {key: value}}: the bar
    interval's settings, ``foxhunt.train.interval_presets``) set over it, then ``section.key=value``
    overrides, then ``values`` ({section: {key: value}}, see ``load_config``)."""
    data: dict[str, Any] = tomllib.loads(DEFAULT_TRAIN_TOML)
    if preset:
        apply_values(data, preset)
    return config_from_dict(data, overrides, source="<built-in train defaults>", values=values)


def config_from_text(text: str, overrides: Sequence[str] = (), source: str = "<text>") -> Config:
    """Validate a TOML text plus overrides into a Config (the same rules as ``load_config``)."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return config_from_dict(data, overrides, source)


def config_from_dict(data: dict[str, Any], overrides: Sequence[str] = (), source: str = "<dict>",
                     values: dict[str, dict[str, Any]] | None = None) -> Config:
    """Apply ``section.key=value`` overrides, then ``values``, to a nested dict and validate it."""
    apply_overrides(data, overrides)
    if overrides:
        source = f"{source} + overrides"
    if values:
        apply_values(data, values)
    return build_config(data, source=source)
