"""Forecast learner training throughput, side by side in one run: training bars/s of whole gradient steps
(B bars drawn, features gathered and normalised, forecast, the h-bar target, loss, backward, guard, Adam)
at several batch sizes, and the time to train one 400 K-bar fold.

* ``foxhunt``: ForecastTrainer, the step captured once as a CUDA graph and replayed, no host reads
  inside an epoch, one readback per epoch;
* ``foxhunt-eager``: the same trainer with graphs off (every op launched from Python);
* ``plain``: the same network, gather and targets in a plain PyTorch loop written the common way:
  ``torch.optim.Adam``, ``clip_grad_norm_``, bars drawn with ``torch.randint`` and the loss read with
  ``.item()`` every step.

The fold row: ``fold_s`` = the seconds of the epochs that draw as many bars as the 400 K-bar fold holds
(one pass of its bars, at the largest batch), graphed.

    PYTHONPATH=src:. python -m bench.bench_forecast            # on the GPU: bench/results/forecast_cuda.json
    PYTHONPATH=src:. python -m bench.bench_forecast --quick    # tiny sizes on the CPU (checks the harness)
"""

from __future__ import annotations

import argparse
import math

import torch

from bench.common import arguments, build_market, machine, own_args, parse, record_row, save, stopwatch
from foxhunt.agents.forecast.config import ForecastConfig
from foxhunt.agents.forecast.learner import loss_of
from foxhunt.agents.forecast.trainer import ForecastTrainer
from foxhunt.env import EnvParams
from foxhunt.market import MarketData

PARAMS = EnvParams(episode_length=256, action_mode="factored")


def _cfg(b: int, a: argparse.Namespace, steps: int | None = None) -> ForecastConfig:
    return ForecastConfig(batch=b, steps_per_epoch=steps or a.steps, hidden=a.hidden, horizon=a.horizon)


def bench_foxhunt(market: MarketData, b: int, a: argparse.Namespace, graphs: bool) -> dict:
    tr = ForecastTrainer(market, PARAMS, _cfg(b, a), seed=0, cuda_graphs=graphs)
    tr.reset_for_fold(market.fold)
    with stopwatch(market.device) as setup:
        tr.train_epoch()  # warm-up: the first eager step + graph capture
    with stopwatch(market.device) as timed:
        tr.train_epoch()  # one readback (it waits for the epoch's device work)
    bars = b * a.steps
    return {"impl": "foxhunt" if graphs else "foxhunt-eager", "batch": b, "seconds": timed.s, "bars": bars,
            "bars_per_s": bars / timed.s, "setup_s": setup.s}


def bench_plain(market: MarketData, b: int, a: argparse.Namespace) -> dict:
    """The same network, gather, targets and loss, optimised the common way (module docstring)."""
    tr = ForecastTrainer(market, PARAMS, _cfg(b, a), seed=0, cuda_graphs=False)
    learner = tr.learner
    net = learner.net
    opt = torch.optim.Adam(net.parameters(), lr=learner.cfg.lr)
    lo, hi = market.fold.train_start, market.fold.train_end - tr.h - 1

    def step() -> float:
        bars = torch.randint(lo, hi, (b,), device=market.device)
        out, y = learner.forward(bars)
        loss = loss_of(out, y, learner.cfg, learner._levels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), learner.cfg.grad_clip)
        opt.step()
        return loss.item()

    with stopwatch(market.device) as setup:
        step()
    with stopwatch(market.device) as timed:
        for _ in range(a.steps):
            step()
    bars = b * a.steps
    return {"impl": "plain", "batch": b, "seconds": timed.s, "bars": bars, "bars_per_s": bars / timed.s, "setup_s": setup.s}


def bench_fold(market: MarketData, b: int, a: argparse.Namespace) -> dict:
    """One pass of the fold's training bars at batch b, graphed: the epochs' seconds (setup apart)."""
    n = market.fold.train_len
    steps = max(1, math.ceil(n / b))
    tr = ForecastTrainer(market, PARAMS, _cfg(b, a, steps=steps), seed=0, cuda_graphs=True)
    tr.reset_for_fold(market.fold)
    with stopwatch(market.device) as setup:
        tr.train_epoch()
    with stopwatch(market.device) as timed:
        tr.train_epoch()
    return {"impl": "fold", "batch": b, "train_bars": n, "steps": steps, "fold_s": timed.s, "bars": steps * b,
            "bars_per_s": steps * b / timed.s, "setup_s": setup.s}


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--sizes", default="", help="comma-separated B, bars a step (default 1024,8192,65536)")
    ap.add_argument("--steps", type=int, default=32, help="gradient steps timed (one epoch of ours)")
    ap.add_argument("--hidden", default="64,64")
    ap.add_argument("--horizon", type=int, default=16, help="h, bars the forecast looks ahead")
    ap.add_argument("--impls", default="foxhunt,foxhunt-eager,plain,fold")
    a = parse(ap)
    a.hidden = tuple(int(x) for x in a.hidden.split(","))
    dev = a.dev
    torch.backends.cuda.matmul.allow_tf32 = True
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else ([64, 256] if a.quick else [1024, 8192, 65_536])
    if a.quick:
        a.steps = 2
    impls = a.impls.split(",")
    name = f"forecast_{dev.type}{'_quick' if a.quick else ''}"
    res: dict = {"machine": machine(dev), "config": own_args(a, keep=("quick",)), "rows": [], "errors": []}
    market = build_market(20_000 if a.quick else 500_000, 51, dev, seed=1, val_gap=10)

    def guarded(fn, *args) -> None:
        r = record_row(res, fn, *args)
        if r is not None:
            extra = f", fold {r['fold_s']:.3f} s ({r['train_bars']:,} bars)" if r["impl"] == "fold" else ""
            print(f"{r['impl']:<14} B={r['batch']:>6}: {r['bars_per_s']:>14,.0f} bars/s{extra}", flush=True)

    for b in sizes:
        if "foxhunt" in impls:
            guarded(bench_foxhunt, market, b, a, True)
        if "foxhunt-eager" in impls:
            guarded(bench_foxhunt, market, b, a, False)
        if "plain" in impls:
            guarded(bench_plain, market, b, a)
    if "fold" in impls:
        guarded(bench_fold, market, sizes[-1], a)
    by = {(r["impl"], r["batch"]): r["bars_per_s"] for r in res["rows"]}
    res["speedup_vs_eager"] = {str(b): by[("foxhunt", b)] / by[("foxhunt-eager", b)] for b in sizes
                               if ("foxhunt", b) in by and ("foxhunt-eager", b) in by}
    res["speedup_vs_plain"] = {str(b): by[("foxhunt", b)] / by[("plain", b)] for b in sizes
                               if ("foxhunt", b) in by and ("plain", b) in by}
    print(f"wrote {save(a, name, res)}")


if __name__ == "__main__":
    main()
