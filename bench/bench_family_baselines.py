"""The family's baselines alone, without training the agent: the quant rule (chosen on each fold's
training window), the supervised classifier and SB3 DQN / PPO at a stated budget of env steps a fold,
beside the oracle and buy-and-hold, on chosen draws of the development or HELD-OUT family, with the
same folds, costs and backtester as ``foxhunt scorecard --family`` (``score_references_and_baselines``).

They need no GPU (SB3 steps one Gymnasium env at a time; the classifier is scikit-learn), so their rows
for a family at the ``gpu`` layouts can be measured on a CPU; their Sharpe ratios do not depend on the
device. Per baseline: the family's capture vs the quant rule and vs the oracle, pooled as the gates pool
the agent's (``gates.family_gates``, the baseline in the agent's place). Held-out draws are reported, never
optimised.

    PYTHONPATH=src:. python -m bench.bench_family_baselines --family heldout --size gpu --draws 0,1,2 \\
        --config configs/h200-fast.toml      (SB3: 20,000 env steps a fold at gpu size)

JSON: bench/results/family_baselines_<family>_<device>.json (``--name`` for a part's file).
"""

from __future__ import annotations

import tempfile
import time
import tomllib
from pathlib import Path

import torch

from bench.common import arguments, machine, parse, save
from foxhunt.backtest.evaluator import Backtester
from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
from foxhunt.scorecard.family import FAMILIES, draw, size_for
from foxhunt.scorecard.family.gates import draw_row, family_gates
from foxhunt.scorecard.run import ScenarioResult, score_references_and_baselines
from foxhunt.train.config import DEFAULT_TRAIN_TOML

BASELINES = ("quant", "supervised", "sb3_dqn", "sb3_ppo")


def score_draw(family: str, index: int, size: str, base: dict, overrides: list[str], sb3_steps: int, out: Path) -> dict:
    """One draw's references and baselines: {"row": the draw's family row with the quant rule as the
    agent, "baselines": {name: that baseline's row fields}, "seconds": {...}}."""
    sc = draw(family, index, size)
    sz = size_for(SIZES[size], sc)
    cfg = scenario_config(base, sc, sz, [f'run.out_dir="{out}"', *overrides])
    prepared = prepare_scenario(cfg, sc)
    bt = Backtester(prepared.market, cfg.env, chunk=cfg.train.eval_chunk, cuda_graphs=False,
                    bars_per_year=cfg.backtest.bars_per_year)
    t0 = time.perf_counter()
    refs, scores = score_references_and_baselines(sc, cfg, prepared, bt, "torch", BASELINES, sb3_steps)
    folds = prepared.folds
    val_bars = int(sum(f.val_len - 1 for f in folds) / len(folds))
    out_rows = {}
    for name, score in scores.items():
        # each baseline in the agent's place: the family row's capture columns are then that baseline's
        r = ScenarioResult(sc.name, sc.description, "baseline", score, refs, {"quant": scores["quant"]},
                           wall_s=0.0, train_s=0.0, env_steps=0, bars_per_year=bt.bars_per_year, val_bars=val_bars,
                           n_folds=len(folds), params=dict(sc.params))
        out_rows[name] = draw_row(r)
        out_rows[name]["walk_forward_s"] = (score.extra.get("seconds") or score.extra.get("fit_s"))  # its own fit time
    return {"rows": out_rows, "seconds": time.perf_counter() - t0,
            "sb3_seconds": {k: v.extra.get("seconds") for k, v in scores.items() if k.startswith("sb3")}}


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--family", required=True, choices=sorted(FAMILIES))
    ap.add_argument("--draws", default="0")
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--sb3-steps", type=int, default=None, help="SB3 env steps a fold, DQN and PPO alike (default: "
                    "the scorecard's budget for --size, foxhunt.scorecard.cli_cmd.SB3_BUDGET)")
    args = parse(ap, argv)
    if args.quick:
        args.size = "tiny"
    if args.sb3_steps is None:
        from foxhunt.scorecard.cli_cmd import SB3_BUDGET

        args.sb3_steps = SB3_BUDGET[args.size]
    if args.threads:
        torch.set_num_threads(args.threads)
    base = tomllib.loads(Path(args.config).read_text() if args.config else DEFAULT_TRAIN_TOML)
    overrides = [*args.overrides, 'run.device="cpu"']
    draws: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in [int(i) for i in args.draws.split(",")]:
            d = score_draw(args.family, index, args.size, base, overrides, args.sb3_steps, Path(tmp) / f"d{index}")
            d["index"] = index
            draws.append(d)
            q = d["rows"]["quant"]
            print(f"{q['scenario']:<22} {q['interval']:<6} oracle {q['oracle_sharpe'] or 0:+6.2f} "
                  + " ".join(f"{k} {v['agent_sharpe'] or 0:+6.2f}" for k, v in d["rows"].items()) + f" ({d['seconds']:.0f} s)", flush=True)
            pooled = {name: family_gates([x["rows"][name] for x in draws]) for name in BASELINES}
            save(args, f"family_baselines_{args.family}_cpu" + ("_quick" if args.quick else ""),
                 {"config": args.config or "<built-in train defaults>", "overrides": overrides, "family_set": args.family,
                  "size": args.size, "sb3_steps_per_fold": args.sb3_steps, "draws": args.draws,
                  "rule": "HELD_OUT scores are reported, never optimised" if args.family == "heldout" else "development draws",
                  "pooled": {k: {g["name"]: g["value"] for g in v} for k, v in pooled.items()},
                  "rows": draws, "machine": machine(torch.device("cpu"))})
    for name, gates in pooled.items():
        print(f"{name:<11} " + "; ".join(f"{g['name']} {g['value'] if g['value'] is None else round(g['value'], 3)}" for g in gates))


if __name__ == "__main__":
    main()
