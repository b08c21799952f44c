"""Learning curves on scorecard scenarios: validation Sharpe after every epoch, next to the Sharpe on a
held-back tail of the training window (the "inner" window: the selection signal ``train.select``
uses), so one run shows whether more epochs over-fit and whether the inner window predicts the
validation window.

    PYTHONPATH=src:. python -m bench.bench_learning --config configs/h200.toml --size gpu \
        --scenarios edge_daily,regime --epochs 20 --device cuda

Per scenario and fold it trains on [train_start, train_end - inner - purge), and after each epoch
backtests the greedy policy on the inner window [train_end - inner, train_end) and on the
validation window (one lockstep run of two windows). JSON: bench/results/learning_<device>.json;
the last lines print, per scenario, the fold-mean validation Sharpe after each epoch, the one the
best inner epoch would select, and the best reference's (oracle) Sharpe.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import arguments, machine, parse, save
from foxhunt.backtest.policies import GreedyPolicy
from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
from foxhunt.scorecard.markets import make_scenario, SPACING
from foxhunt.scorecard.policies import score_exposures
from foxhunt.train.agent import policy_net
from foxhunt.train.selection import split_fold


def curves(name: str, base: dict[str, Any], size_name: str, epochs: int, inner_frac: float,
           overrides: list[str]) -> dict[str, Any]:
    from foxhunt.train.runner import WalkForwardRunner

    size = SIZES[size_name]
    scenario = make_scenario(name, size.n_bars(SPACING[name]))
    cfg = scenario_config(base, scenario, size, [f"train.epochs={epochs}", *overrides])
    prepared = prepare_scenario(cfg, scenario)
    runner = WalkForwardRunner(prepared)
    trainer, bt, backend = runner.trainer, runner.backtester, runner.plan.eval
    purge = int(cfg.folds.purge)
    rows = []
    t0 = time.perf_counter()
    for f in prepared.folds:
        short, inner_start, inner_steps = split_fold(f, inner_frac, purge)  # as train.select = "inner"
        trainer.reset_for_fold(short)
        fold_rows = []
        for e in range(epochs):
            trainer.train_epoch()
            trainer.drain()
            res = bt.run([inner_start, f.val_start], [inner_steps, f.val_len - 1],
                         GreedyPolicy(policy_net(trainer)), backend=backend)
            fold_rows.append({"epoch": e + 1, "inner_sharpe": res.metrics[0]["sharpe"],
                              "val_sharpe": res.metrics[1]["sharpe"], "inner_turnover": res.metrics[0]["turnover"],
                              "val_turnover": res.metrics[1]["turnover"]})
        rows.append(fold_rows)
    wall = time.perf_counter() - t0
    refs = score_exposures(prepared.market, bt, prepared.folds, {"buy_and_hold": np.ones(len(scenario.bars)),
                                                                   **scenario.oracles},
                           trainer.env.n_actions, float(cfg.env.capital), backend)
    ref_sharpe = {k: float(v.summary()["sharpe"]) for k, v in refs.items()}
    val = np.array([[r["val_sharpe"] for r in fr] for fr in rows])  # [folds, epochs]
    inner_s = np.array([[r["inner_sharpe"] for r in fr] for fr in rows])
    pick = np.nanargmax(np.where(np.isfinite(inner_s), inner_s, -np.inf), axis=1)
    selected = val[np.arange(val.shape[0]), pick]
    return {"scenario": name, "epochs": epochs, "inner_frac": inner_frac, "overrides": overrides, "wall_s": wall,
            "folds": rows, "references": ref_sharpe, "best_reference": max(0.0, *ref_sharpe.values()),
            "val_mean_by_epoch": val.mean(0).tolist(), "selected_epochs": (pick + 1).tolist(),
            "val_selected_mean": float(selected.mean())}


def main() -> None:
    p = arguments(__doc__.splitlines()[0], quick="the tiny scorecard size, 3 epochs, edge_daily, on the CPU", config="")
    p.add_argument("--size", default="cpu", choices=sorted(SIZES))
    p.add_argument("--scenarios", default="edge_daily,regime")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--inner", type=float, default=0.2, help="held-back tail of each training window")
    p.add_argument("--variant", action="append", default=[],
                   help="extra runs: 'label:key=value;key=value' (each scenario once more per variant)")
    a = parse(p)
    if a.quick:
        a.size, a.epochs, a.scenarios = "tiny", 3, "edge_daily"
    base = tomllib.loads(Path(a.config).read_text()) if a.config else {}
    overrides = list(a.overrides) + [f"run.device={a.dev.type}"]
    variants = [("base", [])] + [(v.split(":", 1)[0], v.split(":", 1)[1].split(";")) for v in a.variant]
    out = []
    for label, extra in variants:
        for name in a.scenarios.split(","):
            r = curves(name, base, a.size, a.epochs, a.inner, overrides + extra)
            r["variant"] = label
            out.append(r)
            by_epoch = " ".join(f"{x:+.2f}" for x in r["val_mean_by_epoch"])
            print(f"{label:>10} {name:<12} best ref {r['best_reference']:+.2f} | val by epoch {by_epoch} | "
                  f"selected {r['val_selected_mean']:+.2f} (epochs {r['selected_epochs']}) | {r['wall_s']:.0f} s", flush=True)
            # Saved after every run: a call cut short by its time limit still returns what it measured.
            path = save(a, f"learning_{a.dev.type}{'_quick' if a.quick else ''}",
                        {"machine": machine(a.dev), "config": a.config or None, "size": a.size, "runs": out,
                         "complete": len(out) == len(variants) * len(a.scenarios.split(","))})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
