"""`foxhunt … --help` shows square-bracketed text literally.

Typer renders help with rich markup, where ``[word …]`` is a style tag and vanishes from the output
("[tune.space]", "[default: …]"); help strings escape it (``rich.markup.escape``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typing import Any

import typer
from rich.markup import render

from foxhunt.cli import app


def _help(cwd: Path, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "400"}  # wide: no bracketed text wrapped apart
    p = subprocess.run([sys.executable, "-m", "foxhunt.cli", *args, "--help"], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_tune_help_shows_the_tune_space_table_name_literally(tmp_path: Path) -> None:
    out = _help(tmp_path, "tune")
    assert "[tune.space]" in out and "[tune]" in out


def test_backtest_help_shows_its_written_defaults(tmp_path: Path) -> None:
    out = _help(tmp_path, "backtest")
    assert "[default: backtests/latest; RUN_DIR/backtest with --run]" in out
    assert "[default: backtest.barriers, off]" in out


def _texts(cmd: Any, path: str) -> list[tuple[str, str]]:
    out = [(path, cmd.help or ""), (path, cmd.short_help or "")]
    out += [(f"{path} {p.name}", getattr(p, "help", None) or "") for p in cmd.params]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _texts(sub, f"{path} {name}")
    return out


def test_no_help_string_of_any_command_loses_text_to_rich_markup() -> None:
    """Every help text renders to itself (less the escaping backslashes): nothing read as a tag."""
    lost = [(where, text) for where, text in _texts(typer.main.get_command(app), "foxhunt")
            if render(text).plain != text.replace("\\[", "[")]
    assert lost == []
