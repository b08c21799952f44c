"""report.html of a study: Optuna's matplotlib plots (optimisation history, parameter importances,
parallel coordinates, slices), the best trial's per-fold table, the hold-out result and the
overfitting statistics. Figures are embedded as base64 PNGs, so the file stands alone; a plot that
Optuna cannot draw for this study (e.g. importances with one complete trial) says why instead."""

from __future__ import annotations

import html
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna

from foxhunt.backtest.display import sharpe_text
from foxhunt.train.report import _CSS, _png


def _plot(fn: Callable[..., Any], study: optuna.Study, **kw: Any) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ax = fn(study, **kw)
        fig = ax.flat[0].figure if hasattr(ax, "flat") else ax.figure
        fig.set_size_inches(max(fig.get_size_inches()[0], 7), max(fig.get_size_inches()[1], 4))
        return f"<img src='data:image/png;base64,{_png(fig)}'/>"
    except Exception as exc:  # Optuna refuses plots it cannot draw (too few trials, one parameter …)
        plt.close("all")
        return f"<p><i>not drawn: {html.escape(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}</i></p>"


def _f(v: Any, fmt: str) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def fold_table(best: optuna.trial.FrozenTrial) -> str:
    from foxhunt.tune.worker import result_attrs

    a = result_attrs(best)
    cols = (("fold_sharpe", "Sharpe", "{:+.2f}"), ("fold_total_return", "total return", "{:+.2%}"),
            ("fold_max_drawdown", "max DD", "{:.2%}"), ("fold_trades", "trades", "{:.0f}"))
    n = len(a.get("fold_sharpe", []))
    head = "".join(f"<th>{label}</th>" for _, label, _ in cols)
    rows = "".join("<tr><td>" + str(k) + "</td>" + "".join(f"<td>{_f(a.get(key, [None] * n)[k], fmt)}</td>" for key, _, fmt in cols)
                   + "</tr>" for k in range(n))
    return f"<table><tr><th>fold</th>{head}</tr>{rows}</table>"


def write_study_report(study_dir: Path, study: optuna.Study, summary: dict[str, Any]) -> Path:
    """Build ``study_dir/report.html``; returns its path."""
    from optuna.visualization import matplotlib as vm

    parts = [f"<h1>foxhunt tune: study {html.escape(study.study_name)}</h1>"]
    c = summary.get("counts", {})
    parts.append(f"<p>{c.get('COMPLETE', 0)} complete, {c.get('PRUNED', 0)} pruned, {c.get('FAIL', 0)} failed trials; "
                 f"objective: {html.escape(str(summary.get('objective')))}.</p>")
    best = summary.get("best")
    if best:
        parts.append(f"<h2>Best trial: {best['number']} (score {best['value']:+.4f})</h2>")
        parts.append("<table>" + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(repr(v))}</td></tr>"
                                         for k, v in best["params"].items()) + "</table>")
        parts.append("<h3>Validation per fold (search folds)</h3>" + fold_table(study.trials[best["number"]]))
    ho = summary.get("holdout")
    parts.append("<h2>Hold-out (never seen by the search; evaluated once)</h2>")
    if ho and ho.get("agent"):
        a, b = ho["agent"], ho.get("buy_and_hold") or {}
        unit = "bars" if not ho["fold"].get("universe") else "union-calendar dates"
        port = f"; the {ho.get('weights')} portfolio of {a.get('symbols')} symbols" if ho["fold"].get("universe") else ""
        parts.append(
            f"<p>{unit} {ho['fold']['val_start']} … {ho['fold']['val_end'] - 1}{port}; retrained on {unit} "
            f"{ho['fold']['train_start']} … "
            f"{ho['fold']['train_end'] - 1}. Agent {sharpe_text(a)}, return {_f(a.get('total_return'), '{:+.2%}')}, "
            f"max DD {_f(a.get('max_drawdown'), '{:.2%}')}, trades {_f(a.get('trade_count'), '{:.0f}')}; buy &amp; hold "
            f"{sharpe_text(b)}. Hold-out evaluations in this study: {summary.get('holdout_evaluations', 1)}. "
            f"Run directory: {html.escape(Path(ho['run_dir']).name)}/report.html</p>")
    else:
        parts.append("<p>none (tune.holdout = 0 or no complete trial)</p>")
    ov = summary.get("overfitting", {})
    d, p = ov.get("deflated_sharpe", {}), ov.get("pbo", {})
    parts.append("<h2>Overfitting statistics</h2><ul>")
    if d.get("dsr") is not None:
        parts.append(f"<li>Deflated Sharpe ratio {d['dsr']:.3f}: the best trial's per-bar Sharpe {d['sharpe_per_bar']:.4f} over "
                     f"{d['n_obs']} validation bars against SR0 = {d['sr0_per_bar']:.4f}, the expected best of "
                     f"{ov['n_trials']} lucky trials (skew {d['skew']:.2f}, kurtosis {d['kurtosis']:.2f}).</li>")
    else:
        parts.append(f"<li>Deflated Sharpe ratio: {html.escape(str(d.get('why')))}</li>")
    if p.get("pbo") is not None:
        parts.append(f"<li>Probability of backtest overfitting {p['pbo']:.2f} (CSCV, {p['splits']} splits of {p['blocks']} folds, "
                     f"{p['trials']} trials).</li>")
    else:
        parts.append(f"<li>PBO: {html.escape(str(p.get('why')))}</li>")
    parts.append("</ul>")
    parts.append("<h2>Optimisation history</h2>" + _plot(vm.plot_optimization_history, study))
    parts.append("<h2>Parameter importances</h2>" + _plot(vm.plot_param_importances, study))
    parts.append("<h2>Parallel coordinates</h2>" + _plot(vm.plot_parallel_coordinate, study))
    parts.append("<h2>Slices</h2>" + _plot(vm.plot_slice, study))
    cfg = study_dir / "config.toml"
    if cfg.is_file():
        parts.append(f"<h2>Resolved configuration</h2><pre>{html.escape(cfg.read_text())}</pre>")
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>foxhunt tune report</title><style>{_CSS}</style></head>"
           f"<body>{''.join(parts)}</body></html>")
    out = study_dir / "report.html"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(doc)
    os.replace(tmp, out)
    return out
