"""An experiment (issue 47), not a benchmark of a feature: pooled training on a development universe plus its
mirror (each symbol's bars reflected by ``foxhunt.data.mirror.mirror_bars``, added as extra symbols named
``<symbol>M``), scored on the ORIGINAL symbols' validation returns only, against the same references as
``bench_universe_learning``. It stands in for ``train.mirror``, which universes refuse today; unlike
``train.mirror``, the held-back selection and the abstention also see the mirrored symbols.
docs/LEARNING.md ("Universes") cites its results:

    PYTHONPATH=src:. python -m bench.universe_mirror_experiment --universes 0 --seeds 0,1,2 --epochs 4 \\
      --set 'features.ema_horizons=[10,30,100]' --set train.train_cost_multiplier=2 \\
      --out bench/results/universe_learning_dqn_cpu_dev_ema_c2_mirroruniv_exp.json
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from bench.bench_universe_learning import gates, portfolio_row, references, run_config, stitched, train
from bench.common import _write, machine
from foxhunt.agents.fold_trainer import TrainingHalted
from foxhunt.backtest.annualisation import infer_bars_per_year
from foxhunt.data.mirror import mirror_bars
from foxhunt.scorecard.family.universe import FamilyUniverse, universe_draw, write_universe


def with_mirror(u: FamilyUniverse) -> FamilyUniverse:
    """``u`` plus every symbol's mirror as another symbol (``<symbol>M``; oracles negated)."""
    mirrored = tuple(dataclasses.replace(mirror_bars(b), source=b.source + " (mirror)") for b in u.bars)
    return FamilyUniverse(u.name, u.kind, u.form, u.symbols + tuple(s + "M" for s in u.symbols), u.bars + mirrored,
                          u.oracles + tuple({k: -v for k, v in o.items()} for o in u.oracles), u.env, u.params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--universes", default="0", help="development universe indices (comma-separated)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--agent", default="dqn")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override section.key=value")
    ap.add_argument("--out", required=True, help="result JSON path")
    a = ap.parse_args()
    torch.set_num_threads(1)
    args = SimpleNamespace(device="cpu", agent=a.agent, epochs=a.epochs, overrides=a.overrides)
    rows: list[dict[str, Any]] = []
    refs: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in [int(i) for i in a.universes.split(",")]:
            u = universe_draw("dev", index, 6)
            u2 = with_mirror(u)
            data0 = write_universe(u, Path(tmp) / u.name)
            data2 = write_universe(u2, Path(tmp) / (u.name + "_mirror"))
            bpy = infer_bars_per_year(np.unique(np.concatenate([b.timestamps for b in u.bars])))
            rr, rt = references(run_config(u, data0, Path(tmp) / "runs0", 0, args), u, bpy)
            refs[u.name] = {"kind": u.kind, "form": u.form, **{k: portfolio_row(rt, v, bpy) for k, v in rr.items()}}
            print(f"{u.name}: quant {refs[u.name]['quant']['sharpe']:+.2f}", flush=True)
            for seed in [int(s) for s in a.seeds.split(",")]:
                cfg = run_config(u2, data2, Path(tmp) / "runs", seed, args)
                try:
                    run_dir, wall = train(cfg, "pooled", f"{u.name}-mirror-{seed}")
                except TrainingHalted as exc:
                    errors.append({"universe": u.name, "seed": seed, "error": str(exc)})
                    print("HALTED", exc, flush=True)
                    continue
                per, times, facts = stitched(run_dir, u, subset=True)  # the original symbols only
                per2, times2, _ = stitched(run_dir, u2)
                row = {"universe": u.name, "kind": u.kind, "form": u.form, "mode": "pooled", "seed": seed, "wall_s": wall,
                       "portfolio": portfolio_row(times, [p[0] for p in per], bpy),
                       "portfolio_with_mirror": portfolio_row(times2, [p[0] for p in per2], bpy),
                       "fold_pooled_sharpe": facts["fold_pooled_sharpe"], "flat": facts["flat"],
                       "turnover": facts["turnover"], "time_in_market": facts["time_in_market"]}
                rows.append(row)
                print(f"  seed {seed} pooled+mirror portfolio Sharpe {row['portfolio']['sharpe']:+.2f} (with mirror "
                      f"symbols {row['portfolio_with_mirror']['sharpe']:+.2f}) turnover {row['turnover']:.3f} "
                      f"flat {row['flat']} ({wall:.0f} s)", flush=True)
                _write(Path(a.out), {"experiment": "pooled on the universe + its mirror (extra symbols), scored on the "
                                     "original symbols", "family": "dev", "agent": a.agent, "epochs": a.epochs,
                                     "overrides": a.overrides, "references": refs, "rows": rows, "errors": errors,
                                     "gates": gates(rows, refs), "machine": machine(torch.device("cpu"))})


if __name__ == "__main__":
    main()
