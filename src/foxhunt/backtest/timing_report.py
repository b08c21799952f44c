"""Timing apart from holding, for people: the HTML of ``foxhunt.backtest.timing``'s records.

* ``timing_table``: the out-of-sample tearsheet's table (``tearsheet_report.section``): each curve of
  the joined windows beside buy-and-hold with its beta, timing Sharpe (and its SE), timing return,
  R², time in market, long and short shares and the verdict, computed over the joined series;
* ``timing_cells`` / ``TIMING_HEAD``: the same figures of one fold's ``timing`` record, for the
  per-fold table of a training run's report (``foxhunt.train.report``);
* ``RULE``: the holding rule in one sentence, printed under both.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

from foxhunt.backtest.tearsheet import Joined
from foxhunt.backtest.timing import HOLDING_MIN_BETA, HOLDING_R_SQUARED, timing_block

RULE = (f"beta: the slope of the returns on buy-and-hold's (least squares with an intercept, same bars); timing: the "
        f"returns less beta × buy-and-hold's, its Sharpe annualised as the Sharpe. Holding: |beta| ≥ {HOLDING_MIN_BETA:g} "
        f"and the timing Sharpe within one standard error (SE = sqrt(bars per year / bars)) or buy-and-hold explaining "
        f"≥ {HOLDING_R_SQUARED:.0%} of the variance (R²); timing / mistiming: timing Sharpe above +1 SE / below −1 SE; "
        "noise: in the market with |beta| below that and timing within 1 SE; flat: no position.")

TIMING_HEAD = "<th>beta</th><th>timing Sharpe</th><th>time in market</th><th>long</th><th>short</th><th>verdict</th>"
"""The per-fold table's timing columns (``timing_cells`` fills them)."""


def _num(v: Any, fmt: str) -> str:
    if v is None or isinstance(v, bool):
        return "–"
    f = float(v)
    if math.isnan(f):
        return "–"
    if math.isinf(f):
        return "∞" if f > 0 else "−∞"
    return fmt.format(f)


def timing_cells(block: Mapping[str, Any] | None) -> str:
    """One fold's ``TIMING_HEAD`` cells from its metrics.json ``timing`` record ("–" where missing)."""
    b = block or {}
    return (f"<td>{_num(b.get('beta'), '{:+.2f}')}</td><td>{_num(b.get('timing_sharpe'), '{:+.2f}')}</td>"
            f"<td>{_num(b.get('time_in_market'), '{:.0%}')}</td><td>{_num(b.get('long_share'), '{:.0%}')}</td>"
            f"<td>{_num(b.get('short_share'), '{:.0%}')}</td><td>{html.escape(str(b.get('verdict') or '–'))}</td>")


def timing_table(joined: Joined, bars_per_year: float, names: Mapping[str, str], benchmark: str) -> str:
    """Every curve of ``names`` but the benchmark against ``joined.returns[benchmark]`` (buy-and-hold),
    over the joined windows: one beta and one timing Sharpe for the whole out-of-sample series;
    "" when the benchmark is not joined. Positions come from ``joined.positions`` where it holds the
    curve's (else the shares read "–")."""
    if benchmark not in joined.returns:
        return ""
    m = joined.returns[benchmark]
    head = ("<tr><th></th><th>beta</th><th>timing Sharpe</th><th>SE</th><th>timing return</th><th>R²</th>"
            "<th>time in market</th><th>long</th><th>short</th><th>verdict</th></tr>")
    rows = []
    for key, label in names.items():
        if key == benchmark or key not in joined.returns:
            continue
        t = timing_block(joined.returns[key], joined.positions.get(key), m, bars_per_year)
        rows.append(f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{_num(t['beta'], '{:+.2f}')}</td>"
                    f"<td>{_num(t['timing_sharpe'], '{:+.2f}')}</td><td>{_num(t['standard_error'], '{:.2f}')}</td>"
                    f"<td>{_num(t['timing_total_return'], '{:+.2%}')}</td><td>{_num(t['r_squared'], '{:.2f}')}</td>"
                    f"<td>{_num(t['time_in_market'], '{:.0%}')}</td><td>{_num(t['long_share'], '{:.0%}')}</td>"
                    f"<td>{_num(t['short_share'], '{:.0%}')}</td><td>{html.escape(str(t['verdict'] or '–'))}</td></tr>")
    if not rows:
        return ""
    return (f"<h3>Timing apart from holding (against {html.escape(names.get(benchmark, benchmark))}, the windows joined)</h3>"
            f"<table>{head}{''.join(rows)}</table><p>{html.escape(RULE)}</p>")


__all__ = ["RULE", "TIMING_HEAD", "timing_cells", "timing_table"]
