"""Re-score a discount-grid run (``bench/bench_gamma_grid.py`` JSON) under other fold rules, without
training again: which discount a fold trades (each single γ group alone, or the grid's held-back
choice) and the abstention bar z. Every number it needs is in the run's rows: per fold, each γ group's
mean selected held-back Sharpe and its validation backtest (``selection.gamma_groups[i].validation``,
reporting only), and the held-back window's SE.

A fold under rule (γ, z) trades group γ's ensemble, scoring its validation Sharpe, when the group's
held-back mean exceeds z · SE (the grid rule: the best held-back group, z raised for the choice among
g groups as ``train.gamma_grid`` does), else it is flat (0). Per rule it prints the family's gates as
``scorecard.family.gates`` computes them: mean capture vs the quant rule over the edge draws whose quant
rule earned (each ratio clipped to [−1, 2]; gate 50 %), draws below flat by more than 2 SE, no-edge
draws below −tol (2·√2·SE) or trading more than 10 round trips per 1,000 bars. Reporting on
development draws only: the held-out family is never re-scored to choose anything.

    python -m bench.rescore_gamma_grid bench/results/gamma_grid_cuda_dqn_cand.json [--z 0,2,2.5,3]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.scorecard.family import LAYOUTS
from foxhunt.scorecard.family.gates import CAPTURE_CLIP
from foxhunt.train.gamma_grid import adjusted_z

NO_EDGE_TRADES_PER_1000 = 10.0  # one round trip per 100 bars: the family's no-edge turnover bound


def fold_score(groups: list[dict[str, Any]], se: float, rule: str, z: float) -> tuple[float, float]:
    """(validation Sharpe, round trips) of one fold under ``rule`` ("grid" or a γ) and bar z."""
    if rule == "grid":
        pick = max(groups, key=lambda g: g["mean_inner_sharpe"])  # ties: the earlier γ, as gamma_grid.choose
        bar = adjusted_z(z, len(groups)) * se
    else:
        pick = next(g for g in groups if f"{g['gamma']:g}" == rule)
        bar = z * se
    if not pick["mean_inner_sharpe"] > bar:
        return 0.0, 0.0
    v = pick["validation"]
    return (float(v["sharpe"]) if v["sharpe"] is not None and math.isfinite(v["sharpe"]) else 0.0), float(v["trade_count"])


def rescore(rows: list[dict[str, Any]], rule: str, z: float) -> dict[str, Any]:
    caps, below, noisy, sharpes = [], [], [], {}
    for r in rows:
        scores = [fold_score(g, se, rule, z) for g, se in zip(r["gamma_groups"], r["abstain_se"])]
        sharpe = float(np.mean([s for s, _ in scores]))
        trades = 1000.0 * sum(t for _, t in scores) / (len(scores) * r["val_bars"])
        sharpes[r["index"]] = sharpe
        se = float(r["sharpe_standard_error"])
        if r["kind"] == "edge" and (r["quant_sharpe"] or 0.0) > 0:
            caps.append(float(np.clip(sharpe / r["quant_sharpe"], *CAPTURE_CLIP)))
        if sharpe < -2.0 * se:
            below.append(r["index"])
        if r["kind"] == "no_edge" and (sharpe < -2.0 * math.sqrt(2.0) * se or trades > NO_EDGE_TRADES_PER_1000):
            noisy.append(r["index"])
    return {"rule": rule, "z": z, "capture_vs_quant": float(np.mean(caps)) if caps else None, "draws_vs_quant": len(caps),
            "below_flat": below, "no_edge_not_flat": noisy, "sharpe": sharpes}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--z", default="0,2,2.5,3", help="abstention bars to try (comma-separated)")
    args = ap.parse_args(argv)
    for path in args.files:
        doc = json.loads(path.read_text())
        rows = doc["rows"]
        size = str(doc.get("layout", "family gpu")).removeprefix("family ")
        for r in rows:  # validation bars a fold: the family layout's (a custom layout's when the run had one)
            r["val_bars"] = doc["layout"]["val"] if isinstance(doc.get("layout"), dict) else LAYOUTS[size][r["interval"]].val
        gammas = [f"{g['gamma']:g}" for g in rows[0]["gamma_groups"][0]]
        print(f"{path.name}: {len(rows)} draws; validation Sharpe per draw (index: form interval), quant, then rules")
        print("  " + "  ".join(f"#{r['index']} {r['form'][:6]} {r['interval'][:3]}: q {r['quant_sharpe']:+.2f}" for r in rows))
        for rule in [*gammas, "grid"]:
            for z in [float(x) for x in args.z.split(",")]:
                s = rescore(rows, rule, z)
                cap = "n/a" if s["capture_vs_quant"] is None else f"{100 * s['capture_vs_quant']:.0f} %"
                per = " ".join(f"{v:+.2f}" for v in s["sharpe"].values())
                print(f"  γ {rule:<5} z {z:<4g} capture vs quant {cap:>6} ({s['draws_vs_quant']} draws), below flat "
                      f"{s['below_flat'] or '-'}, no-edge not flat {s['no_edge_not_flat'] or '-'} | {per}")


if __name__ == "__main__":
    main()
