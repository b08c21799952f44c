"""Fixtures shared by the bar-data tests: directory snapshots and a work folder."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import pytest


def _snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root ('dir' for directories)."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def snapshot() -> Callable[[Path], dict[str, str]]:
    return _snapshot


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """tmp_path with an empty input folder ``in`` and a cache folder ``cache`` holding a sentinel."""
    (tmp_path / "in").mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "sentinel.txt").write_text("untouched")
    return tmp_path
