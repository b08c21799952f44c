"""Backtest outputs for people: metrics JSON and CSV, and a self-contained HTML report.

The report embeds matplotlib PNGs (base64): the metrics table, the windows joined in order as one
out-of-sample tearsheet (``tearsheet_report``: equity, underwater, rolling Sharpe, monthly returns,
trades and holding time), and one equity + drawdown figure per window (with a benchmark curve, e.g.
buy-and-hold, when given), all against dates. Files are written to
temporary names and renamed. This module and ``foxhunt.data`` are the only users of pandas.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

TABLE_COLUMNS = ("total_return", "annual_return", "sharpe", "sortino", "max_drawdown", "max_drawdown_duration",
                 "value_at_risk", "conditional_value_at_risk", "turnover", "exposure_time", "trade_count",
                 "win_rate", "profit_factor", "beta", "timing_sharpe", "long_share", "short_share", "verdict")
BENCHMARK = "buy & hold"
"""The curve label of buy-and-hold, which the tearsheet's timing table regresses the others on."""


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def png_base64(fig: "plt.Figure") -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def drawdown(equity: np.ndarray) -> np.ndarray:
    """Drawdown of an equity curve: equity / running peak − 1 (≤ 0)."""
    return equity / np.maximum.accumulate(equity) - 1.0


def equity_figure(title: str, curves: Sequence[tuple[str, np.ndarray]], x: np.ndarray | None = None) -> str:
    """Equity (top) and drawdown (bottom) of labelled curves; a base64 PNG."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 4.8), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for label, eq in curves:
        xs = x[: len(eq)] if x is not None else np.arange(len(eq))
        ax1.plot(xs, eq, label=label, lw=1.1)
        ax2.fill_between(xs, drawdown(eq), 0, alpha=0.35, label=label)
    ax1.set_title(title)
    ax1.set_ylabel("equity (start = 1)")
    ax1.legend(loc="best", fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.set_ylabel("drawdown")
    ax2.grid(alpha=0.3)
    fig.autofmt_xdate()
    return png_base64(fig)


def fmt(v: object) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        return f"{v:.4g}"
    return html.escape(str(v))


def html_table(rows: Sequence[dict[str, object]], columns: Sequence[str]) -> str:
    """The metrics table; a flat window (no position: volatility and return exactly 0) shows its
    Sharpe / Sortino / Calmar as "flat" (``foxhunt.backtest.display``), NaN as "–"."""
    from foxhunt.backtest.display import FLAT, is_flat

    def td(r: dict[str, object], c: str) -> str:
        return FLAT if c in ("sharpe", "sortino", "calmar") and is_flat(r) else fmt(r.get(c, ""))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{td(r, c)}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(title: str, sections: Sequence[str]) -> str:
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>"


def img(b64: str) -> str:
    return f"<img src='data:image/png;base64,{b64}'/>"


def write_metrics(out_dir: Path, rows: Sequence[dict[str, object]]) -> tuple[Path, Path]:
    """metrics.json and metrics.csv (one row per window)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, csv = out_dir / "metrics.json", out_dir / "metrics.csv"
    _atomic_write(js, json.dumps(list(rows), indent=2, default=float))
    _atomic_write(csv, pd.DataFrame(list(rows)).to_csv(index=False))
    return js, csv


def tearsheet(curves: Sequence[Sequence[tuple[str, np.ndarray]]], times: Sequence[np.ndarray], bars_per_year: float,
              trades: Sequence[Sequence[dict[str, object]]] | None = None) -> str:
    """The tearsheet section (``foxhunt.backtest.tearsheet_report``) of the windows joined in order,
    every curve label of the first window beside the first; "" where windows overlap in time (they
    are then no one curve). trades: each window's round trips (dicts with entry_bar, exit_bar: bar
    indices counted from the window's first bar, ``times[w][0]``), for the trades-per-window table."""
    from foxhunt.backtest.tearsheet import holding_bars, join
    from foxhunt.backtest.tearsheet_report import section

    ts = [np.asarray(t, np.int64) for t in times]
    if not ts or any(len(t) < 2 for t in ts) or any(b[0] < a[-1] for a, b in zip(ts, ts[1:])):
        return ""
    windows = []
    for cs, t in zip(curves, ts):
        rets = {}
        for label, eq in cs:
            e = np.asarray(eq, np.float64)
            rets[label] = np.divide(e[1:], e[:-1], out=np.zeros(len(e) - 1), where=e[:-1] != 0) - 1.0
        windows.append((t, rets))
    rows = []
    for w, (t, window_trades) in enumerate(zip(ts, trades or [])):
        entry = np.clip([int(x["entry_bar"]) for x in window_trades], 0, len(t) - 1)  # type: ignore[call-overload]
        exit_ = np.clip([int(x["exit_bar"]) for x in window_trades], 0, len(t) - 1)  # type: ignore[call-overload]
        secs = float(np.mean(t[exit_] - t[entry])) / 1e9 if len(window_trades) else float("nan")
        rows.append({"window": w, "trades": len(window_trades), "holding_bars": holding_bars(entry, exit_), "holding_s": secs})
    labels = [label for label, _ in curves[0]]
    return section(join(windows), bars_per_year, {label: label for label in labels}, rows, window="backtest window",
                   benchmark=BENCHMARK if BENCHMARK in labels else None)


def write_backtest_report(path: Path, title: str, rows: Sequence[dict[str, object]],
                          curves: Sequence[Sequence[tuple[str, np.ndarray]]], times: Sequence[np.ndarray] | None = None,
                          notes: str = "", *, bars_per_year: float | None = None,
                          trades: Sequence[Sequence[dict[str, object]]] | None = None) -> Path:
    """report.html: the metrics table, the windows joined as one out-of-sample tearsheet (with
    ``times`` and ``bars_per_year``; trades: each window's round trips), then one equity/drawdown
    figure per window, against dates."""
    cols = ["window", "label", "start", "end", *TABLE_COLUMNS]
    sections = [f"<p>{html.escape(notes)}</p>" if notes else "", "<h2>Metrics</h2>", html_table(rows, cols)]
    if times is not None and bars_per_year:
        sections.append(tearsheet(curves, times, bars_per_year, trades))
    for i, cs in enumerate(curves):
        x = None if times is None else times[i].astype("datetime64[ns]")
        sections += [f"<h2>Window {i}</h2>", img(equity_figure(f"window {i}", cs, x))]
    _atomic_write(path, html_page(title, sections))
    return path
