"""Env-only throughput: the torch env step vs the fused Triton env step, both as CUDA graphs.

    PYTHONPATH=src:. python -m bench.bench_env_fused            # GPU: N = 16 K and 64 K envs, K = 64 steps per graph
    PYTHONPATH=src:. python -m bench.bench_env_fused --intervals 1 8 32   # decisions of k bars (env.decision_interval)
    PYTHONPATH=src:. python -m bench.bench_env_fused --quick    # CPU, Triton interpreter, tiny N: a harness check

For each N one VecTradingEnv (default EnvParams, episode_length 256, auto-reset on, no curiosity
bonus unless --curiosity: the DQN collector's default) steps a block of K random actions:
  (a) torch: K calls of ``vec_env.step`` captured in one CUDA graph;
  (b) fused: K calls of ``foxhunt.env.fused.fused_step`` captured in one CUDA graph, for each
      kernel config (envs per program × warps).
Times: CUDA events around one graph replay (K steps), median of ``--repeats`` after warm-up; on the
CPU (--quick) eager blocks timed with perf_counter (interpreter times mean nothing beyond "it runs").
Agreement: both paths replay one block from the same snapshot; the states are compared (discrete
fields equal, floats within rtol 1e-5) and reported per row.
With ``--intervals`` each step is one decision of k bars (``env.decision_interval``: the torch path is
``VecTradingEnv.step``, k per-bar steps; the fused kernel steps the k bars in one launch); env-steps
are bars stepped (N × K × k a block), so rows at different k compare per-bar throughput.
Writes bench/results/env_fused_<device>[_quick].json (GPU name, torch / triton versions, git
revision, rows) and prints a short table.
"""

from __future__ import annotations

import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from typing import Callable  # noqa: E402

import torch  # noqa: E402

if "--quick" in sys.argv or not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402

from bench import common as _common  # noqa: E402

from foxhunt.env import EnvParams, VecTradingEnv  # noqa: E402
from foxhunt.accel.graphs import capture as accel_capture  # noqa: E402
from foxhunt.env.fused import fused_step  # noqa: E402
from foxhunt.env.vec_env import step  # noqa: E402

CONFIGS = ((128, 4), (256, 8), (64, 2))
"""(envs per program, warps) swept for the fused kernel; the first is the adapter's default."""


def capture(fn: Callable[[], None], env: VecTradingEnv, snap) -> torch.cuda.CUDAGraph:
    """``fn`` (K steps) warmed up on a side stream, then captured; the env is restored after each."""
    return accel_capture(fn, env.device, generators=[env.sampler.generator], save=lambda: snap,
                         restore=env.restore, restore_after_warmup=True)


def agreement(env: VecTradingEnv, snap, run_torch: Callable[[], None], run_fused: Callable[[], None]) -> dict:
    """One block each from the same snapshot: discrete state fields equal, floats within rtol 1e-5."""
    env.restore(snap)
    run_torch()
    ref = env.state.clone()
    env.restore(snap)
    run_fused()
    bad, worst = [], 0.0
    for name, t in ref.tensors().items():
        got = getattr(env.state, name)
        if t.dtype.is_floating_point:
            diff = (got.double() - t.double()).abs()
            worst = max(worst, float((diff / t.double().abs().clamp_min(1e-30)).max()))
            if bool((diff > 1e-5 * t.double().abs() + (1.0 if name in ("cash", "equity", "peak") else 1e-6)).any()):
                bad.append(name)
        elif not torch.equal(got, t):
            bad.append(name)
    env.restore(snap)
    return {"agree": not bad, "fields_differing": bad, "max_rel_diff": worst}


