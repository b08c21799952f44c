"""The bar validation rules, vectorised, and the explicit ``repair`` mode.

The loader (``loader.py``) turns a file into :class:`RawColumns`: parsed arrays plus per-cell flags
(timestamp unparseable, cell not a number) and a way to fetch the original cell text for messages.
:func:`check` applies every row rule at once with numpy and either raises a :class:`BarDataError`
for the first offending row in file order, or (``repair=True``) drops the offending rows, sorts by
time, drops duplicate timestamps and logs what it did.

Rule ids (stable; tests and messages use them):

file level (``repair`` cannot fix them): ``empty-file``, ``missing-column``, ``ambiguous-column``
(two columns map to the same field, e.g. ``Date`` and ``timestamp``), ``unreadable``,
``unsupported-format``, ``mixed-timezones``, ``bad-column-type`` (a Parquet column whose type cannot
hold the field, e.g. ``list<double>`` prices), ``ambiguous-dates`` (day/month or month/day, and no
day above 12 settles it: ``data.dayfirst``), ``ambiguous-epoch`` (epoch numbers no unit puts in
1971..2200: ``data.timestamp_unit``), ``bad-timestamp-format`` (pandas refuses
``data.timestamp_format``).

An adjusted close column (``adj_close``, read with ``data.adjust``) is checked like a price (a
number, finite, > 0); the bars' open, high, low and close are then scaled by adj_close / close, row
by row (one positive factor per row keeps every price rule true).

row level, in the order they are checked within one row (so a row breaking several rules reports
the first of them): ``bad-timestamp``, ``non-numeric``, ``not-finite``, ``price-not-positive``,
``negative-volume``, ``high-below-low``, ``high-below-open-close``, ``low-above-open-close``,
``duplicate-timestamp``, ``non-increasing-timestamp``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from foxhunt.data.bars import PRICE_COLUMNS, BarDataError, Bars

log = logging.getLogger("foxhunt.data")

VALUE_COLUMNS = PRICE_COLUMNS + ("volume",)
FILE_RULES = ("empty-file", "missing-column", "ambiguous-column", "unreadable", "unsupported-format", "mixed-timezones",
              "bad-column-type", "ambiguous-dates", "ambiguous-epoch", "bad-timestamp-format")
ADJ_CLOSE = "adj_close"
CELL_RULES = (
    "bad-timestamp",
    "non-numeric",
    "not-finite",
    "price-not-positive",
    "negative-volume",
    "high-below-low",
    "high-below-open-close",
    "low-above-open-close",
)
ORDER_RULES = ("duplicate-timestamp", "non-increasing-timestamp")
ROW_RULES = CELL_RULES + ORDER_RULES


@dataclass
class RawColumns:
    """A bar table as read from a file, before any rule is applied.

    timestamps: [T] int64 UTC ns; meaningless where ``ts_ok`` is False.
    ts_ok: [T] bool, the timestamp cell parsed.
    values: canonical name ("open".."volume", "adj_close") -> [T] float64; NaN where the cell was
        empty, NA or not a number. "volume" is absent when the file has no volume column,
        "adj_close" unless the prices are to be adjusted by it.
    non_numeric: canonical name -> [T] bool, the cell held text that is not a number.
    names: canonical name (incl. "timestamp") -> the column's name in the file, for messages.
    cell_text: (canonical name, 0-based row) -> the cell as text, or None when it was empty.
    notes: what was inferred to read the file, in words (``Bars.notes``).
    ts_hint: appended to a bad-timestamp row's message (the option that would read it).
    """

    path: str
    timestamps: np.ndarray
    ts_ok: np.ndarray
    values: dict[str, np.ndarray]
    non_numeric: dict[str, np.ndarray]
    names: dict[str, str]
    cell_text: Callable[[str, int], str | None]
    source: str = ""
    notes: tuple[str, ...] = ()
    ts_hint: str = ""

    @property
    def has_volume(self) -> bool:
        return "volume" in self.values

    def __len__(self) -> int:
        return int(self.timestamps.shape[0])


def iso_ns(ns: int) -> str:
    """An int64 UTC-ns timestamp as ISO-8601 text with 'Z' (for messages)."""
    ns = int(ns)
    return np.datetime_as_string(np.datetime64(ns, "ns"), unit="s" if ns % 1_000_000_000 == 0 else "ns") + "Z"


# --------------------------------------------------------------------------- row rules
@dataclass
class _Problem:
    """One rule over all rows: ``mask[i]`` is True where row i breaks it; ``column[i]`` names the column."""

    rule: str
    mask: np.ndarray
    column: np.ndarray | str  # a canonical name, or [T] object array of names where it varies by row
    other_row: np.ndarray | None = None  # for ordering rules: the 0-based row it was compared with


def _first_bad_column(masks: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OR of per-column masks and, per row, the name of the first offending column (in column order)."""
    names = list(masks)
    stacked = np.stack([masks[n] for n in names])  # [C, T]
    anyb = stacked.any(axis=0)
    first = np.asarray(names, dtype=object)[stacked.argmax(axis=0)]
    return anyb, first


