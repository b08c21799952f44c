"""Bars per year, inferred from the timestamps actually present in the data.

Sharpe, Sortino, volatility and CAGR need the number of bars in a year. A fixed guess from the bar
spacing is wrong for most markets: daily equity bars skip weekends and holidays (~252 a year, not
365), session-only intraday bars skip nights (5-minute bars 9:30-16:00 on weekdays: 78 a day), and
24/7 markets skip nothing (hourly: 365.25 × 24 = 8,766). So the rate is counted, not guessed:

    bars_per_year = (bars in [t_0, t_0 + k weeks)) / (k weeks in years),  k = floor(span / 1 week)

i.e. the bars actually present per calendar year over the longest whole number of weeks the series
covers from its first bar. Whole weeks make the count exact for any weekly pattern (weekends,
sessions) however short the series; over years the holidays are counted as they occur. A year is
365.25 days (52.18 weeks). A series shorter than one week falls back to its mean spacing
((n − 1) / span); one bar, or all bars at one time, gives ``DEFAULT_BARS_PER_YEAR`` (252).

``resolve_bars_per_year`` applies a user override (``--bars-per-year``, config ``backtest.bars_per_year``)
and says where the number came from, for the reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_BARS_PER_YEAR = 252.0
NS_PER_DAY = 86_400 * 10**9
WEEK_NS = 7 * NS_PER_DAY
YEAR_NS = 365.25 * NS_PER_DAY


def infer_bars_per_year(timestamps_ns: np.ndarray) -> float:
    """Bars per year of a sorted int64 nanosecond timestamp array (see the module docstring)."""
    ts = np.asarray(timestamps_ns, dtype=np.int64).reshape(-1)
    if ts.shape[0] < 2:
        return DEFAULT_BARS_PER_YEAR
    span = int(ts[-1]) - int(ts[0])
    if span <= 0:
        return DEFAULT_BARS_PER_YEAR
    weeks = span // WEEK_NS
    if weeks >= 1:
        end = int(ts[0]) + weeks * WEEK_NS
        count = int(np.searchsorted(ts, end, side="left"))  # bars in [t_0, t_0 + k weeks)
        return count / (weeks * WEEK_NS / YEAR_NS)
    return (ts.shape[0] - 1) / (span / YEAR_NS)


@dataclass(frozen=True)
class Annualisation:
    """The annualisation factor used by a backtest and where it came from (for the reports)."""

    bars_per_year: float
    source: str  # "inferred from the data" | "set by the user"

    def describe(self) -> str:
        return f"annualisation: {self.bars_per_year:,.1f} bars per year ({self.source})"


def resolve_bars_per_year(timestamps_ns: np.ndarray, override: float | None = None) -> Annualisation:
    """The user's ``override`` when given (must be > 0), else the rate inferred from the data."""
    if override is not None:
        if not (override > 0 and np.isfinite(override)):
            raise ValueError(f"bars_per_year = {override!r}: must be a finite number > 0")
        return Annualisation(float(override), "set by the user")
    return Annualisation(infer_bars_per_year(timestamps_ns), "inferred from the data")


__all__ = ["Annualisation", "DEFAULT_BARS_PER_YEAR", "infer_bars_per_year", "resolve_bars_per_year"]
