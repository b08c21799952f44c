"""Benchmark: build the 51 causal features for 4 M synthetic one-minute bars on the CPU.

    PYTHONPATH=src:. python -m bench.bench_features [--n-bars 4000000] [--threads 2] [--device cpu]
    PYTHONPATH=src:. python -m bench.bench_features --quick    # 100 K bars: a harness check

Prints the result and writes it as JSON to bench/results/features_<device>[_quick].json: build seconds,
bars per second, and the machine (cpu count, load average before the run, torch version, git
revision). Target on the 2-core CI machine: <= 30 s for 4 M bars.

Bars come from ``foxhunt.data.synthetic.generate_bars`` (the JSON records it). Generation is timed
separately and is not part of the figure. One small build first warms up code paths, then the timed build runs once.
"""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone

import numpy as np
import torch

from bench import common as _common
from foxhunt.data.bars import Bars
from foxhunt.data.synthetic import generate_bars
from foxhunt.features.spec import FEATURE_SPEC_VERSION, N_FEATURES, build_features


def make_bars(n: int) -> tuple[Bars, str]:
    """n one-minute bars and the name of the generator used."""
    return generate_bars(n, seed=7, bar_seconds=60), "foxhunt.data.synthetic.generate_bars"


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = _common.arguments(__doc__, quick="100 K bars (a harness check)", device="cpu")
    p.add_argument("--n-bars", type=int, default=None, help="bars to build (default 4,000,000; --quick 100,000)")
    args = _common.parse(p, argv)  # --threads: default 2 (below)
    if not args.threads:
        torch.set_num_threads(2)
    device = str(args.dev)
    n_bars = args.n_bars or (100_000 if args.quick else 4_000_000)

    with _common.stopwatch() as gen:
        bars, generator = make_bars(n_bars)
    gen_s = gen.s
    build_features(bars.slice(0, 20_000), device)  # warm-up: first-call costs are not the figure

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    with _common.stopwatch(args.dev) as build:  # build_features returns CPU tensors: the work is finished
        fs = build_features(bars, device)
    seconds = build.s
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None

    result: dict[str, object] = {
        "benchmark": "features",
        "device": device,
        "n_bars": len(bars),
        "n_features": N_FEATURES,
        "spec_version": FEATURE_SPEC_VERSION,
        "seconds": round(seconds, 3),
        "bars_per_s": round(len(bars) / seconds),
        "target_seconds": 30.0,
        "generator": generator,
        "generate_seconds": round(gen_s, 3),
        "torch_threads": torch.get_num_threads(),
        "machine": {
            "cpu_count": os.cpu_count(),
            "load_avg_1_5_15_before": load_before,
            "load_avg_1_5_15_after": load_after,
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cuda_device": torch.cuda.get_device_name() if args.dev.type == "cuda" else None,
        },
        "git_revision": _common.git_revision(),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    assert fs.features.shape == (len(bars), N_FEATURES)
    out = _common.save(args, f"features_{args.dev.type}{'_quick' if args.quick else ''}", result)
    print(
        f"features: {len(bars):,} bars x {N_FEATURES} on {device} ({torch.get_num_threads()} threads): "
        f"{seconds:.2f} s, {len(bars) / seconds:,.0f} bars/s (target <= 30 s); load avg before {load_before}; -> {out}"
    )
    return result


if __name__ == "__main__":
    main()
