"""Crash-safe checkpoints of a DQNTrainer: safetensors files + a JSON manifest, committed by rename.

A checkpoint is a directory ``checkpoints/f{fold:03d}-e{epoch:05d}-{kind}`` (kind ``epoch``: inside
a fold, ``end``: the fold is finished and evaluated) holding

    <component>.safetensors   the ``state_dict()`` of each of the trainer's stateful components
                              (learner, replay, env, collector, monitor, curiosity if on, trainer's
                              host counters): live tensors, generator states, host integers
    manifest.json             versions, config hash, data hash (MarketData.source_sha256), the
                              component list and the sha256 of each file

This module knows nothing of a component's insides: ``trainer.state_dict()`` gives the dicts and
``trainer.load_state_dict()`` checks and copies them back (``foxhunt.state``). A checkpoint of an
older format (1: written before components saved their own state) is refused with a message
saying so: it cannot be resumed by this version.

Writing: everything goes into ``checkpoints/.tmp-<name>-<pid>``; each file is fsynced; the manifest
is written last; the directory is fsynced, renamed to its final name, and the parent fsynced. A
kill at any moment leaves either the previous checkpoints untouched plus a temporary directory
(removed by ``clean_temporaries`` at the next start), or the complete new checkpoint. Loading
parses the manifest with a strict schema and verifies every file's length and sha256 first, then
compares every tensor header with the trainer before copying anything, and range-checks the
restored values (``foxhunt.train.manifest``); errors name the bad file and key.
Nothing is pickled: tensors go through ``safetensors.torch.save`` / ``load``; ``torch.load`` is
never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import safetensors
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

import foxhunt
from foxhunt.state import ComponentStateError
from foxhunt.train.manifest import FORMAT_VERSION, CheckpointError, check_headers, check_restored_values, parse_manifest

MANIFEST = "manifest.json"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
SLEEP_ENV = "FOXHUNT_TEST_CHECKPOINT_SLEEP"
"""Test hook: seconds to sleep between the files of a save (so that a kill can land inside it)."""

_NAME_RE = re.compile(r"^f(\d{3,})-e(\d{5,})-(epoch|end)$")


# --------------------------------------------------------------------------- what is saved
def member_prefix(k: int) -> str:
    """Component file prefix of ``train.ensemble``'s member k ("" for member 0: a one-agent checkpoint
    is unchanged); ``foxhunt.train.team.Team`` names the members' components with it."""
    return "" if k == 0 else f"member{k}_"


def component_files(trainer: Any) -> dict[str, dict[str, torch.Tensor]]:
    """``{file name: state dict}``: one file per component of ``trainer.state_dict()`` (live tensors)."""
    return {f"{name}.safetensors": state for name, state in trainer.state_dict().items()}


# --------------------------------------------------------------------------- names
def checkpoint_name(fold: int, epoch: int, fold_done: bool) -> str:
    return f"f{fold:03d}-e{epoch:05d}-{'end' if fold_done else 'epoch'}"


def _order_key(name: str) -> tuple[int, int, int] | None:
    m = _NAME_RE.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), 1 if m.group(3) == "end" else 0


def committed(ckpt_dir: Path) -> list[Path]:
    """Committed checkpoint directories, oldest first (temporaries and strays ignored)."""
    if not ckpt_dir.is_dir():
        return []
    found = [(k, p) for p in ckpt_dir.iterdir() if p.is_dir() and (k := _order_key(p.name)) is not None]
    return [p for _, p in sorted(found)]


def latest(ckpt_dir: Path) -> Path | None:
    """The last committed checkpoint, or None."""
    c = committed(ckpt_dir)
    return c[-1] if c else None


