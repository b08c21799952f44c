"""Schemas of what ``foxhunt train --resume`` reads back: checkpoint manifests, folds.json, tensors.

A run directory is user-editable (and attacker-editable) input: every value that decides how a
resumed run continues is parsed here by a strict pydantic schema (types exact: ``1e6`` or ``true``
is not an int; every count >= 0; hashes 64 hex digits; no unknown keys) and then checked against
the run's configuration (fold < n_folds, epoch <= train.epochs, replay counters within the buffer,
metrics offset within metrics.jsonl) *before* the market is uploaded or the trainer is built.
Saved tensors are checked by their safetensors header (dtype, shape; no data read) against the
live trainer before anything is copied, and the loaded replay / optimiser values are range-checked
before training continues. Every failure is one line naming the file, the key and the rule
(``CheckpointError`` / ``RunDirError``, exit code 2), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from foxhunt.errors import CacheError, FoxhuntError

FORMAT_VERSION = 2
"""2: one safetensors file per component state dict (``trainer.state_dict()``). 1 (older):
trainer / replay / rng files, refused with a message saying so."""
MAX_COUNT = 1 << 53
"""Upper bound of every counter (exactly representable as a float: a JSON reader may go through one)."""


class CheckpointError(CacheError):
    """A checkpoint is missing, torn, corrupt or does not belong to this run (names the file)."""


class RunDirError(FoxhuntError):
    """A run directory cannot be created or resumed (exists, missing files, wrong data...)."""


Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FileEntry(_Strict):
    sha256: Sha256
    bytes: Count
    tensors: Annotated[int, Field(ge=1, le=100_000)]


class RunState(_Strict):
    """The runner's state (``save(extra=...)``): both keys are required by ``check_manifest``."""

    metrics_bytes: Count | None = None
    global_epoch: Count | None = None


class Manifest(_Strict):
    """``checkpoints/<name>/manifest.json`` (written by ``foxhunt.train.checkpoint.save``)."""

    format: Literal[2]
    versions: dict[Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=256)]]
    config_sha256: Sha256
    data_sha256: Sha256
    fold: Annotated[int, Field(ge=0, le=1_000_000)]
    epoch: Annotated[int, Field(ge=0, le=100_000)]
    fold_done: bool
    # member<k>_ prefixes of train.ensemble (foxhunt.train.team) carry a digit
    components: list[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]] = Field(min_length=1, max_length=256)
    run: RunState
    files: dict[str, FileEntry]
    created: Annotated[str, StringConstraints(max_length=64)]

    @field_validator("components")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("names repeat")
        return v

    @model_validator(mode="after")
    def _one_file_per_component(self) -> "Manifest":
        want = {f"{c}.safetensors" for c in self.components}
        if set(self.files) != want:
            odd = sorted(set(self.files) ^ want)[0]
            raise ValueError(f"files must list exactly one <component>.safetensors per component (not {odd!r})")
        return self


class FoldRow(_Strict):
    """One row of ``folds.json`` (``foxhunt.folds.folds_to_json``)."""

    fold: Count
    train_start: Count
    train_end: Count
    val_start: Count
    val_end: Count
    train_start_time: str | None = None
    train_end_time: str | None = None
    val_start_time: str | None = None
    val_end_time: str | None = None


