"""Benchmark: the fused backtest kernel beside the torch Backtester (CUDA graphs), and the metrics.

    PYTHONPATH=src:. python -m bench.bench_backtest           # GPU: issue 5's shapes (8 × 100 K, 256 × 100 K)
    PYTHONPATH=src:. python -m bench.bench_backtest --quick   # tiny shapes on the CPU (Triton interpreter): harness check
    PYTHONPATH=src:. python -m bench.bench_backtest --torch-bars 100000   # the torch path at full length (~11 s)

One run, side by side, on a MarketData of random-walk OHLCV with 51 random features (1 M bars) and
the default-shape DuelingQNet (54 → 256 → 256 → {128 → 1, 128 → 45}; random weights ×2 and
biases ×0.1 so that its greedy action changes from bar to bar), default EnvParams:
  (a) torch: ``Backtester(chunk=64, cuda_graphs=True).run(…, GreedyPolicy(net))`` on 8 windows of
      ``--torch-bars`` bars (10 K by default: per-bar time measured, 100 K extrapolated and labelled);
  (b) fused: a sweep of kernel configs (precision × num_warps × windows per program: 1 = a
      matrix-vector MLP per window, 16 = tl.dot tiles) on 8 × 10 K, each one's greedy
      actions compared with the torch run's (bars before the first differing action); then the
      best tf32 and bf16 configs on 8 × 100 K and 256 × 100 K (kernel alone and ``run_fused``
      end to end, metrics included), and tf32 with 32 windows per program on 256 × 100 K;
  (c) ``compute_metrics`` (eager) and ``GraphedMetrics`` on the 8 × 100 K fused returns, positions
      and round trips.
Times: CUDA events after warm-up (compilation, graph capture), median of ``reps`` runs.
Writes bench/results/backtest_<device>[_quick].json and prints a table last.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np
import torch

if "--quick" in sys.argv or not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402

from bench import common as _common  # noqa: E402

from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.fused import check_windows, launch, run_fused  # noqa: E402
from foxhunt.backtest.graphed_metrics import GraphedMetrics  # noqa: E402
from foxhunt.backtest.metrics import TradeRecords, compute_metrics  # noqa: E402
from foxhunt.backtest.policies import GreedyPolicy  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from foxhunt.kernels.backtest.kernel import PRECOMPUTE_MAX_BYTES  # noqa: E402

MODEL = {"tf32": "0.8-1.0 s", "bf16": "0.5-0.6 s", "ieee": "~1.2 s", "tf32x3": "~1 s"}
"""The kernel docstring's estimate for 8 × 100 K (and about the same for 256 × 100 K)."""


def build_net(obs_dim: int, device: torch.device) -> DuelingQNet:
    torch.manual_seed(0)
    net = DuelingQNet(obs_dim)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0 if p.dim() == 2 else 0.1)
    return net.to(device).eval()


class RecordingPolicy(GreedyPolicy):
    """GreedyPolicy that also writes each step's actions into ``actions`` [W, T] (graph-safe)."""

    def __init__(self, net: DuelingQNet, w: int, t: int, device: torch.device) -> None:
        super().__init__(net)
        self.actions = torch.zeros((w, t + 64), dtype=torch.int64, device=device)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.net(obs).argmax(dim=1)
        self.actions.index_copy_(1, t.reshape(1), a.unsqueeze(1))
        return a


def agreement(torch_actions: np.ndarray, fused_actions: np.ndarray) -> dict[str, float]:
    """Share of bars before each window's first differing action, and how many windows differ."""
    w, t = fused_actions.shape
    firsts = []
    for i in range(w):
        d = np.flatnonzero(torch_actions[i, :t] != fused_actions[i])
        firsts.append(int(d[0]) if d.size else t)
    return {"bars_before_first_difference": float(np.mean(firsts) / t), "windows_differing": int(sum(f < t for f in firsts))}


