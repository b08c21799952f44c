"""A universe at scale: load, feature build, upload, walk-forward time and device memory of one pooled
``foxhunt train --data DIR`` on S synthetic symbols (issue 47's scale figures).

The symbols are written first as Parquet files, one a symbol (``generate_bars``: each its own seed; a
tenth of them start a quarter of the span late, so folds have late joiners), not timed. Then, in this
process, the path a user takes:

1. ``prepare_universe`` alone, cold (features built and cached per symbol): load_s, features_s,
   upload_s, the market's device bytes;
2. ``foxhunt train --data DIR`` (the same function the CLI calls, built-in settings for the bar
   interval unless ``--config``; the feature cache now warm): its prepare timings (cached features),
   each fold's transition / training / evaluation seconds, the walk-forward's wall seconds and the
   peak device memory (``torch.cuda.max_memory_allocated``), the host's peak resident memory.

    PYTHONPATH=src:. python -m bench.bench_universe_scale --device cuda --layout daily --symbols 500 --years 20
    PYTHONPATH=src:. python -m bench.bench_universe_scale --device cuda --layout minute --symbols 50 --years 1

JSON: bench/results/universe_scale_<layout>_<device>.json.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import arguments, machine, parse, save

LAYOUTS = {"daily": (86_400, 261.0), "minute": (60, 525_600.0)}  # bar seconds, bars a year (generate_bars: business days; minutes 24/7)


def write_universe(root: Path, layout: str, symbols: int, years: float, workers: int = 1) -> dict[str, Any]:
    """S Parquet files under ``root`` (module docstring), written by ``workers`` processes; returns their
    bar counts and the seconds taken."""
    from concurrent.futures import ProcessPoolExecutor

    n = int(LAYOUTS[layout][1] * years)
    t0 = time.perf_counter()
    jobs = [(root, layout, s, n) for s in range(symbols)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            counts = list(pool.map(_write_symbol, jobs))
    else:
        counts = [_write_symbol(j) for j in jobs]
    return {"bars_per_symbol": n, "bars": int(sum(counts)), "late_symbols": sum(1 for s in range(symbols) if s % 10 == 9),
            "write_s": round(time.perf_counter() - t0, 2)}


def _write_symbol(job: tuple[Path, str, int, int]) -> int:
    """Symbol s's file: its own seed; every tenth symbol joins a quarter of the span late."""
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    root, layout, s, n = job
    late = n // 4 if s % 10 == 9 else 0
    origin = "2005-01-03T00:00:00Z" if layout == "daily" else "2025-01-01T00:00:00Z"
    seconds = LAYOUTS[layout][0]
    write_bars(generate_bars(n - late, seed=1000 + s, bar_seconds=seconds, start=_shifted(origin, late * seconds)),
               root / f"S{s:04d}.parquet")
    return n - late


def _shifted(start: str, seconds: int) -> str:
    import numpy as np

    t = np.datetime64(start.rstrip("Z"), "s") + np.timedelta64(seconds, "s")
    return str(t) + "Z"


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cuda", config="")
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="daily")
    ap.add_argument("--symbols", type=int, default=500)
    ap.add_argument("--years", type=float, default=20.0)
    ap.add_argument("--epochs", type=int, default=None, help="train.epochs (default: the settings')")
    ap.add_argument("--folds", type=int, default=None, help="folds.max_folds (default: the settings')")
    ap.add_argument("--workers", type=int, default=8, help="processes writing the symbols' files")
    args = parse(ap, argv)
    if args.quick:
        args.symbols, args.years, args.device = 6, (2.0 if args.layout == "daily" else 0.01), "cpu"
        args.epochs, args.folds = 1, 2
    from foxhunt.console import console
    from foxhunt.config import build_config, apply_overrides
    from foxhunt.pipeline import prepare_universe
    from foxhunt.train.cli_cmd import _start
    from foxhunt.train.config import DEFAULT_TRAIN_TOML

    dev = torch.device(args.device)
    out: dict[str, Any] = {"layout": args.layout, "symbols": args.symbols, "years": args.years, "config": args.config or "<built-in>",
                           "overrides": args.overrides, "machine": machine(dev)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data"
        data.mkdir()
        out["data"] = write_universe(data, args.layout, args.symbols, args.years, args.workers)
        print(f"wrote {args.symbols} symbols, {out['data']['bars']:,} bars ({out['data']['write_s']} s)", flush=True)
        cache = root / "cache"
        sets = [f"features.cache_dir={json.dumps(str(cache))}", f"run.out_dir={json.dumps(str(root / 'runs'))}",
                "train.report=false", "train.tensorboard=false", "train.checkpoint_every=0", *args.overrides]

        import tomllib

        d = tomllib.loads(Path(args.config).read_text() if args.config else DEFAULT_TRAIN_TOML)
        d["data"] = {"source": "file", "path": str(data)}
        d.setdefault("run", {})["device"] = args.device
        apply_overrides(d, sets)
        cold = prepare_universe(build_config(d, source="<bench universe_scale>"), fold_layout="fit")
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out["prepare_cold"] = {**{k: round(v, 3) for k, v in cold.timings.items()}, "market_bytes": _market_bytes(cold.market),
                               "folds": len(cold.folds), "bars_on_device": int(cold.market.n_bars)}
        print(f"prepare (cold): {out['prepare_cold']}", flush=True)
        name = args.name or f"universe_scale_{args.layout}_{dev.type}" + ("_quick" if args.quick else "")
        save(args, name, {**out, "run": None, "note": "the walk-forward did not finish"})  # a run stopped early keeps its prepare figures
        del cold
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        run_dir, results = _start([data], None, Path(args.config) if args.config else None, args.folds, args.epochs,
                                  args.device, "scale", sets, console)
        wall = time.perf_counter() - t0
        summary = json.loads((run_dir / "summary.json").read_text())
        folds = [json.loads(p.read_text()) for p in sorted((run_dir / "folds").glob("fold_*/timings.json"))]
        out["run"] = {"wall_s": round(wall, 2), "prepare_timings": summary.get("prepare_timings"), "fold_timings": folds,
                      "folds": len(results), "peak_device_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None,
                      "host_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "portfolio": [r for r in summary.get("portfolio", []) if r.get("window") == "all"]}
    save(args, name, out)
    r = out["run"]
    peak = f"{r['peak_device_bytes'] / 2**30:.2f} GiB" if r["peak_device_bytes"] else "n/a"
    print(f"{args.layout}: {args.symbols} symbols × {args.years} y = {out['data']['bars']:,} bars | prepare cold "
          f"{out['prepare_cold']} | walk-forward {r['wall_s']} s over {r['folds']} folds | peak device {peak}", flush=True)


def _market_bytes(market: Any) -> int:
    """Bytes of the market's device tensors (its attributes that are tensors)."""
    return int(sum(v.numel() * v.element_size() for v in vars(market).values() if isinstance(v, torch.Tensor)))


if __name__ == "__main__":
    main()
