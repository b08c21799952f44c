"""Tiny training configurations for the `foxhunt train` tests (seconds on a 2-core CPU); the
configuration itself lives in tests/tiny.py."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.tiny import TINY_TOML, tiny_config  # noqa: F401  (shared with the tune tests; imported from here by the train tests)

CLI = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())", "train"]
"""The `foxhunt` entry point in a subprocess (what the console script runs)."""


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root ('dir' for directories)."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def tiny() -> Callable[..., Path]:
    return tiny_config
