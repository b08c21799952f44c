"""The tearsheet section of a report.html (train, tune's hold-out, backtest): the out-of-sample
curve of windows joined in order beside its benchmarks, as a quant reads it (QuantStats / pyfolio):

* a table of each curve's total return, CAGR, volatility, Sharpe and max drawdown;
* with a benchmark (buy-and-hold), each other curve's beta on it and what is left, its timing
  (``timing_report.timing_table``: one beta and timing Sharpe over the joined series);
* one figure, dates on its time axis, window boundaries dashed: equity, the first
  curve's underwater (drawdown) plot, and its rolling Sharpe (``tearsheet.rolling_window``);
* the first curve's monthly returns as a year × month heat-map table (and each year's total);
* trades per window and the average holding time.

Statistics are ``foxhunt.backtest.tearsheet``'s; figures are matplotlib PNGs embedded as base64, so
the report stays one self-contained file.
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import Any, Sequence

import numpy as np

from foxhunt.backtest.tearsheet import (Joined, drawdown, equity, monthly_returns, rolling_sharpe, rolling_window,
                                        summary)

COLORS = ("tab:blue", "tab:gray", "tab:orange", "tab:green", "tab:purple")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def png(fig: Any) -> str:
    """A matplotlib figure as base64 PNG text (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def img(b64: str) -> str:
    return f"<img src='data:image/png;base64,{b64}'/>"


def _num(v: float, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "−∞"
    return fmt.format(v)


def dates(ns: np.ndarray) -> np.ndarray:
    """int64 UTC ns -> datetime64[ms] for matplotlib's date axis."""
    return np.asarray(ns, np.int64).astype("datetime64[ns]").astype("datetime64[ms]")


def summary_table(joined: Joined, bars_per_year: float, names: dict[str, str]) -> str:
    """One row per curve: total return, CAGR, annual volatility, Sharpe, max drawdown."""
    head = "<tr><th></th><th>total return</th><th>CAGR</th><th>volatility</th><th>Sharpe</th><th>max DD</th></tr>"
    rows = []
    for key, label in names.items():
        s = summary(joined.returns[key], bars_per_year)
        rows.append(f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{_num(s['total_return'], '{:+.2%}')}</td>"
                    f"<td>{_num(s['annual_return'], '{:+.2%}')}</td><td>{_num(s['annual_volatility'], '{:.2%}')}</td>"
                    f"<td>{_num(s['sharpe'], '{:+.2f}')}</td><td>{_num(s['max_drawdown'], '{:.2%}')}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def figure(joined: Joined, bars_per_year: float, names: dict[str, str]) -> str:
    """Equity of every curve, underwater and rolling Sharpe of the first; base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = dates(joined.equity_times())
    first = next(iter(names))
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3, 1.3]})
    for (key, label), color in zip(names.items(), COLORS):
        eq = equity(joined.returns[key])
        ax1.plot(x, eq, lw=1.1 if key == first else 0.9, color=color, label=label)
    ax1.set_ylabel("equity (start = 1)")
    ax1.set_title("out of sample: the windows joined in order", fontsize=10)
    ax1.legend(fontsize=8, loc="best")
    dd = drawdown(equity(joined.returns[first]))
    ax2.fill_between(x, dd, 0.0, color=COLORS[0], alpha=0.4, lw=0)
    ax2.set_ylabel(f"{names[first]}\nunderwater")
    window = rolling_window(bars_per_year, len(joined.times))
    rs = rolling_sharpe(joined.returns[first], window, bars_per_year)
    if rs.shape[0]:
        ax3.plot(dates(joined.times[window - 1 :]), np.where(np.isfinite(rs), rs, np.nan), color=COLORS[0], lw=0.9)
    ax3.axhline(0.0, color="k", lw=0.6)
    ax3.set_ylabel(f"rolling Sharpe\n({window} bars)")
    for ax in (ax1, ax2, ax3):
        for b in joined.bounds:  # where each later window begins
            ax.axvline(x[b], color="k", lw=0.5, ls="--", alpha=0.4)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return png(fig)


def _cell_style(v: float, scale: float) -> str:
    """A green (gain) / red (loss) background whose strength follows |v| / scale."""
    if math.isnan(v) or scale <= 0:
        return ""
    a = min(1.0, abs(v) / scale) * 0.75
    rgb = "46,160,67" if v > 0 else "214,39,40"
    return f" style='background:rgba({rgb},{a:.2f})'"


def monthly_table(times: np.ndarray, returns: np.ndarray, label: str) -> str:
    """Year × month table of compounded monthly returns, coloured as a heat map, with year totals."""
    months = monthly_returns(times, returns)
    if not months:
        return ""
    scale = max(abs(v) for v in months.values()) or 1.0
    head = "<tr><th>year</th>" + "".join(f"<th>{m}</th>" for m in _MONTHS) + "<th>year</th></tr>"
    rows = []
    for year in sorted({y for y, _ in months}):
        cells, total = [], 1.0
        for m in range(1, 13):
            v = months.get((year, m))
            if v is None:
                cells.append("<td></td>")
                continue
            total *= 1.0 + v
            cells.append(f"<td{_cell_style(v, scale)}>{v:+.1%}</td>")
        rows.append(f"<tr><th>{year}</th>{''.join(cells)}<td><b>{total - 1:+.1%}</b></td></tr>")
    return (f"<h3>Monthly returns: {html.escape(label)} (UTC calendar months, compounded)</h3>"
            f"<table>{head}{''.join(rows)}</table>")


def trades_table(rows: Sequence[dict[str, Any]]) -> str:
    """Per window: label, trades, average holding in bars and in time (rows: window, label, trades,
    holding_bars, holding_s)."""
    head = "<tr><th>window</th><th>trades</th><th>avg holding (bars)</th><th>avg holding (time)</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(str(r['window']))}</td><td>{r['trades']}</td><td>{_num(r['holding_bars'], '{:.1f}')}</td>"
        f"<td>{duration(r['holding_s'])}</td></tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def duration(seconds: float) -> str:
    """Seconds in words: "3.5 days", "6.0 h", "45 min"; "–" for NaN."""
    if seconds is None or math.isnan(seconds):
        return "–"
    for unit, size in (("days", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def section(joined: Joined, bars_per_year: float, names: dict[str, str], trades: Sequence[dict[str, Any]] = (),
            note: str = "", window: str = "validation window", benchmark: str | None = None) -> str:
    """The whole tearsheet section (``names``: curve key -> label, the first is the one examined;
    ``window``: what a window is, for the heading; ``benchmark``: the key of buy-and-hold's curve,
    which the timing table regresses the others on; None: no timing table)."""
    from foxhunt.backtest.timing_report import timing_table

    names = {k: v for k, v in names.items() if k in joined.returns}
    if not names or joined.times.shape[0] < 2:
        return ""
    first = next(iter(names))
    first_t, last_t = dates(joined.equity_times()[[0, -1]])
    parts = [f"<h2>Out of sample: {len(joined.bounds) + 1} {window}{'s' if joined.bounds else ''} joined, "
             f"{str(first_t)[:10]} → {str(last_t)[:10]}</h2>",
             f"<p>{html.escape(note)}</p>" if note else "",
             summary_table(joined, bars_per_year, names),
             timing_table(joined, bars_per_year, names, benchmark) if benchmark is not None else "",
             img(figure(joined, bars_per_year, names)),
             monthly_table(joined.times, joined.returns[first], names[first])]
    if trades:
        parts.append("<h3>Trades per window and holding time</h3>" + trades_table(trades))
    return "".join(parts)
