"""Rules across sections for ``train.agent = "forecast"``, checked before anything is allocated.

The greedy network trades market orders of normal urgency at the five exposure levels, sized by
equity (``execution``): so the env must take factored actions (the exposure mode routes a level to
a limit or IoC order by the spread and volatility) and Kelly sizing must be off (the band prices a
level, not a Kelly multiple of it). The learner has no discount, so ``train.gamma_grid`` cannot
spread it. A forecast over the last bars (``forecast.policy = "attention"``) runs alone: the merged
ensemble of ``train.ensemble`` members runs per-bar networks only. The horizon must leave training bars with a target inside every fold's training slice.
"""

from __future__ import annotations

from typing import Any, Sequence

from foxhunt.agents.forecast.trainer import check_horizon
from foxhunt.errors import ConfigError


def check_config(cfg: Any, folds: Sequence[Any]) -> None:
    """ConfigError naming the rule and the setting that fixes it; ``folds``: the folds as trained on
    (with ``train.select = "inner"``, each training window less its held-back tail)."""
    env = cfg.env
    if env.action_mode != "factored":
        raise ConfigError(f"train.agent = 'forecast' trades market orders of normal urgency, which env.action_mode = "
                          f"{env.action_mode!r} would route by spread and volatility; set env.action_mode = \"factored\"")
    if env.kelly:
        raise ConfigError("train.agent = 'forecast' sizes positions by equity alone (its cost band prices a level, not a "
                          "Kelly multiple of it); set env.kelly = false")
    if cfg.train.gamma_grid:
        raise ConfigError("train.gamma_grid spreads a discount, and train.agent = 'forecast' has none; leave train.gamma_grid empty")
    if cfg.forecast.policy != "mlp" and cfg.train.ensemble > 1:
        raise ConfigError(f"forecast.policy = {cfg.forecast.policy!r} runs alone in the torch backtester (its network reads "
                          f"the last bars of the market), not as a merged ensemble; set train.ensemble = 1 (got {cfg.train.ensemble})")
    intervals = cfg.train.decision_grid or (cfg.env.decision_interval,)
    for fold in folds:
        for k in intervals:
            check_horizon(cfg.forecast.horizon_for(k), fold)


__all__ = ["check_config"]
