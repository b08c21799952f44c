"""The in-memory bar table and the error raised for bad bar data.

``Bars`` is columnar numpy: one array per column, all of length T, in time order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from foxhunt.errors import FoxhuntError

PRICE_COLUMNS = ("open", "high", "low", "close")


class BarDataError(FoxhuntError):
    """Bad bar data. The message names the file, row (1-based data row), timestamp, column and rule.

    Attributes mirror the message so that tests and callers can check them without parsing text.
    """

    def __init__(
        self,
        rule: str,
        detail: str = "",
        *,
        path: str | None = None,
        row: int | None = None,
        timestamp: str | None = None,
        column: str | None = None,
    ) -> None:
        self.rule = rule
        self.detail = detail
        self.path = path
        self.row = row
        self.timestamp = timestamp
        self.column = column
        super().__init__(self._message())

    def _message(self) -> str:
        where = [f"file {self.path}" if self.path else None]
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.timestamp is not None:
            where.append(f"timestamp {self.timestamp}")
        if self.column is not None:
            where.append(f"column '{self.column}'")
        head = ", ".join(w for w in where if w)
        tail = f": {self.detail}" if self.detail else ""
        return f"{head}: rule '{self.rule}' broken{tail}" if head else f"rule '{self.rule}' broken{tail}"


@dataclass(frozen=True)
class Bars:
    """OHLCV bars, columnar and time-ordered.

    timestamps: [T] int64, UTC nanoseconds since the epoch, strictly increasing.
    open, high, low, close: [T] float64, prices (> 0).
    volume: [T] float64 (>= 0); all NaN-free. When the source had no volume column, ``has_volume``
        is False and ``volume`` holds ones (so that volume-based features degrade to constants).
    source: where the bars came from (a path or a generator description), for messages and hashes.
    notes: what the loader inferred to read the file, in words (a layout, an epoch unit, joined
        Date + Time columns, an ignored Adj Close ...); not part of ``content_hash``.
    """

    timestamps: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    has_volume: bool = True
    source: str = "<memory>"
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.timestamps.shape[0])

    def slice(self, start: int, stop: int) -> "Bars":
        """Bars[start:stop] as views (no copy)."""
        return dataclasses.replace(
            self,
            timestamps=self.timestamps[start:stop],
            open=self.open[start:stop],
            high=self.high[start:stop],
            low=self.low[start:stop],
            close=self.close[start:stop],
            volume=self.volume[start:stop],
        )

    def median_bar_seconds(self) -> float:
        """Median spacing between bars in seconds (86400 for daily bars); 0 for fewer than 2 bars."""
        if len(self) < 2:
            return 0.0
        # Increasing int64 ns: the wrapped int64 difference read as uint64 is exact even where the
        # true gap exceeds int64 (bars spanning 1677..2262); a plain np.diff would turn negative.
        gaps = np.diff(np.asarray(self.timestamps, dtype=np.int64)).view(np.uint64)
        return float(np.median(gaps)) / 1e9

    def is_intraday(self) -> bool:
        """True when bars are closer together than 20 hours (time-of-day features apply)."""
        return 0.0 < self.median_bar_seconds() < 20 * 3600

    def content_hash(self) -> str:
        """sha256 over the column bytes: identifies the bar content independent of file format."""
        import hashlib

        h = hashlib.sha256()
        # Fixed little-endian dtypes: the hash names the values, whatever dtype / byte order /
        # memory layout a loader produced (it decides feature-cache hits and --resume's data check).
        h.update(np.ascontiguousarray(self.timestamps, dtype="<i8").tobytes())
        for arr in (self.open, self.high, self.low, self.close, self.volume):
            h.update(np.ascontiguousarray(arr, dtype="<f8").tobytes())
        h.update(b"vol" if self.has_volume else b"novol")
        return h.hexdigest()
