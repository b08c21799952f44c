"""Trained models as one safetensors file: weights, normalisation statistics and metadata.

A model file is what ``foxhunt backtest --model`` reads: the Q-network's weights
(``net.<param>``), the normalisation statistics of the fold it was trained on (``norm.mean``,
``norm.std``, float64 [F]: a model must see new data normalised exactly as in training, never with
the new data's own statistics), and JSON metadata in the safetensors header (architecture, feature
names and spec version, env parameters, data hash, fold). Written to a temporary name and renamed;
read with ``safetensors`` only (nothing is ever unpickled).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from foxhunt.agents.networks import DuelingQNet
from foxhunt.errors import CacheError
from foxhunt.market import NormStats

FORMAT = "foxhunt-model/1"


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


def save_model(path: str | os.PathLike[str], net: DuelingQNet, norm: NormStats, *, feature_names: tuple[str, ...],
               spec_version: str, env: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write ``net`` + ``norm`` + metadata to ``path`` atomically."""
    path = Path(path)
    hidden = tuple(m.out_features for m in net.trunk if isinstance(m, torch.nn.Linear))
    meta = {
        "format": FORMAT, "obs_dim": net.obs_dim, "n_actions": net.n_actions, "hidden": list(hidden),
        "head_hidden": net.value[0].out_features, "feature_names": list(feature_names),
        "spec_version": spec_version, "env": env, "extra": extra or {},
    }
    tensors = {f"net.{k}": v.detach().to("cpu", torch.float32).contiguous() for k, v in net.state_dict().items()}
    tensors["norm.mean"] = norm.mean.detach().to("cpu", torch.float64).contiguous()
    tensors["norm.std"] = norm.std.detach().to("cpu", torch.float64).contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"foxhunt": json.dumps(meta)})
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_model(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> tuple[DuelingQNet, NormStats, ModelMeta]:
    """Read a model file; a missing, foreign or damaged file is a CacheError naming it."""
    path = Path(path)
    if not path.is_file():
        raise CacheError(f"model file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as fh:
            header = fh.metadata() or {}
        tensors = load_file(str(path))
        meta = json.loads(header["foxhunt"])
    except (SafetensorError, KeyError, ValueError, OSError) as exc:
        raise CacheError(f"model file {path} is not a foxhunt model ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != FORMAT:
        raise CacheError(f"model file {path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    net = DuelingQNet(int(meta["obs_dim"]), int(meta["n_actions"]), tuple(meta["hidden"]), int(meta["head_hidden"]))
    state = {k[4:]: v for k, v in tensors.items() if k.startswith("net.")}
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        raise CacheError(f"model file {path}: weights do not match the architecture ({exc})") from None
    net = net.to(device).eval()
    norm = NormStats(mean=tensors["norm.mean"].to(device), std=tensors["norm.std"].to(device))
    info = ModelMeta(
        obs_dim=int(meta["obs_dim"]), n_actions=int(meta["n_actions"]), hidden=tuple(meta["hidden"]),
        head_hidden=int(meta["head_hidden"]), feature_names=tuple(meta["feature_names"]),
        spec_version=str(meta["spec_version"]), env=dict(meta["env"]), extra=dict(meta["extra"]),
    )
    return net, norm, info