def _first_error(exc: ValidationError) -> str:
    """``key.sub: rule (got value)`` of the first error, on one line."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "<top>"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    got = ""
    if "input" in err and err["type"] not in ("extra_forbidden", "missing") and not isinstance(err["input"], (dict, list)):
        text = repr(err["input"])
        got = f" (got {text[:60] + '…' if len(text) > 60 else text})"
    return f"{loc}: {msg}{got}".replace("\n", " ")


def _read_json(path: Path, what: str, error: type[FoxhuntError]) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{what} {path}: not JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise error(f"{what} {path}: not JSON (nested too deeply)") from None
    except OSError as exc:
        raise error(f"{what} {path}: cannot be read ({exc.strerror or exc})") from None


def parse_manifest(mpath: Path) -> dict[str, Any]:
    """The manifest at ``mpath`` validated by ``Manifest`` (types and ranges); a plain dict."""
    raw = _read_json(mpath, "checkpoint manifest", CheckpointError)
    if not isinstance(raw, dict):
        raise CheckpointError(f"checkpoint manifest {mpath}: expected a JSON object, got {type(raw).__name__}")
    if raw.get("format") == 1:
        raise CheckpointError(f"checkpoint {mpath}: format 1 was written by an older foxhunt (before components saved "
                              f"their own state); this version cannot resume it: start a new run")
    if raw.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint manifest {mpath}: unknown format {raw.get('format')!r} (expected {FORMAT_VERSION})")
    try:
        return Manifest.model_validate(raw).model_dump()
    except ValidationError as exc:
        raise CheckpointError(f"checkpoint manifest {mpath}: {_first_error(exc)}") from None


def read_folds_json(run_dir: Path) -> list[dict[str, int]]:
    """``run_dir/folds.json`` validated by ``FoldRow``: the index ranges of each fold."""
    path = run_dir / "folds.json"
    raw = _read_json(path, "--resume: folds file", RunDirError)
    if not isinstance(raw, list) or not raw:
        raise RunDirError(f"--resume: folds file {path}: expected a non-empty JSON list of folds")
    out = []
    for i, row in enumerate(raw):
        if not isinstance(row, dict):
            raise RunDirError(f"--resume: folds file {path}: row {i}: expected an object, got {type(row).__name__}")
        try:
            fold = FoldRow.model_validate(row)
        except ValidationError as exc:
            raise RunDirError(f"--resume: folds file {path}: row {i}: {_first_error(exc)}") from None
        out.append({k: getattr(fold, k) for k in ("fold", "train_start", "train_end", "val_start", "val_end")})
    return out


def check_manifest(path: Path, m: dict[str, Any], config: Any, n_folds: int, metrics_path: Path) -> None:
    """The manifest's counters fit this run's configuration (before anything is built).

    config: the run's Config (``train.epochs``); the component counters (replay positions, trainer
    epoch) are range-checked after loading by ``check_restored_values``;
    n_folds: folds of the run; metrics_path: the run's metrics.jsonl (its length bounds the offset).
    """
    epochs = config.train.epochs
    where = f"checkpoint {path}"
    run = m["run"]

    def bad(rule: str) -> CheckpointError:
        return CheckpointError(f"{where}: {rule}")

    if m["fold"] >= n_folds:
        raise bad(f"fold = {m['fold']} is not one of this run's {n_folds} folds (0…{n_folds - 1})")
    if m["fold_done"] and m["epoch"] != epochs:
        raise bad(f"epoch = {m['epoch']} at a fold end must equal train.epochs = {epochs}")
    if not m["fold_done"] and not 1 <= m["epoch"] < epochs:
        raise bad(f"epoch = {m['epoch']} inside a fold must be in 1…{epochs - 1} (train.epochs = {epochs})")
    for key in ("metrics_bytes", "global_epoch"):
        if run.get(key) is None:
            raise bad(f"run.{key} is missing")
    if run["global_epoch"] != m["fold"] * epochs + m["epoch"]:
        raise bad(f"run.global_epoch = {run['global_epoch']} ≠ fold × train.epochs + epoch = {m['fold'] * epochs + m['epoch']}")
    have = metrics_path.stat().st_size if metrics_path.is_file() else 0
    if run["metrics_bytes"] > have:
        raise bad(f"run.metrics_bytes = {run['metrics_bytes']} exceeds the {have} bytes of {metrics_path}")


# --------------------------------------------------------------------------- tensors
_ST_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}


def check_headers(fpath: Path, want: dict[str, tuple[torch.dtype, tuple[int, ...]]]) -> None:
    """The safetensors file ``fpath`` holds exactly ``want``'s tensors with those dtypes and shapes.

    Reads only the header (no tensor data is loaded or allocated).
    """
    from safetensors import safe_open

    try:
        with safe_open(str(fpath), framework="pt") as fh:
            have = {k: (fh.get_slice(k).get_dtype(), tuple(fh.get_slice(k).get_shape())) for k in fh.keys()}
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise CheckpointError(f"checkpoint file {fpath}: unreadable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if set(have) != set(want):
        diff = sorted(set(want) - set(have)) or sorted(set(have) - set(want))
        raise CheckpointError(f"checkpoint file {fpath}: tensor set does not match this trainer (e.g. {diff[0]!r})")
    for k, (dtype, shape) in want.items():
        hd, hs = have[k]
        if hd != _ST_DTYPES.get(dtype) or hs != tuple(shape):
            raise CheckpointError(
                f"checkpoint file {fpath}: tensor {k!r} is {hd} {list(hs)}, this trainer has {_ST_DTYPES.get(dtype, dtype)} {list(shape)}"
            )


def check_restored_values(path: Path, trainer: Any, manifest: dict[str, Any], prefix: str = "") -> None:
    """Range checks of a restored trainer's values (one host read each, at resume only).

    The trainer's epoch must be the manifest's and its rounds ``epoch × rounds per epoch``
    (checkpoints are written at epoch ends); replay bar indices must index the market, actions
    the action set, the storage counters the buffer; every float state (weights, optimiser
    moments, priorities, rewards) must be finite (the sampler trees' ±inf empty-slot markers
    excepted). prefix: the component files' name prefix (``train.ensemble``'s member k: ``member<k>_``).
    """
    where = f"checkpoint {path}"
    if int(trainer.epoch) != manifest["epoch"]:
        raise CheckpointError(f"{where}: {prefix}trainer.safetensors epoch = {int(trainer.epoch)} differs from the manifest's epoch = {manifest['epoch']}")
    cfg = getattr(trainer, "cfg", None)
    for key in ("rounds_per_epoch", "iterations_per_epoch"):  # DQN rounds / PPO iterations of one epoch
        per_epoch = getattr(cfg, key, None)
        if isinstance(per_epoch, int) and int(trainer.rounds) != int(trainer.epoch) * per_epoch:
            raise CheckpointError(f"{where}: {prefix}trainer.safetensors rounds = {int(trainer.rounds)} ≠ epoch × {key} = "
                                  f"{int(trainer.epoch)} × {per_epoch} = {int(trainer.epoch) * per_epoch}")
    replay = getattr(trainer, "replay", None)  # PPO keeps no replay buffer
    if replay is not None:
        storage = replay.storage
        cap = storage.capacity
        pos, size = storage.pos, storage.size
        if not 0 <= size <= cap or not 0 <= pos < cap or (size < cap and pos != size):
            raise CheckpointError(f"{where}: {prefix}replay.safetensors storage.pos = {pos}, storage.size = {size} do not fit a buffer of {cap} slots")
        limits = {"bar": trainer.market.n_rows, "next_bar": trainer.market.n_rows, "action": trainer.env.n_actions}
        for name, hi in limits.items():
            t = getattr(storage, name)
            lo_v, hi_v = int(t.min()), int(t.max())
            if lo_v < 0 or hi_v >= hi:
                raise CheckpointError(f"{where}: {prefix}replay.safetensors storage.{name} holds {lo_v if lo_v < 0 else hi_v}, outside 0…{hi - 1}")
        for name in ("pos_t", "size_t"):
            t = getattr(storage, name, None)
            if t is not None and int(t) != (pos if name == "pos_t" else size):
                raise CheckpointError(f"{where}: {prefix}replay.safetensors storage.{name} = {int(t)} differs from storage.{name[:-2]} = {pos if name == 'pos_t' else size}")
    for comp, group in trainer.state_dict().items():
        for k, t in group.items():
            if not t.is_floating_point():
                continue
            # Sampler trees / priorities use ±inf as the empty-slot sentinel, and the epoch monitor's
            # min / max fields start an epoch at +inf / −inf (the Q monitor's stay there in an epoch
            # without a train step, e.g. the replay's warm-up): only NaN is refused there.
            sentinel = k.startswith("sampler.") or (comp.endswith("monitor") and k == "buf")
            ok = ~torch.isnan(t) if sentinel else torch.isfinite(t)
            if not bool(ok.all()):
                raise CheckpointError(f"{where}: {prefix}{comp}.safetensors tensor {k!r} holds NaN or infinite values")
