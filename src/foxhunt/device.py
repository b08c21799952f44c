"""Device selection shared by every command."""

from __future__ import annotations

import torch

from foxhunt.errors import ConfigError


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' → CUDA when available, else CPU; 'cuda' without a GPU is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested but no CUDA device is available (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"device {name!r}: expected auto, cpu or cuda")
    return torch.device(name)
