"""Which folds of a family run could trade at all: the best oracle rule's and the quant rule's validation
Sharpe against the fold's abstention bar, read from ``bench/bench_family.py`` or ``bench_gamma_grid.py``
rows (no training).

Abstention (``train.abstain``) trades a fold only when the members' held-back Sharpe beats z · SE of the
held-back window. The held-back window (the last ``train.inner_fraction`` of the training window) and the
validation window have about the same length at the family's ``gpu`` layouts, so a policy's validation
Sharpe is a fair stand-in for what it would show on the held-back window: a fold where even the oracle's
validation Sharpe is under the bar is a fold where a learner as good as the oracle would, more often than
not, be flat. Per interval it counts the edge folds where the oracle (knows the latent state) and the
quant rule (causal, chosen on the training window) clear the bar.

    python -m bench.abstain_reach bench/results/family_dev_cuda_dqn_u1.json [more.json ...] [--out reach.json]

Reporting only: nothing is chosen from a held-out file's counts.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any


def _list(value: Any) -> Any:
    """Rows store nested fields as Python literals (strings) or as JSON values."""
    return ast.literal_eval(value) if isinstance(value, str) else value


def best_oracle(oracle_fold_sharpes: dict[str, list[float]]) -> list[float]:
    """[folds] the validation Sharpes of the oracle rule with the highest sum (the rule the row reports)."""
    rules = {k: v for k, v in oracle_fold_sharpes.items() if k.startswith("oracle")}
    return max(rules.values(), key=sum) if rules else []


def draw_reach(row: dict[str, Any]) -> dict[str, Any]:
    """One draw's folds: oracle and quant validation Sharpes, the bar, and which of them clear it."""
    bars = [float(b) for b in _list(row["abstain_bar"])]
    oracle = [float(x) for x in best_oracle(_list(row["oracle_fold_sharpes"]))]
    quant = [float(x) for x in _list(row["quant_fold_sharpes"])]
    return {"scenario": row["scenario"], "interval": row["interval"], "kind": row["kind"], "bars": bars,
            "oracle": oracle, "quant": quant,
            "oracle_clears": sum(o > b for o, b in zip(oracle, bars)),
            "quant_clears": sum(q > b for q, b in zip(quant, bars)), "folds": len(bars)}


def reach(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{"draws": [draw_reach], "by_interval": {interval: {"folds", "oracle_clears", "quant_clears"}}} over the
    edge draws (one row per draw: the first row of each scenario)."""
    seen, draws = set(), []
    for row in rows:
        if row["kind"] != "edge" or row["scenario"] in seen:
            continue
        seen.add(row["scenario"])
        draws.append(draw_reach(row))
    by: dict[str, dict[str, int]] = {}
    for d in draws:
        b = by.setdefault(d["interval"], {"folds": 0, "oracle_clears": 0, "quant_clears": 0})
        for k in b:
            b[k] += d[k]
    return {"draws": draws, "by_interval": by}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="family result JSONs (rows with abstain_bar)")
    ap.add_argument("--out", type=Path, help="write the counts as JSON here")
    args = ap.parse_args(argv)
    report = {}
    for path in args.files:
        r = reach(json.loads(path.read_text())["rows"])
        report[path.name] = r
        print(f"{path.name}: edge folds whose validation Sharpe clears the abstention bar")
        for d in r["draws"]:
            print(f"  {d['scenario']:<24} {d['interval']:<6} bar {' '.join(f'{b:5.1f}' for b in d['bars'])}  "
                  f"oracle {' '.join(f'{x:+6.1f}' for x in d['oracle'])}  quant {' '.join(f'{x:+6.1f}' for x in d['quant'])}")
        for interval, b in r["by_interval"].items():
            print(f"  {interval:<7} oracle {b['oracle_clears']} of {b['folds']}, quant rule {b['quant_clears']} of {b['folds']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
