"""Benchmark: build the 51 causal features for 4 M synthetic one-minute bars on the CPU.

    python bench/bench_features.py [--n-bars 4000000] [--threads 2] [--device cpu]

Prints the result and writes it as JSON to bench/results/features_<device>.json: build seconds,
bars per second, and the machine (cpu count, load average before the run, torch version, git
revision). Target on the 2-core CI machine: <= 30 s for 4 M bars.

Bars come from ``foxhunt.data.synthetic.generate_bars`` (falls back to a plain GBM generator if
that module is unavailable; the JSON records which). Generation is timed separately and is not
part of the figure. One small build first warms up code paths, then the timed build runs once.
"""

from __future__ import annotations

from bench import common as _common

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from foxhunt.data.bars import Bars
from foxhunt.features.spec import FEATURE_SPEC_VERSION, N_FEATURES, build_features

RESULTS = Path(__file__).resolve().parent / "results"


def _gbm(n: int, seed: int = 7) -> Bars:
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 1e-3, n)))
    open_ = np.concatenate([[100.0], close[:-1]])
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0.0, 5e-4, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0.0, 5e-4, n)))
    ts = np.int64(1_704_067_200) * 1_000_000_000 + np.arange(n, dtype=np.int64) * 60_000_000_000
    return Bars(ts, open_, high, low, close, rng.lognormal(6.0, 0.8, n), source=f"gbm({n})")


def make_bars(n: int) -> tuple[Bars, str]:
    """n one-minute bars and the name of the generator used."""
    try:
        from foxhunt.data.synthetic import generate_bars
    except ImportError:
        return _gbm(n), "bench GBM fallback"
    return generate_bars(n, seed=7, bar_seconds=60), "foxhunt.data.synthetic.generate_bars"


git_revision = _common.git_revision


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-bars", type=int, default=4_000_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/features_<device>.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    bars, generator = make_bars(args.n_bars)
    gen_s = time.perf_counter() - t0
    build_features(bars.slice(0, 20_000), args.device)  # warm-up: first-call costs are not the figure

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fs = build_features(bars, args.device)
    seconds = time.perf_counter() - t0  # build_features returns CPU tensors: the work is finished
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None

    result: dict[str, object] = {
        "benchmark": "features",
        "device": args.device,
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
            "cuda_device": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        },
        "git_revision": git_revision(),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    assert fs.features.shape == (len(bars), N_FEATURES)
    out = args.out or RESULTS / f"features_{args.device.split(':')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"features: {len(bars):,} bars x {N_FEATURES} on {args.device} ({torch.get_num_threads()} threads): "
        f"{seconds:.2f} s, {len(bars) / seconds:,.0f} bars/s (target <= 30 s); load avg before {load_before}; -> {out}"
    )
    return result


if __name__ == "__main__":
    main()
