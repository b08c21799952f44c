"""The benchmark harness every bench script uses: revision and machine facts, JSON output, one
timer (``timed``), one random market (``build_market``) and one DQN trainer builder (``trainer``).

Run a benchmark as ``PYTHONPATH=src:. python -m bench.<name>`` (``scripts/gpu.sh`` does): the
scripts import ``bench.common`` and ``foxhunt`` as packages, no sys.path edits.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def git_revision() -> str:
    """HEAD of the checkout; FOXHUNT_GIT_REV when set (the GPU machine's copy has no .git)."""
    env = os.environ.get("FOXHUNT_GIT_REV")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def machine(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "git_revision": git_revision(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            pass
    return info


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write bench/results/<name>.json (temporary name, then rename)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    os.replace(tmp, path)
    return path


def timed(fn: Callable[[], object], device: torch.device | str, reps: int = 10, warmup: int = 1, inner: int = 1,
          clock: str = "events") -> float:
    """Median seconds per call of ``fn`` over ``reps`` samples of ``inner`` calls each, after
    ``warmup`` calls. clock "events": CUDA events on a GPU (device time of the stream), perf_counter
    on a CPU; "wall": perf_counter with a synchronisation around each sample (host overheads count)."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(dev)
    samples = []
    for _ in range(reps):
        if cuda and clock == "events":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            if cuda:
                torch.cuda.synchronize(dev)
            samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def build_market(n_bars: int, n_features: int, device: torch.device | str, seed: int = 0,
                 train_frac: float = 0.8) -> MarketData:
    """A random-walk OHLCV market with random features (tests/helpers.random_feature_set's recipe)
    and one fold: training on the first ``train_frac`` of the bars, validation after it."""
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
    m.set_fold(FoldRange(0, 0, cut, cut, n_bars))
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


def cuda_time(fn, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn`` (CUDA events on GPU, perf_counter on CPU), after warm-up: every
    sample (``timed`` gives their median)."""
    for _ in range(warmup):
        fn()
    out = []
    cuda = torch.cuda.is_available()
    for _ in range(repeats):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return out
