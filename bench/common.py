"""The benchmark harness every bench script uses:

* ``arguments`` / ``parse``: the shared command-line flags (``--quick``, ``--device``, ``--out``,
  ``--name``, ``--threads``, ``--git-revision``; ``--config`` / ``--set`` where a script reads a
  run configuration); each script adds its own flags between the two calls;
* ``timed`` (median seconds per call of a repeated function: CUDA events or perf_counter) and
  ``stopwatch`` (wall seconds of one block): the only timers;
* ``build_market`` (a random-walk market with random features) and ``signal_market`` (a
  planted-signal synthetic series through the real feature pipeline): the only market builders;
* ``trainer`` (a DQN trainer with per-part choices pinned), ``machine`` / ``git_revision`` (the
  facts every JSON records) and ``save`` / ``write_result`` (the result JSON, by default under
  bench/results).

Run a benchmark as ``PYTHONPATH=src:. python -m bench.<name>`` (``scripts/gpu.sh`` does): the
scripts import ``bench.common`` and ``foxhunt`` as packages, no sys.path edits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from foxhunt import provenance
from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


# ---------------------------------------------------------------------------------------------- arguments
def arguments(description: str | None, *, quick: str = "tiny shapes on the CPU: checks the harness",
              device: str = "auto", config: str | None = None) -> argparse.ArgumentParser:
    """The parser every benchmark starts from, holding the shared flags:

        --quick            ``quick`` (tiny shapes on the CPU; result files get a _quick suffix)
        --device D         auto | cpu | cuda[:k] (default ``device``; auto: CUDA when present and
                           not --quick)
        --out PATH         the result JSON (default bench/results/<name>.json)
        --name STEM        that file's stem (default: the script's, e.g. dqn_cuda)
        --threads N        torch intra-op threads (default: the script's choice)
        --git-revision R   recorded as the revision (default: FOXHUNT_GIT_REV, else git)

    and, with ``config`` (the default config file), ``--config FILE`` and ``--set section.key=value``
    (repeatable; ``args.overrides``). The script adds its own flags, then calls ``parse``."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("shared benchmark flags (bench/common.py)")
    g.add_argument("--quick", action="store_true", help=quick)
    g.add_argument("--device", default=device, help=f"auto | cpu | cuda[:k] (default {device}; auto: CUDA when "
                                                     "present and not --quick)")
    g.add_argument("--out", type=Path, default=None, help="result JSON path (default bench/results/<name>.json)")
    g.add_argument("--name", default=None, help="result file stem (default: the script's, e.g. <bench>_<device>)")
    g.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: the script's choice)")
    g.add_argument("--git-revision", default=None, help="recorded as the revision (default: FOXHUNT_GIT_REV, else git)")
    if config is not None:
        g.add_argument("--config", default=config, help=f"base run configuration (default {config})")
        g.add_argument("--set", dest="overrides", action="append", default=[],
                       help="config override section.key=value (repeatable)")
    return ap


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line; apply ``--threads`` and ``--git-revision``; ``args.dev`` is the
    resolved torch.device (``--device``; auto: CUDA when present and not ``--quick``)."""
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.git_revision:
        os.environ["FOXHUNT_GIT_REV"] = args.git_revision
    if args.device == "auto":
        args.dev = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    else:
        args.dev = torch.device(args.device)
    return args


SHARED = ("quick", "device", "out", "name", "threads", "git_revision", "config", "overrides", "dev")
"""The ``args`` attributes ``arguments`` / ``parse`` own (``own_args`` leaves them out)."""


def own_args(args: argparse.Namespace, keep: Sequence[str] = ()) -> dict[str, Any]:
    """The script's own arguments (and those of ``keep``), e.g. to record a run's settings in its JSON."""
    return {k: v for k, v in vars(args).items() if k not in SHARED or k in keep}


def result_path(args: argparse.Namespace, stem: str) -> Path:
    """Where ``save`` writes: ``--out``, else bench/results/<--name or stem>.json."""
    return args.out if args.out is not None else RESULTS / f"{args.name or stem}.json"


def save(args: argparse.Namespace, stem: str, payload: dict[str, Any]) -> Path:
    """Write the result JSON to ``result_path(args, stem)`` (temporary name, then rename)."""
    return _write(result_path(args, stem), payload)



def record_row(res: dict[str, Any], fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
    """``fn(*args)`` appended to ``res["rows"]``; an exception is recorded in ``res["errors"]`` (named by
    the function and its second argument, the size) and printed, and the run goes on: returns None."""
    try:
        row = fn(*args)
    except Exception as exc:  # a failed row is recorded, the run goes on
        res["errors"].append(f"{getattr(fn, '__name__', 'fn')} {args[1:2]}: {type(exc).__name__}: {exc}")
        print("ERROR", res["errors"][-1], flush=True)
        return None
    res["rows"].append(row)
    return row

def git_revision() -> str:
    """HEAD of the checkout; FOXHUNT_GIT_REV when set (the GPU machine's copy has no .git)."""
    return provenance.git_revision(ROOT)


def machine(device: torch.device) -> dict[str, Any]:
    """Device, GPU name, versions and git revision (``foxhunt.provenance``, shared with the CLI outputs)."""
    return provenance.machine(device)


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json (``save`` without parsed arguments)."""
    return _write(RESULTS / f"{name}.json", payload)


def _write(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    os.replace(tmp, path)
    return path


def samples(fn: Callable[[], object], device: torch.device | str, reps: int = 10, warmup: int = 1, inner: int = 1,
            clock: str = "events") -> list[float]:
    """Seconds per call of ``fn``: ``reps`` samples of ``inner`` calls each, after ``warmup`` calls.
    clock "events": CUDA events on a GPU (device time of the stream), perf_counter on a CPU; "wall":
    perf_counter with a synchronisation around each sample (host overheads count)."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(dev)
    out = []
    for _ in range(reps):
        if cuda and clock == "events":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            if cuda:
                torch.cuda.synchronize(dev)
            out.append((time.perf_counter() - t0) / inner)
    return out


def timed(fn: Callable[[], object], device: torch.device | str, reps: int = 10, warmup: int = 1, inner: int = 1,
          clock: str = "events") -> float:
    """Median seconds per call of ``fn`` (``samples``: the same arguments)."""
    return statistics.median(samples(fn, device, reps, warmup, inner, clock))


class stopwatch:
    """Wall seconds of one block (perf_counter), for what runs once (a setup, a compile, a whole
    run): ``with stopwatch(device) as sw: …`` then ``sw.s``, or ``sw = stopwatch().start()`` …
    ``sw.stop()``. With a CUDA ``device`` the device is synchronised at the start and the stop, so
    queued work is counted where it was launched (leave it out where synchronisations are counted)."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        dev = None if device is None else torch.device(device)
        self.cuda = dev if dev is not None and dev.type == "cuda" else None
        self.s = float("nan")

    def start(self) -> "stopwatch":
        if self.cuda is not None:
            torch.cuda.synchronize(self.cuda)
        self.t0 = time.perf_counter()
        return self

    def stop(self) -> float:
        """Seconds since ``start`` (also kept in ``s``)."""
        if self.cuda is not None:
            torch.cuda.synchronize(self.cuda)
        self.s = time.perf_counter() - self.t0
        return self.s

    def __enter__(self) -> "stopwatch":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()


def build_market(n_bars: int, n_features: int, device: torch.device | str, seed: int = 0,
                 train_frac: float = 0.8, val_gap: int = 0) -> MarketData:
    """A random-walk OHLCV market with random features (tests/helpers.random_feature_set's recipe)
    and one fold: training on the first ``train_frac`` of the bars, validation ``val_gap`` bars
    after it to the end."""
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0, 1e-3, n_bars)))
    open_ = np.concatenate([[100.0], close[:-1]]) * np.exp(rng.normal(0, 2e-4, n_bars))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 5e-4, n_bars)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 5e-4, n_bars)))
    fs = FeatureSet(
        features=torch.from_numpy(rng.normal(3.0, 2.0, (n_bars, n_features)).astype(np.float32)),
        targets=torch.zeros((n_bars, 4), dtype=torch.float32),
        ohlc=torch.from_numpy(np.stack([open_, high, low, close], 1)),
        volume=torch.from_numpy(rng.lognormal(8, 0.5, n_bars)),
        timestamps=torch.from_numpy(np.arange(n_bars, dtype=np.int64) * 60_000_000_000 + 1_700_000_000 * 10**9),
        names=tuple(f"f{i}" for i in range(n_features)), warmup=0, has_volume=True,
        spec_version="bench", source_sha256="0" * 64,
    )
    m = MarketData(fs, device)
    cut = int(n_bars * train_frac)
    m.set_fold(FoldRange(0, 0, cut, cut + val_gap, n_bars))
    return m


def signal_market(n_bars: int, device: torch.device | str, seed: int = 11, signal: float = 0.3,
                  train_frac: float = 0.75, val_gap: int = 60) -> MarketData:
    """A synthetic series with a planted next-bar signal (``generate_bars(signal=…)``) through the
    real feature pipeline: the market learning comparisons use. One fold: training on
    [warm-up, train_frac · T), validation from ``val_gap`` bars later to the last bar but one."""
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.features.spec import build_features

    fs = build_features(generate_bars(n_bars, seed=seed, signal=signal), device=device)
    m = MarketData(fs, device)
    t = len(fs)
    m.set_fold(FoldRange(0, fs.warmup, int(t * train_frac), int(t * train_frac) + val_gap, t - 1))
    return m


def trainer(market: MarketData, env_params: EnvParams | None = None, seed: int = 0, **over: Any) -> DQNTrainer:
    """A DQNTrainer; keyword arguments are DQNConfig fields or ExecutionPlan fields (env_step,
    acting, train_step, replay, graphs, matmul_precision, readback: per-part choices pinned
    directly, as benchmarks need, without the resolver's defaults)."""
    plan_keys = {f.name for f in fields(ExecutionPlan)}
    plan = {k: over.pop(k) for k in list(over) if k in plan_keys}
    plan.setdefault("graphs", market.device.type == "cuda")  # as the torch backend resolves there
    return DQNTrainer(market, env_params or EnvParams(episode_length=256), DQNConfig(**over), seed=seed,
                      plan=ExecutionPlan(device=str(market.device), **plan))
