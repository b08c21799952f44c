"""What each abstention bar (``train.abstain_z``) would have scored, read from runs trained with
``train.abstain_ablation = true`` (their metrics.json holds, per fold, every member's held-back
Sharpe, the window's standard error and the validation score of the top 1 … K members' ensemble).

For z in a grid the kept members are those whose held-back Sharpe is above z · SE; they are the top j
by held-back Sharpe, so the fold's score is the ablation's j-th row (j = 0: flat, Sharpe 0). Per run:
the fold-mean validation Sharpe, the flat folds and the mean number of voters, for every z and
without abstention (all K members), all from the same trained networks.

    python -m bench.abstain_table /tmp/sc_h200_fast [--z 0,1,1.5,2,2.5,3] > bench/results/abstain_cuda_h200_fast.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

Z_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


def fold_score(record: dict[str, Any], z: float) -> tuple[float, int]:
    """(validation Sharpe, voters) of a fold's model under bar z · SE (from its ablation rows)."""
    bar = z * float(record["standard_error"])
    kept = sum(1 for s in record["inner_sharpes"] if s is not None and s > bar)
    return (0.0 if kept == 0 else float(record["by_members"][kept - 1]["sharpe"])), kept


def run_table(run: Path, grid: tuple[float, ...]) -> dict[str, Any] | None:
    """The table of one run directory (None when it has no ablation rows)."""
    records = []
    for path in sorted(run.glob("folds/fold_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        rec = (json.loads(path.read_text()).get("selection") or {}).get("abstain")
        if rec is None or "by_members" not in rec:
            return None
        records.append(rec)
    if not records:
        return None
    out: dict[str, Any] = {"folds": len(records), "members": len(records[0]["inner_sharpes"]),
                           "inner_z": [[None if s is None else round(s / r["standard_error"], 3) for s in r["inner_sharpes"]]
                                       for r in records],
                           "all_members": _row([(float(r["by_members"][-1]["sharpe"]), len(r["inner_sharpes"])) for r in records])}
    out["by_z"] = {f"{z:g}": _row([fold_score(r, z) for r in records]) for z in grid}
    return out


def _row(scores: list[tuple[float, int]]) -> dict[str, Any]:
    sharpes = [s for s, _ in scores]
    return {"sharpe": sum(sharpes) / len(sharpes), "fold_sharpes": [round(s, 4) for s in sharpes],
            "flat_folds": sum(1 for _, k in scores if k == 0), "mean_voters": sum(k for _, k in scores) / len(scores)}


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
        print(f"{name}: all {t['all_members']['sharpe']:+.2f}  {cells}", file=sys.stderr)


if __name__ == "__main__":
    main()