def clean_temporaries(ckpt_dir: Path) -> list[str]:
    """Remove leftover temporary / trash directories of interrupted saves; returns their names."""
    removed = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            if p.name.startswith((TMP_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
    return removed


def prune(ckpt_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` committed checkpoints (rename to trash first: atomic)."""
    for p in committed(ckpt_dir)[:-keep] if keep > 0 else []:
        trash = p.with_name(f"{TRASH_PREFIX}{p.name}-{os.getpid()}")
        os.replace(p, trash)
        shutil.rmtree(trash, ignore_errors=True)


# --------------------------------------------------------------------------- saving
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> str:
    """Write ``data`` to ``path`` and fsync it; returns its sha256."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _to_host(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in tensors.items()}


def save(ckpt_dir: Path, trainer: Any, *, fold: int, epoch: int, fold_done: bool, config_hash: str,
         data_hash: str, extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint of ``trainer`` and commit it by rename; returns its directory.

    fold: index of the fold in progress (in the run's fold list); epoch: epochs completed in it;
    fold_done: the fold is finished (evaluated, metrics written). extra: JSON-able run state
    (e.g. the metrics.jsonl byte length) stored in the manifest.
    """
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(fold, epoch, fold_done)
    final = ckpt_dir / name
    tmp = ckpt_dir / f"{TMP_PREFIX}{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    pause = float(os.environ.get(SLEEP_ENV, "0") or 0)
    groups = component_files(trainer)
    files: dict[str, dict[str, Any]] = {}
    for fname in sorted(groups):
        host = _to_host(groups[fname])
        data = st_save(host, metadata={"format": str(FORMAT_VERSION)})
        files[fname] = {"sha256": _write_file(tmp / fname, data), "bytes": len(data), "tensors": len(host)}
        if pause:
            time.sleep(pause)
    manifest = {
        "format": FORMAT_VERSION,
        "versions": {"foxhunt": foxhunt.__version__, "torch": torch.__version__, "safetensors": safetensors.__version__},
        "config_sha256": config_hash,
        "data_sha256": data_hash,
        "fold": fold,
        "epoch": epoch,
        "fold_done": fold_done,
        "components": sorted(name.removesuffix(".safetensors") for name in groups),
        "run": extra or {},
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_file(tmp / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
    _fsync_dir(tmp)
    if final.exists():  # the same point saved again (a resumed run redoing it): replace
        trash = ckpt_dir / f"{TRASH_PREFIX}{name}-{os.getpid()}"
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(tmp, final)
    _fsync_dir(ckpt_dir)
    return final


# --------------------------------------------------------------------------- loading
def _refuse_format_1(mpath: Path, fmt: object) -> None:
    if fmt == 1:
        raise CheckpointError(f"checkpoint {mpath}: format 1 was written by an older foxhunt (before components saved "
                              f"their own state); this version cannot resume it: start a new run")


def refuse_old_format(path: Path) -> None:
    """CheckpointError when checkpoint ``path`` has the old format 1 (nothing else is checked here:
    ``read_manifest`` verifies the rest)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return
    _refuse_format_1(path / MANIFEST, manifest.get("format") if isinstance(manifest, dict) else None)


def _header_tensors(fpath: Path, data: bytes) -> int:
    """The number of tensors in the safetensors header of ``data`` (the header only is parsed)."""
    try:
        n = int.from_bytes(data[:8], "little")
        if not 2 <= n <= len(data) - 8:
            raise ValueError(f"header length {n} does not fit the file's {len(data)} bytes")
        header = json.loads(data[8:8 + n])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"checkpoint file {fpath}: unreadable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    return len([k for k in header if k != "__metadata__"])


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of checkpoint ``path``, schema-checked (``foxhunt.train.manifest.Manifest``),
    with every file's length, sha256 and tensor count verified (CheckpointError naming the file otherwise)."""
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is missing (torn or not a checkpoint)")
    manifest = parse_manifest(mpath)  # refuses format 1 with its own message
    files = manifest["files"]
    for fname in (f"{c}.safetensors" for c in manifest["components"]):
        fpath = path / fname
        if not fpath.is_file():
            raise CheckpointError(f"checkpoint file {fpath} is missing")
        size = fpath.stat().st_size
        if size != files[fname]["bytes"]:
            raise CheckpointError(f"checkpoint file {fpath} is {size} bytes, the manifest says {files[fname]['bytes']}")
        data = fpath.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != files[fname]["sha256"]:
            raise CheckpointError(f"checkpoint file {fpath} is corrupt: sha256 {digest[:12]}… does not match the manifest's {files[fname]['sha256'][:12]}…")
        n = _header_tensors(fpath, data)
        if n != files[fname]["tensors"]:
            raise CheckpointError(f"checkpoint file {fpath} holds {n} tensors, the manifest says {files[fname]['tensors']}")
    return manifest


def check_identity(path: Path, manifest: dict[str, Any], config_hash: str | tuple[str, ...], data_hash: str) -> None:
    """The checkpoint belongs to this configuration and this data (CheckpointError otherwise).

    config_hash: the config's hash, or every hash that identifies it (the current one first)."""
    accepted = (config_hash,) if isinstance(config_hash, str) else config_hash
    if manifest.get("config_sha256") not in accepted:
        raise CheckpointError(f"checkpoint {path}: written with another configuration (config hash differs from the run's config.toml)")
    if manifest.get("data_sha256") != data_hash:
        raise CheckpointError(f"checkpoint {path}: written for other data (data sha256 {str(manifest.get('data_sha256'))[:12]}… ≠ {data_hash[:12]}…)")


def restore(path: Path, trainer: Any, manifest: dict[str, Any]) -> None:
    """Copy checkpoint ``path`` (already verified by ``read_manifest``) into ``trainer`` in place.

    The trainer must be built with the same configuration and have the checkpoint's fold set
    (``reset_for_fold``); ``trainer.load_state_dict`` then overwrites every component's state.
    """
    live = component_files(trainer)
    want = sorted(name.removesuffix(".safetensors") for name in live)
    if sorted(manifest["components"]) != want:
        raise CheckpointError(f"checkpoint {path}: components {sorted(manifest['components'])} ≠ this trainer's {want}")
    for fname, group in live.items():  # headers only: nothing is read or copied until every file matches
        check_headers(path / fname, {k: (t.dtype, tuple(t.shape)) for k, t in group.items()})
    state: dict[str, dict[str, torch.Tensor]] = {}
    for fname in live:
        fpath = path / fname
        try:
            state[fname.removesuffix(".safetensors")] = st_load(fpath.read_bytes())
        except Exception as exc:  # safetensors raises its own error types
            raise CheckpointError(f"checkpoint file {fpath}: unreadable ({exc})") from None
    try:
        trainer.load_state_dict(state)
    except ComponentStateError as exc:
        raise CheckpointError(f"checkpoint file {path / (exc.component + '.safetensors')}: {exc}") from None
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    for k, member in enumerate(getattr(trainer, "members", None) or [trainer]):  # train.ensemble: every member's
        check_restored_values(path, member, manifest, prefix=member_prefix(k))
