"""Which column of a bar file is which, as common tools name them; files without a header.

Names are compared with case, spaces, punctuation and MetaTrader's angle brackets removed
(``" Adj Close"``, ``adj_close`` and ``<ADJCLOSE>`` are one name):

* timestamp: ``timestamp``, ``datetime``, ``open_time`` (Binance), ``gmt time`` (Dukascopy), or
  ``date`` or ``time`` alone; ``date`` + ``time`` (MetaTrader, Stooq) are joined as "DATE TIME";
  without any of them, a first column with an empty or index-like name (``''``, ``Unnamed: 0``,
  ``index``: pandas' ``df.to_csv()``), or pandas' ``__index_level_0__`` column in Parquet, is the
  timestamp;
* ``open``, ``high``, ``low``, ``close``; volume: ``volume``, else ``vol``, else ``tickvol`` /
  ``tick_volume`` (the first of them that is not all zero, MetaTrader's real volume of FX often is);
* ``adj close`` / ``adjusted close``: with ``data.adjust`` it scales the prices (``validate.py``),
  otherwise it is ignored and a note says so. Every other column is ignored.

A first line with no letter in it is data, not a header: 5 or 6 fields read as timestamp, open,
high, low, close[, volume] (CCXT), 7 with a time of day second as date, time, open, high, low,
close, volume (MetaTrader 4), 12 as Binance's kline columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from foxhunt.data.bars import BarDataError

_CANON = {
    "timestamp": "timestamp", "datetime": "timestamp", "opentime": "timestamp", "gmttime": "timestamp",
    "date": "date", "time": "time",
    "open": "open", "high": "high", "low": "low", "close": "close",
    "volume": "volume", "vol": "volume", "tickvol": "volume", "tickvolume": "volume",
    "adjclose": "adj_close", "adjustedclose": "adj_close",
}  # fmt: skip
_VOLUME_RANK = {"volume": 0, "vol": 1, "tickvol": 2, "tickvolume": 2}
INDEX_NAMES = ("", "unnamed0", "index", "indexlevel0")
PARQUET_INDEX = "__index_level_0__"  # pandas' name for an unnamed index in Parquet (the last column)
_REQUIRED = ("open", "high", "low", "close")
_ACCEPTED = {
    "timestamp": "timestamp, datetime, date, time, open_time, gmt time, date + time, or an unnamed first column",
    "open": "open", "high": "high", "low": "low", "close": "close",
}
HEADERLESS = {
    5: ("timestamp", "open", "high", "low", "close"),
    6: ("timestamp", "open", "high", "low", "close", "volume"),
    7: ("date", "time", "open", "high", "low", "close", "volume"),
    12: ("open_time", "open", "high", "low", "close", "volume", "close_time", "quote_volume", "count",
         "taker_buy_volume", "taker_buy_quote_volume", "ignore"),
}
_HEADERLESS_NAME = {5: "timestamp, open, high, low, close", 6: "timestamp, open, high, low, close, volume (CCXT)",
                    7: "date, time, open, high, low, close, volume (MetaTrader)", 12: "Binance kline columns"}


def norm(name: object) -> str:
    """A column name compared: lower case, only letters and digits ("<TICKVOL>" -> "tickvol")."""
    return re.sub(r"[^0-9a-z]", "", str(name).strip().lstrip("\ufeff").lower())


@dataclass
class Layout:
    """Positions of the columns used. ``cols``: canonical name -> position ("timestamp" is the
    date column when ``time_col`` is set); ``volume``: the volume columns, preferred first."""

    header: list[str]
    cols: dict[str, int]
    time_col: int | None = None
    volume: list[int] = field(default_factory=list)
    index_col: bool = False
    notes: list[str] = field(default_factory=list)
    symbol: int | None = None  # the symbol column of a long table (foxhunt.data.long_table), when read

    def name(self, canon: str) -> str:
        """The column's name in the file (for messages); "Date + Time" for joined columns."""
        if canon == "timestamp" and self.time_col is not None:
            return f"{self.header[self.cols['timestamp']]} + {self.header[self.time_col]}"
        if canon == "volume":
            return self.header[self.volume[0]]
        return self.header[self.cols[canon]]


