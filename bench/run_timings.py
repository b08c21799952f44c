"""The timings a walk-forward run directory records, gathered from every run under a folder (a
scorecard's ``runs/``): per fold its transition, training, evaluation seconds (timings.json) and each
epoch's wall seconds (metrics.jsonl ``epoch_s``), so a cold start shows where it is paid.

    python -m bench.run_timings /tmp/sc_h200_fast > bench/results/timings_cuda_h200_fast.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_timings(run: Path) -> dict:
    folds: dict[str, dict] = {}
    for t in sorted(run.glob("folds/fold_*/timings.json")):
        folds[t.parent.name] = {k: v for k, v in json.loads(t.read_text()).items() if v is not None}
    epochs: dict[str, list[float]] = {}
    log = run / "metrics.jsonl"
    if log.is_file():
        for line in log.read_text().splitlines():
            row = json.loads(line)
            if "epoch_s" in row:
                epochs.setdefault(f"fold_{row['fold']}", []).append(round(float(row["epoch_s"]), 3))
    for name, e in epochs.items():
        folds.setdefault(name, {})["epoch_s"] = e
    return folds


def main() -> None:
    root = Path(sys.argv[1])
    out = {str(r.parent.relative_to(root)): run_timings(r.parent) for r in sorted(root.rglob("metrics.jsonl"))}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
