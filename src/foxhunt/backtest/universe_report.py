"""report.html of a universe backtest (``foxhunt.backtest.universe``): the portfolios first, then the
symbols.

Sections, in order: the notes; the portfolio rows (equal-weight and inverse-volatility, each policy);
per weighting rule, its curves' summary (total return, CAGR, volatility, Sharpe, max drawdown), the
timing table against buy-and-hold's portfolio, one equity + drawdown figure of the model's
portfolio against buy-and-hold's and the quant rule's on the union calendar, and the model
portfolio's monthly returns; a symbol × window heat map of the model's Sharpe (matplotlib
``imshow``); the best and worst symbols by the Sharpe of their windows joined; one section per
symbol (its windows joined: the summary of the model, buy-and-hold and the quant rule, and their
equity + drawdown figure for the first ``SYMBOL_FIGURES`` symbols, tables only after that so
that a universe of hundreds stays a readable file); the per-symbol metrics table. A training run's
report (``foxhunt.train.universe_oos``) is the same page with window = fold. The machinery is the single-file report's (``report``, ``tearsheet_report``):
tables, base64 PNG figures, one self-contained file written to a temporary name and renamed.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from foxhunt.backtest.portfolio import WEIGHT_RULES
from foxhunt.backtest.report import TABLE_COLUMNS, _atomic_write, equity_figure, html_page, html_table, img, png_base64
from foxhunt.backtest.tearsheet import Joined, summary
from foxhunt.backtest.tearsheet_report import monthly_table, summary_table
from foxhunt.backtest.timing_report import timing_table

__all__ = ["write_universe_report", "sharpe_heatmap", "ranked_symbols", "RULE_TITLES"]

RULE_TITLES = {"equal": "equal-weight", "inverse_vol": "inverse-volatility-weighted"}
SHOWN = 5  # best and worst symbols listed
SYMBOL_FIGURES = 40  # per-symbol equity figures drawn (each is a PNG inside the file)


def sharpe_heatmap(symbols: Sequence[str], sharpe: np.ndarray, label: str, window: str = "backtest window",
                   columns: Sequence[Any] | None = None) -> str:
    """A symbol × window heat map of Sharpe ratios ([S, windows]; ±inf and NaN shown blank), values
    written in the cells while they stay legible; a base64 PNG. window: the columns' name ("fold" for a
    training run), columns: their labels (default 0 … windows - 1)."""
    import matplotlib.pyplot as plt

    s, w = sharpe.shape
    finite = np.where(np.isfinite(sharpe), sharpe, np.nan)
    lim = float(np.nanmax(np.abs(finite))) if np.isfinite(finite).any() else 1.0
    fig, ax = plt.subplots(figsize=(min(2.0 + 0.9 * w, 14.0), min(1.2 + 0.28 * s, 40.0)))
    im = ax.imshow(np.ma.masked_invalid(finite), cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(s), labels=list(symbols), fontsize=8 if s <= 60 else 5)
    ax.set_xticks(range(w), labels=[str(j) for j in (columns if columns is not None else range(w))], fontsize=8)
    ax.set_xlabel(window)
    ax.set_title(f"{label}: Sharpe per symbol and {window}", fontsize=10)
    if s * w <= 400:
        for (i, j), v in np.ndenumerate(sharpe):
            ax.text(j, i, "–" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02, label="Sharpe")
    return png_base64(fig)


def ranked_symbols(symbols: Sequence[str], returns: dict[str, list[np.ndarray]], label: str, benchmark: str,
                   bars_per_year: float) -> list[dict[str, Any]]:
    """One row per symbol, best first by the Sharpe of the model's windows joined (NaN last): symbol,
    its Sharpe, total return and max drawdown, buy-and-hold's Sharpe on the same bars."""
    rows = []
    for s, symbol in enumerate(symbols):
        if len(returns[label][s]) == 0:
            continue  # in no window (a symbol that sits every fold out)
        m, b = summary(returns[label][s], bars_per_year), summary(returns[benchmark][s], bars_per_year)
        rows.append({"symbol": symbol, "sharpe": m["sharpe"], "total_return": m["total_return"],
                     "max_drawdown": m["max_drawdown"], f"{benchmark} sharpe": b["sharpe"]})
    return sorted(rows, key=lambda r: (math.isnan(r["sharpe"]), -r["sharpe"] if not math.isnan(r["sharpe"]) else 0.0))


