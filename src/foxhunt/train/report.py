"""report.html of a training run (and of tune's hold-out, a one-fold run): the data line, the
out-of-sample tearsheet (the validation windows joined in order: agent beside buy-and-hold and the
quant rule chosen in sample, drawdown, monthly returns, rolling Sharpe, trades and holding time:
``foxhunt.backtest.tearsheet_report``), the per-fold table, each fold's validation equity and
drawdown, training curves. Every time axis shows dates. Matplotlib figures are embedded as base64
PNGs, so the file stands alone.

Reads only what the run directory holds (``folds/fold_k/metrics.json``, ``curves.safetensors``,
``oos.safetensors``, ``trades.csv``, ``metrics.jsonl``, ``data.json``: ``foxhunt.train.oos``), so a
resumed or finished run can always rebuild it; a run without the out-of-sample files (written
before them, or with ``train.save_curves`` off) gets the sections it has, its curves against bars.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.backtest.display import beats, cell, number
from foxhunt.backtest.tearsheet import Joined, holding_bars, join
from foxhunt.backtest.timing_report import RULE, TIMING_HEAD, timing_cells
from foxhunt.train.logs import read_metrics
from foxhunt.train.oos import read_data, read_fold, read_trades

TABLE_COLS = (("sharpe", "Sharpe", "{:+.2f}"), ("total_return", "total return", "{:+.2%}"),
              ("max_drawdown", "max DD", "{:.2%}"), ("trade_count", "trades", "{:.0f}"), ("win_rate", "win rate", "{:.0%}"))


def load_fold_results(run_dir: Path) -> list[dict[str, Any]]:
    """Every ``folds/fold_k/metrics.json`` of the run, in fold order."""
    out = []
    base = run_dir / "folds"
    if base.is_dir():
        for p in sorted(base.glob("fold_*/metrics.json"), key=lambda q: int(q.parent.name.split("_")[1])):
            out.append(json.loads(p.read_text()))
    return out


def _curves(run_dir: Path, fold: int) -> dict[str, np.ndarray]:
    path = run_dir / "folds" / f"fold_{fold}" / "curves.safetensors"
    if not path.is_file():
        return {}
    from safetensors.numpy import load

    return dict(load(path.read_bytes()))


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def abstain_cell(r: dict[str, Any]) -> str | None:
    """The fold's abstention in words (train.abstain), None when the run has none: whether it traded,
    its members' mean held-back Sharpe in standard errors against the bar, and for a flat fold what
    the ensemble it replaced scored on the validation window."""
    rec = (r.get("selection") or {}).get("abstain")
    if rec is None:
        return None
    mean, se = rec.get("mean_inner_sharpe"), rec.get("standard_error")
    z = number(mean / se if isinstance(mean, (int, float)) and se else None, "{:+.1f}")
    if not rec.get("flat"):
        return f"trades (held-back {z} SE &gt; {rec.get('z', 0):g})"
    alt = rec.get("all_members")
    return (f"flat (held-back {z} SE &le; {rec.get('z', 0):g}; the ensemble would have scored "
            f"{cell(alt, 'sharpe', '{:+.2f}') if alt else 'n/a'})")


def fold_table_html(results: list[dict[str, Any]], quant: dict[int, dict[str, Any]] | None = None) -> str:
    """One row per fold; ``quant``: fold -> the in-sample-chosen quant rule's record (oos.safetensors).
    The agent's beta, timing Sharpe, time in market, long and short shares and verdict (metrics.json's
    ``timing``) follow its own columns, beside its Sharpe; the holding rule is printed under the table."""
    quant = quant or {}
    head = "".join(f"<th>{label}</th>" for _, label, _ in TABLE_COLS)
    notes = [abstain_cell(r) for r in results]
    extra = any(n is not None for n in notes)
    gammas = [(r.get("selection") or {}).get("gamma") for r in results]  # train.gamma_grid: each fold's discount
    with_gamma = any(g is not None for g in gammas)
    rows = []
    for r, note, gamma in zip(results, notes, gammas):
        f = r["fold"]
        a, b = r["agent"], r.get("buy_and_hold") or {}
        cells = "".join(f"<td>{cell(a, k, fmt)}</td>" for k, _, fmt in TABLE_COLS)
        bcells = "".join(f"<td>{cell(b, k, fmt)}</td>" for k, _, fmt in TABLE_COLS[:3])
        better = beats(a, b)  # a flat fold counts as Sharpe 0
        q = quant.get(f["fold"])
        qcells = (f"<td>{q.get('rule', '–')}</td><td>{cell(q.get('metrics'), 'sharpe', '{:+.2f}')}</td>" if q else
                  "<td>–</td><td>–</td>") if quant else ""
        rows.append(
            f"<tr><td>{f['fold']}</td><td>{f['train_end'] - f['train_start']}</td><td>{f['val_end'] - f['val_start']}</td>"
            f"{cells}{timing_cells(r.get('timing'))}{bcells}{qcells}<td>{'yes' if better else 'no'}</td>"
            f"{f'<td>{gamma:g}</td>' if with_gamma and gamma is not None else '<td>–</td>' if with_gamma else ''}"
            f"{f'<td>{note or chr(8211)}</td>' if extra else ''}</tr>"
        )
    bh = "".join(f"<th>B&amp;H {label}</th>" for _, label, _ in TABLE_COLS[:3])
    last = ("<th>γ (held-back choice)</th>" if with_gamma else "") + ("<th>abstention</th>" if extra else "")
    qh = "<th>quant rule (chosen in sample)</th><th>quant Sharpe</th>" if quant else ""
    return (f"<table><tr><th>fold</th><th>train bars</th><th>val bars</th>{head}{TIMING_HEAD}{bh}{qh}<th>agent Sharpe &gt; B&amp;H</th>"
            f"{last}</tr>" + "".join(rows) + f"</table><p>{html.escape(RULE)}</p>")


def equity_figure(run_dir: Path, results: list[dict[str, Any]], folds: dict[int, dict[str, Any]] | None = None) -> str | None:
    """Each fold's validation equity and drawdown (agent, buy-and-hold, quant rule), against dates
    where the run wrote them (oos.safetensors), else against the window's bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from foxhunt.backtest.tearsheet_report import dates

    folds = folds if folds is not None else {r["fold"]["fold"]: read_fold(run_dir, r["fold"]["fold"]) for r in results}
    curves = [(k, c) for k, c in sorted(folds.items()) if "agent" in c]
    if not curves:
        return None
    fig, axes = plt.subplots(len(curves), 2, figsize=(11, 2.6 * len(curves)), squeeze=False)
    for row, (k, c) in zip(axes, curves):
        times = c.get("times")
        x = dates(times) if times is not None and len(times) == len(c["agent"]) + 1 else np.arange(len(c["agent"]) + 1)
        for key, label, color in (("agent", "agent", "tab:blue"), ("bh", "buy & hold", "tab:gray"), ("quant", "quant rule", "tab:orange")):
            if key not in c:
                continue
            eq = np.concatenate([[1.0], np.cumprod(1.0 + c[key])])
            dd = eq / np.maximum.accumulate(eq) - 1.0
            row[0].plot(x, eq, label=label, color=color, lw=1)
            row[1].plot(x, dd, label=label, color=color, lw=1)
        row[0].set_title(f"fold {k}: validation equity (start = 1)", fontsize=9)
        row[1].set_title(f"fold {k}: drawdown", fontsize=9)
        row[0].legend(fontsize=8)
        for ax in row:
            ax.set_xlabel("date (UTC)" if x.dtype.kind == "M" else "bar", fontsize=8)
            ax.tick_params(labelsize=7)
            if x.dtype.kind == "M":
                for lab in ax.get_xticklabels():
                    lab.set_rotation(20)
    fig.tight_layout()
    return _png(fig)


