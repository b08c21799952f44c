"""Benchmark: compute_metrics on W windows × T bars, eager and CUDA-graphed, beside the float64 reference.

    PYTHONPATH=src:. python -m bench.bench_metrics            # 8 × 100 K and 256 × 100 K on the GPU (CPU if none)
    PYTHONPATH=src:. python -m bench.bench_metrics --quick    # a small CPU run that checks the harness works

GPU times: CUDA events around ``inner`` back-to-back calls, repeated ``reps`` times after a warm-up;
the median per call is reported. CPU times: perf_counter, same scheme. Each case is timed with
returns only and with positions + trades (K = 500 round trips per window). The float64 reference
(``metrics_reference.window_metrics``, Python loops) is timed on one window of T bars for scale.
Writes ``bench/results/metrics_<device>[_quick].json`` and prints a table.
"""

from __future__ import annotations

import platform

import numpy as np
import torch

from bench import common as _common
from foxhunt.backtest.graphed_metrics import GraphedMetrics
from foxhunt.backtest.metrics import TradeRecords, compute_metrics
from foxhunt.backtest.metrics_reference import window_metrics


def _inputs(W: int, T: int, device: torch.device, seed: int = 0, trades_per_window: int = 500):
    g = torch.Generator().manual_seed(seed)
    returns = 0.01 * torch.randn(W, T, generator=g)
    lengths = T - torch.randint(0, max(1, T // 10), (W,), generator=g)  # odd lengths in (0.9 T, T]
    lengths[0] = T
    positions = torch.randint(-2, 3, (W, T), generator=g).float() / 2
    K = W * trades_per_window
    trades = TradeRecords(torch.randint(0, W, (K,), generator=g), 0.02 * torch.randn(K, generator=g),
                          torch.rand(K, generator=g) < 0.9)
    to = lambda t: t.to(device)  # noqa: E731
    return to(returns), to(lengths), to(positions), TradeRecords(to(trades.window), to(trades.ret), to(trades.valid))


def run(quick: bool, device: torch.device) -> dict:
    cases = [(8, 10_000), (32, 10_000)] if quick else [(8, 100_000), (256, 100_000)]
    warmup, reps, inner = (2, 5, 2) if quick else (20, 50, 20)
    rows = []
    for W, T in cases:
        returns, lengths, positions, trades = _inputs(W, T, device)
        for variant in ("returns", "full"):
            kw = {"positions": positions, "trades": trades} if variant == "full" else {}
            row = {"windows": W, "bars": T, "inputs": variant}
            row["eager_s"] = _common.timed(lambda: compute_metrics(returns, lengths, **kw), device, reps, warmup, inner)
            if device.type == "cuda":
                gm = GraphedMetrics(W, T, device, with_positions=variant == "full",
                                    trade_capacity=trades.window.shape[0] if variant == "full" else None)
                ok = torch.allclose(gm(returns, lengths, **kw), compute_metrics(returns, lengths, **kw), equal_nan=True)
                row["graphed_equal_eager"] = bool(ok)
                row["graphed_s"] = _common.timed(lambda: gm(returns, lengths, **kw), device, reps, warmup, inner)
                row["eager_over_graphed"] = row["eager_s"] / row["graphed_s"]
                del gm
            rows.append(row)
    # the float64 reference on one window of T bars, on the CPU, for scale
    T = cases[0][1]
    r_np, pos_np = _inputs(1, T, torch.device("cpu"))[0].numpy()[0], _inputs(1, T, torch.device("cpu"))[2].numpy()[0]
    with _common.stopwatch() as sw:
        window_metrics(r_np, positions=pos_np, trade_returns=list(np.random.default_rng(0).normal(0, 0.02, 500)))
    ref_s = sw.s
    first_full = next(r for r in rows if r["windows"] == cases[0][0] and r["inputs"] == "full")
    device_per_window = first_full.get("graphed_s", first_full["eager_s"]) / cases[0][0]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {
        "benchmark": "metrics",
        "quick": quick,
        "device": str(device),
        "device_name": name,
        "torch": torch.__version__,
        "git_revision": _common.git_revision(),
        "cpu_threads": torch.get_num_threads(),
        "timing": {"warmup": warmup, "reps": reps, "inner": inner, "statistic": "median seconds per call"},
        "goal": "8 x 100K windows <= 100 us on an H200 (graphed)",
        "rows": rows,
        "reference": {"bars": T, "float64_python_s": ref_s,
                      "reference_over_device_per_window": ref_s / device_per_window},
    }


def _print(result: dict) -> None:
    print(f"metrics bench on {result['device_name']} ({result['device']}), torch {result['torch']}, "
          f"rev {result['git_revision'][:12]}")
    print(f"{'W':>5} {'T':>8} {'inputs':>8} {'eager µs':>11} {'graphed µs':>11} {'eager/graph':>12}")
    for r in result["rows"]:
        g = f"{r['graphed_s'] * 1e6:11.1f}" if "graphed_s" in r else f"{'-':>11}"
        ratio = f"{r['eager_over_graphed']:12.2f}" if "eager_over_graphed" in r else f"{'-':>12}"
        print(f"{r['windows']:>5} {r['bars']:>8} {r['inputs']:>8} {r['eager_s'] * 1e6:11.1f} {g} {ratio}")
    ref = result["reference"]
    print(f"float64 reference, 1 window × {ref['bars']} bars (CPU, Python): {ref['float64_python_s'] * 1e3:.1f} ms "
          f"= {ref['reference_over_device_per_window']:.0f}× the device time per window")


def profile_kernels(device: torch.device, W: int = 8, T: int = 100_000, top: int = 25) -> None:
    """Print the kernels of one eager call by device time (where the microseconds go)."""
    from torch.profiler import ProfilerActivity, profile

    returns, lengths, positions, trades = _inputs(W, T, device)
    for _ in range(3):
        compute_metrics(returns, lengths, positions=positions, trades=trades)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(10):
            compute_metrics(returns, lengths, positions=positions, trades=trades)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=top))


def main() -> None:
    ap = _common.arguments(__doc__, quick="small CPU run (harness check)")
    ap.add_argument("--profile", action="store_true", help="also print the kernels of one 8 x 100K call")
    args = _common.parse(ap)
    device = args.dev
    result = run(args.quick, device)
    out = _common.save(args, f"metrics_{device.type}{'_quick' if args.quick else ''}", result)
    _print(result)
    print(f"wrote {out}")
    if args.profile:
        profile_kernels(device, *((8, 10_000) if args.quick else (8, 100_000)))


if __name__ == "__main__":
    main()