def run(args: argparse.Namespace, device: torch.device) -> dict:
    quick = args.quick
    n_bars, n_feat = (4_000, 51) if quick else (1_000_000, 51)
    small_t, big_t = (16, 24) if quick else (10_000, 100_000)
    torch_t = args.torch_bars or (small_t if quick else 10_000)
    big_w = 20 if quick else 256
    reps = 1 if quick or args.fast else 3
    market = _common.build_market(n_bars, n_feat, device, train_frac=0.5)
    net = build_net(market.obs_dim, device)
    params = EnvParams()
    rng = np.random.default_rng(1)
    starts8 = rng.integers(0, n_bars - big_t - 2, 8)
    starts_big = rng.integers(0, n_bars - big_t - 2, big_w)
    result: dict = {"rows": [], "sweep": []}

    # (a) the torch path, CUDA graphs of 64 steps.
    bt = Backtester(market, params, chunk=64, cuda_graphs=True)
    policy = GreedyPolicy(net)
    bt.run(starts8, [min(torch_t, 640)] * 8, policy)  # warm-up: kernels, cuBLAS, graph machinery
    t_torch = _common.timed(lambda: bt.run(starts8, [torch_t] * 8, policy), device, reps=1 if torch_t > 20_000 else reps, warmup=0)
    rec = RecordingPolicy(net, 8, small_t, device)
    bt.run(starts8, [small_t] * 8, rec)
    torch_actions = rec.actions.cpu().numpy()
    result["torch"] = {"windows": 8, "bars": torch_t, "seconds": t_torch, "us_per_bar": t_torch / torch_t * 1e6,
                       "extrapolated_100k_s": t_torch / torch_t * 100_000, "extrapolated": torch_t < 100_000,
                       "distinct_actions": int(len(np.unique(torch_actions[:, :small_t])))}

    # (b) fused: sweep on 8 × small_t (actions stored for the agreement check), then the big shapes.
    st8, ln8 = check_windows(market, starts8, [small_t] * 8)
    # (precision, num_warps, block_w, bn): block_w 1 = one window per program (matrix-vector MLP on
    # the CUDA cores, layers 2-3 fused over bn-column chunks), 16 = tl.dot tiles of 16 windows.
    # (precision, num_warps, block_w, bn, precompute): block_w 1 = one window per program (matrix-vector
    # MLP on the CUDA cores, layers 2-3 fused over bn-column chunks; precompute = layer 1's feature part
    # computed for all bars before the loop, None = automatic), 16 = tl.dot tiles of 16 windows.
    configs = [("tf32", 4, 16, 64, None), ("tf32", 8, 16, 64, None), ("bf16", 4, 16, 64, None), ("ieee", 4, 16, 64, None)]
    configs += [(p, nw, 1, bn, pre) for p in ("tf32", "bf16") for nw in (4, 8) for bn in (32, 64, 128)
                for pre in ((None, False) if p == "tf32" else (None,))]
    if quick:
        configs = [("tf32", 4, 16, 64, None), ("bf16", 4, 1, 64, None), ("tf32", 4, 1, 64, False)]
    # A sixth field: row-path extras (adv_only: the advantage head alone with its exact fallback,
    # the default; l1_keep: cache hints keeping the head weights in L1).
    configs = [c + ({},) for c in configs]
    if args.fast:  # few compiled configurations: fits a short device lease
        configs = [("tf32", 4, 1, 64, None, dict(adv_only=False)), ("tf32", 4, 1, 64, None, {}),
                   ("tf32", 4, 1, 32, None, {}), ("tf32", 4, 1, 128, None, {}), ("tf32", 8, 1, 64, None, {}),
                   ("tf32", 4, 1, 64, None, dict(l1_keep=True)), ("tf32", 4, 1, 64, None, dict(adv_only=False, l1_keep=True)),
                   ("tf32", 4, 16, 64, None, {}), ("tf32", 4, 16, 64, None, dict(adv_only=False))]
        if args.tiles:  # the tile path only (windows >= ROW_MAX_WINDOWS): advantage head only vs both heads
            configs = configs[-2:]
    for prec, nw, bw, bn, pre, extra in configs:
        holder: dict = {}

        def go(prec=prec, nw=nw, bw=bw, bn=bn, pre=pre, extra=extra, holder=holder):
            holder["out"] = launch(bt, st8, ln8, net, precision=prec, num_warps=nw, block_w=bw, bn=bn, precompute=pre,
                                   store_debug=True, **extra)

        s = _common.timed(go, device, reps)
        row = {"precision": prec, "num_warps": nw, "block_w": bw, "bn": bn, "precompute": pre, "windows": 8,
               "adv_only": extra.get("adv_only", True), "l1_keep": extra.get("l1_keep", False),
               "bars": small_t, "kernel_s": s,
               "us_per_bar": s / small_t * 1e6, **agreement(torch_actions, holder["out"].actions.cpu().numpy())}
        result["sweep"].append(row)
        print("sweep", row, flush=True)
    precs = sorted({r["precision"] for r in result["sweep"]} & {"tf32", "bf16"})
    big = []
    for p in precs:  # the best configuration of each precision and block_w, on 8 and on big_w windows
        for bw in sorted({r["block_w"] for r in result["sweep"] if r["precision"] == p}):
            best = min((r for r in result["sweep"] if r["precision"] == p and r["block_w"] == bw),
                       key=lambda r: r["kernel_s"])
            extra = {"adv_only": best["adv_only"], "l1_keep": best["l1_keep"]}
            big += [(p, best["num_warps"], bw, best["bn"], best["precompute"], extra, w, s)
                    for w, s in ((8, starts8), (big_w, starts_big))]
            if args.fast and (best["adv_only"] or best["l1_keep"]):  # both heads beside it
                big += [(p, 4, bw, 64, None, {"adv_only": False}, w, s)
                        for w, s in ((8, starts8), (big_w, starts_big)) if (bw == 1) == (w == 8)]
    metrics_inputs = None
    for prec, nw, bw, bn, pre, extra, w, starts in big:
        st, ln = check_windows(market, starts, [big_t] * w)
        holder = {}
        tune = dict(precision=prec, num_warps=nw, block_w=bw, bn=bn, precompute=pre, **extra)

        def kern(st=st, ln=ln, holder=holder, tune=tune):
            holder["out"] = launch(bt, st, ln, net, **tune)

        k_s = _common.timed(kern, device, reps)
        e2e = _common.timed(lambda st=st, ln=ln, tune=tune: run_fused(bt, st, ln, net, **tune), device, reps, warmup=0)
        result["rows"].append({"precision": prec, "num_warps": nw, "block_w": bw, "bn": bn,
                               "precompute": bool(bw == 1 and prec != "bf16" and pre is not False
                                                  and w * big_t * 256 * 4 <= PRECOMPUTE_MAX_BYTES),
                               "adv_only": bool(extra.get("adv_only", False)), "l1_keep": bool(extra.get("l1_keep", False)),
                               "windows": w, "bars": big_t,
                               "kernel_s": k_s, "run_fused_s": e2e, "us_per_bar": k_s / big_t * 1e6,
                               "model_8x100k": MODEL[prec] if bw > 1 else "-"})
        print("fused", result["rows"][-1], flush=True)
        if prec == "tf32" and w == 8 and metrics_inputs is None:
            metrics_inputs = holder["out"]

    # (c) the metrics reduction on the 8 × big_t fused outputs.
    out = metrics_inputs
    w, t = out.returns.shape
    lengths = torch.full((w,), t, dtype=torch.int64, device=device)
    trades = TradeRecords(torch.arange(w, device=device).repeat_interleave(t), out.trade_return.reshape(-1),
                          out.trade_closed.reshape(-1))
    kw = {"positions": out.positions, "trades": trades}
    m_eager = _common.timed(lambda: compute_metrics(out.returns, lengths, **kw), device, reps=5 if quick else 20, warmup=2)
    m_graph = None
    if device.type == "cuda":
        gm = GraphedMetrics(w, t, device, with_positions=True, trade_capacity=w * t)
        m_graph = _common.timed(lambda: gm(out.returns, lengths, **kw), device, reps=20, warmup=2)
    result["metrics"] = {"windows": w, "bars": t, "eager_s": m_eager, "graphed_s": m_graph,
                         "trades": int(out.trade_closed.sum())}
    return result


