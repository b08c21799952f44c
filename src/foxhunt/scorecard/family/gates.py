"""The family's rows and pooled gates: one row per draw and the gates over a set of draws.

Per draw (``draw_row``): its form, interval, horizon, strength, costs and noise; the Sharpe ratios
(mean of the validation folds' annualised Sharpe) of the best oracle rule, the quant baseline (and
the rule it chose on each fold's training window), buy-and-hold and the agent; the agent's capture
vs the quant rule and vs the oracle; its trades per 1,000 bars and walk-forward seconds.

Gates (``family_block``), the same for the development and the held-out set:

* ``capture vs quant``: over the draws with an edge whose quant rule earned (Sharpe > 0), the mean
  of agent Sharpe / quant Sharpe >= ``CAPTURE_VS_QUANT_GATE`` (50 %; the goal is 100 %). Each
  draw's ratio enters the mean clipped to ``CAPTURE_CLIP`` so that a draw where the quant rule
  barely earns cannot carry (or sink) the mean alone; the rows keep the raw ratio.
* ``capture vs oracle`` (a goal, reported and not gated): the same mean against the best oracle rule
  >= ``CAPTURE_VS_ORACLE_GOAL`` (60 %). The oracle knows the latent state; on minute draws its
  Sharpe is often above what any causal rule can show on a validation window (the named scenarios'
  capture gate is against the best *reference*, a different measure).
* ``not below flat``: no draw's agent Sharpe below flat (0) by more than the noise bar, 2 SE of the
  draw's mean fold Sharpe (``ScenarioResult.standard_error``).
* ``no-edge flat``: every no-edge draw's agent Sharpe >= -tol (``ScenarioResult.tolerance``) and its
  turnover <= ``MAX_NO_EDGE_TURNOVER``, as the named no_edge gate.

Reported beside the gates (``beyond_noise``, not gated): the same capture vs quant over only the edge
draws whose quant Sharpe exceeds 2 SE of the draw's fold mean, where the rule's earnings are not noise
(a minute draw's quant rule can earn +2 on a draw with no edge).

Timing apart from holding, reported beside Sharpe capture (``timing``, a goal, not gated): each row
carries the agent's beta on buy-and-hold and its timing Sharpe, the quant rule's timing Sharpe (both
``foxhunt.backtest.timing``: the returns less beta × buy-and-hold's on the same bars, the mean of the
fold values) and ``timing_capture_vs_quant`` = agent timing Sharpe / quant timing Sharpe (None when
the quant rule's timing is <= 0). The quant rule **times** a draw when its timing Sharpe exceeds 2 SE of
the draw's fold mean, the noise bar ``beyond_noise`` applies to its Sharpe; over the edge draws where
it times, the mean timing capture (each ratio clipped to ``CAPTURE_CLIP``, as the gate's) against the
goal ``TIMING_CAPTURE_GOAL`` (100 %: issue 45's gate, "timing capture >= 100 % of the quant rule's
timing where it times").

A gate with no draw to judge (e.g. no quant baseline run) is reported as not gated (passed None).
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

import numpy as np

from foxhunt.scorecard.run import MAX_NO_EDGE_TURNOVER, ScenarioResult, pct

CAPTURE_VS_QUANT_GATE = 0.5
CAPTURE_VS_QUANT_GOAL = 1.0
CAPTURE_VS_ORACLE_GOAL = 0.6
CAPTURE_CLIP = (-1.0, 2.0)
TIMING_CAPTURE_GOAL = 1.0


def _sharpe(p: Any) -> float | None:
    if p is None:
        return None
    s = p.summary()["sharpe"]
    return float(s) if math.isfinite(s) else None


def oracle_sharpe(r: ScenarioResult) -> float | None:
    """The best oracle rule's Sharpe (references named oracle*)."""
    vals = [_sharpe(v) for k, v in r.references.items() if k.startswith("oracle")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def capture_vs_oracle(r: ScenarioResult) -> float | None:
    o, a = oracle_sharpe(r), _sharpe(r.agent)
    return a / o if o is not None and a is not None and o > 0 else None


def draw_row(r: ScenarioResult) -> dict[str, Any]:
    """One draw's row (see the module docstring)."""
    p = r.params
    a = r.agent.summary()
    q = r.baselines.get("quant")
    at = r.timing()
    return {
        "scenario": r.name, "index": p.get("index"), "seed": p.get("seed"), "form": p.get("form"), "kind": p.get("kind"),
        "interval": p.get("interval"), "horizon": p.get("horizon"), "strength": p.get("strength"), "costs": p.get("costs"),
        "cost_rate_bps": p.get("cost_rate_bps"), "noise": p.get("noise_text"), "noise_params": p.get("noise"),
        "expected_oracle_sharpe": p.get("expected_oracle_sharpe_best"), "oracle_sharpe": oracle_sharpe(r),
        "quant_sharpe": _sharpe(q), "quant_rules": (q.extra.get("rules") if q is not None else None),
        "buy_and_hold_sharpe": _sharpe(r.references.get("buy_and_hold")), "agent_sharpe": _sharpe(r.agent),
        "capture_vs_quant": r.capture_vs_quant(), "capture_vs_oracle": capture_vs_oracle(r),
        "agent_beta": at["beta"], "agent_timing_sharpe": at["timing_sharpe"],
        "quant_timing_sharpe": r.timing(q)["timing_sharpe"] if q is not None else None,
        "timing_capture_vs_quant": r.timing_capture_vs_quant(),
        "trades_per_1000": a["trades_per_1000"], "turnover": a["turnover"], "walk_forward_s": r.train_s,
        "sharpe_standard_error": r.standard_error(), "sharpe_tolerance": r.tolerance(), "gate": r.gate.get("passed"),
    }


def _mean_capture(values: Sequence[float]) -> float | None:
    return float(np.mean(np.clip(values, *CAPTURE_CLIP))) if values else None


def family_block(results: Sequence[ScenarioResult], family: str, size: str) -> dict[str, Any]:
    """scorecard.json's "family": the set, its rows and its gates (see the module docstring)."""
    return block_from_rows([draw_row(r) for r in results], family, size)


def block_from_rows(rows: Sequence[dict[str, Any]], family: str, size: str) -> dict[str, Any]:
    """The family block from ``draw_row`` rows alone (so rows scored in separate processes can be
    pooled: ``bench/bench_family.py`` parts, merged by ``bench/merge_parts.py``)."""
    gates = family_gates(rows)
    judged = [g["passed"] for g in gates if g["passed"] is not None]
    return {"set": family, "size": size, "draws": len(rows), "edge_draws": sum(r["kind"] == "edge" for r in rows),
            "no_edge_draws": sum(r["kind"] == "no_edge" for r in rows),
            "rule": "HELD_OUT scores are reported, never optimised" if family == "heldout" else "development draws (tuning allowed)",
            "rows": list(rows), "gates": gates, "beyond_noise": beyond_noise(rows), "timing": timing_capture(rows),
            "passed": bool(all(judged)) if judged else None}


def beyond_noise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Capture vs quant (clipped mean, as the gate) over the edge draws whose quant Sharpe > 2 SE."""
    names = [r["scenario"] for r in rows if r["kind"] == "edge" and r["capture_vs_quant"] is not None
             and (r["quant_sharpe"] or 0.0) > 2.0 * r["sharpe_standard_error"]]
    vals = [r["capture_vs_quant"] for r in rows if r["scenario"] in names]
    m = _mean_capture(vals)
    return {"value": m, "draws": names,
            "rule": f"capture vs quant {pct(m)} over the {len(names)} edge draws whose quant Sharpe > 2 SE (reported, not gated)"}


def times(row: dict[str, Any]) -> bool:
    """Whether the draw's quant rule times the market: its timing Sharpe above 2 SE of the draw's fold mean."""
    qt = row.get("quant_timing_sharpe")
    return qt is not None and qt > 2.0 * row["sharpe_standard_error"]


def timing_capture(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Timing capture vs quant (clipped mean, as the gate) over the edge draws where the quant rule
    times (``times``); a goal, reported and not gated (see the module docstring)."""
    names = [r["scenario"] for r in rows if r["kind"] == "edge" and times(r) and r.get("timing_capture_vs_quant") is not None]
    vals = [r["timing_capture_vs_quant"] for r in rows if r["scenario"] in names]
    m = _mean_capture(vals)
    timed = sum(r["kind"] == "edge" and times(r) for r in rows)
    return {"value": m, "draws": names, "goal": TIMING_CAPTURE_GOAL, "met": None if m is None else bool(m >= TIMING_CAPTURE_GOAL),
            "rule": f"timing capture vs quant {pct(m)} >= {TIMING_CAPTURE_GOAL:.0%} over the {len(names)} edge draws where the quant "
                    f"rule times (its timing Sharpe > 2 SE; {timed} of {sum(r['kind'] == 'edge' for r in rows)} edge draws; "
                    f"each ratio clipped to {list(CAPTURE_CLIP)}; a goal, not gated)"}


def family_gates(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The four gates (see the module docstring) over ``draw_row`` rows."""
    edge = [r for r in rows if r["kind"] == "edge"]
    no_edge = [r for r in rows if r["kind"] == "no_edge"]
    gates = []
    vq = [r["capture_vs_quant"] for r in edge if r["capture_vs_quant"] is not None]
    mq = _mean_capture(vq)
    gates.append({"name": "capture vs quant", "passed": None if mq is None else bool(mq >= CAPTURE_VS_QUANT_GATE), "value": mq,
                  "draws": len(vq),
                  "rule": f"edge draws: mean capture vs the quant rule {pct(mq)} >= {CAPTURE_VS_QUANT_GATE:.0%} "
                          f"(goal {CAPTURE_VS_QUANT_GOAL:.0%}: {'met' if mq is not None and mq >= CAPTURE_VS_QUANT_GOAL else 'not met'}; "
                          f"{len(vq)} of {len(edge)} edge draws with a quant Sharpe > 0; each ratio clipped to {list(CAPTURE_CLIP)})"})
    vo = [r["capture_vs_oracle"] for r in edge if r["capture_vs_oracle"] is not None]
    mo = _mean_capture(vo)
    gates.append({"name": "capture vs oracle", "passed": None, "goal": True, "met": None if mo is None else bool(mo >= CAPTURE_VS_ORACLE_GOAL),
                  "value": mo, "draws": len(vo),
                  "rule": f"edge draws: mean capture vs the oracle {pct(mo)} >= {CAPTURE_VS_ORACLE_GOAL:.0%} ({len(vo)} of {len(edge)} edge draws)"})
    below = [r["scenario"] for r in rows if (r["agent_sharpe"] or 0.0) < -2.0 * r["sharpe_standard_error"]]
    gates.append({"name": "not below flat", "passed": bool(not below) if rows else None, "value": len(below), "draws": len(rows),
                  "rule": f"every draw: agent Sharpe >= flat 0 - 2 SE: {len(rows) - len(below)} of {len(rows)}"
                          + (f" (below: {', '.join(below)})" if below else "")})
    bad = [r["scenario"] for r in no_edge
           if (r["agent_sharpe"] or 0.0) < -r["sharpe_tolerance"] or r["turnover"] > MAX_NO_EDGE_TURNOVER]
    gates.append({"name": "no-edge flat", "passed": bool(not bad) if no_edge else None, "value": len(bad), "draws": len(no_edge),
                  "rule": f"no-edge draws: Sharpe >= -tol and turnover <= {MAX_NO_EDGE_TURNOVER}: {len(no_edge) - len(bad)} of {len(no_edge)}"
                          + (f" (failed: {', '.join(bad)})" if bad else "")})
    return gates


def gate_lines(block: dict[str, Any]) -> list[str]:
    """One line per family gate: "PASS|FAIL|not gated  <name>: <rule>", then the reported beyond-noise capture."""
    word = {True: "PASS", False: "FAIL", None: "not gated"}
    goal = {True: "GOAL met", False: "GOAL not met", None: "GOAL n/a"}
    lines = [f"{goal[g.get('met')] if g.get('goal') else word[g['passed']]}  {g['name']}: {g['rule']}" for g in block["gates"]]
    if block.get("timing") is not None:  # timing apart from holding, beside Sharpe capture
        lines.append(f"{goal[block['timing'].get('met')]}  timing capture vs quant: {block['timing']['rule']}")
    if block.get("beyond_noise") is not None:
        lines.append(f"reported  capture vs quant beyond noise: {block['beyond_noise']['rule']}")
    return lines


def _f(x: Any, fmt: str = "{:+.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


COLUMNS = ("draw", "form", "interval", "horizon", "strength", "costs", "noise", "oracle", "quant", "quant rules",
           "B&H", "agent", "vs quant", "vs oracle", "agent β", "agent timing", "quant timing", "timing vs quant",
           "trades/1k", "walk-fwd s", "gate")
SHORT_COLUMNS = ("draw", "bars", "horizon", "strength", "costs", "noise", "oracle", "quant (rules)", "B&H", "agent",
                 "vs quant", "vs oracle", "β", "timing", "q timing", "timing vs q", "trades/1k", "wf s", "gate")
"""The console's narrower table: the form is in the draw's name, the noise and the rules abbreviated."""


def _short_noise(noise: dict[str, Any] | None, text: str | None) -> str:
    if not noise:
        return str(text)
    return f"{'GARCH' if noise['vol_model'] == 'garch' else 'SV'} t{noise['df']:.0f}" + (" J" if noise.get("jump_rate") else "")


def _cells(row: dict[str, Any], short: bool = False) -> list[str]:
    rules = row["quant_rules"]
    gate = {True: "PASS", False: "FAIL", None: "-"}[row["gate"]]
    if short:
        distinct = list(dict.fromkeys(rules)) if rules else []
        quant = _f(row["quant_sharpe"]) + (f" ({','.join(distinct)})" if distinct else "")
        return [row["scenario"], str(row["interval"]), _f(row["horizon"], "{:,.0f}"), _f(row["strength"], "{:.3g}"),
                f"{_f(row['cost_rate_bps'], '{:.1f}')} bp", _short_noise(row.get("noise_params"), row["noise"]),
                _f(row["oracle_sharpe"]), quant, _f(row["buy_and_hold_sharpe"]), _f(row["agent_sharpe"]),
                pct(row["capture_vs_quant"]), pct(row["capture_vs_oracle"]), *_timing_cells(row), _f(row["trades_per_1000"], "{:.1f}"),
                _f(row["walk_forward_s"], "{:.0f}"), gate]
    return [row["scenario"], str(row["form"]), str(row["interval"]), _f(row["horizon"], "{:,.0f}"), _f(row["strength"], "{:.3g}"),
            f"{row['costs']} ({_f(row['cost_rate_bps'], '{:.1f}')} bps)", str(row["noise"]), _f(row["oracle_sharpe"]),
            _f(row["quant_sharpe"]), ",".join(rules) if rules else "-", _f(row["buy_and_hold_sharpe"]), _f(row["agent_sharpe"]),
            pct(row["capture_vs_quant"]), pct(row["capture_vs_oracle"]), *_timing_cells(row), _f(row["trades_per_1000"], "{:.1f}"),
            _f(row["walk_forward_s"], "{:.1f}"), gate]


def _timing_cells(row: dict[str, Any]) -> list[str]:
    """agent beta, agent timing Sharpe, quant timing Sharpe, timing capture vs quant ("n/a" for rows
    written before the timing columns)."""
    return [_f(row.get("agent_beta")), _f(row.get("agent_timing_sharpe")), _f(row.get("quant_timing_sharpe")),
            pct(row.get("timing_capture_vs_quant"))]


def rich_family_table(block: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table(title=f"foxhunt scorecard: family {block['set']}, {block['draws']} draws (validation Sharpe = mean of fold Sharpe ratios)")
    for col in SHORT_COLUMNS:
        t.add_column(col, justify="left" if col in ("draw", "bars", "noise", "quant (rules)", "gate") else "right")
    for row in block["rows"]:
        cells = _cells(row, short=True)
        cells[-1] = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]"}.get(cells[-1], cells[-1])
        t.add_row(*cells)
    return t


def html_fragment(block: dict[str, Any]) -> str:
    """The family's table and gate lines as HTML."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(row)) + "</tr>" for row in block["rows"])
    gates = "".join(f"<li>{html.escape(line)}</li>" for line in gate_lines(block))
    return (f"<h2>family {html.escape(block['set'])} ({block['draws']} draws; {html.escape(block['rule'])})</h2>"
            f"<table><tr>{head}</tr>{body}</table><p>family gates:</p><ul>{gates}</ul>")
