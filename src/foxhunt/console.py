"""The rich consoles every command prints to (stdout for results, stderr for one-line errors).

A module of its own so that the command modules (``train/cli_cmd.py``, ``backtest/cli_cmd.py``)
and the entry point (``cli.py``) share them without importing each other.
"""

from __future__ import annotations

from rich.console import Console

console = Console()
err_console = Console(stderr=True)

__all__ = ["console", "err_console"]
