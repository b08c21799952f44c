"""features.long_momentum: the extra vol-adjusted momentum columns (foxhunt.features.extra) against a
float64 loop, their place in the feature set and model files, and the user paths that use them
(train, then backtest --model, in fresh processes; bad horizons refused in one line)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from foxhunt.agents.model_io import load_model
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars
from foxhunt.features.extra import long_momentum_in, vol_adjusted_momentum, with_long_momentum
from foxhunt.features.spec import FEATURE_SPEC_VERSION, N_FEATURES, WARMUP, build_features
from tests.cli_run import refused_line, run_cli
from tests.tiny import tiny_config


def _reference(close: np.ndarray, w: int) -> np.ndarray:
    """The float64 loop: log(C[t]/C[t-w]) / (sample std of the w one-bar log returns ending at t × √w)."""
    lr = np.diff(np.log(close))  # lr[i] = log(C[i+1] / C[i])
    out = np.zeros(close.shape[0])
    for t in range(w, close.shape[0]):
        window = lr[t - w:t]
        out[t] = np.log(close[t] / close[t - w]) / (window.std(ddof=1) * np.sqrt(w))
    return out


@pytest.mark.parametrize("w", [2, 7, 120])
def test_vol_adjusted_momentum_equals_a_float64_loop_and_is_zero_before_its_window(w: int) -> None:
    rng = np.random.default_rng(w)
    close = np.exp(np.cumsum(rng.normal(0.0, 0.01, 400))) * 50.0
    got = vol_adjusted_momentum(close, w)
    np.testing.assert_allclose(got, _reference(close, w), rtol=1e-9, atol=1e-12)
    assert (got[:w] == 0.0).all()


def test_vol_adjusted_momentum_is_zero_where_the_window_does_not_vary_and_on_short_series() -> None:
    close = np.concatenate([np.full(50, 10.0), np.linspace(10.0, 11.0, 20)])
    got = vol_adjusted_momentum(close, 10)
    assert np.isfinite(got).all() and (got[10:50] == 0.0).all()
    assert (vol_adjusted_momentum(close[:5], 10) == 0.0).all()


def test_long_momentum_columns_follow_the_spec_columns_and_are_named_in_the_spec_version() -> None:
    fs = build_features(generate_bars(700, seed=3))
    out = with_long_momentum(fs, [250, 120])
    assert out.features.shape == (700, N_FEATURES + 2)
    assert torch.equal(out.features[:, :N_FEATURES], fs.features)
    assert out.names[N_FEATURES:] == ("mom_vol_adj_250", "mom_vol_adj_120")
    assert out.spec_version == FEATURE_SPEC_VERSION + "+mom_vol_adj_250,mom_vol_adj_120"
    want = torch.as_tensor(_reference(fs.ohlc[:, 3].numpy(), 120)).to(torch.float32)
    want[:WARMUP] = 0.0  # rows before the spec's warm-up are 0, as for every column
    assert torch.equal(out.features[:, N_FEATURES + 1], want)
    assert long_momentum_in(out.names, N_FEATURES) == (250, 120)
    assert with_long_momentum(fs, []) is fs
    assert long_momentum_in(fs.names, N_FEATURES) == ()


@pytest.mark.parametrize("extra, columns, spec", [
    ("long_momentum = [120]", ("mom_vol_adj_120",), "+mom_vol_adj_120"),
    ("ema_horizons = [50, 500]", ("ema_mom_50", "ema_vol_50", "ema_mom_500", "ema_vol_500"), "+ema_mom_50,ema_vol_50,ema_mom_500,ema_vol_500"),
])
def test_a_model_trained_with_extra_columns_is_backtested_on_the_same_columns(tmp_path, extra, columns, spec) -> None:
    """`foxhunt train` with features.long_momentum / ema_horizons writes models over 51 + the extra
    columns, and `foxhunt backtest --model` on another bar file rebuilds them (fresh processes)."""
    cfg = tiny_config(tmp_path, epochs=1, every=0)
    # one fold validated on 100 bars (the tiny config's two of 300): its model is the one backtested below
    cfg.write_text(cfg.read_text().replace("[features]\n", f"[features]\n{extra}\n", 1)
                   .replace("val = 300\n", "val = 100\n", 1))
    res = run_cli(tmp_path, "train", "--config", str(cfg), "--name", "x", "--folds", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    model = next((tmp_path / "runs" / "x" / "folds").glob("fold_*/model.safetensors"))
    _, _, meta = load_model(model)
    assert meta.feature_names[N_FEATURES:] == columns
    assert meta.spec_version == FEATURE_SPEC_VERSION + spec
    bars = write_bars(generate_bars(700, seed=5), tmp_path / "bars.parquet")  # ~400 steps after the warm-up
    out = tmp_path / "bt"
    res = run_cli(tmp_path, "backtest", "--model", str(model), "--data", str(bars), "--out", str(out), "--device", "cpu",
                  "--cache-dir", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(json.loads((out / "metrics.json").read_text())) == 2


@pytest.mark.parametrize("value, rule", [
    ("[60]", "horizon 60: the spec already has mom_vol_adj_60"),
    ("[1]", "horizon 1: must be within 2 … 100000 bars"),
    ("[120, 120]", "[120, 120]: horizons must be distinct"),
])
def test_bad_long_momentum_horizons_are_refused_in_one_line_with_exit_2(tmp_path, value: str, rule: str) -> None:
    cfg = tiny_config(tmp_path, epochs=1)
    line = refused_line(tmp_path, ["train", "--config", str(cfg), "--set", f"features.long_momentum={value}"])
    assert "features.long_momentum" in line and rule in line, line


# --------------------------------------------------------------------- multi-scale EMA columns
def _ema_loop(x, lookback, x0=0.0):
    out, e, a = [], x0, 1.0 / lookback
    for v in x:
        e = (1.0 - a) * e + a * float(v)
        out.append(e)
    return np.array(out)


@pytest.mark.parametrize("h", [3, 30, 700])
def test_ema_columns_equal_a_float64_loop(h: int) -> None:
    from foxhunt.features.extra import VOL_FLOOR_LOOKBACK, ema_log_vol, ema_zscore

    r = np.random.default_rng(h).standard_normal(1_500) * 0.01
    e = _ema_loop(r, h)
    var = _ema_loop(r * r, max(h, VOL_FLOOR_LOOKBACK), r[0] ** 2)
    a = 1.0 / h
    want = e / np.sqrt(var * a / (2 - a))
    np.testing.assert_allclose(ema_zscore(r, h), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ema_log_vol(r, h), 0.5 * np.log(_ema_loop(r * r, h, r[0] ** 2)), rtol=1e-9)


def test_ema_columns_are_causal_and_a_unit_z_score_under_no_edge() -> None:
    from foxhunt.features.extra import ema_log_vol, ema_zscore

    r = np.random.default_rng(0).standard_normal(60_000) * 0.003
    later = r.copy()
    later[40_000:] = 5.0 * np.random.default_rng(1).standard_normal(20_000)  # change only the future
    for h in (10, 300, 3_000):
        z, z2 = ema_zscore(r, h), ema_zscore(later, h)
        assert np.array_equal(z[:40_000], z2[:40_000]) and np.array_equal(ema_log_vol(r, h)[:40_000], ema_log_vol(later, h)[:40_000])
        if h <= 300:  # an EMA in units of its no-edge std (3,000 bars: too few independent windows here)
            assert 0.8 < float(np.std(z[5 * h:40_000])) < 1.2


def test_ema_horizon_columns_follow_the_spec_and_long_momentum_and_are_read_back_from_names() -> None:
    from foxhunt.features.extra import extras_in, with_extras

    fs = build_features(generate_bars(3_000, seed=2))
    out = with_extras(fs, [120], [30, 3000])
    assert out.names[N_FEATURES:] == ("mom_vol_adj_120", "ema_mom_30", "ema_vol_30", "ema_mom_3000", "ema_vol_3000")
    assert out.features.shape == (3_000, N_FEATURES + 5) and bool(torch.isfinite(out.features).all())
    assert out.spec_version == FEATURE_SPEC_VERSION + "+mom_vol_adj_120+ema_mom_30,ema_vol_30,ema_mom_3000,ema_vol_3000"
    assert extras_in(out.names, N_FEATURES) == ((120,), (30, 3000))
    assert extras_in(with_extras(fs, [], [5]).names, N_FEATURES) == ((), (5,))


def test_bad_ema_horizons_are_refused_in_one_line_with_exit_2(tmp_path) -> None:
    cfg = tiny_config(tmp_path, epochs=1)
    line = refused_line(tmp_path, ["train", "--config", str(cfg), "--set", "features.ema_horizons=[1]"])
    assert "features.ema_horizons" in line and "horizon 1: must be within 2 … 1000000 bars" in line, line
