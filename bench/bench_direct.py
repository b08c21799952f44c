"""Direct learner training throughput, side by side in one run: bars/s of whole gradient steps (B windows
× T bars: gather, policy, the env's P&L, objective, backward, guard, Adam) at several batch sizes.

* ``foxhunt``: DirectTrainer, the step captured once as a CUDA graph and replayed, no host reads
  inside an epoch, one readback per epoch;
* ``foxhunt-eager``: the same trainer with graphs off (every op launched from Python);
* ``plain``: the same policy and P&L functions in a plain PyTorch loop written the common way:
  ``torch.optim.Adam``, ``clip_grad_norm_``, windows drawn with ``torch.randint`` and the loss read
  with ``.item()`` every step.

    PYTHONPATH=src:. python -m bench.bench_direct            # on the GPU: bench/results/direct_cuda.json
    PYTHONPATH=src:. python -m bench.bench_direct --quick    # tiny sizes on the CPU (checks the harness)
"""

from __future__ import annotations

import argparse

import torch

from bench.common import arguments, build_market, machine, own_args, parse, record_row, save, stopwatch
from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.trainer import DirectTrainer
from foxhunt.env import EnvParams
from foxhunt.market import MarketData

PARAMS = EnvParams(episode_length=256, action_mode="factored")


def _cfg(b: int, a: argparse.Namespace) -> DirectConfig:
    return DirectConfig(window=a.window, batch_windows=b, steps_per_epoch=a.steps, hidden=a.hidden, head_hidden=a.head_hidden,
                        relaxation=a.relaxation, position_input=not a.no_position)


def bench_foxhunt(market: MarketData, b: int, a: argparse.Namespace, graphs: bool) -> dict:
    tr = DirectTrainer(market, PARAMS, _cfg(b, a), seed=0, cuda_graphs=graphs)
    tr.reset_for_fold(market.fold)
    with stopwatch(market.device) as setup:
        tr.train_epoch()  # warm-up: the first eager step + graph capture
    with stopwatch(market.device) as timed:
        tr.train_epoch()  # one readback (it waits for the epoch's device work)
    bars = b * a.window * a.steps
    return {"impl": "foxhunt" if graphs else "foxhunt-eager", "batch_windows": b, "window": a.window, "seconds": timed.s,
            "bars": bars, "bars_per_s": bars / timed.s, "setup_s": setup.s}


def bench_plain(market: MarketData, b: int, a: argparse.Namespace) -> dict:
    """The same forward pass and objective, optimised the common way (module docstring)."""
    tr = DirectTrainer(market, PARAMS, _cfg(b, a), seed=0, cuda_graphs=False)  # its policy, P&L and objective
    learner = tr.learner
    net = learner.net
    opt = torch.optim.Adam(net.parameters(), lr=learner.cfg.lr)
    lo, hi = market.fold.train_start, market.fold.train_end - a.window - 1

    def step() -> float:
        starts = torch.randint(lo, hi, (b,), device=market.device)
        loss, _ = learner.loss(learner.forward(starts))
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
    bars = b * a.window * a.steps
    return {"impl": "plain", "batch_windows": b, "window": a.window, "seconds": timed.s, "bars": bars,
            "bars_per_s": bars / timed.s, "setup_s": setup.s}


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--sizes", default="", help="comma-separated B, windows a step (default 1024,4096,16384)")
    ap.add_argument("--window", type=int, default=256, help="bars a window (T)")
    ap.add_argument("--steps", type=int, default=8, help="gradient steps timed (one epoch of ours)")
    ap.add_argument("--hidden", default="64,64")
    ap.add_argument("--head-hidden", type=int, default=32)
    ap.add_argument("--relaxation", default="straight_through")
    ap.add_argument("--no-position", action="store_true", help="the policy without its exposure input (one batched pass)")
    ap.add_argument("--impls", default="foxhunt,foxhunt-eager,plain")
    a = parse(ap)
    a.hidden = tuple(int(x) for x in a.hidden.split(","))
    dev = a.dev
    torch.backends.cuda.matmul.allow_tf32 = True
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else ([8, 32] if a.quick else [1024, 4096, 16_384])
    if a.quick:
        a.window, a.steps = 16, 2
    impls = a.impls.split(",")
    name = f"direct_{dev.type}{'_quick' if a.quick else ''}"
    res: dict = {"machine": machine(dev), "config": own_args(a, keep=("quick",)), "rows": [], "errors": []}
    market = build_market(20_000 if a.quick else 400_000, 51, dev, seed=1, val_gap=10)

    def guarded(fn, *args) -> None:
        r = record_row(res, fn, *args)
        if r is not None:
            print(f"{r['impl']:<14} B={r['batch_windows']:>6} T={r['window']}: {r['bars_per_s']:>14,.0f} bars/s", flush=True)

    for b in sizes:
        if "foxhunt" in impls:
            guarded(bench_foxhunt, market, b, a, True)
        if "foxhunt-eager" in impls:
            guarded(bench_foxhunt, market, b, a, False)
        if "plain" in impls:
            guarded(bench_plain, market, b, a)
    by = {(r["impl"], r["batch_windows"]): r["bars_per_s"] for r in res["rows"]}
    res["speedup_vs_eager"] = {str(b): by[("foxhunt", b)] / by[("foxhunt-eager", b)] for b in sizes
                               if ("foxhunt", b) in by and ("foxhunt-eager", b) in by}
    res["speedup_vs_plain"] = {str(b): by[("foxhunt", b)] / by[("plain", b)] for b in sizes
                               if ("foxhunt", b) in by and ("plain", b) in by}
    print(f"wrote {save(a, name, res)}")


if __name__ == "__main__":
    main()
