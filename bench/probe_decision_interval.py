"""What a decision interval does to a learner on an intraday drift (``scorecard.markets.intraday_drift``).

One configuration (the built-in DQN or PPO CPU configuration, or --config) walk-forward on an intraday
market whose drift keeps its sign for ~``--regime`` bars, at each ``--intervals`` k (``env.decision_interval``)
and each ``--seeds`` run seed, beside the quant rule (in-sample chosen momentum / reversal), the
oracle (the hidden drift's sign) and buy-and-hold on the same validation windows. Abstention is off by
default (``--abstain`` turns it on): a CPU-sized validation window's noise bar would hide what was
learned. Not a family draw: a probe for choosing k, whose market (seed 17 unless --market-seed) is
no held-out draw.

    PYTHONPATH=src:. python -m bench.probe_decision_interval --agent dqn --intervals 1,16 --seeds 0,1,2

JSON: bench/results/decision_interval_<device>_<tag>.json, one row per (k, seed): fold Sharpes, trades
per 1,000 bars, flat folds, the references' Sharpes, walk-forward seconds.
"""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import arguments, machine, parse, save
from foxhunt.scorecard.build import Size
from foxhunt.scorecard.markets import intraday_drift
from foxhunt.scorecard.run import run_scenario
from foxhunt.train.config import DEFAULT_TRAIN_TOML


def base_config(agent: str, config: str) -> dict[str, Any]:
    """The configuration under test: --config, else the built-in CPU DQN (``foxhunt train``'s) or PPO
    (configs/train-ppo.toml) configuration."""
    if config:
        return tomllib.loads(Path(config).read_text())
    if agent == "ppo":
        return tomllib.loads((Path(__file__).resolve().parents[1] / "configs" / "train-ppo.toml").read_text())
    return tomllib.loads(DEFAULT_TRAIN_TOML)


def one_run(scenario: Any, base: dict[str, Any], size: Size, overrides: list[str], out: Path) -> dict[str, Any]:
    r = run_scenario(scenario, base, size, overrides, out, "<probe>", baselines=("quant",))
    agent = r.agent
    bars = agent.bars or 1
    row = {"agent_fold_sharpes": [f.sharpe for f in agent.folds], "agent_sharpe": float(np.mean([f.sharpe or 0.0 for f in agent.folds])),
           "trades_per_1000": 1000.0 * sum(f.trades for f in agent.folds) / bars,
           "flat_folds": (agent.extra.get("abstain") or {}).get("flat_folds", []), "walk_forward_s": r.train_s}
    for name, ps in {**r.references, **r.baselines}.items():
        row[f"{name}_fold_sharpes"] = [f.sharpe for f in ps.folds]
        row[f"{name}_sharpe"] = float(np.mean([f.sharpe or 0.0 for f in ps.folds]))
    return row


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--agent", default="dqn", choices=("dqn", "ppo"), help="the built-in CPU configuration to start from")
    ap.add_argument("--intervals", default="1,16", help="decision intervals k (comma-separated)")
    ap.add_argument("--seeds", default="0,1,2", help="run seeds (comma-separated): >= 3 for a learning claim")
    ap.add_argument("--bars", type=int, default=24_000)
    ap.add_argument("--train", type=int, default=12_000, help="training bars before the first validation window")
    ap.add_argument("--val", type=int, default=3_000)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--drift", type=float, default=0.08, help="the drift, sigma a bar")
    ap.add_argument("--regime", type=int, default=1_500, help="mean bars a drift keeps its sign")
    ap.add_argument("--bar-seconds", type=int, default=60)
    ap.add_argument("--market-seed", type=int, default=17)
    ap.add_argument("--abstain", action="store_true", help="keep the configuration's abstention (off by default here)")
    ap.add_argument("--tag", default="probe")
    args = parse(ap, argv)
    if args.quick:
        args.bars, args.train, args.val, args.folds, args.seeds = 6_000, 2_500, 1_000, 2, "0"
        args.overrides = [*args.overrides, "train.epochs=1"]
    if args.threads:
        torch.set_num_threads(args.threads)
    base = base_config(args.agent, args.config)
    sc = intraday_drift(args.bars, args.market_seed, args.drift, args.regime, args.bar_seconds)
    size = Size("probe", bars=args.bars, train=args.train, val=args.val, max_folds=args.folds, real_train=0, real_val=0)
    dev = [f'run.device="{args.device}"'] if args.device != "auto" else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in [int(x) for x in args.intervals.split(",")]:
            for seed in [int(x) for x in args.seeds.split(",")]:
                over = [f"env.decision_interval={k}", f"run.seed={seed}", *([] if args.abstain else ["train.abstain=false"]),
                        *args.overrides, *dev]
                row = {"decision_interval": k, "seed": seed, **one_run(sc, base, size, over, Path(tmp) / f"k{k}s{seed}")}
                rows.append(row)
                print(f"k {k:>3} seed {seed}: agent {row['agent_sharpe']:+6.2f} {[round(s or 0, 2) for s in row['agent_fold_sharpes']]} "
                      f"trades/1k {row['trades_per_1000']:5.1f} | quant {row.get('quant_sharpe', 0):+6.2f} "
                      f"oracle {row.get('oracle_sharpe', 0):+6.2f} B&H {row.get('buy_and_hold_sharpe', 0):+6.2f} "
                      f"({row['walk_forward_s']:.0f} s)", flush=True)
                save(args, f"decision_interval_{'cuda' if args.device.startswith('cuda') else 'cpu'}_{args.tag}" + ("_quick" if args.quick else ""),
                     {"agent": args.agent, "config": args.config or f"<built-in {args.agent} CPU>", "overrides": args.overrides,
                      "market": sc.description, "market_seed": args.market_seed, "bars": args.bars, "train": args.train,
                      "val": args.val, "folds": args.folds, "abstain": args.abstain, "rows": rows,
                      "machine": machine(torch.device("cuda" if args.device.startswith("cuda") else "cpu"))})


if __name__ == "__main__":
    main()
