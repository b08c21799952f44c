"""Trained models as one safetensors file: weights, normalisation statistics and metadata.

A model file is what ``foxhunt backtest --model`` reads: the Q-network's weights
(``net.<param>``, float32), the normalisation statistics of the fold it was trained on
(``norm.mean``, ``norm.std``, float64 [F]: a model must see new data normalised exactly as in
training, never with the new data's own statistics), and two header entries:

    foxhunt          JSON metadata (``ModelMetaSchema``: architecture, feature names and spec
                     version, env parameters, data hash, fold, training medians; ``head``:
                     "branching" for a ``BranchingQNet``, absent for the flat dueling head, so
                     files written before the key existed load as before; ``sequence``:
                     {length, width, heads} of a ``SequenceQNet``'s lag attention, whose
                     ``net.encoder.*`` tensors the file then holds, absent for a per-bar network)
    foxhunt_sha256   sha256 over the canonical metadata JSON and every tensor's name, dtype,
                     shape and bytes (``content_sha256``): a flipped byte anywhere is refused

Loading is an input boundary (a model file may come from anywhere): the header is read first and
the metadata parsed by a strict schema (types, ranges, consistency with the env and the feature
list); every tensor's dtype and shape is compared with the architecture the metadata describes,
and the weights' size with the device's memory, *before* any tensor data is read or any network
allocated; then the content hash is checked and every value must be finite (std >= 0, not all
zero). Each failure is one ``ModelFileError`` line naming the file and the rule (exit code 2).
Files of the first format (``foxhunt-model/1``, no content hash) still load when they pass every
other check; a failing one is refused with a hint to re-export it (re-run ``foxhunt train``).
Written to a temporary name and renamed; read with ``safetensors`` only (nothing is unpickled).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from foxhunt.agents.dqn.config import MAX_WIDTH
from foxhunt.agents.networks import BRANCHES, N_FACTORED_ACTIONS, head_of, q_network
from foxhunt.agents.sequence_net import SequenceQNet, sequence_tensors
from foxhunt.errors import CacheError
from foxhunt.market import N_PORTFOLIO_FEATURES, STD_FLOOR, NormStats

FORMAT = "foxhunt-model/2"
LEGACY_FORMATS = ("foxhunt-model/1",)
MAX_FEATURES = 4_096


class ModelFileError(CacheError):
    """A model file is missing, foreign, damaged, or describes an impossible network (names the file)."""


@dataclass(frozen=True)
class ModelMeta:
    obs_dim: int
    n_actions: int
    hidden: tuple[int, ...]
    head_hidden: int
    feature_names: tuple[str, ...]
    spec_version: str
    env: dict[str, Any]
    extra: dict[str, Any]
    verified: bool = True
    """False for a legacy file without a content hash (its bytes could not be verified)."""
    head: str = "flat"
    """The Q head: "flat" (DuelingQNet) or "branching" (BranchingQNet)."""


# --------------------------------------------------------------------------- metadata schema
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Medians(_Strict):
    """Training-slice medians the env needs (order routing, initial volatility); all > 0."""

    abs_return: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    range: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    volume: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class FoldDict(_Strict):
    fold: Annotated[int, Field(ge=0)]
    train_start: Annotated[int, Field(ge=0)]
    train_end: Annotated[int, Field(ge=0)]
    val_start: Annotated[int, Field(ge=0)]
    val_end: Annotated[int, Field(ge=0)]

    @model_validator(mode="after")
    def _ordered(self) -> "FoldDict":
        if not self.train_start < self.train_end <= self.val_start < self.val_end:
            raise ValueError("needs train_start < train_end <= val_start < val_end")
        return self


class Extra(BaseModel):
    """Free-form run information; the keys that loaders use are typed."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    medians: Medians | None = None
    data_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    fold: FoldDict | None = None
    trained_on: FoldDict | None = None
    """The fold as the network was trained: train_end before the held-back window with train.select =
    "inner" (its normalisation and medians are the model's); absent in older files: ``fold``'s."""
    run: str | None = None


