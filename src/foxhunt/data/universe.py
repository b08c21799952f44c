"""A universe of symbols: many bar series loaded, validated and laid out in one columnar array.

Sources (``load_universe``), any mix, in the order given:

* a directory: every bar file directly in it (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``; hidden
  files and other extensions are skipped), one symbol a file;
* a file: one symbol, named by the file name without its bar-file extension (``BRK.B.csv`` is
  ``BRK.B``), or a long table with a symbol column (``foxhunt.data.long_table``: ``symbol``,
  ``ticker``, ``tic``, ``instrument`` or ``data.symbol_column``), whose symbols are the column's values;
* a glob pattern (``data/*.parquet``) that is not itself a path: the bar files it matches.

The same file reached twice (a directory and a pattern over it) is read once. Every file goes
through the single-file loader and its rules (every layout and ``[data]`` read option of a user's
own file); the first bad file, in the order above, is the error, naming the file, row and rule.
Then, in this order: a symbol from two files is ``duplicate-symbol``; ``data.symbols`` keeps the
symbols it names (one it names that is not there is a ConfigError listing those that are); symbols
whose median bar spacings differ by more than ``INTERVAL_TOLERANCE`` are ``mixed-intervals``
(daily next to minute bars; calendars may differ: 24/7 next to 24/5, holidays, gaps, late starts).

Layout: symbols sorted by name; ``offsets`` [S + 1] int64, the bars of symbol s are rows
``offsets[s]:offsets[s + 1]`` of every concatenated column, each symbol's rows in time order
(timestamps increase within a symbol, not across the boundary). Nothing is written.

One series from a ``[data]`` section (``one_symbol``, what ``foxhunt.data.load_source`` returns for
files): a universe of exactly one symbol is that symbol's bars; several are refused in one line
(``UniverseNotAvailable``) where one series is needed (``foxhunt train`` trains several pooled:
``foxhunt.train.universe_runner``).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.data.describe import interval_text
from foxhunt.data.long_table import load_table
from foxhunt.data.options import file_options
from foxhunt.errors import ConfigError

if TYPE_CHECKING:
    from foxhunt.config import DataConfig

__all__ = ["Universe", "UniverseNotAvailable", "load_universe", "universe_of", "expand_sources", "symbol_of", "config_sources", "is_universe",
           "one_symbol", "refuse_universe", "INTERVAL_TOLERANCE"]

BAR_SUFFIXES = (".csv.gz", ".csv", ".parquet", ".pq")
INTERVAL_TOLERANCE = 1.5
"""Largest ratio between two symbols' median bar spacings in one universe (1 min next to 1 min 20 s
passes; 1 min next to 2 min, or 1 day next to 1 h, does not)."""
_COLUMNS = ("timestamps", "open", "high", "low", "close", "volume")


def is_bar_file(path: Path) -> bool:
    """Whether the name ends in a bar-file extension (any case)."""
    return path.name.lower().endswith(BAR_SUFFIXES)


def symbol_of(path: str | Path) -> str:
    """A one-symbol file's symbol: its name without the bar-file extension ("AAPL.csv.gz" -> "AAPL")."""
    name = Path(path).name
    for suffix in BAR_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: len(name) - len(suffix)]
    return Path(name).stem


