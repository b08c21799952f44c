"""Folds that fit the data: the layout a run takes when the configured fold spans do not fit.

The rule (``auto_spans``): **five expanding folds whose validation windows tile the later half of
the usable bars** (those after the feature warm-up). With U usable bars, the purge p and the
embargo e of the configuration (in bars)::

    val   = floor(U / 10)                        each fold's validation window
    train = U - 5 val - p - 4 e                  fold 0's training window (fold k's: + k val)

so fold 0 trains on about the first half, the five validation windows follow one another to the
last bar, and ``folds.max_folds`` then keeps the last K as always. A layout needs val >= 2 and
train >= 1; below that (a few dozen usable bars) no fold fits and the error stays.

When it applies (``fit_folds``): only when the user set none of the span keys (``SPAN_KEYS``),
neither in a ``--config`` file nor with ``--set`` (``spans_set``): then where the configured spans
do not fit, and with ``foxhunt train --data FILE`` without ``--config`` always (the built-in
spans are sized for the built-in market). A run whose spans the user set and which do not fit
fails, and the error names the ``--set`` options that lay out the rule's folds instead. The layout
becomes the run's configuration (``folds.train``, ``folds.val`` …), so its config.toml,
``--resume`` and a rerun from that file all see the same folds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from foxhunt.config import Config, apply_overrides, read_config_file
from foxhunt.folds import FoldError, FoldRange, folds_from_config, parse_span

AUTO_FOLDS = 5
SPAN_KEYS = ("train", "val", "step", "purge", "embargo")


def spans_set(config_path: str | Path | None, overrides: Sequence[str] = ()) -> list[str]:
    """The ``[folds]`` span keys the user set: in the ``--config`` file or in ``--set`` overrides
    (a file that is not TOML text is the config loader's one-line error)."""
    data: dict[str, Any] = {}
    if config_path is not None:
        data = read_config_file(config_path)
    apply_overrides(data, list(overrides))
    folds = data.get("folds")
    return [k for k in SPAN_KEYS if isinstance(folds, dict) and k in folds]


def _bars(span: int | str, timestamps: np.ndarray) -> int:
    """A span in bars: a bar count as is, a duration by the median bar spacing (rounded up)."""
    kind, amount = parse_span(span, allow_zero=True)
    if kind == "bars":
        return amount
    gap = float(np.median(np.diff(timestamps[: min(len(timestamps), 10_001)]).astype(np.float64))) if len(timestamps) > 1 else 1.0
    return int(np.ceil(amount / max(gap, 1.0)))


def auto_spans(usable: int, purge: int, embargo: int = 0, k: int = AUTO_FOLDS) -> tuple[int, int] | None:
    """(train, val) in bars of the rule's layout (module docstring), or None when it does not fit."""
    val = usable // (2 * k)
    train = usable - k * val - purge - (k - 1) * embargo
    return (train, val) if val >= 2 and train >= 1 else None


def _layout_values(cfg: Config, timestamps: np.ndarray, origin: int) -> dict[str, Any] | None:
    purge = _bars(cfg.folds.purge, timestamps)
    embargo = _bars(cfg.folds.embargo, timestamps)
    spans = auto_spans(len(timestamps) - origin, purge, embargo)
    if spans is None:
        return None
    return {"train": spans[0], "val": spans[1], "step": None, "purge": purge, "embargo": embargo, "mode": "expanding"}


LAYOUTS = ("config", "fit", "data")


def fit_folds(cfg: Config, timestamps: np.ndarray, origin: int, *, layout: str = "config") -> tuple[Config, list[FoldRange], str | None]:
    """The folds over ``timestamps`` (origin: the first usable bar) as ``layout`` says:

    * ``config``: the configuration's spans; where they do not fit, the FoldError names the
      ``--set`` options that lay out the rule's folds (the user set a span);
    * ``fit``: the configuration's spans, or the rule's where they do not fit (no span set);
    * ``data``: the rule's (``foxhunt train --data FILE`` without ``--config`` or a span: the
      built-in spans are sized for the built-in market, not the file); the configuration's where
      the rule's do not fit.

    Returns (config, folds, the note for the data line or None); the config holds the folds laid
    out. Raises FoldError where nothing fits."""
    values = _layout_values(cfg, timestamps, origin)
    if layout == "data" and values is not None:
        return _laid_out(cfg, values, timestamps, origin, "no fold span set for this file")
    try:
        return cfg, folds_from_config(timestamps, cfg.folds, origin=origin), None
    except FoldError as exc:
        if values is None:
            raise
        if layout == "config":
            sets = f"--set folds.train={values['train']} --set folds.val={values['val']}"
            if _bars(cfg.folds.purge, timestamps) != cfg.folds.purge:
                sets += f" --set folds.purge={values['purge']}"
            raise FoldError(f"{exc}; e.g. {sets} fits ({AUTO_FOLDS} expanding folds over the later half of the data)") from None
    why = f"the configured train={cfg.folds.train!r}, val={cfg.folds.val!r} do not fit {len(timestamps) - origin:,} usable bars"
    return _laid_out(cfg, values, timestamps, origin, why)


def _laid_out(cfg: Config, values: dict[str, Any], timestamps: np.ndarray, origin: int,
              why: str) -> tuple[Config, list[FoldRange], str]:
    fitted = cfg.replace(folds=values)
    folds = folds_from_config(timestamps, fitted.folds, origin=origin)
    note = (f"laid out by the data ({why}): {AUTO_FOLDS} expanding folds over the later half, train from "
            f"{values['train']:,} bars, val {values['val']:,} each, purge {values['purge']} "
            f"(folds.train = {values['train']}, folds.val = {values['val']})")
    return fitted, folds, note
