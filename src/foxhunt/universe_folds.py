"""Walk-forward folds across a universe: date ranges on the union calendar, mapped to each symbol.

The rule:

1. **Calendar.** The union calendar is every timestamp at which any symbol has a bar (sorted,
   each once). Its origin (first usable index) is the earliest time at which some symbol's
   features are formed (that symbol's bar ``warmup``).
2. **Folds.** ``foxhunt.fold_layout.fit_folds`` lays the folds out on the calendar exactly as on one
   file's timestamps (the configured spans, or the fitted layout: five expanding folds tiling the
   later half of the usable calendar), so purge and embargo are as configured, in calendar bars or
   durations. A fold is then four times: train [t0, t1), validation [t2, t3) (t3 past the last bar
   for the last window), the same dates for every symbol.
3. **Per symbol.** Symbol s's rows in fold k are its bars in those times: training from
   ``max(first bar at or after t0, its warm-up bar)`` to the first bar at or after t1, validation
   from the first bar at or after t2 to the first at or after t3. With a purge in bars, a symbol's
   training end is also moved back to leave at least ``purge`` of its own bars before its validation
   start (a symbol with holidays the calendar lacks would otherwise have fewer).
4. **Membership.** Symbol s joins fold k when it has at least ``data.min_train_bars`` (default
   ``DEFAULT_MIN_TRAIN_BARS``) training bars and at least 2 validation bars (one return) there. A
   symbol that starts late joins the first fold in which it has that much training, and every later
   one in which it still trades. A fold that no symbol joins is a FoldError.

A universe of one symbol has the symbol's own timestamps as its calendar, so its folds and row
ranges are those of the single file, bar for bar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.fold_layout import fit_folds
from foxhunt.folds import FoldError, FoldRange, parse_span

if TYPE_CHECKING:
    from foxhunt.config import Config
    from foxhunt.data.universe import Universe

__all__ = ["UniverseFold", "union_calendar", "calendar_origin", "universe_folds", "calendar_folds", "DEFAULT_MIN_TRAIN_BARS"]

DEFAULT_MIN_TRAIN_BARS = 100
_END = np.iinfo(np.int64).max  # "after the last bar": a validation window that runs to the end


@dataclass(frozen=True)
class UniverseFold:
    """One fold across a universe of S symbols.

    fold: its number. calendar: the fold as indices into the union calendar ([U] int64).
    times: (train_start, train_end, val_start, val_end) in int64 UTC ns, ends exclusive (val_end is
        int64 max when the window runs to the calendar's last bar).
    bounds: [S, 4] int64 rows into the universe's concatenated arrays (offsets included):
        train_start, train_end, val_start, val_end of each symbol; ranges never cross a symbol.
    member: [S] bool, the symbol joins the fold (module docstring, rule 4). A non-member's bounds
        are its rows in those times all the same (possibly empty); no range starts before the
        symbol's warm-up bar, so validation holds only formed bars as well.
    """

    fold: int
    calendar: FoldRange
    times: tuple[int, int, int, int]
    bounds: np.ndarray
    member: np.ndarray

    @property
    def train_len(self) -> np.ndarray:
        """[S] int64 training bars per symbol."""
        return self.bounds[:, 1] - self.bounds[:, 0]

    @property
    def val_len(self) -> np.ndarray:
        """[S] int64 validation bars per symbol."""
        return self.bounds[:, 3] - self.bounds[:, 2]

    def symbol_range(self, s: int, offsets: np.ndarray) -> FoldRange:
        """Symbol s's fold as a FoldRange of indices into its own bars (offsets removed)."""
        base = int(offsets[s])
        b = [int(x) - base for x in self.bounds[s]]
        return FoldRange(self.fold, b[0], b[1], b[2], b[3])


def union_calendar(universe: "Universe") -> np.ndarray:
    """[U] int64 UTC ns: every time at which some symbol has a bar, sorted, each once."""
    return np.unique(universe.timestamps)


def calendar_origin(universe: "Universe", calendar: np.ndarray, warmup: int) -> int:
    """The first usable calendar index: the earliest time at which some symbol has its bar ``warmup``
    (its features formed). Symbols of ``warmup`` bars or fewer have none (the feature step refuses them)."""
    formed = [int(b.timestamps[warmup]) for b in universe.bars if len(b) > warmup]
    if not formed:
        return int(calendar.shape[0])
    return int(np.searchsorted(calendar, min(formed), side="left"))


def universe_folds(cfg: "Config", universe: "Universe", warmup: int, *, layout: str = "config",
                   cut: int | None = None) -> tuple["Config", list[UniverseFold], str | None, np.ndarray]:
    """The folds of ``universe`` (module docstring): (config holding the layout, folds, the fitted
    layout's note or None, the union calendar [U] int64).

    layout: ``fit_folds``' (``config`` | ``fit`` | ``data``). cut: lay the folds out on the calendar's
    first ``cut`` dates only (``foxhunt tune``'s hold-out, ``foxhunt.tune.holdout``): no validation
    window reaches the calendar date ``cut``. Raises FoldError where no fold fits the calendar or a
    fold has no member symbol."""
    calendar = union_calendar(universe)
    origin = calendar_origin(universe, calendar, warmup)
    cfg, folds, note = fit_folds(cfg, calendar if cut is None else calendar[:cut], origin, layout=layout)
    return cfg, calendar_folds(cfg, universe, warmup, folds, calendar), note, calendar


def calendar_folds(cfg: "Config", universe: "Universe", warmup: int, folds: list[FoldRange],
                   calendar: np.ndarray) -> list[UniverseFold]:
    """``folds`` (indices into ``calendar``, [U] int64) mapped to each symbol (module docstring, rules 3 and 4).
    A fold whose validation ends at U runs to the last bar. FoldError for a fold without a member symbol."""
    kind, amount = parse_span(cfg.folds.purge, allow_zero=True)
    purge_bars = amount if kind == "bars" else 0  # a duration purge already holds in time for every symbol
    min_train = cfg.data.min_train_bars or DEFAULT_MIN_TRAIN_BARS
    out = []
    for f in folds:
        # indices into the whole calendar: a fold laid out before a cut ends at the cut's date, not at the end
        times = (int(calendar[f.train_start]), int(calendar[f.train_end]), int(calendar[f.val_start]),
                 int(calendar[f.val_end]) if f.val_end < calendar.shape[0] else _END)
        bounds, member = _symbol_bounds(universe, times, warmup, purge_bars, min_train)
        if not member.any():
            raise FoldError(f"fold {f.fold}: no symbol has {min_train} training bars (data.min_train_bars) and 2 validation "
                            f"bars in it; lower data.min_train_bars or set longer fold spans")
        out.append(UniverseFold(f.fold, f, times, bounds, member))
    return out


def _symbol_bounds(universe: "Universe", times: tuple[int, int, int, int], warmup: int, purge_bars: int,
                   min_train: int) -> tuple[np.ndarray, np.ndarray]:
    """([S, 4] int64 rows with offsets, [S] bool member) of one fold's times (module docstring, 3 and 4)."""
    t0, t1, t2, t3 = times
    n = len(universe)
    bounds = np.zeros((n, 4), dtype=np.int64)
    member = np.zeros(n, dtype=bool)
    for s, bars in enumerate(universe.bars):  # once per fold and symbol, on the host, before any upload
        ts = bars.timestamps
        vs, ve = (int(np.searchsorted(ts, t, side="left")) for t in (t2, t3))
        a = min(max(int(np.searchsorted(ts, t0, side="left")), warmup), len(ts))
        b = min(int(np.searchsorted(ts, t1, side="left")), vs - purge_bars)
        b = max(b, a)  # an empty range, never a negative one
        vs = max(vs, b)
        base = int(universe.offsets[s])
        bounds[s] = (base + a, base + b, base + vs, base + max(ve, vs))
        member[s] = b - a >= min_train and ve - vs >= 2
    return bounds, member
