"""The procedural market family: every draw's oracle equals an independent float64 loop over its
recorded latent state; the returns carry the stated edge (and none for no-edge draws); draws are
stratified, deterministic in their seed, and the development and held-out seed sets are disjoint;
hourly bars are annualised and reward-rescaled as hourly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.scorecard.family import (DEVELOPMENT, FAMILIES, HELD_OUT, LAYOUTS, PATTERN, draw, draws, horizon_stratum,
                                      seed_of, size_for)
from foxhunt.scorecard.family.forms import EDGE_FORMS, FORMS, H_MAX, H_MIN, horizon_cap

THRESHOLDS_KEY = "thresholds"


def _sgn(x: float) -> float:
    return 1.0 if x > 0 else -1.0 if x < 0 else 0.0


def _loop_oracles(form: str, lat: dict[str, np.ndarray], p: dict, n: int) -> dict[str, list[float]]:
    """Each form's oracle rules, recomputed bar by bar in plain Python floats from the latent arrays."""
    th = p[THRESHOLDS_KEY]
    out: dict[str, list[float]] = {}
    if form == "no_edge":
        return {"oracle_flat": [0.0] * n}
    if form == "next_bar":
        return {"oracle": [_sgn(float(x)) for x in lat["r"]]}
    if form == "vol_state":
        cs = float(p["form_params"]["calm_sign"])
        return {"oracle": [cs if float(c) > 0 else -cs for c in lat["calm"]]}
    for theta in th:
        key = f"oracle_theta{theta:g}"
        rule = []
        for t in range(n):
            if form == "drift":
                m = float(lat["m"][t])
                rule.append(_sgn(m) * (1.0 if abs(m) > theta else 0.0))
            elif form == "mean_revert":
                u = float(lat["u"][t])
                rule.append(-_sgn(u) * (1.0 if abs(u) > theta else 0.0))
            elif form == "volume":
                w = float(lat["w"][t])
                rule.append(_sgn(float(lat["r"][t])) * _sgn(w) * (1.0 if abs(w) > theta else 0.0))
            elif form == "regime":
                m = float(lat["m"][t])
                rule.append(float(lat["g"][t]) * _sgn(m) * (1.0 if abs(m) > theta else 0.0))
            else:
                raise AssertionError(form)
        out[key] = rule
    for b in p["bands"]:  # hysteresis: +1 once x > b, -1 once x < -b, held; 0 before the first crossing
        state, rule = 0.0, []
        for t in range(n):
            x = float(lat["u" if form == "mean_revert" else "m"][t])
            if x > b:
                state = 1.0
            elif x < -b:
                state = -1.0
            if form == "mean_revert":
                rule.append(-state)
            elif form == "regime":
                rule.append(float(lat["g"][t]) * state)
            else:
                rule.append(state)
        out[f"oracle_band{b:g}"] = rule
    return out


@pytest.mark.parametrize("family", ["dev", "heldout"])
def test_every_draws_oracle_equals_a_float64_loop_over_its_latent_state(family):
    for sc in draws(family, 12, "tiny"):
        form = sc.params["form"]
        want = _loop_oracles(form, sc.latent, sc.params, len(sc.bars))
        assert set(want) == set(sc.oracles), sc.name
        for name, rule in want.items():
            got = sc.oracles[name]
            assert got.dtype == np.float64 and got.shape == (len(sc.bars),)
            assert np.array_equal(got, np.array(rule)), (sc.name, name)
            assert np.all(np.abs(got) <= 1.0)
        if "r" in sc.latent:  # the recorded returns are the bars' close-to-close log returns
            lr = np.diff(np.log(sc.bars.close))
            np.testing.assert_allclose(lr, sc.latent["r"][1:], rtol=0, atol=1e-9)


def _t_stat(e: np.ndarray, lr: np.ndarray, start: int = 303) -> float:
    pnl = e[start:-1] * lr[start + 1 :]
    return float(pnl.mean() / pnl.std() * math.sqrt(pnl.shape[0])) if pnl.std() > 0 else 0.0


