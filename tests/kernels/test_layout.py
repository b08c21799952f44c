"""The kernels' layout (issue 12): ``foxhunt.kernels`` is a leaf grouped per op, every fused op has
one adapter ``<layer>/fused.py`` exporting ``unsupported(...)``, and the host-side modules the
adapters import at load time need no Triton (so that an install without it still imports them)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "foxhunt"
ADAPTERS = ("env.fused", "agents.dqn.fused", "agents.replay.fused", "backtest.fused")
OPS = ("acting", "backtest", "draws", "env_step", "replay", "rules")


def test_kernels_import_nothing_of_foxhunt_outside_kernels():
    for path in (SRC / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith("foxhunt.") or name.startswith("foxhunt.kernels"), f"{path}: {name}"


def test_kernels_are_grouped_per_op_and_every_adapter_exports_unsupported():
    assert sorted(p.name for p in (SRC / "kernels").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(OPS)
    assert sorted(p.name for p in (SRC / "kernels").glob("*.py")) == ["__init__.py", "_triton.py"]
    for name in ADAPTERS:
        assert callable(importlib.import_module(f"foxhunt.{name}").unsupported), name


def test_the_adapters_and_host_modules_import_without_triton():
    """Triton blocked (``sys.modules["triton"] = None``): the adapters, the backtest's host data and
    the packed network still import; the kernels themselves are imported only when one runs."""
    mods = [f"foxhunt.{m}" for m in ADAPTERS] + ["foxhunt.kernels.backtest.host", "foxhunt.kernels.rules.packing"]
    script = ("import sys; sys.modules['triton'] = None\n"
              + "".join(f"import {m}\n" for m in mods)
              + "assert not any(k.startswith('triton') and sys.modules[k] is not None for k in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