def _portfolio_section(run: Any, rule: str, names: dict[str, str], benchmark: str) -> str:
    """One weighting rule: summary, timing against buy-and-hold's portfolio, equity + drawdown, months."""
    start = min(int(t[0]) for t in run.times if len(t))
    joined = Joined(start, run.axis, {k: run.portfolios[(k, rule)].returns for k in names}, [])
    x = np.concatenate([[start], run.axis]).astype("datetime64[ns]")
    curves = [(names[k], run.portfolios[(k, rule)].equity()) for k in names]
    return "".join([
        f"<h2>Portfolio, {RULE_TITLES[rule]}: {len(run.symbols)} symbols on {run.axis.shape[0]:,} dates</h2>",
        summary_table(joined, run.bars_per_year, names),
        timing_table(joined, run.bars_per_year, names, benchmark),
        img(equity_figure(f"{RULE_TITLES[rule]} portfolio", curves, x)),
        monthly_table(run.axis, run.portfolios[(run.label, rule)].returns, f"{run.label}, {RULE_TITLES[rule]} portfolio"),
    ])


def _symbol_sections(run: Any, names: dict[str, str], window: str) -> list[str]:
    """One section per symbol: its windows joined (summary table; the equity figure for the first
    ``SYMBOL_FIGURES`` symbols)."""
    out = [f"<h2>Per symbol: each symbol's {window}s joined</h2>"]
    drawn = 0
    for s, symbol in enumerate(run.symbols):
        t = run.times[s]
        if len(t) < 2:
            out.append(f"<h3>{html.escape(symbol)}</h3><p>in no {window}.</p>")
            continue
        joined = Joined(int(t[0]), t[1:], {k: run.returns[k][s] for k in names}, [])
        out += [f"<h3>{html.escape(symbol)}</h3>", summary_table(joined, run.bars_per_year, names)]
        if drawn < SYMBOL_FIGURES:
            curves = [(names[k], np.concatenate([[1.0], np.cumprod(1.0 + run.returns[k][s])])) for k in names]
            out.append(img(equity_figure(f"{symbol}: {window}s joined", curves, t.astype("datetime64[ns]"))))
            drawn += 1
    if drawn < sum(len(t) >= 2 for t in run.times):
        out.append(f"<p>Equity figures for the first {SYMBOL_FIGURES} symbols; the rest have their tables.</p>")
    return out


def write_universe_report(path: Path, title: str, run: Any, notes: str = "", benchmark: str = "buy & hold",
                          window: str = "window", columns: Sequence[Any] | None = None) -> Path:
    """report.html of a ``UniverseRun`` (module docstring for its sections). window: what a column of
    ``run.sharpe`` is ("window" for a backtest's, "fold" for a training run's); columns: their labels."""
    names = {k: k for k in run.returns}  # the model first, then buy-and-hold, then the quant rule
    port_rows = [r for r in run.rows if r["symbol"] == "portfolio"]
    sym_rows = [r for r in run.rows if r["symbol"] != "portfolio"]
    port_cols = ["weights", "label", "start", "end", "symbols", *[c for c in TABLE_COLUMNS if c not in
                                                                   ("trade_count", "win_rate", "profit_factor", "turnover",
                                                                    "exposure_time", "beta", "timing_sharpe", "long_share",
                                                                    "short_share", "verdict")]]
    sections = [f"<p>{html.escape(notes)}</p>" if notes else "",
                "<h2>Portfolios</h2><p>Each policy's per-symbol returns held together on the union of the symbols' dates, "
                "weights renormalised over the symbols with a bar on each date (rebalanced every date).</p>",
                html_table(port_rows, port_cols)]
    sections += [_portfolio_section(run, rule, names, benchmark) for rule in WEIGHT_RULES]
    sections += [f"<h2>Sharpe per symbol and {window} ({html.escape(run.label)})</h2>",
                 img(sharpe_heatmap(run.symbols, run.sharpe, run.label, "backtest window" if window == "window" else window,
                                    columns))]
    ranked = ranked_symbols(run.symbols, run.returns, run.label, benchmark, run.bars_per_year)
    cols = list(ranked[0]) if ranked else []
    shown = min(SHOWN, (len(ranked) + 1) // 2)
    sections += [f"<h2>Best {shown} and worst {shown} symbols (Sharpe of {html.escape(run.label)}, its windows joined)</h2>",
                 "<h3>Best</h3>", html_table(ranked[:shown], cols),
                 "<h3>Worst</h3>", html_table([r for r in ranked[::-1] if not math.isnan(r["sharpe"])][:shown], cols)]
    sections += _symbol_sections(run, names, window)
    sections += [f"<h2>Per symbol and {window}</h2>",
                 html_table(sym_rows, ["symbol", "window", "label", "start", "end", *TABLE_COLUMNS])]
    _atomic_write(path, html_page(title, sections))
    return path
