"""Folds that fit the data (foxhunt.fold_layout): the rule's layout, when it applies, and the
--set a refused layout names (issue 38 part 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.config import build_config
from foxhunt.fold_layout import AUTO_FOLDS, auto_spans, fit_folds, spans_set
from foxhunt.folds import FoldError, walk_forward

DAY = 86_400 * 10**9


def days(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * DAY


def cfg(**folds: object):
    return build_config({"folds": {"train": 8000, "val": 1000, "purge": 60, **folds}})


@settings(max_examples=200, deadline=None)
@given(st.integers(40, 500_000), st.integers(0, 300), st.integers(0, 20))
def test_the_rule_tiles_the_later_half_with_five_validation_windows_ending_at_the_last_bar(usable: int, purge: int,
                                                                                          embargo: int) -> None:
    spans = auto_spans(usable, purge, embargo)
    if spans is None:
        assert usable // 10 < 2 or usable - 5 * (usable // 10) - purge - 4 * embargo < 1
        return
    train, val = spans
    origin = 7
    folds = walk_forward(np.arange(origin + usable, dtype=np.int64), train, val, purge=purge, embargo=embargo, origin=origin)
    assert len(folds) == AUTO_FOLDS
    assert folds[-1].val_end <= origin + usable and origin + usable - folds[-1].val_end < AUTO_FOLDS  # ends at the data's end
    assert all(f.val_len == val for f in folds) and folds[0].train_start == origin
    assert 5 * val <= usable / 2 and 5 * val > usable / 2 - 10  # the later half
    assert folds[0].train_end == origin + train and folds[0].val_start == folds[0].train_end + purge


def test_spans_that_do_not_fit_are_laid_out_by_the_data_with_fit() -> None:
    ts = days(2335)
    fitted, folds, note = fit_folds(cfg(), ts, 303, layout="fit")
    assert (fitted.folds.train, fitted.folds.val, fitted.folds.purge, fitted.folds.step) == (957, 203, 60, None)
    assert [f.val_start for f in folds] == [303 + 957 + 60 + 203 * k for k in range(5)] and folds[-1].val_end == 2335
    assert note == ("laid out by the data (the configured train=8000, val=1000 do not fit 2,032 usable bars): 5 expanding folds "
                    "over the later half, train from 957 bars, val 203 each, purge 60 (folds.train = 957, folds.val = 203)")


def test_spans_that_fit_are_kept_with_fit_and_replaced_with_data() -> None:
    ts = days(200_000)
    same, folds, note = fit_folds(cfg(max_folds=5), ts, 303, layout="fit")
    assert note is None and same.folds.train == 8000 and folds[-1].val_len == 1000
    data, folds, note = fit_folds(cfg(max_folds=5), ts, 303, layout="data")
    assert data.folds.val == (200_000 - 303) // 10 and len(folds) == 5 and data.folds.max_folds == 5
    assert note is not None and note.startswith("laid out by the data (no fold span set for this file)")


def test_user_spans_that_do_not_fit_name_the_set_that_would() -> None:
    with pytest.raises(FoldError) as info:
        fit_folds(cfg(), days(2335), 303, layout="config")
    assert str(info.value) == ("no walk-forward fold fits in 2032 usable bars (train=8000, val=1000, purge=60); use shorter spans "
                               "or more data; e.g. --set folds.train=957 --set folds.val=203 fits (5 expanding folds over the "
                               "later half of the data)")
    walk_forward(days(2335), 957, 203, purge=60, origin=303)  # ... and it does


def test_a_duration_purge_is_converted_to_bars_and_named_in_the_set() -> None:
    with pytest.raises(FoldError) as info:
        fit_folds(cfg(purge="10D"), days(2335), 303, layout="config")
    assert str(info.value).endswith("--set folds.train=1007 --set folds.val=203 --set folds.purge=10 fits (5 expanding folds "
                                    "over the later half of the data)")


def test_too_few_bars_for_any_layout_keep_the_plain_error() -> None:
    with pytest.raises(FoldError, match=r"^no walk-forward fold fits in 15 usable bars .*use shorter spans or more data$"):
        fit_folds(cfg(), days(318), 303, layout="fit")


def test_spans_set_reads_the_config_file_and_the_overrides(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[folds]\nval = 500\nmax_folds = 2\n[env]\nepisode_length = 10\n")
    assert spans_set(p) == ["val"]
    assert spans_set(None, ["folds.purge=5", "folds.max_folds=1", "env.cost_bps=2"]) == ["purge"]
    assert spans_set(None, ["folds.max_folds=1"]) == [] and spans_set(None) == []
