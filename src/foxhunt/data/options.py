"""How to read a user's file, from the ``[data]`` section: ``load_bars``' keyword arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from foxhunt.config import DataConfig


def file_options(cfg: "DataConfig") -> dict[str, object]:
    """``load_bars``' keyword arguments from a data config: repair and how to read the file."""
    return {"repair": cfg.repair, "timestamp_format": cfg.timestamp_format, "dayfirst": cfg.dayfirst,
            "timestamp_unit": cfg.timestamp_unit, "adjust": cfg.adjust}