def headerless(first: list[str]) -> tuple[str, ...] | None:
    """The column names of a file whose first line is data (no letter in it), or None for a header.
    Raises missing-column for a data line whose field count is no known layout."""
    if any(re.search(r"[A-Za-z]", c) for c in first):
        return None
    cols = HEADERLESS.get(len(first))
    if cols is None or (len(first) == 7 and ":" not in first[1]):
        raise BarDataError("missing-column", f"the first line holds no column names and its {len(first)} fields are no known "
                           "layout (5, 6, 7 or 12 fields); add a header line: timestamp,open,high,low,close,volume",
                           column="timestamp")
    return cols


def headerless_note(n: int) -> str:
    return f"no header line: columns read as {_HEADERLESS_NAME[n]}"


def resolve(header: list[str], label: str, *, adjust: bool = False) -> Layout:
    """The layout of a file with these column names. Raises missing-column (a required column, or
    Adj Close with ``adjust``) and ambiguous-column (two columns for one field)."""
    found: dict[str, int] = {}
    volume: dict[int, int] = {}  # rank -> position
    for i, name in enumerate(header):
        key = norm(name)
        canon = _CANON.get(key)
        if canon is None:
            continue
        if canon == "volume":
            rank = _VOLUME_RANK[key]
            if rank in volume:
                _ambiguous(header, volume[rank], i, "volume", label)
            volume[rank] = i
            continue
        if canon in found:
            _ambiguous(header, found[canon], i, canon, label)
        found[canon] = i
    times = [c for c in ("timestamp", "date", "time") if c in found]
    layout = Layout(list(header), {}, volume=[volume[r] for r in sorted(volume)])
    if times == ["date", "time"]:
        layout.cols["timestamp"], layout.time_col = found["date"], found["time"]
        layout.notes.append(f"timestamps: columns '{header[found['date']]}' and '{header[found['time']]}' joined")
    elif len(times) > 1:
        a, b = sorted(found[t] for t in times)[:2]
        _ambiguous(header, a, b, "timestamp", label)
    elif times:
        layout.cols["timestamp"] = found[times[0]]
    elif header and (norm(header[0]) in INDEX_NAMES or PARQUET_INDEX in header):
        pos = 0 if norm(header[0]) in INDEX_NAMES else header.index(PARQUET_INDEX)
        layout.cols["timestamp"], layout.index_col = pos, True
        layout.notes.append(f"timestamps: the {'first ' if pos == 0 else ''}column {header[pos]!r} (an index, as pandas writes it)")
    for canon in ("timestamp", *_REQUIRED):
        if canon not in layout.cols and canon not in found:
            raise BarDataError("missing-column", f"no {canon} column (accepted names, any case: {_ACCEPTED[canon]}); "
                               f"the file has {list(header)}", path=label, column=canon)
    layout.cols.update({c: found[c] for c in _REQUIRED})
    if "adj_close" in found:
        if adjust:
            layout.cols["adj_close"] = found["adj_close"]
            layout.notes.append(f"prices adjusted by '{header[found['adj_close']]}' / '{header[found['close']]}' (data.adjust = true)")
        else:
            layout.notes.append(f"'{header[found['adj_close']]}' ignored (data.adjust = true scales open, high, low and close by "
                                "it / close)")
    elif adjust:
        raise BarDataError("missing-column", f"data.adjust = true needs an adjusted close column ('Adj Close'); the file has "
                           f"{list(header)}; set data.adjust = false", path=label, column="Adj Close")
    return layout


SYMBOL_NAMES = ("symbol", "ticker", "tic", "instrument")
"""The names of a long table's symbol column (compared as ``norm`` does), unless ``data.symbol_column``."""


def symbol_column(header: list[str], label: str, wanted: str | None = None) -> int | None:
    """The position of the symbol column: ``wanted`` (``data.symbol_column``; missing-column when the
    file has no such column), else the one of ``SYMBOL_NAMES`` in the header (None: none;
    ambiguous-column: two)."""
    if wanted is not None:
        hits = [i for i, name in enumerate(header) if norm(name) == norm(wanted)]
        if not hits:
            raise BarDataError("missing-column", f"no symbol column {wanted!r} (data.symbol_column); the file has {list(header)}",
                               path=label, column=wanted)
        return hits[0]
    hits = [i for i, name in enumerate(header) if norm(name) in SYMBOL_NAMES]
    if len(hits) > 1:
        _ambiguous(header, hits[0], hits[1], "symbol", label)
    return hits[0] if hits else None


def _ambiguous(header: list[str], first: int, second: int, canon: str, label: str) -> None:
    raise BarDataError("ambiguous-column", f"both '{header[first]}' and '{header[second]}' name the {canon} column",
                       path=label, column=str(header[second]))
