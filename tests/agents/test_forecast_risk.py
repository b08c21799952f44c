"""The forecast execution's risk term from the held-back error (``agents.forecast.evaluate.error_variance``):
with ``train.select = "inner"`` v is the median forecast's mean squared error against its target over
the held-back window's bars whose target lies inside it (normalised with the training part's
statistics), the band prices it, nothing past the window is read, ``select = "last"`` falls back to
the training bars, and a run records the source in each fold's ``learner_eval``."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from foxhunt.agents.forecast.evaluate import error_variance, training_error_variance
from foxhunt.folds import FoldRange
from tests.agents.forecast_helpers import edge_market, small_forecast

H = 3
PART = FoldRange(0, 0, 2_390, 3_010, 4_000)  # the training part: bars 0 … 2389 (a purge of 10 before the window)
WINDOW = (2_400, 3_000)  # the held-back window: bars 2400 … 2999


def _trained(risk: float = 2.0):
    market = edge_market()
    t = small_forecast(market, horizon=H, risk_aversion=risk)
    t.reset_for_fold(PART)
    for _ in range(2):
        t.train_epoch()
    t.drain()
    t.set_held_back(WINDOW)
    return t, market


@torch.no_grad()
def _loop_variance(t, market, first: int, last: int) -> float:
    """The mean squared error over bars first … last, one bar at a time in float64."""
    net = copy.deepcopy(t.learner.net).double()
    lins = [*net.linears(), net.out]
    mean, inv = market.norm_mean.double(), market.norm_inv_std.double()
    sig = float(market.median_abs_return) * math.sqrt(math.pi / 2) * math.sqrt(H)
    total, n = 0.0, 0
    for b in range(first, last + 1):
        x = (market.features[b].double() - mean) * inv
        for lin in lins[:-1]:
            x = torch.nn.functional.leaky_relu(lin(x), 0.01)
        f = float(lins[-1](x)[t.cfg.median_output])
        y = float(market.log_return[b + 1: b + 1 + H].double().sum()) / sig
        total += (f - y) ** 2
        n += 1
    return total / n


def test_the_held_back_variance_is_the_float64_mean_squared_error_over_the_windows_bars_with_targets_inside_it():
    t, market = _trained()
    v, source, bars = t.error_variance()
    assert (source, bars) == ("held_back", WINDOW[1] - H - WINDOW[0])  # bars 2400 … 2996: targets end at bar 2999
    assert v == pytest.approx(_loop_variance(t, market, WINDOW[0], WINDOW[1] - 1 - H), rel=1e-5)
    assert v != pytest.approx(training_error_variance(t.learner.net, market, H), rel=1e-3)  # another set of bars


def test_the_band_prices_the_held_back_variance():
    t, _ = _trained(risk=2.0)
    v = t.error_variance()[0]
    assert v > 0 and t.band().risk == pytest.approx(2.0 * v, rel=1e-12)


def test_bars_after_the_held_back_window_change_nothing_and_its_last_target_bar_does():
    t, market = _trained()
    v = t.error_variance()[0]
    band = t.band()
    market.log_return[WINDOW[1]:] = 1e3  # poisoned returns and features after the window's end
    market.features[WINDOW[1]:] = 1e6
    assert t.error_variance() == (v, "held_back", WINDOW[1] - H - WINDOW[0])
    assert t.band() == band
    market.log_return[WINDOW[1] - 1] += 1.0  # the window's last bar: the target of bar end − 1 − h reads it
    assert t.error_variance()[0] != v


def test_without_a_held_back_window_the_variance_falls_back_to_the_training_bars():
    t, market = _trained()
    t.set_held_back(None)  # train.select = "last"
    v, source, bars = t.error_variance()
    assert source == "training" and bars == PART.train_len - H
    assert v == training_error_variance(t.learner.net, market, H)
    assert t.band().risk == pytest.approx(2.0 * v, rel=1e-12)
    assert error_variance(t.learner.net, market, H, 0, [(WINDOW[0], WINDOW[0] + H)])[1] == "training"  # no bar's target fits


def test_the_runner_records_the_held_back_error_in_each_folds_learner_eval(tmp_path):
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.run_dir import create_run_dir
    from foxhunt.train.runner import WalkForwardRunner
    from tests.train.test_cli_train_forecast import forecast_config

    cfg = load_config(forecast_config(tmp_path, epochs=1, every=0, select="inner"), ["forecast.risk_aversion=1.0"])
    prepared = prepare_market(cfg)
    runner = WalkForwardRunner(prepared)
    run_dir, resolved = create_run_dir(cfg, prepared, "risk")
    runner.use_config(resolved)
    runner.run(run_dir)
    for k, fold in enumerate(prepared.folds):
        ev = json.loads((run_dir / "folds" / f"fold_{k}" / "metrics.json").read_text())["learner_eval"]
        inner = int(fold.train_len * cfg.train.inner_fraction)
        assert ev["error_source"] == "held_back" and ev["error_bars"] == inner - ev["horizon"]
        assert ev["error_variance"] > 0
