"""Rules across sections for ``train.agent = "direct"``, checked before anything is allocated.

The training P&L (``agents.direct.pnl``) is the env's execution for market orders of normal urgency
at the five exposure levels, sized by equity: what the greedy network sends among the env's 45
factored actions. So the env must take factored actions (the exposure mode routes a level to a
limit or IoC order by the spread and volatility, which the training P&L does not book), and Kelly
sizing (a multiplier from the trades' history) must be off. The learner has no discount, so
``train.gamma_grid`` cannot spread it. A policy over the last bars (``direct.policy = "attention"``)
runs alone: the merged ensemble of ``train.ensemble`` members runs per-bar networks only.
"""

from __future__ import annotations

from typing import Any, Sequence

from foxhunt.agents.direct.trainer import check_window
from foxhunt.errors import ConfigError


def check_config(cfg: Any, folds: Sequence[Any]) -> None:
    """ConfigError naming the rule and the setting that fixes it; ``folds``: the folds as trained on
    (with ``train.select = "inner"``, each training window less its held-back tail)."""
    env = cfg.env
    if env.action_mode != "factored":
        raise ConfigError(f"train.agent = 'direct' trades market orders of normal urgency, which env.action_mode = "
                          f"{env.action_mode!r} would route by spread and volatility; set env.action_mode = \"factored\"")
    if env.kelly:
        raise ConfigError("train.agent = 'direct' sizes positions by equity alone (its training P&L has no Kelly multiplier); "
                          "set env.kelly = false")
    if cfg.train.gamma_grid:
        raise ConfigError("train.gamma_grid spreads a discount, and train.agent = 'direct' has none; leave train.gamma_grid empty")
    if cfg.direct.policy != "mlp" and cfg.train.ensemble > 1:
        raise ConfigError(f"direct.policy = {cfg.direct.policy!r} runs alone in the torch backtester (its network reads the "
                          f"last bars of the market), not as a merged ensemble; set train.ensemble = 1 (got {cfg.train.ensemble})")
    for fold in folds:
        check_window(cfg.direct, fold)


__all__ = ["check_config"]
