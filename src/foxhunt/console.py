"""The rich consoles every command prints to (stdout for results, stderr for one-line errors), and
the helpers that put a user's text into their lines (``one_line``, ``show_path``, ``iso_time``).

A module of its own so that the command modules (``*/cli_cmd.py``) and the entry point
(``cli.py``) share them without importing each other: the entry point imports the command
modules, never the reverse (tests/test_import_graph.py).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


def one_line(text: str) -> str:
    """``text`` with control characters (newlines in a file name...) escaped: one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def show_path(path: object) -> str:
    """A user's path inside rich markup: markup escaped, control characters made visible."""
    return escape(one_line(str(path)))


def iso_time(ns: int) -> str:
    """A bar timestamp (int64 ns since the epoch) as ``YYYY-MM-DD HH:MM:SS``."""
    import numpy as np  # here: `foxhunt --help` and the error paths do not pay numpy's import

    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")


__all__ = ["console", "err_console", "iso_time", "one_line", "show_path"]