class SequenceMeta(_Strict):
    """A network over the last ``length`` bars (``agents.sequence_net.SequenceQNet``): its lag attention."""

    length: Annotated[int, Field(ge=1, le=4096)]
    width: Width
    heads: Annotated[int, Field(ge=1, le=64)]

    @model_validator(mode="after")
    def _heads(self) -> "SequenceMeta":
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")
        return self


class ModelMetaSchema(_Strict):
    """The ``foxhunt`` header entry of a model file."""

    format: Literal["foxhunt-model/1", "foxhunt-model/2"]
    obs_dim: Width
    n_actions: Literal[5, 45]
    hidden: list[Width] = Field(min_length=1, max_length=6)
    head_hidden: Width
    head: Literal["flat", "branching"] = "flat"
    sequence: SequenceMeta | None = None
    feature_names: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(min_length=1, max_length=MAX_FEATURES)
    spec_version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    env: dict[str, Any]
    extra: Extra = Extra()

    @model_validator(mode="after")
    def _consistent(self) -> "ModelMetaSchema":
        if self.head == "branching" and self.n_actions != N_FACTORED_ACTIONS:
            raise ValueError(f"head = 'branching' needs n_actions = {N_FACTORED_ACTIONS} (got {self.n_actions})")
        if self.sequence is not None and self.head != "flat":
            raise ValueError("sequence needs the flat dueling head")
        if len(set(self.feature_names)) != len(self.feature_names):
            raise ValueError("feature_names repeat")
        if self.obs_dim != len(self.feature_names) + N_PORTFOLIO_FEATURES:
            raise ValueError(f"obs_dim = {self.obs_dim} must be len(feature_names) + {N_PORTFOLIO_FEATURES} = "
                             f"{len(self.feature_names) + N_PORTFOLIO_FEATURES}")
        return self


def expected_tensors(meta: ModelMetaSchema) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) of every tensor the metadata's architecture implies."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    sizes = [meta.obs_dim, *meta.hidden]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        out[f"net.trunk.{2 * i}.weight"] = ("F32", (b, a))
        out[f"net.trunk.{2 * i}.bias"] = ("F32", (b,))
    heads = [("value", 1)] + ([(f"branches.{b}", n) for b, n in enumerate(BRANCHES)] if meta.head == "branching"
                              else [("advantage", meta.n_actions)])
    for head, n_out in heads:
        out[f"net.{head}.0.weight"] = ("F32", (meta.head_hidden, meta.hidden[-1]))
        out[f"net.{head}.0.bias"] = ("F32", (meta.head_hidden,))
        out[f"net.{head}.2.weight"] = ("F32", (n_out, meta.head_hidden))
        out[f"net.{head}.2.bias"] = ("F32", (n_out,))
    f = len(meta.feature_names)
    if meta.sequence is not None:
        out.update(sequence_tensors(meta, f))
    out["norm.mean"] = ("F64", (f,))
    out["norm.std"] = ("F64", (f,))
    return out


