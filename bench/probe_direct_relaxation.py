"""How the direct learner should meet the env's five exposure levels, measured: each relaxation trained
walk-forward on development draws, then scored on the validation windows two ways at the real costs:

* ``levels``: the greedy network in the torch backtester (what ``foxhunt train`` trades and reports);
* ``trained``: the exposures the relaxation trained on, booked by the training P&L (``agents.direct.pnl``,
  equal to the backtester on the levels): the softmax expectation, the straight-through levels, or
  the continuous tanh exposure: what a continuous target-exposure action in the env would trade.

Abstention is off (every fold trades its selected network): this compares policies, not the noise bar.
Development draws only (tuning allowed); never run it on held-out draws.

    PYTHONPATH=src:. python -m bench.probe_direct_relaxation --config configs/train-direct.toml \\
        --draws 4,3,2,6 --relaxations softmax,straight_through,continuous --threads 1

JSON: bench/results/direct_relaxation_<device>.json (``--name`` to change).
"""

from __future__ import annotations

import math
import tempfile
import tomllib
from pathlib import Path

import numpy as np
import torch

from bench.common import arguments, machine, own_args, parse, save
from foxhunt.agents.direct.pnl import Execution, bar_step, fresh_book, gather_bars, step_terms
from foxhunt.backtest.evaluator import execution_params
from foxhunt.env.params import EnvTensors
from foxhunt.train.selection import pooled_sharpe


@torch.no_grad()
def trained_returns(net, market, env, start: int, steps: int, k: int) -> np.ndarray:
    """Per-bar validation returns of the exposures the relaxation trains on, one window from a flat
    portfolio (bars start+1 … start+steps), at ``env``'s real costs."""
    idx = torch.arange(start, start + steps, device=market.device)[None, :]
    ex = Execution.of(EnvTensors.build(execution_params(env), 1, market.device))
    feats = (market.features.index_select(0, idx[0]) - market.norm_mean) * market.norm_inv_std
    terms = step_terms(gather_bars(market, idx), ex, market.median_abs_return)
    book, exposure, out = fresh_book(1, ex), torch.zeros(1, device=market.device), []
    pre = net.first_layer(feats[None])
    x = torch.zeros(1, device=market.device)
    for j in range(steps):
        if j % k == 0:
            x = net.exposure(net.rest(pre[:, j], exposure))
        res = bar_step(book, x, terms.at(j), ex, hard_gate=net.relaxation == "straight_through")
        book, exposure = res.book, res.exposure
        out.append(float(res.ret))
    return np.asarray(out)


def main() -> None:
    from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
    from foxhunt.scorecard.family import draw, size_for
    from foxhunt.train.runner import WalkForwardRunner

    ap = arguments(__doc__, device="cpu", config="configs/train-direct.toml")
    ap.add_argument("--draws", default="4,3,2,6", help="development draw indices")
    ap.add_argument("--relaxations", default="softmax,straight_through,continuous")
    ap.add_argument("--size", default="cpu")
    a = parse(ap)
    base = tomllib.loads(Path(a.config).read_text())
    rows = []
    name = f"direct_relaxation_{a.dev.type}"
    for index in [int(i) for i in a.draws.split(",")]:
        sc = draw("dev", index, a.size)
        size = size_for(SIZES[a.size], sc)
        size = type(size)(**{**size.__dict__, "epochs": None})
        for relax in a.relaxations.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                ov = [*a.overrides, f'direct.relaxation="{relax}"', "train.abstain=false", f'run.out_dir="{tmp}"',
                      f'run.device="{a.dev.type}"']
                cfg = scenario_config(base, sc, size, ov)
                runner = WalkForwardRunner(prepare_scenario(cfg, sc))
                folds: list[dict] = []

                def on_fold(k, fold, agent) -> None:
                    net = runner.trainer.learner.net  # the selected epoch's weights (EpochSelector.finish)
                    r = trained_returns(net, runner.market, cfg.env, fold.val_start, fold.val_len - 1,
                                        runner.trainer.env.decision_interval)
                    folds.append({"levels_sharpe": agent.metrics[0]["sharpe"], "trained_sharpe": pooled_sharpe(r, runner.bars_per_year),
                                  "levels_trades": agent.metrics[0]["trade_count"]})

                runner.score_folds(on_fold)
            mean = lambda key: float(np.mean([f[key] if math.isfinite(f[key]) else 0.0 for f in folds]))  # noqa: E731
            row = {"scenario": sc.name, "relaxation": relax, "levels_sharpe": mean("levels_sharpe"),
                   "trained_sharpe": mean("trained_sharpe"), "folds": folds, "interval": sc.params.get("interval")}
            rows.append(row)
            print(f"{sc.name:<20} {relax:<17} levels {row['levels_sharpe']:+6.2f} trained {row['trained_sharpe']:+6.2f}", flush=True)
            save(a, name, {"machine": machine(a.dev), "config": a.config, "overrides": a.overrides, "args": own_args(a),
                           "rows": rows})


if __name__ == "__main__":
    main()
