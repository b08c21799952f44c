"""Epoch-selection rules re-scored on stored learning curves (no training): for every walk-forward in
bench/results/learning*_<suffix>.json (bench/bench_learning.py output: per fold and epoch, the inner
window's and the validation window's Sharpe), the fold-mean validation Sharpe that each rule would
keep, and each rule's paired difference from the runner's rule (the argmax of the inner Sharpe).

    python -m bench.selection_rules                  # the H200 files (learning*_cuda_h200.json)
    python -m bench.selection_rules --suffix cpu     # learning*_cpu.json

Rules: argmax (train.select = "inner"); ma3 / ma5: argmax of the 3- / 5-epoch centred moving average
of the inner Sharpe (edges padded with the end values); last: the last epoch; skipq: the argmax after
the first quarter of the epochs. Prints one line a walk-forward, then the summary (docs/LEARNING.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _moving_argmax(width: int) -> Callable[[np.ndarray], int]:
    def pick(inner: np.ndarray) -> int:
        h = width // 2
        padded = np.pad(inner, h, mode="edge")
        return int(np.argmax(np.convolve(padded, np.ones(width) / width, mode="valid")))
    return pick


RULES: dict[str, Callable[[np.ndarray], int]] = {
    "argmax": lambda inner: int(np.argmax(inner)),
    "ma3": _moving_argmax(3),
    "ma5": _moving_argmax(5),
    "last": lambda inner: len(inner) - 1,
    "skipq": lambda inner: len(inner) // 4 + int(np.argmax(inner[len(inner) // 4:])),
}


def selected(folds: list[list[dict]], rule: Callable[[np.ndarray], int]) -> float:
    """Fold-mean validation Sharpe of the epochs ``rule`` picks from each fold's inner Sharpe [epochs]."""
    vals = []
    for fold in folds:
        inner = np.array([r["inner_sharpe"] for r in fold], dtype=float)
        inner = np.where(np.isfinite(inner), inner, -np.inf)
        vals.append(fold[rule(inner)]["val_sharpe"])
    return float(np.mean(vals))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suffix", default="cuda_h200", help="result files learning*_<suffix>.json (default cuda_h200)")
    a = p.parse_args()
    table: dict[str, list[float]] = {k: [] for k in RULES}
    for path in sorted(RESULTS.glob(f"learning*_{a.suffix}.json")):
        for run in json.loads(path.read_text()).get("runs", []):
            if not run.get("folds") or "inner_sharpe" not in run["folds"][0][0]:
                continue
            row = {k: selected(run["folds"], rule) for k, rule in RULES.items()}
            for k, v in row.items():
                table[k].append(v)
            print(f"{path.stem[:40]:40s} {run.get('scenario', '?'):10s} {run.get('variant', ''):8s} "
                  + " ".join(f"{k} {v:+.2f}" for k, v in row.items()))
    n = len(table["argmax"])
    if n < 2:
        raise SystemExit(f"{n} walk-forward(s) found under {RESULTS}: nothing to compare")
    base = np.array(table["argmax"])
    print(f"{n} walk-forwards; mean selected: " + ", ".join(f"{k} {np.mean(v):+.3f}" for k, v in table.items()))
    for k in RULES:
        if k != "argmax":
            d = np.array(table[k]) - base
            print(f"{k:>6} - argmax: {d.mean():+.3f} ± {d.std(ddof=1) / np.sqrt(n):.3f} (SE); better in {(d > 0).sum()} of {n}")


if __name__ == "__main__":
    main()