def bench_size(market, n: int, k: int, repeats: int, warmup: int, curiosity: bool, interval: int = 1) -> list[dict]:
    dev = market.device
    cuda = dev.type == "cuda"
    env = VecTradingEnv(market, n, EnvParams(episode_length=256, decision_interval=interval), seed=0)
    g = torch.Generator(device=dev).manual_seed(1)
    actions = torch.randint(0, env.n_actions, (k, n), device=dev, generator=g)
    bonus = torch.rand((k, n), device=dev, generator=g) * 1e-4 if curiosity else None
    snap = env.snapshot()
    cur = (lambda i: bonus[i]) if bonus is not None else (lambda i: None)  # noqa: E731

    def torch_block() -> None:
        for i in range(k):
            if interval == 1:
                step(env.state, env.params, market, actions[i], cur(i), env.out, sampler=env.sampler)
            else:  # one decision of k bars (the collector's env.step)
                env.step(actions[i], cur(i))

    def fused_block(block: int, warps: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(k):
                fused_step(env.state, env.params, market, actions[i], cur(i), env.out, env.sampler,
                           block=block, num_warps=warps)
        return run

    rows = []
    configs = CONFIGS if cuda else CONFIGS[:1]
    t_fn = capture(torch_block, env, snap).replay if cuda else torch_block
    t_torch = _common.timed(t_fn, market.device, repeats, warmup)
    env.restore(snap)
    for block, warps in configs:
        f_fn = capture(fused_block(block, warps), env, snap).replay if cuda else fused_block(block, warps)
        t_fused = _common.timed(f_fn, market.device, repeats, warmup)
        agree = agreement(env, snap, t_fn, f_fn)
        bars = n * k * interval
        rows.append({
            "n_envs": n, "k_steps": k, "decision_interval": interval, "block": block, "num_warps": warps,
            "curiosity": curiosity, "graphs": cuda, "torch_s_per_block": t_torch, "fused_s_per_block": t_fused,
            "torch_env_steps_per_s": bars / t_torch, "fused_env_steps_per_s": bars / t_fused,
            "fused_decisions_per_s": n * k / t_fused,
            "fused_us_per_step": t_fused / k * 1e6, "torch_us_per_step": t_torch / k * 1e6,
            "speedup": t_torch / t_fused, **agree,
        })
    return rows


def main() -> None:
    ap = _common.arguments(__doc__, quick="CPU interpreter, tiny N, few steps (harness check)")
    ap.add_argument("--sizes", type=int, nargs="*", help="numbers of envs (default 16K 64K; quick: 64)")
    ap.add_argument("--k", type=int, help="steps per block (default 64; quick: 4)")
    ap.add_argument("--repeats", type=int, help="timed blocks (default 20; quick: 2)")
    ap.add_argument("--curiosity", action="store_true", help="pass a curiosity bonus (default: none)")
    ap.add_argument("--intervals", type=int, nargs="*", default=[1], help="decision intervals k (env.decision_interval; default 1)")
    args = _common.parse(ap)
    device = args.dev
    sizes = args.sizes or ([64] if args.quick else [1 << 14, 1 << 16])
    k = args.k or (4 if args.quick else 64)
    repeats = args.repeats or (2 if args.quick else 20)
    warmup = 1 if args.quick else 3
    market = _common.build_market(5_000 if args.quick else 200_000, 51, device)
    # K decisions a block, at most 64 bars (a torch block of K decisions captures K·k per-bar steps)
    rows = [r for iv in args.intervals for n in sizes
            for r in bench_size(market, n, max(2, k // iv), repeats, warmup, args.curiosity, iv)]
    result = {
        "benchmark": "env_fused",
        **_common.machine(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch_version": torch.__version__,
        "triton_version": triton.__version__,
        "triton_interpreter": os.environ.get("TRITON_INTERPRET") == "1",
        "note": "interpreted, the launcher runs one program of next_pow2(N) envs whatever the block"
                if os.environ.get("TRITON_INTERPRET") == "1" else None,
        "quick": bool(args.quick),
        "timing": "median seconds per block of K steps (decisions of decision_interval bars; no observe); CUDA events "
                  "around one graph replay on the GPU, perf_counter around eager steps on the CPU; env-steps = bars",
        "rows": rows,
    }
    out = _common.save(args, f"env_fused_{device.type}{'_quick' if args.quick else ''}", result)
    name = result["gpu_name"] or platform.processor() or "cpu"
    mode = "graphed" if device.type == "cuda" else "eager (interpreter)"
    print(f"env step, torch vs fused, {mode}, on {device} ({name}), torch {torch.__version__}, "
          f"triton {triton.__version__}, rev {result['git_revision'][:12]}, K = {k}")
    print(f"{'k':>3} | {'N envs':>7} | {'block/warps':>11} | {'torch env-steps/s':>17} | {'fused env-steps/s':>17} | "
          f"{'fused µs/step':>13} | {'speedup':>7} | agree")
    for r in rows:
        print(f"{r['decision_interval']:>3} | {r['n_envs']:>7} | {r['block']:>5}/{r['num_warps']:<5} | {r['torch_env_steps_per_s']:>17,.0f} | "
              f"{r['fused_env_steps_per_s']:>17,.0f} | {r['fused_us_per_step']:>13.1f} | {r['speedup']:>6.1f}x | "
              f"{r['agree']}{'' if r['agree'] else ' ' + str(r['fields_differing'])}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
