"""The ``[backtest]`` config section: how backtests are annualised and which episode rules they use.

Read by the walk-forward runner's validation backtests and by ``foxhunt backtest`` (whose
``--bars-per-year`` / ``--barriers`` flags override it).
"""

from __future__ import annotations

from pydantic import Field

from foxhunt.config import Section, register_section


class BacktestConfig(Section):
    """``[backtest]``: annualisation override and triple-barrier evaluation."""

    bars_per_year: float | None = Field(
        None, gt=0, le=1e9,
        description="annualisation factor of Sharpe / volatility / CAGR; default: inferred from the bars present "
                    "per calendar year in the data (foxhunt.backtest.annualisation)")
    barriers: bool = Field(
        False, description="triple-barrier evaluation: each round trip is labelled +1 profit / -1 stop / 0 time by "
                           "the env's barriers (env.profit_bps, stop_bps, max_holding); off: no labels")


register_section("backtest", BacktestConfig)

__all__ = ["BacktestConfig"]
