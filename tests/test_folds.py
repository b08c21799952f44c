"""Walk-forward folds: index ranges found by binary search, properties checked with hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foxhunt.folds import FoldError, FoldRange, folds_to_json, parse_span, walk_forward

MIN = 60 * 1_000_000_000
DAY = 86_400 * 1_000_000_000


def minute_stamps(n: int, gaps: bool = False, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    step = rng.integers(1, 5, n) * MIN if gaps else np.full(n, MIN)
    return np.cumsum(step).astype(np.int64)


def test_bar_count_expanding_layout_is_exact():
    folds = walk_forward(minute_stamps(1000), train=300, val=100, purge=10)
    assert folds[0] == FoldRange(0, 0, 300, 310, 410)
    assert folds[1] == FoldRange(1, 0, 400, 410, 510)
    assert folds[-1].val_end <= 1000
    assert len(folds) == 6


def test_sliding_keeps_train_length_and_origin_is_respected():
    folds = walk_forward(minute_stamps(1000), train=300, val=100, mode="sliding", origin=50)
    assert folds[0].train_start == 50
    assert all(f.train_len == 300 for f in folds)
    assert all(f.train_start >= 50 for f in folds)


def test_duration_spans_find_boundaries_by_time():
    ts = minute_stamps(10 * 24 * 60)  # ten days of minutes
    folds = walk_forward(ts, train="3D", val="1D", purge="1h")
    f = folds[0]
    assert ts[f.train_end] - ts[0] >= 3 * DAY and ts[f.train_end - 1] - ts[0] < 3 * DAY
    assert ts[f.val_start] - ts[f.train_end] >= 3_600 * 1_000_000_000
    assert f.val_len == 24 * 60


def test_max_folds_keeps_the_most_recent():
    all_folds = walk_forward(minute_stamps(1000), train=300, val=100)
    last2 = walk_forward(minute_stamps(1000), train=300, val=100, max_folds=2)
    assert [f.fold for f in last2] == [0, 1]
    assert (last2[-1].val_start, last2[-1].val_end) == (all_folds[-1].val_start, all_folds[-1].val_end)


def test_too_little_data_is_a_clear_error():
    with pytest.raises(FoldError, match="no walk-forward fold fits"):
        walk_forward(minute_stamps(100), train=90, val=20)


@pytest.mark.parametrize("bad", ["90X", "-3", "1.5", "m", "10m", 0, True])
def test_bad_spans_are_rejected(bad):
    with pytest.raises((ValueError, FoldError)):
        parse_span(bad)


def test_span_parsing_units():
    assert parse_span("90D") == ("ns", 90 * DAY)
    assert parse_span("30min") == ("ns", 30 * MIN)
    assert parse_span("12h") == ("ns", 12 * 60 * MIN)
    assert parse_span("250") == ("bars", 250)
    assert parse_span(0, allow_zero=True) == ("bars", 0)


def test_folds_json_has_times():
    ts = minute_stamps(1000)
    text = folds_to_json(walk_forward(ts, 300, 100), ts)
    assert '"train_start_time"' in text and '"val_end": ' in text


span_bars = st.integers(min_value=1, max_value=400)
span_any = st.one_of(span_bars, st.sampled_from(["30min", "2h", "6h", "1D"]))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=50, max_value=3000),
    train=span_any,
    val=span_any,
    step=st.one_of(st.none(), span_any),
    purge=st.one_of(st.integers(0, 100), st.sampled_from(["0", "15min", "1h"])),
    embargo=st.one_of(st.integers(0, 50), st.sampled_from(["10min"])),
    mode=st.sampled_from(["expanding", "sliding"]),
    gaps=st.booleans(),
    origin=st.integers(0, 40),
)
def test_fold_properties_hold_for_any_layout(n, train, val, step, purge, embargo, mode, gaps, origin):
    ts = minute_stamps(n, gaps=gaps, seed=n)
    try:
        folds = walk_forward(ts, train, val, step, mode, purge, embargo, origin=origin)
    except FoldError:
        return
    kind_p, amount_p = parse_span(purge, allow_zero=True)
    prev = None
    for i, f in enumerate(folds):
        assert f.fold == i
        # every index in range, train before val
        assert origin <= f.train_start < f.train_end <= f.val_start < f.val_end <= n
        # purge gap respected
        if kind_p == "bars":
            assert f.val_start - f.train_end >= amount_p
        else:
            assert ts[f.val_start] - ts[f.train_end] >= amount_p or f.val_start == f.train_end == n
        if prev is not None:
            # ordered, val windows don't overlap
            assert f.train_end > prev.train_end
            assert f.val_start >= prev.val_end
        prev = f