def _print(res: dict) -> None:
    print(f"backtest bench on {res['device_name']} ({res['device']}), torch {res['torch_version']}, "
          f"triton {res['triton_version']}, rev {res['git_revision'][:12]}")
    tr = res["torch"]
    label = " (EXTRAPOLATED from the measured bars)" if tr["extrapolated"] else ""
    graphs = "CUDA graphs of 64 steps" if res["device"].startswith("cuda") else "eager (CPU)"
    print(f"(a) torch Backtester, {graphs}: 8 × {tr['bars']} bars in {tr['seconds']:.3f} s "
          f"= {tr['us_per_bar']:.1f} µs/bar; 8 × 100 K: {tr['extrapolated_100k_s']:.2f} s{label}; "
          f"{tr['distinct_actions']} distinct greedy actions")
    print(f"(b) fused sweep, 8 × {res['sweep'][0]['bars']} bars:")
    print(f"{'precision':>10} {'warps':>6} {'BW':>4} {'BN':>4} {'pre':>5} {'adv':>5} {'L1':>5} {'kernel s':>10} {'µs/bar':>9} {'agree':>7} {'differ':>7}")
    for r in res["sweep"]:
        print(f"{r['precision']:>10} {r['num_warps']:>6} {r['block_w']:>4} {r.get('bn', '-'):>4} {str(r.get('precompute')):>5} "
              f"{str(r.get('adv_only', '-')):>5} {str(r.get('l1_keep', '-')):>5} {r['kernel_s']:10.4f} {r['us_per_bar']:9.2f} "
              f"{r['bars_before_first_difference']:7.1%} {r['windows_differing']:>5}/8")
    print(f"{'precision':>10} {'warps':>6} {'BW':>4} {'BN':>4} {'pre':>5} {'adv':>5} {'L1':>5} {'W':>5} {'T':>8} {'kernel s':>10} {'run_fused s':>12} {'µs/bar':>9} "
          f"{'torch/fused':>12} {'model 8×100K':>13}")  # torch/fused: ratio of µs per bar
    for r in res["rows"]:
        speed = f"{tr['us_per_bar'] / r['us_per_bar']:12.1f}" if r["windows"] == 8 else f"{'-':>12}"
        print(f"{r['precision']:>10} {r['num_warps']:>6} {r['block_w']:>4} {r.get('bn', '-'):>4} {str(r.get('precompute')):>5} "
              f"{str(r.get('adv_only', '-')):>5} {str(r.get('l1_keep', '-')):>5} {r['windows']:>5} {r['bars']:>8} {r['kernel_s']:10.3f} "
              f"{r['run_fused_s']:12.3f} {r['us_per_bar']:9.2f} {speed} {r['model_8x100k']:>13}")
    mt = res["metrics"]
    g = f"{mt['graphed_s'] * 1e6:.0f} µs" if mt["graphed_s"] else "-"
    print(f"(c) metrics on {mt['windows']} × {mt['bars']} ({mt['trades']} trades): compute_metrics "
          f"{mt['eager_s'] * 1e6:.0f} µs, GraphedMetrics {g}")
    print("gate: 8 × 100 K ≤ 1 s; goal ≤ 0.3 s (fused kernel)")


def main() -> None:
    ap = _common.arguments(__doc__, quick="tiny shapes on the CPU (Triton interpreter)")
    ap.add_argument("--torch-bars", type=int, default=0, help="bars per window for the torch path (default 10 K)")
    ap.add_argument("--fast", action="store_true", help="few kernel configurations (tf32), one repetition")
    ap.add_argument("--tiles", action="store_true", help="with --fast: the tile path's two configurations only")
    args = _common.parse(ap)
    device = args.dev
    if device.type == "cpu" and not args.quick:
        raise SystemExit("no CUDA device: use --quick for the CPU harness check")
    with _common.stopwatch() as wall:
        res = run(args, device)
    res.update({
        "benchmark": "backtest", "quick": args.quick, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine()),
        "torch_version": torch.__version__, "triton_version": triton.__version__, "git_revision": _common.git_revision(),
        "timing": "CUDA events (perf_counter on CPU) after warm-up; median of runs",
        "net": "DuelingQNet(54): 54-256-256-{128-1, 128-45}, LeakyReLU 0.01, weights x2, biases x0.1",
        "wall_s": wall.s,
    })
    path = _common.save(args, f"backtest_{device.type}{'_quick' if args.quick else ''}", res)
    _print(res)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