def test_the_returns_carry_the_stated_edge_and_no_edge_draws_carry_none():
    """On long (gpu-size) draws the best oracle's P&L before costs is positive by > 5 SE; on no-edge
    draws the oracle is flat and neither the last bar's sign nor a 100-bar momentum earns (|t| < 4)."""
    from foxhunt.backtest.quant_rules import signal

    for family in ("dev", "heldout"):
        for i in range(12):
            sc = draw(family, i, "gpu")
            lr = np.concatenate([[0.0], np.diff(np.log(sc.bars.close))])
            if sc.kind == "no_edge":
                assert not any(v.any() for v in sc.oracles.values())
                assert abs(_t_stat(np.sign(lr), lr)) < 4.0, sc.name
                assert abs(_t_stat(np.sign(signal(lr, 100)), lr)) < 4.0, sc.name
                continue
            e = sc.oracles[sc.params["best_oracle"]]
            assert _t_stat(e, lr) > 5.0, (sc.name, sc.params["strength"])


def test_edge_strengths_are_calibrated_to_a_clear_but_not_trivial_oracle_sharpe_after_costs():
    from foxhunt.scorecard.family.forms import TARGET_SHARPE

    for family in ("dev", "heldout"):
        for sc in draws(family, 24, "cpu"):
            p = sc.params
            if p["kind"] == "no_edge":
                assert p["strength"] == 0.0 and p["target_sharpe"] == 0.0
                continue
            lo, hi = TARGET_SHARPE[p["interval"]]
            assert p["reached"] and lo <= p["target_sharpe"] <= hi
            # bisection from above; the sign-feedback forms' turnover moves in small steps with the strength
            assert p["target_sharpe"] <= p["expected_oracle_sharpe_best"] <= 1.05 * p["target_sharpe"]
            assert 0.0 < p["strength"] <= 1.5


def test_any_12_consecutive_draws_hold_3_no_edge_draws_and_every_edge_form():
    assert len(PATTERN) == 12
    for start in range(0, 30):
        window = [PATTERN[i % 12] for i in range(start, start + 12)]
        assert window.count("no_edge") == 3
        assert set(EDGE_FORMS) <= set(window) and window.count("drift") >= 2
    # the drift draws of a block spread over the thirds of the log horizon range
    for family in ("dev", "heldout"):
        ds = draws(family, 24, "cpu")
        assert [d.params["form"] for d in ds] == [PATTERN[i % 12] for i in range(24)]
        assert {d.kind for d in ds} == {"edge", "no_edge"} and sum(d.kind == "no_edge" for d in ds) == 6
        cap = min(H_MAX, horizon_cap(LAYOUTS["cpu"]["minute"].train))
        for d in ds:
            k = horizon_stratum(d.params["index"])
            if k is None:
                continue
            u = math.log(d.params["horizon"] / H_MIN) / math.log(cap / H_MIN)
            assert k / 3 <= u <= (k + 1) / 3, (d.name, d.params["horizon"])
        # parameters vary with the seed: the same form in two blocks draws different markets
        a, b = ds[0], ds[12]
        assert a.params["form"] == b.params["form"] == "drift"
        assert a.params["strength"] != b.params["strength"] and not np.array_equal(a.bars.close[:100], b.bars.close[:100])
        assert {d.params["interval"] for d in ds} >= {"minute", "hourly", "daily"} and len({d.params["costs"] for d in ds}) == 3
        assert {d.params["noise"]["vol_model"] for d in ds} == {"garch", "sv"}


def test_the_development_and_held_out_seed_sets_are_disjoint():
    assert set(FAMILIES) == {"dev", "heldout"}
    assert DEVELOPMENT.stop <= HELD_OUT.start or HELD_OUT.stop <= DEVELOPMENT.start
    assert not set(DEVELOPMENT[:5000]) & set(HELD_OUT[:5000])
    assert seed_of("dev", 3) == DEVELOPMENT[3] and seed_of("heldout", 3) == HELD_OUT[3]
    a, b = draw("dev", 0, "tiny"), draw("heldout", 0, "tiny")
    assert a.seed != b.seed and not np.array_equal(a.bars.close, b.bars.close)
    with pytest.raises(ValueError):
        seed_of("test", 0)


