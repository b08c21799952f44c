"""Built-in settings that follow the bar interval (foxhunt.train.interval_presets, issue 38 part 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.data.bars import Bars
from foxhunt.train.config import default_train_config
from foxhunt.train.interval_presets import PRESETS, REWARD_STD, interval_preset, per_bar_sigma, round_sig, universe_preset


def walk(n: int, seconds: int, sigma: float, seed: int = 0) -> Bars:
    rng = np.random.default_rng(seed)
    c = 100 * np.exp(np.cumsum(rng.normal(0, sigma, n)))
    ts = np.arange(n, dtype=np.int64) * seconds * 10**9
    return Bars(ts, c, c * 1.001, c * 0.999, c, np.ones(n))


@pytest.mark.parametrize("seconds, name", [(86_400, "daily"), (7 * 86_400, "daily"), (72_000, "daily"), (3_600, "hourly"),
                                           (1_800, "hourly"), (900, "intraday"), (60, "intraday"), (1, "intraday")])
def test_the_bar_spacing_picks_the_row(seconds: int, name: str) -> None:
    p = interval_preset(walk(400, seconds, 0.01))
    assert p.name == name
    assert {k: v for k, v in p.values.items() if k != "env.reward_scale"} == PRESETS[name]


def test_reward_scale_is_reward_std_over_the_first_halfs_per_bar_sigma() -> None:
    bars = walk(2000, 3_600, 0.002)
    half = np.diff(np.log(bars.close[:1001]))
    assert per_bar_sigma(bars) == pytest.approx(float(np.std(half)), rel=1e-12)
    p = interval_preset(bars)
    assert p.values["env.reward_scale"] == round_sig(REWARD_STD / float(np.std(half)))
    assert 400 <= p.values["env.reward_scale"] <= 600  # sigma 0.2 %


def test_a_universes_reward_scale_follows_its_median_symbol_not_its_first() -> None:
    # a calm first symbol among volatile peers: one pooled scale must suit the typical symbol
    bars = [walk(1000, 86_400, 0.01, seed=0), walk(1000, 86_400, 0.2, seed=1), walk(1000, 86_400, 0.1, seed=2)]
    sigmas = sorted(per_bar_sigma(b) for b in bars)
    p = universe_preset(bars)
    assert p.sigma == pytest.approx(sigmas[1], rel=1e-12)
    assert p.values["env.reward_scale"] == round_sig(REWARD_STD / sigmas[1])
    assert p.name == "daily" and p.symbols == 3
    assert "the median over 3 symbols" in p.line()


def test_the_second_half_does_not_set_the_scale() -> None:
    a, b = walk(1000, 60, 0.001), walk(1000, 60, 0.001)
    wild = Bars(b.timestamps, b.open.copy(), b.high.copy(), b.low.copy(), b.close.copy(), b.volume)
    wild.close[600:] *= np.exp(np.random.default_rng(5).normal(0, 0.05, 400))
    assert interval_preset(a).values["env.reward_scale"] == interval_preset(wild).values["env.reward_scale"]


def test_a_decision_interval_in_a_row_divides_the_scale_by_its_root(monkeypatch: pytest.MonkeyPatch) -> None:
    bars = walk(1000, 60, 0.001)
    base = interval_preset(bars).values["env.reward_scale"]
    monkeypatch.setitem(PRESETS, "intraday", {**PRESETS["intraday"], "env.decision_interval": 4})
    p = interval_preset(bars)
    assert p.values["env.decision_interval"] == 4
    assert p.values["env.reward_scale"] == pytest.approx(round_sig(REWARD_STD / (per_bar_sigma(bars) * math.sqrt(4))))
    assert p.values["env.reward_scale"] == pytest.approx(base / 2, rel=0.05)


def test_flat_prices_keep_the_built_in_reward_scale() -> None:
    ts = np.arange(50, dtype=np.int64) * 86_400 * 10**9
    one = np.ones(50)
    p = interval_preset(Bars(ts, one, one, one, one, one))
    assert p.sigma == 0 and "env.reward_scale" not in p.values


def test_the_preset_goes_over_the_built_in_config_and_set_goes_over_the_preset() -> None:
    p = interval_preset(walk(1000, 60, 0.001))
    cfg = default_train_config(["env.episode_length=300"], preset=p.as_sections())
    assert cfg.env.episode_length == 300 and cfg.env.reward_scale == p.values["env.reward_scale"]
    assert cfg.dqn.gamma == default_train_config().dqn.gamma  # untouched keys stay built in
    line = p.line(["env.episode_length=300"])
    assert line.startswith("settings: built-in for intraday bars (every 1 min; foxhunt.train.interval_presets): "
                           "env.episode_length = 1024 (--set wins), train.decision_grid = [1, 16], train.ensemble = 2, "
                           "train.select = inner, env.reward_scale = ")
    assert (cfg.train.decision_grid, cfg.train.ensemble, cfg.train.select) == ([1, 16], 2, "inner")
    assert line.endswith(f"; reward scale = 1 / per-bar σ {p.sigma:.3%} of the first half")


def test_round_sig_keeps_two_significant_figures() -> None:
    assert [round_sig(x) for x in (83.6, 2512.0, 0.01234, 1.0)] == [84.0, 2500.0, 0.012, 1.0]