def _cell_problems(raw: RawColumns) -> list[_Problem]:
    """The rules that look at one row alone, in priority order; all vectorised over rows."""
    cols = [c for c in (*VALUE_COLUMNS, ADJ_CLOSE) if c in raw.values]
    prices = [c for c in (*PRICE_COLUMNS, ADJ_CLOSE) if c in raw.values]
    v = raw.values
    out = [_Problem("bad-timestamp", ~raw.ts_ok, "timestamp")]
    nn = {c: raw.non_numeric[c] for c in cols}
    out.append(_Problem("non-numeric", *_first_bad_column(nn)))
    # An empty or non-numeric cell is NaN too; non-numeric was reported first, so mask it out here.
    with np.errstate(invalid="ignore"):
        nf = {c: ~np.isfinite(v[c]) & ~nn[c] for c in cols}
        out.append(_Problem("not-finite", *_first_bad_column(nf)))
        # NaN compares False everywhere below, so a NaN row is never double-reported by these.
        out.append(_Problem("price-not-positive", *_first_bad_column({c: v[c] <= 0 for c in prices})))
        if "volume" in cols:
            out.append(_Problem("negative-volume", v["volume"] < 0, "volume"))
        o, h, lo, c = v["open"], v["high"], v["low"], v["close"]
        out.append(_Problem("high-below-low", h < lo, "high"))
        out.append(_Problem("high-below-open-close", h < np.maximum(o, c), "high"))
        out.append(_Problem("low-above-open-close", lo > np.minimum(o, c), "low"))
    return out


def _order_problems(ts: np.ndarray, keep: np.ndarray) -> list[_Problem]:
    """Duplicate and decreasing timestamps among the rows in ``keep``, each compared with the
    previous kept row. Before the first violation the kept rows increase strictly, so comparing
    neighbours finds the first offending row exactly (the maximum so far is the previous row)."""
    n = ts.shape[0]
    idx = np.flatnonzero(keep)
    # Neighbours are compared, never subtracted: np.diff of int64 ns overflows (9e18 then -9e18
    # would give a positive difference and pass as increasing).
    kept = ts[idx]
    later, earlier = kept[1:], kept[:-1]
    prev = np.full(n, -1, dtype=np.int64)
    prev[idx[1:]] = idx[:-1]
    dup = np.zeros(n, dtype=bool)
    dec = np.zeros(n, dtype=bool)
    dup[idx[1:][later == earlier]] = True
    dec[idx[1:][later < earlier]] = True
    return [
        _Problem("duplicate-timestamp", dup, "timestamp", prev),
        _Problem("non-increasing-timestamp", dec, "timestamp", prev),
    ]


def _raise_first(raw: RawColumns, problems: list[_Problem]) -> None:
    """Raise for the first offending row in file order (ties in a row: the first rule in the list)."""
    firsts = [int(p.mask.argmax()) if p.mask.any() else len(raw) for p in problems]
    row = min(firsts)
    if row >= len(raw):
        return
    p = problems[firsts.index(row)]
    col = p.column if isinstance(p.column, str) else str(p.column[row])
    raise _row_error(raw, p, row, col)


def _fmt(x: float) -> str:
    return repr(float(x))


def _row_error(raw: RawColumns, p: _Problem, row: int, col: str) -> BarDataError:
    """The error for rule ``p`` at 0-based ``row``; the message shows the offending values."""
    ts_text = raw.cell_text("timestamp", row)
    v = {c: raw.values[c][row] for c in raw.values}
    rule = p.rule
    if rule == "bad-timestamp":
        detail = "empty timestamp cell" if ts_text is None else f"cannot parse {ts_text!r} as a timestamp{raw.ts_hint}"
    elif rule == "non-numeric":
        detail = f"{raw.cell_text(col, row)!r} is not a number"
    elif rule == "not-finite":
        text = raw.cell_text(col, row)
        detail = "empty cell" if text is None else f"{text!r} is not a finite number"
    elif rule == "price-not-positive":
        detail = f"{col} = {_fmt(v[col])}; prices must be > 0"
    elif rule == "negative-volume":
        detail = f"volume = {_fmt(v['volume'])}; volume must be >= 0"
    elif rule == "high-below-low":
        detail = f"high {_fmt(v['high'])} < low {_fmt(v['low'])}"
    elif rule == "high-below-open-close":
        detail = f"high {_fmt(v['high'])} < max(open {_fmt(v['open'])}, close {_fmt(v['close'])})"
    elif rule == "low-above-open-close":
        detail = f"low {_fmt(v['low'])} > min(open {_fmt(v['open'])}, close {_fmt(v['close'])})"
    else:
        assert p.other_row is not None
        other = int(p.other_row[row])
        other_text = raw.cell_text("timestamp", other)
        if rule == "duplicate-timestamp":
            detail = f"same timestamp as row {other + 1}"
        else:
            detail = f"earlier than row {other + 1} ({other_text}); timestamps must increase"
    return BarDataError(rule, detail, path=raw.path, row=row + 1, timestamp=ts_text, column=raw.names.get(col, col))


