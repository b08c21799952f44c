"""Walk-forward folds as index ranges into the bar arrays (no data is ever copied).

A fold is ``FoldRange(fold, train_start, train_end, val_start, val_end)``, ends exclusive, indices
into the full arrays. Spans are bar counts (int) or durations ("90D", "12h", "30min"); duration
boundaries are found by binary search on the timestamps.

Layout of fold k (``purge`` and ``embargo`` are gaps, never used for training or validation)::

    expanding:  [origin ............ train_end) purge [val_start .. val_end) embargo | next val ...
    sliding:         [train_end - train .. train_end) purge [val_start .. val_end) ...

* ``train_end`` of fold 0 is ``origin + train``; each later fold moves it by ``step`` (default
  ``val``).
* ``val_start = max(train_end + purge, previous val_end + embargo)``: the purge gap (which keeps the
  forward-looking targets of training bars out of the validation period) is always respected, and
  validation windows never overlap.
* Folds stop when a validation window would run past the data.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Literal, Sequence

import numpy as np

from foxhunt.errors import FoxhuntError

_UNIT_NS = {
    "s": 1_000_000_000,
    "sec": 1_000_000_000,
    "min": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 86_400 * 1_000_000_000,
    "w": 7 * 86_400 * 1_000_000_000,
}
_SPAN_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)?\s*$")


class FoldError(FoxhuntError):
    """The walk-forward layout cannot be built (data too short, bad span)."""


@dataclass(frozen=True)
class FoldRange:
    """One walk-forward fold: index ranges ``[train_start, train_end)`` and ``[val_start, val_end)``."""

    fold: int
    train_start: int
    train_end: int
    val_start: int
    val_end: int

    @property
    def train_len(self) -> int:
        return self.train_end - self.train_start

    @property
    def val_len(self) -> int:
        return self.val_end - self.val_start

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def parse_span(span: int | str, *, allow_zero: bool = False) -> tuple[str, int]:
    """Parse a span into ``("bars", n)`` or ``("ns", nanoseconds)``.

    Ints and digit-only strings are bar counts; "90D", "12h", "30min", "45s", "2W" are durations
    (case-insensitive units; "m"/"M" are refused as ambiguous between minute and month).
    """
    low = 0 if allow_zero else 1
    if isinstance(span, bool):
        raise ValueError(f"span {span!r}: expected a bar count or a duration like '90D'")
    if isinstance(span, int):
        if span < low:
            raise ValueError(f"span {span}: a bar count must be >= {low}")
        return ("bars", span)
    m = _SPAN_RE.match(str(span))
    if not m:
        raise ValueError(f"span {span!r}: expected a bar count or a duration like '90D', '12h', '30min'")
    number, unit = m.group(1), m.group(2)
    if unit is None or unit.lower() in ("bar", "bars"):
        if "." in number:
            raise ValueError(f"span {span!r}: a bar count must be a whole number")
        return parse_span(int(number), allow_zero=allow_zero)
    key = unit.lower()
    if key in ("m",):
        raise ValueError(f"span {span!r}: 'm' is ambiguous; write 'min' for minutes")
    if key not in _UNIT_NS:
        raise ValueError(f"span {span!r}: unknown unit '{unit}' (use s, min, h, D, W)")
    ns = int(round(float(number) * _UNIT_NS[key]))
    if ns < low:
        raise ValueError(f"span {span!r}: duration must be > 0")
    return ("ns", ns)


class _Axis:
    """Moves along the bar axis by bar counts or durations (binary search on timestamps)."""

    def __init__(self, timestamps: np.ndarray) -> None:
        self.ts = timestamps
        self.n = int(timestamps.shape[0])

    def forward(self, idx: int, span: tuple[str, int]) -> int:
        """First index at or after ``idx + span``; may return ``n`` or more (past the end)."""
        kind, amount = span
        if kind == "bars":
            return idx + amount
        if idx >= self.n:
            return self.n + 1
        target = int(self.ts[idx]) + amount
        return int(np.searchsorted(self.ts, target, side="left"))

    def backward(self, idx: int, span: tuple[str, int]) -> int:
        """Index of the first bar within ``span`` before ``idx`` (exclusive end ``idx``)."""
        kind, amount = span
        if kind == "bars":
            return idx - amount
        # The window [start, idx) covers bars with timestamp > ts[idx-1] - amount.
        target = int(self.ts[idx - 1]) - amount
        return int(np.searchsorted(self.ts, target, side="right"))


def walk_forward(
    timestamps: np.ndarray,
    train: int | str,
    val: int | str,
    step: int | str | None = None,
    mode: Literal["expanding", "sliding"] = "expanding",
    purge: int | str = 0,
    embargo: int | str = 0,
    *,
    origin: int = 0,
    max_folds: int | None = None,
) -> list[FoldRange]:
    """Walk-forward folds over ``timestamps`` ([T] int64, strictly increasing).

    origin: first usable bar (e.g. the end of the feature warm-up).
    max_folds: keep only the last K folds (the most recent data).
    Raises FoldError when not even one fold fits.
    """
    if mode not in ("expanding", "sliding"):
        raise FoldError(f"fold mode {mode!r}: expected 'expanding' or 'sliding'")
    ts = np.asarray(timestamps)
    try:
        train_s = parse_span(train)
        val_s = parse_span(val)
        step_s = parse_span(step) if step is not None else None
        purge_s = parse_span(purge, allow_zero=True)
        embargo_s = parse_span(embargo, allow_zero=True)
    except ValueError as exc:
        raise FoldError(str(exc)) from None
    axis = _Axis(ts)
    n = axis.n
    folds: list[FoldRange] = []
    train_end = axis.forward(origin, train_s)
    prev_val_end: int | None = None
    while train_end < n:
        val_start = axis.forward(train_end, purge_s) if train_end < n else n
        if prev_val_end is not None:
            val_start = max(val_start, axis.forward(prev_val_end, embargo_s) if prev_val_end < n else n)
        if val_start >= n:
            break
        val_end = axis.forward(val_start, val_s)
        if val_end > n:
            break
        train_start = origin if mode == "expanding" else max(origin, axis.backward(train_end, train_s))
        if train_end - train_start >= 1 and val_end - val_start >= 1:
            folds.append(FoldRange(len(folds), train_start, train_end, val_start, val_end))
        prev_val_end = val_end
        nxt = axis.forward(train_end, step_s) if step_s is not None else train_end + (val_end - val_start)
        if nxt <= train_end:  # a duration step shorter than one bar still moves on
            nxt = train_end + 1
        train_end = nxt
    if not folds:
        raise FoldError(
            f"no walk-forward fold fits in {n - origin} usable bars "
            f"(train={train!r}, val={val!r}, purge={purge!r}); use shorter spans or more data"
        )
    if max_folds is not None and len(folds) > max_folds:
        folds = [
            FoldRange(i, f.train_start, f.train_end, f.val_start, f.val_end)
            for i, f in enumerate(folds[-max_folds:])
        ]
    return folds


def folds_from_config(timestamps: np.ndarray, cfg: "object", origin: int = 0) -> list[FoldRange]:
    """walk_forward with the fields of a ``FoldConfig``."""
    return walk_forward(
        timestamps,
        cfg.train,
        cfg.val,
        cfg.step,
        cfg.mode,
        cfg.purge,
        cfg.embargo,
        origin=origin,
        max_folds=cfg.max_folds,
    )


def folds_to_json(folds: Sequence[FoldRange], timestamps: np.ndarray | None = None) -> str:
    """JSON list of folds; with timestamps, each boundary also as an ISO-8601 UTC time."""
    rows = []
    for f in folds:
        row: dict[str, object] = f.to_dict()
        if timestamps is not None:
            for key in ("train_start", "train_end", "val_start", "val_end"):
                idx = min(getattr(f, key), len(timestamps) - 1) if key.endswith("end") else getattr(f, key)
                stamp = np.datetime64(int(timestamps[idx]), "ns")
                row[f"{key}_time"] = str(stamp) + "Z"
        rows.append(row)
    return json.dumps(rows, indent=2)
