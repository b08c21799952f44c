"""What ``foxhunt data validate`` and ``foxhunt prepare`` print for a universe of symbols.

``data validate DIR`` (or several files, a pattern, a long table): one line per symbol (bars,
interval, first → last bar, its file) and a total line, then what was inferred to read the files,
each note once with the number of symbols it applies to. ``prepare --data DIR``: the folds on the
union calendar (dates, members), then a table symbol × fold of training / validation bars ("–":
the symbol does not join that fold), the membership rule, the fitted layout's note and the upload.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from foxhunt.console import iso_time, one_line, show_path
from foxhunt.data.describe import data_summary, interval_class, interval_text, iso_day_or_time
from foxhunt.data.universe import Universe
from foxhunt.universe_folds import DEFAULT_MIN_TRAIN_BARS

__all__ = ["universe_lines", "print_universe", "print_prepared_universe"]


def universe_lines(universe: Universe) -> list[str]:
    """The lines of ``foxhunt data validate`` for a universe (plain text, no markup)."""
    lines = []
    for symbol, bars, file in zip(universe.symbols, universe.bars, universe.files):
        s = data_summary(bars)
        vol = "" if s["has_volume"] else ", no volume"
        lines.append(f"ok {symbol}: {s['bars']:,} bars {s['interval']}, {s['first']} → {s['last']}{vol} ({one_line(file)})")
    sec = universe.interval_s()
    cls = interval_class(sec)
    first = min(int(b.timestamps[0]) for b in universe.bars)
    last = max(int(b.timestamps[-1]) for b in universe.bars)
    n = len(universe)
    lines.append(f"ok {n} symbol{'s' if n != 1 else ''}: {universe.n_bars:,} bars every {interval_text(sec)} ({cls}), "
                 f"{iso_day_or_time(first, cls == 'daily')} → {iso_day_or_time(last, cls == 'daily')}")
    notes: dict[str, int] = {}
    for bars in universe.bars:
        for note in bars.notes:
            notes[note] = notes.get(note, 0) + 1
    lines += [f"  read: {note} ({k} of {n} symbols)" if k != n else f"  read: {note}" for note, k in notes.items()]
    return lines


def print_universe(universe: Universe, console: Any) -> None:
    for line in universe_lines(universe):
        console.print(escape(line), highlight=False, soft_wrap=True)


def print_prepared_universe(p: Any, console: Any) -> None:
    """``foxhunt prepare``'s output for a PreparedUniverse (``foxhunt.pipeline.prepare_universe``)."""
    u, folds, m = p.universe, p.folds, p.market
    table = Table(title=f"walk-forward folds on the union calendar ({p.config.folds.mode}, {len(p.calendar):,} dates)")
    for col in ("fold", "train", "val", "symbols"):
        table.add_column(col)
    for f in folds:
        c = f.calendar
        table.add_row(str(f.fold), f"{iso_time(p.calendar[c.train_start])} → {iso_time(p.calendar[c.train_end - 1])}",
                      f"{iso_time(p.calendar[c.val_start])} → {iso_time(p.calendar[c.val_end - 1])}",
                      f"{int(f.member.sum())} of {len(u)}")
    console.print(table)
    per = Table(title="bars per symbol and fold: train / val (– : not in the fold)")
    for col in ("symbol", "bars", "first → last", *(f"fold {f.fold}" for f in folds)):
        per.add_column(col)
    for s, (symbol, bars) in enumerate(zip(u.symbols, u.bars)):
        cells = [f"{int(f.train_len[s])} / {int(f.val_len[s])}" if f.member[s] else "–" for f in folds]
        per.add_row(escape(symbol), str(len(bars)), f"{iso_time(bars.timestamps[0])} → {iso_time(bars.timestamps[-1])}", *cells)
    console.print(per)
    need = p.config.data.min_train_bars or DEFAULT_MIN_TRAIN_BARS
    console.print(f"a symbol joins a fold with at least {need} training bars (data.min_train_bars) and 2 validation bars",
                  highlight=False, soft_wrap=True)
    if p.fold_note:
        console.print(f"folds {escape(p.fold_note)}", highlight=False, soft_wrap=True)
    built = sum(p.features.built)
    console.print(
        f"market data on [bold]{m.device}[/]: {len(u)} symbols, {m.n_bars} bars × {m.n_features} features "
        f"(obs dim {m.obs_dim}), warm-up {m.warmup} bars per symbol; cache: {built} built, {len(u) - built} reused "
        f"in {show_path(p.config.features.cache_dir)}"
        + ("; and every symbol's mirror for training (train.mirror)" if m.mirror_offset else ""),
        highlight=False, soft_wrap=True,
    )
