"""Trading-env throughput: env steps per second, CUDA-graph replay vs eager, and a Gymnasium loop.

For each N (number of envs) one block of K steps (step + observe, random actions, auto-reset on,
curiosity bonus given) is timed eagerly and, on CUDA, as one captured graph replay; both columns come
from the same run on the same state. A single ``TradingEnv`` (Gymnasium API, CPU, numpy in/out)
stepping random actions is timed alongside. Times are medians over repeats after a warm-up.

    PYTHONPATH=src:. python -m bench.bench_env            # N = 1K, 16K, 64K on CUDA (when present)
    PYTHONPATH=src:. python -m bench.bench_env --quick    # small N, few steps on the CPU: a harness check

Writes bench/results/env_<device>[_quick].json (GPU name, torch version, git revision, results) and
prints a short table.
"""

from __future__ import annotations

import platform

import torch

from bench import common as _common
from foxhunt.env import EnvParams, StepGraph, VecTradingEnv
from foxhunt.env.gym_wrapper import TradingEnv
from foxhunt.market import MarketData


def bench_vec(market: MarketData, n: int, k: int, repeats: int, warmup: int) -> dict[str, float | int | None]:
    dev = market.device
    env = VecTradingEnv(market, n, EnvParams(episode_length=256), seed=0)
    g = torch.Generator(device=dev).manual_seed(1)
    actions = torch.randint(0, 45, (k, n), device=dev, generator=g)
    bonus = torch.rand((k, n), device=dev, generator=g) * 1e-4

    def eager() -> None:
        for i in range(k):
            env.step(actions[i], bonus[i])
            env.observe()

    t_eager = _common.timed(eager, dev, repeats, warmup, clock='wall')
    row: dict[str, float | int | None] = {
        "n_envs": n,
        "k_steps": k,
        "eager_s_per_block": t_eager,
        "eager_env_steps_per_s": n * k / t_eager,
        "eager_batched_steps_per_s": k / t_eager,
        "graph_s_per_block": None,
        "graph_env_steps_per_s": None,
        "graph_batched_steps_per_s": None,
        "graph_speedup": None,
    }
    if dev.type == "cuda":
        graph = StepGraph(env, k, with_curiosity=True, observe=True)
        graph.actions.copy_(actions)
        graph.curiosity.copy_(bonus)
        t_graph = _common.timed(graph.replay, dev, repeats, warmup, clock='wall')
        row.update(
            graph_s_per_block=t_graph,
            graph_env_steps_per_s=n * k / t_graph,
            graph_batched_steps_per_s=k / t_graph,
            graph_speedup=t_eager / t_graph,
        )
        del graph
    del env
    return row


def bench_gym(market_cpu: MarketData, steps: int) -> dict[str, float | int]:
    env = TradingEnv(market_cpu, EnvParams(episode_length=256), seed=0)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    for a in actions[:20]:  # warm-up
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    with _common.stopwatch() as sw:
        for a in actions:
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                env.reset()
    dt = sw.s
    return {"steps": steps, "seconds": dt, "steps_per_s": steps / dt}


def main() -> None:
    ap = _common.arguments(__doc__, quick="small N and few steps on the CPU (harness check)")
    ap.add_argument("--sizes", type=int, nargs="*", help="numbers of envs (default 1K 16K 64K; quick: 256 1K)")
    ap.add_argument("--k", type=int, help="steps per block (default 64; quick: 8)")
    ap.add_argument("--repeats", type=int, help="timed blocks per size (default 20; quick: 3)")
    args = _common.parse(ap)
    device = args.dev
    sizes = args.sizes or ([256, 1024] if args.quick else [1 << 10, 1 << 14, 1 << 16])
    k = args.k or (8 if args.quick else 64)
    repeats = args.repeats or (3 if args.quick else 20)
    warmup = 1 if args.quick else 3
    gym_steps = 200 if args.quick else 2_000
    n_bars = 5_000 if args.quick else 200_000
    n_features = 51

    market = _common.build_market(n_bars, n_features, device)
    rows = [bench_vec(market, n, k, repeats, warmup) for n in sizes]
    market_cpu = market if device.type == "cpu" else _common.build_market(n_bars, n_features, torch.device("cpu"))
    gym_row = bench_gym(market_cpu, gym_steps)

    result = {
        "benchmark": "env",
        "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch_version": torch.__version__,
        "git_revision": _common.git_revision(),
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "quick": bool(args.quick),
        "n_bars": n_bars,
        "n_features": n_features,
        "timing": "median wall seconds per block of k steps (step + observe), synchronised, after warm-up",
        "vec_env": rows,
        "gym_single_env_cpu": gym_row,
    }
    out = _common.save(args, f"env_{device.type}{'_quick' if args.quick else ''}", result)

    name = result["gpu_name"] or platform.processor() or "cpu"
    print(f"env bench on {device} ({name}), torch {torch.__version__}, rev {result['git_revision'][:12]}, K = {k}")
    print(f"{'N envs':>8} | {'eager env-steps/s':>18} | {'graph env-steps/s':>18} | {'graph/eager':>11}")
    for r in rows:
        g = f"{r['graph_env_steps_per_s']:>18,.0f}" if r["graph_env_steps_per_s"] else f"{'-':>18}"
        sp = f"{r['graph_speedup']:>10.1f}x" if r["graph_speedup"] else f"{'-':>11}"
        print(f"{r['n_envs']:>8} | {r['eager_env_steps_per_s']:>18,.0f} | {g} | {sp}")
    print(f"Gymnasium TradingEnv (1 env, CPU): {gym_row['steps_per_s']:,.0f} steps/s")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
