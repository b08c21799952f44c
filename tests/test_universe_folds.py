"""Folds across a universe (issue 47, foxhunt.universe_folds): date ranges on the union calendar,
mapped to each symbol's own bars. A one-symbol universe has the single file's folds bar for bar; a
universe of 2,300-bar daily files gets the fitted layout; calendars with gaps and late starts get
the rows their dates hold and join the folds the rule says; no range crosses a symbol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from foxhunt.config import build_config
from foxhunt.data.universe import load_universe
from foxhunt.fold_layout import fit_folds
from foxhunt.folds import FoldError
from foxhunt.universe_folds import DEFAULT_MIN_TRAIN_BARS, calendar_folds, universe_folds
from tests.data.universe_files import bars_frame, days, universe_dir, write

WARMUP = 303


def config(path: Path, folds: dict | None = None, **data: object):
    return build_config({"data": {"source": "file", "path": str(path), **data}, "folds": folds or {}})


@pytest.mark.parametrize("layout, folds", [("fit", {}), ("config", {"train": 100, "val": 40, "purge": 7, "embargo": 3}),
                                           ("config", {"train": "150D", "val": "60D", "mode": "sliding", "purge": "5D"})])
def test_a_one_symbol_universe_has_the_single_files_folds(tmp_path: Path, layout: str, folds: dict) -> None:
    path = write(tmp_path / "SPY.csv", bars_frame(pd.bdate_range("2015-01-01", periods=700), 1))
    cfg = config(path, folds, min_train_bars=1)
    u = load_universe([path], cfg.data)
    _, single, _ = fit_folds(cfg, u.bars[0].timestamps, WARMUP, layout=layout)
    fitted, ufolds, _, calendar = universe_folds(cfg, u, WARMUP, layout=layout)
    assert np.array_equal(calendar, u.bars[0].timestamps)
    assert [f.calendar for f in ufolds] == single
    assert [f.symbol_range(0, u.offsets) for f in ufolds] == single


def test_a_universe_of_2300_bar_daily_files_gets_the_fitted_layout(tmp_path: Path) -> None:
    cal = pd.bdate_range("2009-01-02", periods=2_300)
    for k, name in enumerate(("AAA", "BBB", "CCC")):
        write(tmp_path / f"{name}.csv", bars_frame(cal, k))
    cfg = config(tmp_path)
    u = load_universe([tmp_path], cfg.data)
    fitted, folds, note, _ = universe_folds(cfg, u, WARMUP, layout="data")
    usable = 2_300 - WARMUP
    assert (fitted.folds.val, fitted.folds.train) == (usable // 10, usable - 5 * (usable // 10) - 60)
    assert len(folds) == 5 and all(f.member.all() for f in folds) and note is not None
    _, single, _ = fit_folds(cfg, u.bars[0].timestamps, WARMUP, layout="data")
    for f, g in zip(folds, single):  # a shared calendar: every symbol's rows are the single file's, offset
        for s in range(3):
            assert f.symbol_range(s, u.offsets) == g


def test_gaps_and_late_starts_get_the_rows_of_their_dates_and_join_by_the_rule(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)  # AAA daily from 2020-01-01; BBB business days from February; CCC a 30-day gap
    write(d / "LATE.csv", bars_frame(days("2020-06-20", 420), 9))  # starts ~170 days after AAA, ends before BBB
    cfg = config(d, {"train": 60, "val": 30, "purge": 5}, min_train_bars=40)
    u = load_universe([d], cfg.data)
    _, folds, _, calendar = universe_folds(cfg, u, WARMUP, layout="config")
    seen_late = []
    for f in folds:
        t0, t1, t2, t3 = f.times
        assert (t0, t1, t2) == tuple(int(calendar[i]) for i in (f.calendar.train_start, f.calendar.train_end, f.calendar.val_start))
        for s, bars in enumerate(u.bars):
            ts, base = bars.timestamps, int(u.offsets[s])
            a, b, vs, ve = (int(x) - base for x in f.bounds[s])
            assert 0 <= a <= b <= vs <= ve <= len(ts)  # inside the symbol: no range crosses an offset
            formed = np.arange(len(ts)) >= WARMUP
            in_val = np.flatnonzero((ts >= t2) & (ts < t3) & formed)
            # validation: exactly the formed bars of the validation dates
            assert (vs, ve) == ((in_val[0], in_val[-1] + 1) if in_val.size else (vs, vs))
            # training: the formed bars of the training dates but the last 5 of the symbol's own bars before
            # its validation dates (the purge, in its bars)
            formed_train = np.flatnonzero((ts >= t0) & (ts < t1) & formed)
            assert b - a == int(np.sum(formed_train < np.searchsorted(ts, t2) - 5))
            assert vs - b >= 5 or b == a
            assert f.member[s] == (b - a >= 40 and ve - vs >= 2)
        seen_late.append(bool(f.member[u.index("LATE")]))
    # LATE joins once it has 40 formed training bars (its warm-up ends 303 days in), and leaves when its
    # bars end before a validation window: out, in, out again.
    first, last = seen_late.index(True), len(seen_late) - 1 - seen_late[::-1].index(True)
    assert 0 < first <= last < len(seen_late) - 1 and all(seen_late[first:last + 1])


def test_folds_cut_at_a_calendar_date_end_there_for_every_symbol(tmp_path: Path) -> None:
    d = universe_dir(tmp_path)
    cfg = config(d, {"train": 60, "val": 30, "purge": 5}, min_train_bars=40)
    u = load_universe([d], cfg.data)
    _, whole, _, calendar = universe_folds(cfg, u, WARMUP)
    cut = len(calendar) - 45  # inside the last whole fold's validation window
    _, folds, _, same = universe_folds(cfg, u, WARMUP, cut=cut)
    assert np.array_equal(same, calendar) and 0 < len(folds) < len(whole)
    t_cut = int(calendar[cut])
    for f in folds:
        assert f.calendar.val_end <= cut and f.times[3] <= t_cut
        for s, bars in enumerate(u.bars):  # no symbol's validation rows reach the cut date
            ve = int(f.bounds[s, 3] - u.offsets[s])
            assert ve == 0 or int(bars.timestamps[ve - 1]) < t_cut
    # the same calendar folds mapped again (the hold-out's path) are the same per-symbol folds
    again = calendar_folds(cfg, u, WARMUP, [f.calendar for f in folds], calendar)
    assert all(np.array_equal(a.bounds, b.bounds) and np.array_equal(a.member, b.member) for a, b in zip(again, folds))


def test_a_fold_no_symbol_can_join_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "A.csv", bars_frame(days("2020-01-01", 420), 1))
    cfg = config(path, {"train": 30, "val": 20, "purge": 2})
    with pytest.raises(FoldError, match=f"fold 0: no symbol has {DEFAULT_MIN_TRAIN_BARS} training bars \\(data.min_train_bars\\)"):
        universe_folds(cfg, load_universe([path], cfg.data), WARMUP, layout="config")
