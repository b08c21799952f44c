"""Re-score a family run's abstention at another z, from its committed rows (no training).

Each row of a ``bench/bench_family.py`` result holds, per fold, the members' held-back Sharpes
(``member_inner_sharpes``), the held-back window's standard error (``abstain_se``), the traded fold's
validation Sharpe (``agent_fold_sharpes``) and, for an abstained fold, what the fold's model would
have scored (``flat_alternative_sharpe``). At a bar of z standard errors a fold trades when its
members' mean held-back Sharpe exceeds z · SE: its Sharpe is then the traded or the alternative one,
else 0 (a draw whose rows this rule does not reproduce at their own bar, as a decision grid's, is
named and skipped). Printed per draw: the mean of the fold Sharpes at each z over the files (the seeds), beside
the quant rule's fold mean. Fold means, not the stitched Sharpe of the run (the folds have equal
lengths, so the two differ by the folds' volatility ratio only).

    PYTHONPATH=src:. python -m bench.rescore_abstention bench/results/family_dev_cpu_forecast_s{0,1,2}.json --z 3 2 1
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def reproduces(row: dict[str, Any]) -> bool:
    """The rule above, at the run's own bar (``abstain_bar``), gives the run's own traded folds. It does not for a
    decision or γ grid, whose fold trades on the chosen group's members only: such rows are not re-scored."""
    for f, (members, bar) in enumerate(zip(row["member_inner_sharpes"], row["abstain_bar"])):
        score = float(np.mean(members)) if members else -np.inf
        if (score > bar) == bool(row["flat"][f]):
            return False
    return True


def fold_sharpes(row: dict[str, Any], z: float) -> list[float]:
    """[folds] the row's fold Sharpes had the abstention bar been z standard errors."""
    out = []
    for f, (members, se) in enumerate(zip(row["member_inner_sharpes"], row["abstain_se"])):
        score = float(np.mean(members)) if members else -np.inf
        traded = not row["flat"][f]
        value = row["agent_fold_sharpes"][f] if traded else row["flat_alternative_sharpe"][f]
        out.append(float(value) if score > z * se and value is not None else 0.0)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--z", type=float, nargs="+", default=[3.0, 2.0, 1.0])
    args = ap.parse_args(argv)
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in args.files:
        for row in json.loads(path.read_text())["rows"]:
            by[row["scenario"]].append(row)
    print("draw".ljust(20), "quant", *(f"z={z:g} (folds traded)".rjust(22) for z in args.z))
    for name, rows in by.items():
        if not all(reproduces(r) for r in rows):
            print(name.ljust(20), "not re-scored: the mean-of-members rule does not give the run's own traded folds "
                  "(a decision or gamma grid trades on the chosen group's members)")
            continue
        quant = float(np.mean([np.mean(r["quant_fold_sharpes"]) for r in rows]))
        cells = []
        for z in args.z:
            fs = [fold_sharpes(r, z) for r in rows]
            traded = sum(v != 0.0 for f in fs for v in f)
            cells.append(f"{np.mean([np.mean(f) for f in fs]):+.2f} ({traded}/{sum(len(f) for f in fs)})".rjust(22))
        print(name.ljust(20), f"{quant:+.2f}", *cells)


if __name__ == "__main__":
    main()
