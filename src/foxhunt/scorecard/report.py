"""Scorecard outputs: the rich table, ``scorecard.json`` and ``report.html`` (equity curves per scenario;
for a family run also the family's per-draw table and gates, ``scorecard.family.gates``)."""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from foxhunt.scorecard.run import ScenarioResult


def _f(x: Any, fmt: str = "{:+.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


def rows(results: Sequence[ScenarioResult]) -> list[dict[str, Any]]:
    """One row per scenario × policy (agent, baselines, references) with the table's figures; the
    agent's row is named by its kind ("agent (dqn)" / "agent (ppo)") and flagged ``agent``."""
    out = []
    for r in results:
        best_name, best = r.best_reference()
        policies = [(r.agent_label, r.agent, True), *((k, v, False) for k, v in r.baselines.items()),
                    *((k, v, False) for k, v in r.references.items())]
        for label, p, is_agent in policies:
            s = p.summary()
            out.append({
                "scenario": r.name, "policy": label, "agent": is_agent, "agent_kind": r.agent_kind if is_agent else None,
                "sharpe": s["sharpe"], "total_return": s["total_return"],
                "max_drawdown": s["max_drawdown"], "trades_per_1000": s["trades_per_1000"], "costs_pct": s["costs_pct"],
                "capture": r.capture(p) if label != "flat" else None, "best": label == best_name,
                "capture_vs_quant": r.capture_vs_quant(p) if label not in ("flat", "quant") else None,
                "wall_s": r.train_s if is_agent else None, "env_steps": r.env_steps if is_agent else s.get("env_steps"),
                "gate": (("PASS" if r.gate["passed"] else "FAIL") if r.gate.get("passed") is not None else "goal")
                if is_agent else "",
            })
    return out


def rich_table(results: Sequence[ScenarioResult]) -> Any:
    from rich.table import Table

    t = Table(title="foxhunt scorecard (validation windows; Sharpe = mean of fold Sharpe ratios)")
    for col in ("scenario", "policy", "Sharpe", "return", "max DD", "trades/1k", "costs %", "capture", "vs quant", "walk-fwd s", "env steps", "gate"):
        t.add_column(col, justify="left" if col in ("scenario", "policy", "gate") else "right")
    last = None
    for row in rows(results):
        style = "bold" if row["agent"] else ("dim" if row["policy"] in ("flat", "buy_and_hold") or row["policy"].startswith("oracle") else None)
        name = row["policy"] + (" *" if row["best"] else "")
        gate = row["gate"]
        gate = f"[green]{gate}[/]" if gate == "PASS" else f"[red]{gate}[/]" if gate == "FAIL" else gate
        t.add_row(row["scenario"] if row["scenario"] != last else "", name, _f(row["sharpe"]), _f(row["total_return"], "{:+.1%}"),
                  _f(row["max_drawdown"], "{:.1%}"), _f(row["trades_per_1000"], "{:.1f}"), _f(row["costs_pct"], "{:.2f}"),
                  _f(row["capture"], "{:.1%}"), _f(row["capture_vs_quant"], "{:.1%}"), _f(row["wall_s"], "{:.1f}"),
                  _f(row["env_steps"], "{:,.0f}"), gate, style=style)
        last = row["scenario"]
    return t


def scorecard_dict(results: Sequence[ScenarioResult], meta: dict[str, Any], family: dict[str, Any] | None = None) -> dict[str, Any]:
    """The card: meta, passed (every gated scenario, and the family's gates when given), the scenarios,
    and the family block (``family.gates.family_block``) when the run scored a family."""
    gated = [r.gate["passed"] for r in results if r.gate.get("passed") is not None]
    if family is not None and family.get("passed") is not None:
        gated.append(family["passed"])
    card = {**meta, "passed": bool(all(gated)) if gated else None, "scenarios": [r.to_dict() for r in results]}
    if family is not None:
        card["family"] = family
    return card


def _json_safe(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_json_safe(obj), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _plot(r: ScenarioResult) -> str:
    """Equity curves of the agent, the baselines and the references over the validation folds (PNG, base64)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=90)
    for label, p, kw in [(r.agent_label, r.agent, {"lw": 2.0, "color": "black"}),
                         *((k, v, {"lw": 1.2}) for k, v in r.baselines.items()),
                         *((k, v, {"lw": 1.0, "ls": "--"}) for k, v in r.references.items())]:
        eq = p.curve()
        step = max(1, len(eq) // 4000)  # at most ~4,000 points a line (GPU windows are 100 K bars)
        ax.plot(np.arange(0, len(eq), step), eq[::step], label=f"{label} ({p.summary()['sharpe']:+.2f})", **kw)
    edges = [0]
    for f in r.agent.folds:
        edges.append(edges[-1] + len(f.returns))
    for e in edges[1:-1]:
        ax.axvline(e, color="grey", lw=0.5, alpha=0.5)
    ax.set_yscale("log")
    ax.set_xlabel("validation bar (folds concatenated)")
    ax.set_ylabel("equity")
    ax.set_title(f"{r.name}: equity on the validation windows (legend: mean fold Sharpe)")
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def abstain_note(r: ScenarioResult) -> str:
    """One sentence on the agent's abstention (train.abstain), "" when the run had none: the flat
    folds, each fold's members' mean held-back Sharpe in standard errors against the bar, and what
    the flat folds' ensembles would have scored."""
    a = r.agent.extra.get("abstain")
    if not a:
        return ""
    zs = ", ".join("–" if z is None else f"{z:+.2f}" for z in a["mean_inner_z"])
    flat = a["flat_folds"]
    s = f"abstention (bar {a['z']:g} SE): members' mean held-back Sharpe per fold {zs} SE; "
    if not flat:
        return s + "every fold traded."
    without = ", ".join(_f(w) for w in a["without"] if w is not None)
    return s + f"flat folds {', '.join(map(str, flat))} of {len(a['mean_inner_z'])} (their ensembles would have scored {without})."


def learner_note(r: ScenarioResult) -> str:
    """One line of the agent's own per-fold evaluation beside its fold Sharpes (the forecast learner's
    out-of-sample IC and hit rate: each fold's ``learner_eval``, worded by its registry entry's
    ``fold_phrase``), "" for a learner without one."""
    from foxhunt.agents.registry import LEARNERS

    evals = r.agent.extra.get("learner_eval")
    entry = LEARNERS.get(r.agent_kind)
    if not evals or entry is None or entry.fold_phrase is None:
        return ""
    parts = [f"fold {i}: Sharpe {_f(f.sharpe)}, " + (entry.fold_phrase(ev) if ev is not None else "n/a")
             for i, (f, ev) in enumerate(zip(r.agent.folds, evals))]
    return f"{r.name} {r.agent_label} per fold: " + "; ".join(parts)


def write_html(path: Path, results: Sequence[ScenarioResult], meta: dict[str, Any], family: dict[str, Any] | None = None) -> None:
    head = ["scenario", "policy", "Sharpe", "return", "max DD", "trades/1k", "costs %", "capture", "vs quant", "walk-fwd s", "env steps", "gate"]
    body = []
    for row in rows(results):
        cells = [row["scenario"], row["policy"] + (" *" if row["best"] else ""), _f(row["sharpe"]), _f(row["total_return"], "{:+.1%}"),
                 _f(row["max_drawdown"], "{:.1%}"), _f(row["trades_per_1000"], "{:.1f}"), _f(row["costs_pct"], "{:.2f}"),
                 _f(row["capture"], "{:.1%}"), _f(row["capture_vs_quant"], "{:.1%}"), _f(row["wall_s"], "{:.1f}"),
                 _f(row["env_steps"], "{:,.0f}"), row["gate"]]
        style = ' style="font-weight:bold"' if row["agent"] else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    sections = []
    for r in results:
        sections.append(f"<h2>{html.escape(r.name)}</h2><p>{html.escape(r.description)}</p>"
                        f"<p>gate: {html.escape(r.gate.get('rule', ''))} — "
                        f"{'PASS' if r.gate.get('passed') else 'FAIL' if r.gate.get('passed') is False else 'not gated'}</p>"
                        + (f"<p>{html.escape(abstain_note(r))}</p>" if abstain_note(r) else "")
                        + (f"<p>{html.escape(learner_note(r))}</p>" if learner_note(r) else "") +
                        f'<img src="data:image/png;base64,{_plot(r)}"/>')
    fam = ""
    if family is not None:
        from foxhunt.scorecard.family.gates import html_fragment

        fam = html_fragment(family)
    meta_rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in meta.items())
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>foxhunt scorecard</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}</style>
</head><body><h1>foxhunt scorecard</h1><table>{meta_rows}</table>
<p>Sharpe: mean of the validation folds' annualised Sharpe ratios; return: compounded over the folds; max DD: worst fold;
capture: Sharpe / best reference Sharpe (* marks the best reference); vs quant: Sharpe / the quant rule's Sharpe
(n/a when it earned nothing); costs: closed round trips' costs, % of capital;
walk-fwd s: the agent's walk-forward (training and evaluation of every fold, as <code>foxhunt train</code>).</p>
{fam}<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>{''.join(body)}</table>{''.join(sections)}</body></html>"""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(doc)
    os.replace(tmp, path)
