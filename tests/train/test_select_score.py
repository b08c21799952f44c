"""train.select_score = "timing": the held-back score is the Sharpe of what holding one exposure cannot
earn (the policy's returns less their regression on buy-and-hold's), so a constant exposure scores nothing
and a policy that times the market keeps its score."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.train.config import default_train_config
from foxhunt.train import selection
from foxhunt.train.selection import HeldBackScore, sub_windows, timing_returns
from tests.helpers import random_feature_set
from tests.train.conftest import tiny_config
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted


def test_timing_returns_equal_a_float64_regression_residual_on_random_inputs(rng):
    for n in (2, 7, 1_000):
        m = rng.standard_t(4, n) * 1e-2
        r = 0.3 * m + rng.normal(0, 5e-3, n)
        beta = np.cov(r, m, ddof=0)[0, 1] / np.var(m)
        np.testing.assert_allclose(timing_returns(r, m), r - beta * m, rtol=1e-12, atol=1e-18)


def test_a_constant_exposure_leaves_nothing_and_timing_is_kept(rng):
    m = rng.normal(0, 1e-2, 5_000)
    assert np.abs(timing_returns(0.5 * m, m)).max() < 1e-15  # holding half long: nothing left
    s = np.sign(rng.normal(size=5_000))  # exposure uncorrelated with the market's move: its beta is ~0
    timed = s * m
    np.testing.assert_allclose(timing_returns(timed, m), timed, rtol=0.05, atol=1e-4)  # beta ~ 1/sqrt(n)
    assert np.all(timing_returns(np.zeros(10), rng.normal(size=10)) == 0)  # flat stays flat
    assert np.all(timing_returns(m[:10], np.full(10, 1e-3)) == m[:10])  # a market that does not vary: beta 0
    with pytest.raises(ValueError, match=r"returns \(3,\) and market returns \(4,\) differ"):
        timing_returns(np.zeros(3), np.zeros(4))


SUB_WINDOW = 256
"""The selector's sub-window here (``selection.SUB_WINDOW`` is 2,048; the test sets it smaller: a backtest's
serial length, hence its time, is the sub-window's, and the claims hold at any length)."""


def _scored_market() -> tuple[MarketData, int, int]:
    m = MarketData(random_feature_set(8_000, 5, seed=3))
    m.set_fold(FoldRange(0, 0, 7_000, 7_010, 8_000))
    return m, 500, 3 * SUB_WINDOW + 17  # a held-back window of several sub-windows


def _foresight(m: MarketData, start: int, steps: int) -> ExposurePolicy:
    """Half exposure in the direction of each sub-window's next bar's close-to-close move (it times)."""
    starts, lengths = sub_windows(start, steps, SUB_WINDOW)
    lr = m.log_return.numpy()
    ex = np.zeros((len(starts), max(lengths)), np.float32)
    for w, (s, n) in enumerate(zip(starts, lengths)):
        ex[w, :n] = 0.5 * np.sign(lr[s + 1 : s + 1 + n])
    return ExposurePolicy(torch.from_numpy(ex))


def test_the_held_back_timing_score_is_undefined_for_buy_and_hold_and_keeps_a_timing_policy(monkeypatch):
    monkeypatch.setattr(selection, "SUB_WINDOW", SUB_WINDOW)
    m, start, steps = _scored_market()
    assert len(sub_windows(start, steps, selection.SUB_WINDOW)[0]) == 4  # several sub-windows
    bt = Backtester(m, chunk=64)
    sharpe = HeldBackScore(bt, "torch", bt.bars_per_year, "sharpe")
    timing = HeldBackScore(bt, "torch", bt.bars_per_year, "timing")
    n_windows = len(sub_windows(start, steps, SUB_WINDOW)[0])
    hold = ExposurePolicy(torch.ones(n_windows, SUB_WINDOW + 1))
    hold_sharpe = sharpe(start, steps, hold)  # backtested once, read by both checks below
    assert math.isfinite(hold_sharpe)
    market = timing.market_returns(start, steps)
    assert market.shape == (steps,) and timing.market_returns(start, steps) is market  # backtested once a window
    held = timing(start, steps, hold)
    assert math.isnan(held) or abs(held) < 1e-3 * abs(hold_sharpe) + 1e-6  # nothing but rounding left
    plain, timed = sharpe(start, steps, _foresight(m, start, steps)), timing(start, steps, _foresight(m, start, steps))
    assert plain > 5 and timed == pytest.approx(plain, rel=0.1)


def test_select_score_is_a_config_choice_of_sharpe_or_timing():
    assert default_train_config().train.select_score == "sharpe"
    assert default_train_config(["train.select_score=timing"]).train.select_score == "timing"
    with pytest.raises(ConfigError, match="train.select_score"):
        default_train_config(["train.select_score=sortino"])
    with pytest.raises(ValueError, match="score 'sortino'"):
        HeldBackScore(None, "torch", 252.0, "sortino")


def test_a_timing_scored_run_killed_in_its_first_fold_and_resumed_gives_the_uninterrupted_result(tmp_path):
    """Fresh processes: the buy-and-hold returns the score regresses on are rebuilt after --resume as the
    uninterrupted run built them, so both runs keep the same epochs and end bit for bit alike."""
    cfg = tiny_config(tmp_path, epochs=2, every=1, cache=tmp_path / "cache", select="inner")  # killed after epoch 1 of 2: inside fold 0
    # a 10 % held-back window (half the default) of 1,800 bars (the tiny config's 3,000: fold 0 still trains on
    # more than its 800) and 100-bar validation (its 300): each epoch's selection and each fold's validation
    # score fewer bars; the claim is the same
    text = cfg.read_text().replace('select = "inner"\n', 'select = "inner"\nselect_score = "timing"\ninner_fraction = 0.1\n', 1)
    cfg.write_text(text.replace("bars = 3000\n", "bars = 1800\n", 1).replace("val = 300\n", "val = 100\n", 1))
    assert "bars = 1800" in cfg.read_text() and "val = 100" in cfg.read_text()
    assert "select_score = \"timing\"" in cfg.read_text()
    killed_in_fold_0_then_resumed_equals_uninterrupted(cfg, tmp_path)
    metrics = json.loads((tmp_path / "runs" / "ref" / "folds" / "fold_0" / "metrics.json").read_text())
    assert metrics["selection"]["epoch"] >= 0 and metrics["selection"]["inner_steps"] > 0
