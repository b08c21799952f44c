"""Crash-safe checkpoints of a DQNTrainer: safetensors files + a JSON manifest, committed by rename.

A checkpoint is a directory ``checkpoints/f{fold:03d}-e{epoch:05d}-{kind}`` (kind ``epoch``: inside
a fold, ``end``: the fold is finished and evaluated) holding

    trainer.safetensors   every tensor of ``trainer.state_tensors()`` (+ curiosity's Adam moments)
    replay.safetensors    the replay storage arrays and the sampler's trees / priorities / beta
    rng.safetensors       the state (uint8) of every torch.Generator the training draws from
    manifest.json         versions, config hash, data hash (MarketData.source_sha256), host counters
                          (fold, epoch, rounds, replay pos/size, ...) and the sha256 of each file

Writing: everything goes into ``checkpoints/.tmp-<name>-<pid>``; each file is fsynced; the manifest
is written last; the directory is fsynced, renamed to its final name, and the parent fsynced. A
kill at any moment leaves either the previous checkpoints untouched plus a temporary directory
(removed by ``clean_temporaries`` at the next start), or the complete new checkpoint. Loading
verifies the manifest and every file's sha256 first and names the bad file on a mismatch.
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
from foxhunt.errors import CacheError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FILES = ("trainer.safetensors", "replay.safetensors", "rng.safetensors")
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
SLEEP_ENV = "FOXHUNT_TEST_CHECKPOINT_SLEEP"
"""Test hook: seconds to sleep between the files of a save (so that a kill can land inside it)."""

_NAME_RE = re.compile(r"^f(\d{3,})-e(\d{5,})-(epoch|end)$")
_STORAGE_FIELDS = ("bar", "portfolio", "action", "reward", "done", "next_bar", "next_portfolio", "discount", "pos_t", "size_t")


class CheckpointError(CacheError):
    """A checkpoint is missing, torn, corrupt or does not belong to this run (names the file)."""


# --------------------------------------------------------------------------- what is saved
def trainer_tensors(trainer: Any) -> dict[str, dict[str, torch.Tensor]]:
    """The live device tensors of ``trainer`` (a DQNTrainer), grouped by file (no copies).

    Loading copies into exactly these tensors in place, so captured CUDA graphs stay valid.
    A trainer with its own layout (PPOTrainer) provides it through ``checkpoint_tensors()``.
    """
    if hasattr(trainer, "checkpoint_tensors"):
        return trainer.checkpoint_tensors()
    main = dict(trainer.state_tensors())
    main["collector.epsilon"] = trainer.collector.epsilon
    storage, sampler = trainer.replay.storage, trainer.replay.sampler
    replay = {f"storage.{f}": getattr(storage, f) for f in _STORAGE_FIELDS}
    replay["sampler.beta"] = sampler.beta
    for name in ("max_priority", "priorities", "order"):
        if hasattr(sampler, name):
            replay[f"sampler.{name}"] = getattr(sampler, name)
    for name in ("sum_tree", "min_tree"):
        if hasattr(sampler, name):
            replay[f"sampler.{name}"] = getattr(sampler, name).tree
    return {"trainer.safetensors": main, "replay.safetensors": replay}


def generators(trainer: Any) -> dict[str, torch.Generator]:
    """Every torch.Generator that training draws from, by a stable name."""
    if hasattr(trainer, "checkpoint_generators"):
        return trainer.checkpoint_generators()
    gens = {
        "env_start_sampler": trainer.env.sampler.generator,
        "collector": trainer.collector.generator,
        "replay_sampler": trainer.replay.sampler.generator,
    }
    if trainer.curiosity is not None:
        gens["curiosity"] = trainer.curiosity.generator
    return gens


def host_counters(trainer: Any) -> dict[str, int]:
    """Host-side integers a resumed trainer needs (known by construction, never read back)."""
    if hasattr(trainer, "host_counters"):
        return trainer.host_counters()
    out = {
        "trainer_epoch": int(trainer.epoch),
        "trainer_rounds": int(trainer.rounds),
        "replay_pos": int(trainer.replay.storage.pos),
        "replay_size": int(trainer.replay.storage.size),
    }
    if hasattr(trainer.replay.sampler, "n_updates"):
        out["sampler_n_updates"] = int(trainer.replay.sampler.n_updates)
    return out


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
    groups = trainer_tensors(trainer)
    groups["rng.safetensors"] = {k: g.get_state() for k, g in generators(trainer).items()}
    files: dict[str, dict[str, Any]] = {}
    for fname in FILES:
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
        "host": host_counters(trainer),
        "generators": sorted(generators(trainer)),
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
def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of checkpoint ``path``, with every file's sha256 verified (CheckpointError)."""
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is missing (torn or not a checkpoint)")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {mpath}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {mpath}: unknown format {manifest.get('format') if isinstance(manifest, dict) else '?'!r} (expected {FORMAT_VERSION})")
    files = manifest.get("files", {})
    for fname in FILES:
        fpath = path / fname
        if fname not in files:
            raise CheckpointError(f"checkpoint {mpath}: no entry for {fname}")
        if not fpath.is_file():
            raise CheckpointError(f"checkpoint file {fpath} is missing")
        digest = hashlib.sha256(fpath.read_bytes()).hexdigest()
        if digest != files[fname]["sha256"]:
            raise CheckpointError(f"checkpoint file {fpath} is corrupt: sha256 {digest[:12]}… does not match the manifest's {files[fname]['sha256'][:12]}…")
    return manifest