def oos_inputs(run_dir: Path, results: list[dict[str, Any]],
               folds: dict[int, dict[str, Any]]) -> tuple[Joined | None, list[dict[str, Any]]]:
    """The validation windows joined in fold order (agent, buy-and-hold, quant rule) where every fold
    has its times, and the trades-per-fold rows (count, mean holding in bars and time)."""
    windows, positions, trades = [], [], []
    for r in results:
        k = r["fold"]["fold"]
        c = folds.get(k, {})
        times = c.get("times")
        if "agent" in c and times is not None and len(times) == len(c["agent"]) + 1:
            windows.append((times, {key: c[key] for key in ("agent", "bh", "quant") if key in c}))
            positions.append(c.get("positions", {}))
        rt = read_trades(run_dir, k)
        if rt is not None:
            vs = r["fold"]["val_start"]
            held = holding_bars([e for e, _ in rt], [x for _, x in rt])
            secs = float("nan")
            if rt and times is not None:
                at = lambda b: int(times[min(max(b - vs, 0), len(times) - 1)])  # noqa: E731 - bar -> its time
                secs = float(np.mean([at(x) - at(e) for e, x in rt])) / 1e9
            trades.append({"window": f"fold {k}", "trades": len(rt), "holding_bars": held, "holding_s": secs})
    joined = join(windows, positions) if windows and len(windows) == len(results) else None
    return joined, trades