# --------------------------------------------------------------------------- entry points
def check(raw: RawColumns, *, repair: bool = False) -> Bars:
    """Apply every row rule to ``raw`` and return the bars, or raise.

    repair=False: raise a BarDataError for the first offending row in file order.
    repair=True: drop rows that break a cell rule, sort by timestamp (stable), drop duplicate
        timestamps keeping the first in file order, and log counts per rule on ``foxhunt.data``.
        Raises ``empty-file`` when no row is left.
    """
    n = len(raw)
    if n == 0:
        raise BarDataError("empty-file", "no data rows", path=raw.path)
    cells = _cell_problems(raw)
    if not repair:
        # Ordering is judged among rows whose timestamp parsed; a bad cell earlier still wins.
        _raise_first(raw, cells + _order_problems(raw.timestamps, raw.ts_ok))
        return _to_bars(raw, None)
    return _to_bars(raw, _repair(raw, cells))


def _repair(raw: RawColumns, cells: list[_Problem]) -> np.ndarray:
    """The 0-based rows to keep, in output (time) order; logs what was dropped and why."""
    n = len(raw)
    keep = np.ones(n, dtype=bool)
    counts: dict[str, int] = {}
    for p in cells:  # each dropped row is counted under the first rule it breaks
        hit = p.mask & keep
        if hit.any():
            counts[p.rule] = int(hit.sum())
            keep &= ~p.mask
    idx = np.flatnonzero(keep)
    ts = raw.timestamps[idx]
    unsorted = int((ts[1:] < ts[:-1]).sum())  # compared, not subtracted (int64 overflow)
    order = np.argsort(ts, kind="stable")  # stable: among equal timestamps the first in file order stays first
    ts_sorted = ts[order]
    dup = np.zeros(ts_sorted.shape[0], dtype=bool)
    dup[1:] = ts_sorted[1:] == ts_sorted[:-1]
    if dup.any():
        counts["duplicate-timestamp"] = int(dup.sum())
    order = order[~dup]
    n_left = int(order.shape[0])
    why = ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"
    if n_left == 0:
        raise BarDataError("empty-file", f"repair dropped all {n} rows ({why})", path=raw.path)
    if counts or unsorted:
        log.warning(
            "repair %s: dropped %d of %d rows (%s); sorted %d rows that were out of time order",
            raw.path, n - n_left, n, why, unsorted,
        )
    else:
        log.info("repair %s: nothing to repair (%d rows)", raw.path, n)
    return idx[order]


def _to_bars(raw: RawColumns, rows: np.ndarray | None) -> Bars:
    """Bars from the kept rows (``rows``: explicit row indices in output order, or all rows)."""

    def take(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a if rows is None else a[rows])

    if raw.has_volume:
        volume = take(raw.values["volume"]).astype(np.float64, copy=False)
    else:
        volume = np.ones(len(raw) if rows is None else rows.shape[0], dtype=np.float64)
    prices = {c: take(raw.values[c]) for c in PRICE_COLUMNS}
    if ADJ_CLOSE in raw.values:  # data.adjust: splits and dividends, as the adjusted close has them
        factor = take(raw.values[ADJ_CLOSE]) / prices["close"]
        prices = {c: np.ascontiguousarray(p * factor) for c, p in prices.items()}
    return Bars(
        timestamps=take(raw.timestamps).astype(np.int64, copy=False),
        **prices,
        volume=volume,
        has_volume=raw.has_volume,
        source=raw.source or raw.path,
        notes=raw.notes,
    )


def validate_bars(bars: Bars, *, path: str | None = None) -> None:
    """Check in-memory bars against every row rule; raise BarDataError for the first bad row.

    Used for generated data and before writing. ``path`` only labels the message.
    """
    n = len(bars)
    label = path or bars.source
    if n == 0:
        raise BarDataError("empty-file", "no bars", path=label)
    values = {c: np.asarray(getattr(bars, c), dtype=np.float64) for c in VALUE_COLUMNS}
    if not bars.has_volume:
        values.pop("volume")
    ts = np.asarray(bars.timestamps)
    if ts.dtype != np.int64:
        raise BarDataError("bad-timestamp", f"timestamps must be int64 UTC ns, got {ts.dtype}", path=label, row=1)

    def cell_text(col: str, row: int) -> str | None:
        return iso_ns(ts[row]) if col == "timestamp" else repr(float(values[col][row]))

    raw = RawColumns(
        path=label,
        timestamps=ts,
        ts_ok=np.ones(n, dtype=bool),
        values=values,
        non_numeric={c: np.zeros(n, dtype=bool) for c in values},
        names={},
        cell_text=cell_text,
    )
    _raise_first(raw, _cell_problems(raw) + _order_problems(ts, raw.ts_ok))