def content_sha256(meta_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the canonical metadata JSON and each tensor (sorted by name): name, dtype, shape, bytes."""
    h = hashlib.sha256()
    h.update(meta_json.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"\n{name}|{t.dtype}|{list(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _canonical(meta: dict[str, Any]) -> str:
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- save
def save_model(path: str | os.PathLike[str], net: torch.nn.Module, norm: NormStats, *, feature_names: tuple[str, ...],
               spec_version: str, env: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write ``net`` (a DuelingQNet or BranchingQNet) + ``norm`` + metadata (+ their content hash) to
    ``path`` atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    hidden = tuple(m.out_features for m in net.trunk if isinstance(m, torch.nn.Linear))
    meta = {
        "format": FORMAT, "obs_dim": net.obs_dim, "n_actions": net.n_actions, "hidden": list(hidden),
        "head_hidden": net.value[0].out_features, "feature_names": list(feature_names),
        "spec_version": spec_version, "env": env, "extra": extra or {},
    }
    if head_of(net) != "flat":  # a flat head's file is as before the key existed
        meta["head"] = head_of(net)
    if isinstance(net, SequenceQNet):  # absent for a per-bar network
        meta["sequence"] = net.sequence_meta()
    tensors = {f"net.{k}": v.detach().to("cpu", torch.float32).contiguous() for k, v in net.state_dict().items()}
    tensors["norm.mean"] = norm.mean.detach().to("cpu", torch.float64).contiguous()
    tensors["norm.std"] = norm.std.detach().to("cpu", torch.float64).contiguous()
    meta_json = _canonical(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"foxhunt": meta_json, "foxhunt_sha256": content_sha256(meta_json, tensors)})
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- load
def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "<top>"
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    got = ""
    if "input" in err and err["type"] not in ("extra_forbidden", "missing") and not isinstance(err["input"], (dict, list)):
        text = repr(err["input"])
        got = f" (got {text[:60] + '…' if len(text) > 60 else text})"
    return f"{loc}: {msg}{got}".replace("\n", " ")


def parse_meta(path: Path, header: dict[str, str]) -> ModelMetaSchema:
    """The ``foxhunt`` header entry parsed and validated (ModelFileError naming the rule)."""
    if "foxhunt" not in header:
        raise ModelFileError(f"model file {path} is not a foxhunt model (no 'foxhunt' metadata in its header)")
    try:
        raw = json.loads(header["foxhunt"])
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ModelFileError(f"model file {path}: metadata is not JSON ({str(exc).splitlines()[0] if str(exc) else 'too deep'})") from None
    if not isinstance(raw, dict):
        raise ModelFileError(f"model file {path}: metadata must be a JSON object, got {type(raw).__name__}")
    fmt = raw.get("format")
    if fmt != FORMAT and fmt not in LEGACY_FORMATS:
        raise ModelFileError(f"model file {path}: format {fmt!r}, expected {FORMAT!r}")
    try:
        meta = ModelMetaSchema.model_validate(raw)
    except ValidationError as exc:
        raise ModelFileError(f"model file {path}: metadata {_first_error(exc)}{_legacy_hint(fmt)}") from None
    _check_env(path, meta)
    return meta


def _legacy_hint(fmt: Any) -> str:
    return " (an old model file without a content hash: re-export it by re-running foxhunt train)" if fmt in LEGACY_FORMATS else ""


def env_params(meta: ModelMetaSchema | ModelMeta) -> Any:
    """The model's env parameters as ``EnvParams`` (unknown keys of older versions ignored)."""
    from foxhunt.env.params import EnvParams

    return EnvParams(**{k: v for k, v in meta.env.items() if k in EnvParams.model_fields})


def _check_env(path: Path, meta: ModelMetaSchema) -> None:
    try:
        env = env_params(meta)
    except ValidationError as exc:
        raise ModelFileError(f"model file {path}: metadata env.{_first_error(exc)}{_legacy_hint(meta.format)}") from None
    if env.n_actions != meta.n_actions:
        raise ModelFileError(f"model file {path}: n_actions = {meta.n_actions} but env.action_mode = {env.action_mode!r} "
                             f"has {env.n_actions} actions")


def _check_fits(path: Path, meta: ModelMetaSchema, want: dict[str, tuple[str, tuple[int, ...]]],
                device: torch.device) -> None:
    """The weights (and a forward pass's scratch) fit the device's free memory."""
    from foxhunt.budget import available_bytes

    n = sum(math.prod(shape) * (8 if dt == "F64" else 4) for dt, shape in want.values())
    need = 2 * n  # the host copy read from the file + the network on the device
    have = available_bytes(device)
    if need > have:
        raise ModelFileError(f"model file {path}: its network needs ~{need / 2**30:.2f} GiB, more than the "
                             f"{have / 2**30:.2f} GiB available on {device}")


def load_model(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> tuple[torch.nn.Module, NormStats, ModelMeta]:
    """Read and verify a model file (see the module docstring); ModelFileError naming it otherwise."""
    from safetensors import safe_open
    from safetensors.torch import load as st_load

    path = Path(path)
    device = torch.device(device)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as fh:
            header = dict(fh.metadata() or {})
            shapes = {k: (fh.get_slice(k).get_dtype(), tuple(fh.get_slice(k).get_shape())) for k in fh.keys()}
    except OSError as exc:
        raise ModelFileError(f"model file {path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise ModelFileError(f"model file {path} is not a foxhunt model ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    meta = parse_meta(path, header)
    hint = _legacy_hint(meta.format)
    want = expected_tensors(meta)
    if set(shapes) != set(want):
        diff = sorted(set(want) - set(shapes)) or sorted(set(shapes) - set(want))
        kind = "is missing" if diff[0] in want else "is not part of the architecture"
        raise ModelFileError(f"model file {path}: tensor {diff[0]!r} {kind} (metadata: hidden={list(meta.hidden)}, "
                             f"head_hidden={meta.head_hidden}, n_actions={meta.n_actions}, head={meta.head}){hint}")
    for k, (dt, shape) in want.items():
        if shapes[k] != (dt, shape):
            raise ModelFileError(f"model file {path}: tensor {k!r} is {shapes[k][0]} {list(shapes[k][1])}, the metadata's "
                                 f"architecture needs {dt} {list(shape)}{hint}")
    _check_fits(path, meta, want, device)
    try:
        tensors = st_load(path.read_bytes())
    except OSError as exc:
        raise ModelFileError(f"model file {path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:
        raise ModelFileError(f"model file {path} is damaged ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    verified = meta.format == FORMAT
    if verified:
        recorded = header.get("foxhunt_sha256")
        actual = content_sha256(header["foxhunt"], tensors)
        if recorded is None:
            raise ModelFileError(f"model file {path}: no content hash (foxhunt_sha256) in its header")
        if actual != recorded:
            raise ModelFileError(f"model file {path} is corrupt: content sha256 {actual[:12]}… does not match the "
                                 f"recorded {str(recorded)[:12]}…")
    for k, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise ModelFileError(f"model file {path}: tensor {k!r} holds NaN or infinite values{hint}")
    std = tensors["norm.std"]
    if bool((std < 0).any()) or not bool((std > STD_FLOOR).any()):
        raise ModelFileError(f"model file {path}: norm.std must be >= 0 with at least one feature above {STD_FLOOR} "
                             f"(min {float(std.min()):.3g}, max {float(std.max()):.3g}){hint}")
    if meta.sequence is not None:
        seq = meta.sequence
        net = SequenceQNet(meta.obs_dim, meta.n_actions, tuple(meta.hidden), meta.head_hidden,
                           n_features=len(meta.feature_names), length=seq.length, width=seq.width, heads=seq.heads)
    else:
        net = q_network(meta.head, meta.obs_dim, meta.n_actions, tuple(meta.hidden), meta.head_hidden)
    net.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("net.")})
    net = net.to(device).eval()
    norm = NormStats(mean=tensors["norm.mean"].to(device), std=std.to(device))
    extra = meta.extra.model_dump(exclude_none=True)
    info = ModelMeta(
        obs_dim=meta.obs_dim, n_actions=meta.n_actions, hidden=tuple(meta.hidden), head_hidden=meta.head_hidden,
        feature_names=tuple(meta.feature_names), spec_version=meta.spec_version, env=dict(meta.env), extra=extra,
        verified=verified, head=meta.head,
    )
    return net, norm, info
