"""Checks on the paths a user gives, made before anything is computed or written.

A command checks its output paths first, so that a file where a directory is needed (or the
reverse), a missing permission or a NUL byte is one ``PathError`` line (exit 2) before any work,
rather than an ``OSError`` traceback after it (and a half-written output). The checks create
nothing; the later ``mkdir``/write may still fail for reasons that appear in between (disk full,
a race): the CLI's error boundary turns such an ``OSError`` into one line too.
"""

from __future__ import annotations

import os
from pathlib import Path

from foxhunt.errors import PathError


def _text(path: str | os.PathLike[str], what: str) -> Path:
    if "\0" in os.fspath(path):
        raise PathError(what, repr(os.fspath(path)), "a path cannot contain a NUL byte")
    if not os.fspath(path):
        raise PathError(what, "''", "the path is empty")
    return Path(path)


def _creatable_in(p: Path, what: str) -> None:
    """``p`` does not exist: its nearest existing ancestor must be a writable directory."""
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():  # a dangling link: mkdir would fail with "File exists"
            raise PathError(what, p, f"{parent} is a broken symbolic link")
        parent = parent.parent
    if not parent.is_dir():
        raise PathError(what, p, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PathError(what, p, f"no permission to create entries in {parent}")


def check_output_dir(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` is, or can be created as, a writable directory. Returns it as a Path."""
    p = _text(path, what)
    if p.exists():
        if not p.is_dir():
            raise PathError(what, p, "exists and is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise PathError(what, p, "the directory is not writable")
    elif p.is_symlink():
        raise PathError(what, p, "is a broken symbolic link")
    else:
        _creatable_in(p, what)
    return p


def check_output_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` is a regular file that may be replaced, or can be created. Returns it as a Path."""
    p = _text(path, what)
    if p.exists():
        if p.is_dir():
            raise PathError(what, p, "is a directory; expected a file name")
        if not p.is_file():
            raise PathError(what, p, "exists and is not a regular file")
        if not os.access(p.parent, os.W_OK | os.X_OK):
            raise PathError(what, p, f"no permission to replace it in {p.parent}")
    else:
        _creatable_in(p, what)
    return p
