"""What each abstention bar (``train.abstain_z``) would have scored, read from finished run folders.

A run with ``train.abstain`` records per fold its members' selected held-back Sharpes, the window's
standard error, and, for a flat fold, what the members' ensemble scored on the validation window
(``selection.abstain.all_members``); a fold that traded scored the ensemble's Sharpe itself. So for
every bar z the fold's score is known without training again: 0 (flat) when the members' mean
held-back Sharpe is at or below z · SE, the ensemble's validation Sharpe otherwise. Per run: the
fold-mean validation Sharpe and the flat folds for every z, and without abstention.

    python -m bench.abstain_table /tmp/sc_h200_fast [--z 0,1,1.5,2,2.5,3] > bench/results/abstain_cuda_h200_fast.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

Z_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


def _sharpe(x: Any) -> float:
    """A validation Sharpe as the scorecard counts it: undefined (never traded) is flat, 0."""
    return float(x) if x is not None and math.isfinite(float(x)) else 0.0


def fold_row(fold: dict[str, Any]) -> tuple[float, float]:
    """(members' mean held-back Sharpe in SE units, the ensemble's validation Sharpe) of one fold's
    metrics.json content."""
    rec = fold["selection"]["abstain"]
    ensemble = rec["all_members"]["sharpe"] if rec["flat"] else fold["agent"]["sharpe"]
    return float(rec["mean_inner_sharpe"]) / float(rec["standard_error"]), _sharpe(ensemble)


def run_table(run: Path, grid: tuple[float, ...]) -> dict[str, Any] | None:
    """The table of one run directory (None when its folds have no abstention record)."""
    rows = []
    for path in sorted(run.glob("folds/fold_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        fold = json.loads(path.read_text())
        if "abstain" not in (fold.get("selection") or {}):
            return None
        rows.append(fold_row(fold))
    if not rows:
        return None
    out: dict[str, Any] = {"folds": len(rows), "mean_inner_z": [round(z, 3) for z, _ in rows],
                           "without": _summary([s for _, s in rows], 0)}
    out["by_z"] = {f"{z:g}": _summary([s if m > z else 0.0 for m, s in rows], sum(1 for m, _ in rows if m <= z))
                   for z in grid}
    return out


def _summary(sharpes: list[float], flat: int) -> dict[str, Any]:
    return {"sharpe": sum(sharpes) / len(sharpes), "fold_sharpes": [round(s, 4) for s in sharpes], "flat_folds": flat}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="a folder holding run directories (e.g. a scorecard's output folder)")
    p.add_argument("--z", default=",".join(f"{z:g}" for z in Z_GRID), help="comma-separated bars in standard errors")
    a = p.parse_args()
    grid = tuple(float(x) for x in a.z.split(","))
    out = {}
    for log in sorted(a.root.rglob("metrics.jsonl")):
        table = run_table(log.parent, grid)
        if table is not None:
            out[str(log.parent.relative_to(a.root))] = table
    json.dump(out, sys.stdout, indent=1)
    print()
    for name, t in out.items():  # the short summary, on stderr
        cells = "  ".join(f"z{z}: {r['sharpe']:+.2f} ({r['flat_folds']} flat)" for z, r in t["by_z"].items())
        print(f"{name}: without {t['without']['sharpe']:+.2f}  {cells}", file=sys.stderr)


if __name__ == "__main__":
    main()
