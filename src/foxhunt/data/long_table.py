"""A bar file read as a table of symbols: one long table with a symbol column, or one symbol.

A long table holds many instruments' bars in one file, told apart by a symbol column (FinRL's
``date, tic, open, high, low, close, volume``; any layout ``foxhunt.data.columns`` reads, plus a
column named ``symbol``, ``ticker``, ``tic`` or ``instrument`` in any case, or ``data.symbol_column``).
Rows of one symbol need not be adjacent (FinRL sorts by date, then ticker). Each symbol's rows go
through the single-file path on their own: timestamps parsed (``timestamps.py``), every row rule
checked (``validate.check``), ``repair`` applied. An error names the file and the row of the file
(not of the symbol's rows) and says which symbol it is.

A file without a symbol column is one symbol, read exactly as ``load_bars`` reads it (the same
functions on the same columns, the file read once).
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.columns import symbol_column
from foxhunt.data.loader import bars_of, read_file
from foxhunt.data.timestamps import TimeOptions

__all__ = ["load_table"]


def load_table(path: str | Path, *, symbol_col: str | None = None, repair: bool = False, timestamp_format: str | None = None,
               dayfirst: bool | None = None, timestamp_unit: str | None = None,
               adjust: bool = False) -> list[tuple[str | None, Bars]]:
    """The bars of each symbol in a file: [(symbol, Bars)] sorted by symbol, or [(None, Bars)] for a
    file without a symbol column (``load_bars``' result, unchanged).

    symbol_col: ``data.symbol_column`` (the file must have it), else one of ``columns.SYMBOL_NAMES``.
    The other keywords are ``load_bars``'. A symbol's Bars have ``source`` "FILE[SYMBOL]" (the file's
    name alone for a table of one symbol).
    Raises BarDataError naming the file, the file's row, timestamp, column and rule; an empty
    symbol cell is rule ``missing-symbol``.
    """
    label, layout, columns = read_file(path, adjust=adjust, find_symbol=lambda h, lab: symbol_column(h, lab, symbol_col))
    opts = TimeOptions(timestamp_format, dayfirst, timestamp_unit)
    if layout.symbol is None:
        # No symbol column: load_bars' own path on the columns read once (one code path, one result).
        return [(None, bars_of(label, layout, columns, opts, repair=repair))]
    sym_name = layout.header[layout.symbol]
    names = _symbol_text(columns.pop(layout.symbol), label, sym_name)
    layout.symbol = None
    codes, uniques = pd.factorize(names, sort=True)
    order = np.argsort(codes, kind="stable")  # each symbol's rows, in file order
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    out: list[tuple[str | None, Bars]] = []
    for k, symbol in enumerate(uniques):
        rows = order[bounds[k]:bounds[k + 1]]
        part = {pos: col.iloc[rows].reset_index(drop=True) for pos, col in columns.items()}
        # The volume column is settled on the layout it is given (loader.raw_columns): one copy per symbol.
        try:
            bars = bars_of(label, copy.deepcopy(layout), part, opts, repair=repair)
        except BarDataError as exc:
            raise _in_file(exc, rows, str(symbol)) from None
        # A table of one symbol is that symbol's file: labelled as load_bars labels it.
        out.append((str(symbol), bars if len(uniques) == 1 else replace(bars, source=f"{label}[{symbol}]")))
    return out


def _symbol_text(col: pd.Series, label: str, name: str) -> np.ndarray:
    """[N] object array of stripped symbol names; an empty cell is an error naming its row."""
    text = col.astype("string").str.strip()
    empty = (text.isna() | (text == "")).to_numpy(dtype=bool)
    if empty.any():
        row = int(np.argmax(empty))
        raise BarDataError("missing-symbol", "empty symbol cell; every row of a long table names its symbol",
                           path=label, row=row + 1, column=name)
    return text.to_numpy(dtype=object)


def _in_file(exc: BarDataError, rows: np.ndarray, symbol: str) -> BarDataError:
    """``exc`` (rows counted within one symbol's rows) with the file's row numbers and the symbol named."""
    def file_row(k: int) -> int:
        return int(rows[k - 1]) + 1 if 1 <= k <= rows.shape[0] else k

    # The ordering rules name the row compared with in their detail ("same timestamp as row 3").
    detail = re.sub(r"\brow (\d+)\b", lambda m: f"row {file_row(int(m.group(1)))}", exc.detail)
    detail = f"{detail} (symbol {symbol})" if detail else f"symbol {symbol}"
    row = file_row(exc.row) if exc.row is not None else None
    return BarDataError(exc.rule, detail, path=exc.path, row=row, timestamp=exc.timestamp, column=exc.column)
