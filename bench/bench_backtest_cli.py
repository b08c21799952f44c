"""Benchmark: `foxhunt backtest --model` with the fused kernel beside the torch path (issue 14).

    python -m bench.bench_backtest_cli                     # GPU: 8 windows × 100 K bars, both backends
    python -m bench.bench_backtest_cli --cli               # also the whole CLI in a fresh process, per backend
    python -m bench.bench_backtest_cli --members 3 --skip-torch   # a voting ensemble of 3 in the kernel
    python -m bench.bench_backtest_cli --quick             # CPU harness check (Triton interpreter, tiny)

Data: synthetic bars (``generate_bars``, seed 0) of windows × bars + the feature warm-up, features
through the real pipeline (cached in a temporary directory); model: the default-shape DuelingQNet
(54 → 256 → 256 → {128 → 1, 128 → 45}, random weights ×2, biases ×0.1 so the greedy action moves)
saved with recorded medians, as `foxhunt train` writes it. Timed: ``standalone.run_models`` (what
`foxhunt backtest --model` runs after loading: model + buy-and-hold over every window, metrics and
trade rows read back) per backend, wall clock after one warm-up call (kernel compilation); with
``--cli`` the CLI end to end in a subprocess (imports, cache load, compilation, files). Also
reports how far the two backends' model metrics are apart (only near-ties of Q can differ).
Writes bench/results/backtest_cli_<device>[_quick].json.
"""

from __future__ import annotations

from bench import common as _common  # run as: PYTHONPATH=src:. python -m bench.bench_backtest_cli

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

if "--quick" in sys.argv or not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from foxhunt.accel.backend import resolve  # noqa: E402
from foxhunt.accel.config import AccelConfig  # noqa: E402
from foxhunt.agents.model_io import load_model, save_model  # noqa: E402
from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.backtest.standalone import run_models  # noqa: E402
from foxhunt.data.synthetic import generate_bars  # noqa: E402
from foxhunt.data.writer import write_bars  # noqa: E402
from foxhunt.features.cache import load_or_build  # noqa: E402
from foxhunt.features.spec import FEATURE_SPEC_VERSION, feature_names  # noqa: E402
from foxhunt.market import NormStats  # noqa: E402

WARMUP_BARS = 310  # the feature spec's warm-up (303) and a little more


def make_inputs(d: Path, n_bars: int, quick: bool, members: int = 1) -> tuple[Path, list[Path]]:
    bars = write_bars(generate_bars(n_bars, seed=0), d / "bars.parquet")
    return bars, [make_model(d / f"model{k}.safetensors", quick, seed=k) for k in range(members)]


def make_model(path: Path, quick: bool, seed: int) -> Path:
    names = feature_names()
    torch.manual_seed(seed)
    net = DuelingQNet(len(names) + 3, 45, (16, 16), 8) if quick else DuelingQNet(len(names) + 3, 45)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0 if p.dim() == 2 else 0.1)
    norm = NormStats(torch.zeros(len(names), dtype=torch.float64), torch.ones(len(names), dtype=torch.float64))
    return save_model(path, net, norm, feature_names=tuple(names), spec_version=FEATURE_SPEC_VERSION,
                      env={}, extra={"medians": {"abs_return": 1e-3, "range": 2e-3, "volume": 1_000.0}})


def main() -> None:
    ap = _common.arguments(__doc__, quick="tiny shapes on the CPU (Triton interpreter)")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--bars", type=int, default=100_000, help="bars per window")
    ap.add_argument("--cli", action="store_true", help="also time the CLI end to end in a subprocess per backend")
    ap.add_argument("--members", type=int, default=1, help="models in a voting ensemble (1: a single model)")
    ap.add_argument("--skip-torch", action="store_true", help="fused only (the torch path takes ~2 min at 8 × 100 K)")
    args = _common.parse(ap)
    if args.quick:
        args.windows, args.bars = 2, 24
    dev = args.dev
    out: dict = {"machine": _common.machine(dev), "windows": args.windows, "bars_per_window": args.bars,
                 "members": args.members, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        bars_path, model_paths = make_inputs(d, args.windows * args.bars + WARMUP_BARS + 1, args.quick, args.members)
        from foxhunt.data.loader import load_bars

        fs = load_or_build(load_bars(bars_path), d / "cache", device=dev).features
        loaded = [load_model(p, dev) for p in model_paths]
        backends = ["fused"] if args.skip_torch else ["fused", "torch"]
        results = {}
        for backend in backends:
            plan = resolve(AccelConfig(eval=backend), None, dev, parts=("eval",))  # as the CLI resolves it
            kw = dict(windows=args.windows, ensemble_mode="vote", plan=plan, bars_per_year=None, barriers=False,
                      say=lambda s: None)
            if backend == "fused":  # warm-up: compilation and the allocator
                run_models(model_paths, loaded, fs, dev, **kw)
            notes: list[str] = []
            with _common.stopwatch(dev) as sw:
                results[backend] = run_models(model_paths, loaded, fs, dev, **{**kw, "say": notes.append})
            wall = sw.s
            out["runs"][backend] = {"run_models_s": wall, "notes": notes}
            print(f"{backend:>6}: run_models {wall:8.3f} s  ({args.windows} × {args.bars:,} bars, {args.members} model(s) "
                  f"+ buy-and-hold; {[n for n in notes if n.startswith(('model backtest', 'fallback'))]})")
        if "torch" in results:
            a, b = results["torch"].rows, results["fused"].rows
            diffs = {k: max(abs(x[k] - y[k]) for x, y in zip(a, b) if isinstance(x[k], float) and x[k] == x[k])
                     for k in ("total_return", "sharpe", "trade_count")}
            out["torch_vs_fused_max_abs_diff"] = diffs
            out["speedup"] = out["runs"]["torch"]["run_models_s"] / out["runs"]["fused"]["run_models_s"]
            print(f"fused speed-up {out['speedup']:.1f}×; largest metric differences {diffs}")
        if args.cli:
            for backend in backends:
                models = [a for p in model_paths for a in ("--model", str(p))]
                cmd = [sys.executable, "-m", "foxhunt.cli", "backtest", *models, "--data", str(bars_path),
                       "--windows", str(args.windows), "--set", f"accel.eval={backend}", "--device", dev.type,
                       "--cache-dir", str(d / "cache"), "--out", str(d / f"out_{backend}")]
                with _common.stopwatch() as sw:
                    proc = subprocess.run(cmd, capture_output=True, text=True)
                wall = sw.s
                out["runs"][backend]["cli_s"] = wall
                out["runs"][backend]["cli_rc"] = proc.returncode
                print(f"{backend:>6}: CLI end to end {wall:8.3f} s (rc {proc.returncode})")
                if proc.returncode:
                    print(proc.stderr[-2000:])
    name = f"backtest_cli_{dev.type}{f'_k{args.members}' if args.members > 1 else ''}{'_quick' if args.quick else ''}"
    print(f"wrote {_common.save(args, name, out)}")


if __name__ == "__main__":
    main()
