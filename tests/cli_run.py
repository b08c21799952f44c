"""Run the `foxhunt` CLI as the user does (a fresh `python -m foxhunt.cli` process in a folder) and
check refusals: the exact one-line error, exit code 2, nothing written (listing before == after)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path


def run_cli(cwd: Path, *args: str, timeout: float = 300, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "foxhunt.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_ok(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``foxhunt ARGS`` in ``cwd`` (200 columns: rich wraps no line a test reads), asserted to exit 0."""
    p = run_cli(cwd, *args, timeout=timeout, columns=200)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def listing(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under root ('dir' for directories, 'link' for links)."""
    out = {}
    for p in sorted(root.rglob("*")):
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        out[str(p.relative_to(root))] = kind
    return out


def assert_refused(cwd: Path, args: list[str], line: str) -> None:
    """``foxhunt ARGS`` in ``cwd`` prints exactly ``error: LINE`` on stderr, exits 2, writes nothing."""
    before = listing(cwd)
    res = run_cli(cwd, *args)
    assert (res.returncode, res.stderr) == (2, f"error: {line}\n"), res.stdout + res.stderr
    assert listing(cwd) == before


def refused_line(cwd: Path, args: list[str]) -> str:
    """``foxhunt ARGS`` in ``cwd`` exits 2 with one ``error: …`` line on stderr and writes nothing; returns
    that line without ``error: `` (for a test that checks its words, in one run where ``assert_refused``
    would need the exact line up front)."""
    before = listing(cwd)
    res = run_cli(cwd, *args)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stdout + res.stderr
    assert listing(cwd) == before
    return res.stderr[len("error: "):].rstrip("\n")

