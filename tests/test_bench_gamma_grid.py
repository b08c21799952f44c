"""bench/bench_gamma_grid.py --keep-columns: inside ``only_columns`` the learner's observations hold only
the named feature columns (the others are 0 after normalisation); outside it the market is untouched."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.bench_gamma_grid import only_columns
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set

FOLD = FoldRange(0, 100, 1_500, 1_560, 2_000)


def _market(names: tuple[str, ...]) -> MarketData:
    fs = random_feature_set(n_features=len(names))
    return MarketData(dataclasses.replace(fs, names=names))


def _observed(m: MarketData) -> torch.Tensor:
    m.set_fold(FOLD)
    out = torch.empty(5, m.obs_dim)
    return m.observe(torch.arange(200, 205), torch.ones(5, 3), out)[:, : m.n_features]


def test_only_the_kept_columns_are_observed_and_the_market_is_restored_after_the_block():
    names = ("ret_1", "ema_mom_10", "vol_20", "ema_mom_300", "ema_vol_10")
    m = _market(names)
    with only_columns(("ema_mom",)):
        inside = _observed(m)
    assert torch.all(inside[:, [0, 2, 4]] == 0) and torch.all(inside[:, [1, 3]] != 0)
    assert torch.all(_observed(m) != 0)  # set_fold is the original again


def test_a_prefix_no_column_has_is_refused_and_no_prefix_changes_nothing():
    m = _market(("ret_1", "vol_20"))
    with only_columns(("ema_mom",)), pytest.raises(ValueError, match="--keep-columns ema_mom: no feature column"):
        m.set_fold(FOLD)
    with only_columns(()):
        assert torch.all(_observed(m) != 0)
