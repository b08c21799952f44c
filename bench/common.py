"""Shared helpers of the benchmark scripts: revision, machine facts, JSON output."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

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


def cuda_time(fn, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn`` (CUDA events on GPU, perf_counter on CPU), after warm-up."""
    import time

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
