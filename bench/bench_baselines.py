"""The scorecard's baseline rows without the agent: SB3 DQN / PPO (and the supervised classifier) on a
scenario's folds, next to its references, at any size, on any device.

Why a bench of its own: SB3 steps one environment per Python call, so it gains nothing from the H200
(129 steps/s there against ~450/s on a 2-core CPU, BENCHMARKS.md), while the agent's H200 scorecard
fills a device call. The scenario data, folds, costs and validation windows are exactly those of
``foxhunt scorecard --size SIZE --config CONFIG`` (same generators, seeds and fold plan), so these rows
sit beside the H200 card's agent rows. On a 2-core CPU the daily and real-data scenarios take minutes;
the minute scenarios at the gpu size (5 folds of 100 K validation bars) take 32 minutes each with both
SB3 learners (the torch backtester steps every validation bar, ~1.1 ms a step; run one process a
scenario with OMP_NUM_THREADS=1).

    python -m bench.bench_baselines --size gpu --config configs/h200-fast.toml --scenarios no_edge,leak \\
        --baselines sb3_dqn,sb3_ppo --sb3-steps 5000 --name baselines_cpu_gpu_size
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from bench.common import machine, save


def main(argv: list[str] | None = None) -> dict:
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
    from foxhunt.scorecard.markets import SCENARIOS, SPACING, make_scenario
    from foxhunt.scorecard.run import score_references_and_baselines

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="gpu", choices=sorted(SIZES))
    p.add_argument("--config", type=Path, default=Path("configs/h200-fast.toml"))
    p.add_argument("--scenarios", default="no_edge,edge_daily,edge_minute,regime,leak")
    p.add_argument("--baselines", default="sb3_dqn,sb3_ppo")
    p.add_argument("--sb3-steps", type=int, default=5000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--name", default="baselines_cpu_gpu_size", help="bench/results/<name>.json")
    p.add_argument("--out", type=Path, default=None, help="write here instead of bench/results/<name>.json")
    a = p.parse_args(argv)
    base = tomllib.loads(a.config.read_text())
    sz = SIZES[a.size]
    chosen = [b.strip() for b in a.baselines.split(",") if b.strip()]
    # The torch backend: the configuration's [accel] may name CUDA-only parts; the backtests here run
    # SB3's networks and fixed exposures, which take the torch path anyway.
    ov = [f'run.device="{a.device}"', 'accel.backend="torch"']
    rows = {}
    for name in [s.strip() for s in a.scenarios.split(",") if s.strip()]:
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        t0 = time.perf_counter()
        sc = make_scenario(name, sz.n_bars(SPACING[name]))
        cfg = scenario_config(base, sc, sz, ov)
        prepared = prepare_scenario(cfg, sc)
        bt = Backtester(prepared.market, cfg.env, chunk=cfg.train.eval_chunk, cuda_graphs=False,
                        bars_per_year=cfg.backtest.bars_per_year)
        refs, bases = score_references_and_baselines(sc, cfg, prepared, bt, "torch", chosen, a.sb3_steps)
        best_name, best = max(((k, v.summary()["sharpe"]) for k, v in refs.items()), key=lambda kv: kv[1])
        rows[name] = {
            "best_reference": best_name, "best_reference_sharpe": best,
            "references": {k: v.summary() for k, v in refs.items()},
            "baselines": {k: {**v.summary(), "capture": (v.summary()["sharpe"] / best if best > 0 else None), **v.extra}
                          for k, v in bases.items()},
            "folds": len(prepared.folds), "wall_s": time.perf_counter() - t0,
        }
        line = ", ".join(f"{k} {v['sharpe']:+.2f}" for k, v in rows[name]["baselines"].items())
        print(f"{name}: best reference {best_name} {best:+.2f}; {line} ({rows[name]['wall_s']:.0f} s)", flush=True)
    res = {"size": a.size, "config": str(a.config), "baselines": chosen, "sb3_steps_per_fold": a.sb3_steps,
           "machine": machine(torch.device(a.device)), "scenarios": rows}
    print("wrote", save(a, "baselines_cpu_gpu_size", res))  # --out, else bench/results/<--name>.json
    return res


if __name__ == "__main__":
    main()
