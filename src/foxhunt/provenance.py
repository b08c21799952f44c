"""Where a result came from: device, library versions and the git revision (recorded in outputs such
as ``scorecard.json`` so that a number can be traced to the code and machine that measured it)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

REV_ENV = "FOXHUNT_GIT_REV"
"""Overrides the revision (a GPU machine's copy of the checkout has no usable .git)."""


def git_revision(root: Path | None = None) -> str:
    """HEAD of the checkout holding this package ($FOXHUNT_GIT_REV when set; "unknown" without git)."""
    env = os.environ.get(REV_ENV)
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root or Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def machine(device: torch.device | str) -> dict[str, Any]:
    """Device, GPU name (CUDA), torch / triton / python versions, CPU count and git revision."""
    dev = torch.device(device)
    info: dict[str, Any] = {"device": str(dev), "torch": torch.__version__, "python": platform.python_version(),
                            "cpu_count": os.cpu_count(), "git_revision": git_revision()}
    if dev.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(dev)
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            pass
    return info