def check_identity(path: Path, manifest: dict[str, Any], config_hash: str, data_hash: str) -> None:
    """The checkpoint belongs to this configuration and this data (CheckpointError otherwise)."""
    if manifest.get("config_sha256") != config_hash:
        raise CheckpointError(f"checkpoint {path}: written with another configuration (config hash differs from the run's config.toml)")
    if manifest.get("data_sha256") != data_hash:
        raise CheckpointError(f"checkpoint {path}: written for other data (data sha256 {str(manifest.get('data_sha256'))[:12]}… ≠ {data_hash[:12]}…)")


def _copy_group(path: Path, fname: str, live: dict[str, torch.Tensor]) -> None:
    fpath = path / fname
    try:
        loaded = st_load(fpath.read_bytes())
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"checkpoint file {fpath}: unreadable ({exc})") from None
    if set(loaded) != set(live):
        missing = sorted(set(live) - set(loaded)) or sorted(set(loaded) - set(live))
        raise CheckpointError(f"checkpoint file {fpath}: tensor set does not match this trainer (e.g. {missing[0]!r})")
    for k, dst in live.items():
        src = loaded[k]
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise CheckpointError(
                f"checkpoint file {fpath}: tensor {k!r} is {src.dtype} {list(src.shape)}, this trainer has {dst.dtype} {list(dst.shape)}"
            )
    with torch.no_grad():
        for k, dst in live.items():
            dst.copy_(loaded[k])


def restore(path: Path, trainer: Any, manifest: dict[str, Any]) -> None:
    """Copy checkpoint ``path`` (already verified by ``read_manifest``) into ``trainer`` in place.

    The trainer must be built with the same configuration and have the checkpoint's fold set
    (``reset_for_fold``); every tensor, generator and host counter is then overwritten.
    """
    for fname, live in trainer_tensors(trainer).items():
        _copy_group(path, fname, live)
    gens = generators(trainer)
    rng_path = path / "rng.safetensors"
    states = st_load(rng_path.read_bytes())
    if set(states) != set(gens):
        raise CheckpointError(f"checkpoint file {rng_path}: generators {sorted(states)} ≠ this trainer's {sorted(gens)}")
    for k, g in gens.items():
        try:
            g.set_state(states[k])
        except RuntimeError as exc:
            raise CheckpointError(f"checkpoint file {rng_path}: generator {k!r} state rejected ({exc})") from None
    host = manifest["host"]
    if hasattr(trainer, "set_host_counters"):
        trainer.set_host_counters(host)
        return
    trainer.epoch = int(host["trainer_epoch"])
    trainer.rounds = int(host["trainer_rounds"])
    trainer.replay.storage.pos = int(host["replay_pos"])
    trainer.replay.storage.size = int(host["replay_size"])
    if "sampler_n_updates" in host:
        trainer.replay.sampler.n_updates = int(host["sampler_n_updates"])