def expand_sources(sources: Sequence[str | Path]) -> list[Path]:
    """The files the sources name, in order (a directory's and a pattern's sorted by name), each once.

    Raises BarDataError ``no-bar-files`` for a directory or pattern with no bar file. A path that
    does not exist and is not a pattern is kept: the loader names it ("no such file").
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for src in sources:
        p = Path(src)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and is_bar_file(f) and not f.name.startswith("."))
            if not files:
                raise BarDataError("no-bar-files", f"the directory holds no bar file ({', '.join(BAR_SUFFIXES)})", path=str(p))
        elif not p.exists() and glob.has_magic(str(src)):
            files = sorted(Path(f) for f in glob.glob(str(src)) if Path(f).is_file() and is_bar_file(Path(f)))
            if not files:
                raise BarDataError("no-bar-files", f"the pattern matches no bar file ({', '.join(BAR_SUFFIXES)})", path=str(src))
        else:
            files = [p]
        for f in files:
            key = f.resolve()
            if key not in seen:  # a directory and a pattern over it: read once
                seen.add(key)
                out.append(f)
    if not out:
        raise ConfigError("no bar file given (a directory, files or a glob pattern)")
    return out


@dataclass(frozen=True)
class Universe:
    """S symbols' bars, one columnar layout.

    symbols: S names, sorted. bars: S Bars, one per symbol (each strictly increasing in time).
    files: S paths, the file each symbol came from (a long table's symbols share one).
    whole_file: S flags, True where the file holds that symbol alone (a one-symbol file, or a long
        table of one symbol): ``load_bars(files[s])`` then reads exactly ``bars[s]``.
    from_table: S flags, True where the symbol is a value of a long table's symbol column (False:
        named by its file).
    offsets: [S + 1] int64, rows offsets[s]:offsets[s + 1] of a concatenated column are symbol s.
    """

    symbols: tuple[str, ...]
    bars: tuple[Bars, ...]
    files: tuple[str, ...]
    whole_file: tuple[bool, ...]
    from_table: tuple[bool, ...]
    offsets: np.ndarray
    _cat: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.symbols)

    @property
    def n_bars(self) -> int:
        """R: the bars of all symbols."""
        return int(self.offsets[-1])

    @property
    def counts(self) -> np.ndarray:
        """[S] int64 bars per symbol."""
        return np.diff(self.offsets)

    def index(self, symbol: str) -> int:
        """The position of ``symbol`` in ``symbols`` (KeyError when absent)."""
        try:
            return self.symbols.index(symbol)
        except ValueError:
            raise KeyError(symbol) from None

    def rows(self, s: int) -> slice:
        """The rows of symbol s in every concatenated column."""
        return slice(int(self.offsets[s]), int(self.offsets[s + 1]))

    def column(self, name: str) -> np.ndarray:
        """[R] a concatenated column: "timestamps" (int64 UTC ns) or "open" … "volume" (float64),
        symbol after symbol. Built once, then shared (read-only)."""
        if name not in _COLUMNS:
            raise KeyError(f"{name!r}: one of {_COLUMNS}")
        if name not in self._cat:
            arr = np.concatenate([getattr(b, name) for b in self.bars])
            arr.flags.writeable = False
            self._cat[name] = arr
        return self._cat[name]

    @property
    def timestamps(self) -> np.ndarray:
        """[R] int64 UTC ns, symbol after symbol (increasing within each symbol's rows)."""
        return self.column("timestamps")

    def interval_s(self) -> float:
        """The universe's bar spacing in seconds: the median of the symbols' median spacings."""
        gaps = [b.median_bar_seconds() for b in self.bars if len(b) > 1]
        return float(np.median(gaps)) if gaps else 0.0


def load_universe(sources: Sequence[str | Path], cfg: "DataConfig") -> Universe:
    """Load, validate and lay out the symbols of ``sources`` (module docstring for the forms and rules).

    cfg: the ``[data]`` section: how to read files (``file_options``), ``symbol_column``, ``symbols``.
    Raises BarDataError (a bad file, ``no-bar-files``, ``duplicate-symbol``, ``mixed-intervals``)
    or ConfigError (``data.symbols`` names a symbol that is not there).
    """
    options = file_options(cfg)
    found: dict[str, tuple[str, Bars, bool, bool]] = {}
    for path in expand_sources(sources):
        table = load_table(path, symbol_col=cfg.symbol_column, **options)  # type: ignore[arg-type]
        for name, bars in table:
            symbol = name if name is not None else symbol_of(path)
            if symbol in found:
                raise BarDataError("duplicate-symbol", f"symbol {symbol!r} is also in file {path}; one symbol a file",
                                   path=found[symbol][0])
            found[symbol] = (str(path), bars, len(table) == 1, name is not None)
    if cfg.symbols is not None:
        missing = [s for s in cfg.symbols if s not in found]
        if missing:
            raise ConfigError(f"data.symbols: {missing[0]!r} is not in the universe; it has {_names(sorted(found))}")
        found = {s: found[s] for s in cfg.symbols}
    return _laid_out(found)


def universe_of(bars: Mapping[str, Bars]) -> Universe:
    """A universe of bars already in memory (generated or loaded), symbol -> Bars, under the same
    layout and interval rule as ``load_universe``; ``files`` are the bars' ``source``, and no symbol
    counts as a whole file. The bars must already be valid (``validate.validate_bars``)."""
    if not bars:
        raise ConfigError("a universe needs at least one symbol")
    return _laid_out({s: (b.source, b, False, False) for s, b in bars.items()})


def _laid_out(found: Mapping[str, tuple[str, Bars, bool, bool]]) -> Universe:
    """Symbols sorted, the interval rule checked, offsets laid out (found: symbol -> (file, bars,
    whole file, from a table))."""
    symbols = tuple(sorted(found))
    rows = [found[s] for s in symbols]
    _check_intervals(symbols, rows)
    offsets = np.zeros(len(symbols) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r[1]) for r in rows])
    files, bars, whole, table = (tuple(col) for col in zip(*rows))
    return Universe(symbols, bars, files, whole, table, offsets)  # type: ignore[arg-type]


