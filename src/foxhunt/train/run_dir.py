"""The run directory of ``foxhunt train``: naming and creating it, and checking it for ``--resume``.

Layout (``<run.out_dir>/<name>/``)::

    config.toml  folds.json  accel.json  metrics.jsonl  summary.json  report.html
    folds/fold_k/metrics.json   deterministic: same seed ⇒ same bytes (no timings in it)
    folds/fold_k/timings.json   fold transition, training, evaluation seconds
    checkpoints/f{fold}-e{epoch}-{epoch|end}/   see foxhunt.train.checkpoint
    tb/                          TensorBoard event files

This module owns the directory's lifecycle, not its contents: ``create_run_dir`` writes only
config.toml (run.name resolved) and folds.json, atomically; ``read_run_dir`` / ``check_resume``
validate an existing directory and its last checkpoint and write nothing. What a run writes into
the directory is ``foxhunt.train.outputs`` (files) and ``foxhunt.train.runner`` (when).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foxhunt.config import Config, load_config
from foxhunt.errors import ConfigError
from foxhunt.folds import folds_to_json
from foxhunt.pipeline import Prepared
from foxhunt.train import checkpoint as ckpt
from foxhunt.train.manifest import RunDirError, check_manifest, read_folds_json


@dataclass
class ResumePoint:
    """A verified checkpoint to continue from (None path: the run never reached a checkpoint)."""

    path: Path | None
    manifest: dict[str, Any] = field(default_factory=dict)


def default_run_name() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def check_run_name(name: str | None) -> str | None:
    """A run name (``--name`` / ``run.name``) is one plain path component; RunDirError if not."""
    if name is not None and (not name or "/" in name or "\0" in name or name.startswith(".")):
        raise RunDirError(f"run name {name!r}: must be non-empty, without '/' or NUL, not starting with '.'")
    return name


def create_run_dir(config: Config, prepared: Prepared, name: str | None,
                   files: dict[str, str] | None = None) -> tuple[Path, Config]:
    """Make ``<out_dir>/<name>/`` with config.toml (run.name resolved) and folds.json, atomically;
    ``files``: {file name: text} written beside them (in the same atomic step).

    Returns (run directory, resolved config). Raises RunDirError if an explicit name exists.
    """
    out_dir = Path(config.run.out_dir)
    explicit = check_run_name(name or config.run.name)
    base = explicit or default_run_name()
    final = out_dir / base
    if final.exists():
        if explicit is not None:
            raise RunDirError(f"run directory {final} already exists (continue it with --resume {final}, or pick another --name)")
        i = 2
        while (out_dir / f"{base}-{i}").exists():
            i += 1
        final = out_dir / f"{base}-{i}"
    resolved = config.replace(run={"name": final.name})
    made: list[Path] = []
    tmp = out_dir / f".tmp-{final.name}-{os.getpid()}"
    try:
        made = [d for d in (out_dir, *out_dir.parents) if not d.exists()]  # what mkdir creates, deepest first
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        resolved.write(tmp)
        # A pooled universe's folds are indices into its union calendar (foxhunt.train.universe_runner)
        times = getattr(prepared, "calendar", None)
        times = prepared.market.timestamps_host if times is None else times
        (tmp / "folds.json").write_text(folds_to_json(prepared.folds, times) + "\n")
        for file_name, text in (files or {}).items():
            (tmp / file_name).write_text(text)
        os.replace(tmp, final)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        shutil.rmtree(tmp, ignore_errors=True)
        for d in made:  # nothing left behind: the directories this call created, if still empty
            try:
                d.rmdir()
            except OSError:
                break
        raise RunDirError(f"cannot create the run directory {final}: {getattr(exc, 'strerror', None) or exc}") from None
    return final, resolved


RUN_DIR_ENTRIES = {"checkpoints": True, "folds": True, "tb": True, "metrics.jsonl": False, "summary.json": False,
                   "report.html": False}
"""Entries of a run directory that a run writes (name -> is a directory)."""


def read_run_dir(run_dir: Path) -> tuple[Config, ResumePoint]:
    """Validate a run directory for --resume (writes nothing): its config and last checkpoint."""
    if not run_dir.is_dir():
        raise RunDirError(f"--resume {run_dir}: no such run directory")
    for need in ("config.toml", "folds.json"):
        if not (run_dir / need).is_file():
            raise RunDirError(f"--resume {run_dir}: {need} is missing (not a foxhunt train run directory)")
    # Entries the run writes into: one of the wrong type would fail mid-run (after metrics.jsonl
    # was already truncated to the checkpoint), so it is refused now, before anything is touched.
    for entry, want_dir in RUN_DIR_ENTRIES.items():
        p = run_dir / entry
        if (p.exists() or p.is_symlink()) and (p.is_dir() != want_dir or not (p.is_dir() or p.is_file())):
            raise RunDirError(f"--resume {run_dir}: {entry} is not a {'directory' if want_dir else 'regular file'}")
    last = ckpt.latest(run_dir / "checkpoints")
    if last is not None:
        ckpt.refuse_old_format(last)  # before the config: an older run's config has removed keys too
    try:
        config = load_config(run_dir / "config.toml")
    except ConfigError as exc:
        raise RunDirError(f"--resume {run_dir}: {exc}") from None
    folds = read_folds_json(run_dir)  # schema-checked before anything is built
    if last is None:
        return config, ResumePoint(None)
    manifest = ckpt.read_manifest(last)  # schema + every file's length and sha256
    check_manifest(last, manifest, config, len(folds), run_dir / "metrics.jsonl")
    return config, ResumePoint(last, manifest)


def check_resume(run_dir: Path, config: Config, prepared: Prepared, point: ResumePoint) -> None:
    """The data and folds are those the run started with (RunDirError / CheckpointError)."""
    saved = read_folds_json(run_dir)
    now = [f.to_dict() for f in prepared.folds]
    if saved != now:
        raise RunDirError(f"--resume {run_dir}: the folds differ from folds.json (the data changed since the run started)")
    if point.path is not None:
        # Checkpoints written before the canonical config hash carry sha256(config.toml's bytes).
        legacy = hashlib.sha256((run_dir / "config.toml").read_bytes()).hexdigest()
        ckpt.check_identity(point.path, point.manifest, (config.hash(), legacy), prepared.market.source_sha256)


def is_complete(point: ResumePoint, n_folds: int) -> bool:
    """The checkpoint is the last fold's end: nothing is left to train."""
    return point.path is not None and bool(point.manifest.get("fold_done")) and int(point.manifest.get("fold", -1)) == n_folds - 1