def training_figure(rows: list[dict[str, Any]]) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(11, 5.5))
    folds = sorted({r["fold"] for r in rows})
    ppo = "entropy" in rows[0]  # PPO: the critic's V and the policy entropy in place of Q and epsilon
    panels = (("reward_mean", "reward mean"), ("loss_mean", "loss"), ("q_mean", "V mean" if ppo else "Q mean"),
              ("entropy", "policy entropy") if ppo else ("epsilon", "epsilon"))
    for ax, (key, title) in zip(axes.ravel(), panels):
        for f in folds:
            pts = [(r["global_epoch"], r.get(key)) for r in rows if r["fold"] == f]
            xs = [x for x, y in pts if y is not None]
            ys = [y for _, y in pts if y is not None]
            ax.plot(xs, ys, marker=".", lw=1, label=f"fold {f}")
        ax.set_title(f"{title} per epoch", fontsize=9)
        ax.set_xlabel("epoch (whole run)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


_CSS = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
        "pre{background:#f7f7f7;padding:1em;font-size:12px;overflow:auto}")


def write_report(run_dir: Path, title: str | None = None) -> Path:
    """Build ``run_dir/report.html`` from the run directory's files; returns its path."""
    results = load_fold_results(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    from foxhunt.backtest.tearsheet_report import section
    from foxhunt.data.describe import data_line

    parts = [f"<h1>{html.escape(title or 'foxhunt train: ' + run_dir.name)}</h1>"]
    data = read_data(run_dir)
    if data is not None:  # file, bars, interval, span, what was inferred; the fold layout
        parts.append(f"<p><b>data</b>: {html.escape(data_line(data['data']))}</p>")
        if data.get("folds"):
            parts.append(f"<p><b>folds</b> {html.escape(data['folds'])}</p>")
    bars_per_year = None
    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        s = json.loads(summary_path.read_text())
        bars_per_year = s.get("bars_per_year")
        parts.append(f"<p>device {html.escape(str(s.get('device')))}; data {html.escape(str(s.get('data')))}; "
                     f"{s.get('n_folds')} folds × {s.get('epochs')} epochs; wall time {s.get('wall_s', 0):.1f} s.</p>")
        if s.get("annualisation"):  # Sharpe / volatility / CAGR use this factor
            parts.append(f"<p>{html.escape(str(s['annualisation']))}; {html.escape(str(s.get('episode_rules', '')))}</p>")
    folds = {r["fold"]["fold"]: read_fold(run_dir, r["fold"]["fold"]) for r in results}
    joined, trades = oos_inputs(run_dir, results, folds)
    if joined is not None and bars_per_year:
        rules = ", ".join(f"fold {k}: {c['quant_info'].get('rule')}" for k, c in folds.items() if c.get("quant_info"))
        note = ("quant rule: the simple momentum / reversal rule with the best Sharpe on each fold's training window "
                f"(foxhunt.backtest.quant_rules), backtested on its validation window like the agent ({rules})") if rules else ""
        parts.append(section(joined, float(bars_per_year), {"agent": "agent", "bh": "buy & hold", "quant": "quant rule"},
                             trades, note, benchmark="bh"))
    quant = {k: c["quant_info"] for k, c in folds.items() if c.get("quant_info")}
    parts.append("<h2>Validation per fold (greedy agent vs buy-and-hold)</h2>" + fold_table_html(results, quant))
    eq = equity_figure(run_dir, results, folds)
    if eq:
        parts.append(f"<h2>Validation equity and drawdown</h2><img src='data:image/png;base64,{eq}'/>")
    tr = training_figure(rows)
    if tr:
        parts.append(f"<h2>Training curves</h2><img src='data:image/png;base64,{tr}'/>")
    cfg = run_dir / "config.toml"
    if cfg.is_file():
        parts.append(f"<h2>Configuration</h2><pre>{html.escape(cfg.read_text())}</pre>")
    doc = f"<!doctype html><html><head><meta charset='utf-8'><title>foxhunt report</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>"
    out = run_dir / "report.html"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(doc)
    os.replace(tmp, out)
    return out