def _names(symbols: list[str], limit: int = 20) -> str:
    shown = ", ".join(symbols[:limit])
    return shown + (f" … ({len(symbols)} symbols)" if len(symbols) > limit else "")


def _check_intervals(symbols: tuple[str, ...], rows: list[tuple[str, Bars, bool, bool]]) -> None:
    """``mixed-intervals`` when the shortest and longest median bar spacing differ by more than
    INTERVAL_TOLERANCE; the message names both symbols, files and spacings."""
    spaced = [(r[1].median_bar_seconds(), s, r[0]) for s, r in zip(symbols, rows) if len(r[1]) > 1]
    if len(spaced) < 2:
        return
    lo, hi = min(spaced), max(spaced)
    if hi[0] > lo[0] * INTERVAL_TOLERANCE:
        raise BarDataError("mixed-intervals", f"symbol {lo[1]} has bars every {interval_text(lo[0])} here, symbol {hi[1]} every "
                           f"{interval_text(hi[0])} in file {hi[2]}; a universe has one bar interval (resample, or split the "
                           "universe)", path=lo[2])


def config_sources(cfg: "DataConfig") -> list[str]:
    """The sources a ``[data]`` section names: ``data.path`` then ``data.paths`` (either may be absent)."""
    return [*([cfg.path] if cfg.path else []), *(cfg.paths or [])]


class UniverseNotAvailable(ConfigError):
    """A universe of several symbols where one series is needed (tuning and ``backtest --run`` take one
    symbol; ``foxhunt train`` trains a universe pooled, ``foxhunt backtest --model`` backtests one)."""


def one_symbol(cfg: "DataConfig") -> Bars:
    """The bars of a ``[data]`` section that names files (``data.source = 'file'``), as one series.

    One plain file (no universe key, no symbol column) is ``load_bars``' result, the file read once.
    A universe (a directory, several files, a pattern, a long table, ``data.symbols``) of exactly one
    symbol is that symbol's bars. Raises UniverseNotAvailable for more than one symbol, after every
    file passed its rules (a bad file is still its own error)."""
    universe = load_universe(config_sources(cfg), cfg)
    refuse_universe(universe)
    return universe.bars[0]


def refuse_universe(universe: Universe) -> None:
    """Raise UniverseNotAvailable (one line) unless ``universe`` has exactly one symbol."""
    if len(universe) > 1:
        first = universe.symbols[0]
        raise UniverseNotAvailable(
            f"the data name a universe of {len(universe)} symbols ({_names(list(universe.symbols), 8)}): `foxhunt train` "
            f"(pooled training) and `foxhunt backtest --model` take a universe; this command takes one symbol: give one file, "
            f"or pick one symbol with "
            f"--set 'data.symbols=[\"{first}\"]'")


def is_universe(sources: Sequence[str | Path], cfg: "DataConfig") -> bool:
    """Whether ``sources`` are more than today's one plain file: several sources, a directory, a
    pattern, or a universe key set (``data.symbols``, ``data.symbol_column``). A single file is
    still read as a universe when it is a long table (``load_table`` finds its symbol column)."""
    if len(sources) != 1 or cfg.symbols is not None or cfg.symbol_column is not None:
        return True
    p = Path(sources[0])
    return p.is_dir() or (not p.exists() and glob.has_magic(str(sources[0])))