def test_a_draw_is_deterministic_in_its_family_index_and_size():
    a, b = draw("heldout", 7, "tiny"), draw("heldout", 7, "tiny")
    assert a.name == b.name and a.params == b.params and a.env == b.env
    for col in ("timestamps", "open", "high", "low", "close", "volume"):
        assert np.array_equal(getattr(a.bars, col), getattr(b.bars, col))
    assert all(np.array_equal(a.oracles[k], b.oracles[k]) for k in a.oracles)
    assert a.bars.content_hash() != draw("heldout", 8, "tiny").bars.content_hash()


def test_layouts_give_each_size_and_interval_its_folds():
    from foxhunt.folds import walk_forward
    from foxhunt.scorecard.build import SIZES

    for size, by in LAYOUTS.items():
        for interval, lay in by.items():
            folds = walk_forward(np.arange(lay.bars), lay.train, lay.val, purge=60, origin=303, max_folds=lay.folds)
            assert len(folds) == lay.folds and folds[0].train_end - folds[0].train_start == lay.train, (size, interval)
            if interval == "daily":
                assert lay.bars <= 60_000  # business days from 2024 end in 2262 near 62 K
    sc = draw("dev", 4, "tiny")
    sz = size_for(SIZES["cpu"], sc)
    assert (sz.bars, sz.train, sz.val, sz.max_folds, sz.epochs) == (2_600, 1_200, 400, 2, SIZES["cpu"].epochs)
    assert sz.n_bars(86_400) == 2_600


def test_hourly_draws_are_annualised_and_reward_rescaled_as_hourly_bars():
    from foxhunt.backtest.annualisation import infer_bars_per_year
    from foxhunt.scorecard.build import SIZES, _bar_seconds, reward_rescale, scenario_config
    from foxhunt.train.config import DEFAULT_TRAIN_TOML

    import tomllib

    sc = next(d for d in draws("dev", 12, "tiny") if d.params["interval"] == "hourly")
    assert _bar_seconds(sc) == 3_600
    assert infer_bars_per_year(sc.bars.timestamps) == pytest.approx(8_766.0, rel=1e-3)
    base = tomllib.loads(DEFAULT_TRAIN_TOML)  # daily bars, reward_scale 100
    assert reward_rescale(base, 3_600) == pytest.approx(math.sqrt(8_766.0 / 252.0))
    cfg = scenario_config(base, sc, size_for(SIZES["tiny"], sc))
    assert cfg.data.bar_seconds == 3_600
    assert cfg.env.reward_scale == pytest.approx(100.0 * math.sqrt(8_766.0 / 252.0))
    assert (cfg.env.cost_bps, cfg.env.spread_bps, cfg.env.impact_eta) == tuple(sc.env[k] for k in ("cost_bps", "spread_bps", "impact_eta"))
    assert (cfg.folds.train, cfg.folds.val, cfg.folds.max_folds) == (1_200, 400, 2)
    assert sc.bars.is_intraday()


def test_family_forms_cover_the_brief():
    assert set(FORMS) == {"next_bar", "drift", "mean_revert", "vol_state", "volume", "regime", "no_edge"}


def test_half_the_minute_draws_become_five_minute_draws_and_every_other_parameter_is_drawn_as_before():
    from foxhunt.scorecard.family import INTERVALS, TARGET_SHARPE

    ds = draws("dev", 48, "tiny")
    kinds = [d.params["interval"] for d in ds]
    fives = [d for d in ds if d.params["interval"] == "five_minute"]
    minutes = kinds.count("minute")
    assert fives and minutes and 0.25 < len(fives) / (len(fives) + minutes) < 0.75
    for d in fives:
        assert d.params["bar_seconds"] == INTERVALS["five_minute"] == 300
        assert int(np.median(np.diff(d.bars.timestamps))) == 300 * 10**9
        lo, hi = TARGET_SHARPE["five_minute"]
        assert d.kind == "no_edge" or lo - 1e-9 <= d.params["target_sharpe"] <= hi + 1e-9


def test_intraday_gpu_draws_have_a_million_bars_in_five_folds_of_100k():
    lay = LAYOUTS["gpu"]
    for interval in ("minute", "five_minute", "hourly"):
        assert (lay[interval].bars, lay[interval].train, lay[interval].val, lay[interval].folds) == (1_000_000, 400_000, 100_000, 5)
