"""Run a cross-compile script for Hopper (sm_90) in a subprocess with the Triton interpreter off.

The kernel modules must be imported with TRITON_INTERPRET unset or 0 to be compiled, while the
test session may run with it on; Triton ships ptxas, so no GPU is needed. Skips when this Triton
has no bundled ptxas.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_interpreter_off(script: str, timeout: int = 600) -> list[str]:
    """stdout lines of ``python -c script`` with TRITON_INTERPRET=0 (asserts it exits with 0)."""
    triton = pytest.importorskip("triton")
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no bundled ptxas")
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TRITON_INTERPRET": "0"},
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()
