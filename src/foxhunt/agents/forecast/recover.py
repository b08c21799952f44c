"""The forecast read back from a saved forecast model, for ``foxhunt backtest``'s IC and hit rate.

A forecast model file holds the packed greedy network (``execution.pack``), not the forecast network,
but the forecast is a difference of its outputs: at exposure x = 0 the level scores are
f·L − c·|L| − r·L², so the market orders of normal urgency at levels +1 and −1 differ by 2f (the
cost and risk terms are even in L and cancel, and so do the dueling value and advantage mean). A
merged ensemble's mean Q gives the members' mean forecast, as the run's ``learner_eval`` does. A
network over the last bars (``forecast.policy = "attention"``: it binds the market's bars) is not
read back. The horizon h is the model file's ``forecast_horizon`` (``model_extra``)."""

from __future__ import annotations

from typing import Any

import torch

from foxhunt.agents.forecast.evaluate import information
from foxhunt.agents.forecast.execution import LEVELS, MARKET_NORMAL
from foxhunt.agents.forecast.target import realised
from foxhunt.market import MarketData

UP = 9 * LEVELS.index(1.0) + MARKET_NORMAL  # level +1's market order of normal urgency (a factored action)
DOWN = 9 * LEVELS.index(-1.0) + MARKET_NORMAL  # level −1's


def model_extra(cfg: Any, decision_interval: int) -> dict[str, Any]:
    """What a forecast model file records beyond the others': its horizon h (bars)."""
    return {"forecast_horizon": int(cfg.forecast.horizon_for(decision_interval))}


@torch.no_grad()
def packed_forecasts(qnet: Any, x: torch.Tensor) -> torch.Tensor:
    """The forecasts [N] (float32, in h-bar volatilities) of a packed greedy network at normalised
    features x [N, F]: (Q[level +1] − Q[level −1]) / 2 at a flat portfolio (module docstring)."""
    obs = torch.cat([x, x.new_zeros(x.shape[0], 3)], 1)
    q = qnet(obs)
    return (q[:, UP] - q[:, DOWN]) / 2.0


@torch.no_grad()
def window_report(qnet: Any, market: MarketData, first: int, end: int, extra: dict[str, Any]) -> dict[str, Any] | None:
    """{kind, horizon, ic_spearman, ic_pearson, hit_rate, n} of the model's forecast on bars first … end − 1
    (``evaluate.information``: every bar whose next h bars lie inside, against their realised log
    return), features normalised with the market's current statistics (set them to the model's); None
    when the model records no horizon or reads the last bars."""
    h = extra.get("forecast_horizon")
    if h is None or hasattr(qnet, "bind_history"):
        return None
    h = int(h)
    out: dict[str, Any] = {"kind": "forecast", "horizon": h}
    last = end - 1 - h
    if last < first:
        return {**out, **information(torch.zeros(0), torch.zeros(0))}
    bars = torch.arange(first, last + 1, dtype=torch.int64, device=market.device)
    x = (market.features.index_select(0, bars) - market.norm_mean) * market.norm_inv_std
    return {**out, **information(packed_forecasts(qnet, x), realised(market, bars, h))}


__all__ = ["DOWN", "UP", "model_extra", "packed_forecasts", "window_report"]
