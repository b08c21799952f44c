"""The mirrored market (``train.mirror``): every log return negated, range, volume and time kept, and
the features built from it flip the direction columns and keep the volatility and volume columns."""

from __future__ import annotations

import numpy as np

from foxhunt.data.mirror import mirror_bars, mirror_extra
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.validate import validate_bars
from foxhunt.features.cache import load_or_build
from foxhunt.features.extra import with_extras


def test_mirror_bars_negates_every_log_return_and_keeps_the_first_close_volume_and_timestamps():
    bars = generate_bars(2_000, seed=4, bar_seconds=3_600)
    m = mirror_bars(bars)
    np.testing.assert_allclose(np.diff(np.log(m.close)), -np.diff(np.log(bars.close)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.log(m.open / m.close), -np.log(bars.open / bars.close), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.log(m.high / m.low), np.log(bars.high / bars.low), rtol=0, atol=1e-12)
    assert m.close[0] == bars.close[0]
    assert np.array_equal(m.volume, bars.volume) and np.array_equal(m.timestamps, bars.timestamps)
    assert bool(np.all(m.high >= np.maximum(m.open, m.close))) and bool(np.all(m.low <= np.minimum(m.open, m.close)))
    validate_bars(m)  # a valid bar series under every rule of the loader
    back = mirror_bars(m)
    np.testing.assert_allclose(back.close, bars.close, rtol=1e-12)


def test_features_of_the_mirror_flip_direction_columns_and_keep_volatility_and_volume_columns(tmp_path):
    bars = generate_bars(3_000, seed=3, bar_seconds=3_600)
    f = with_extras(load_or_build(bars, tmp_path).features, [120], [30, 300])
    g = with_extras(load_or_build(mirror_bars(bars), tmp_path).features, [120], [30, 300])
    w = f.warmup
    col = {n: i for i, n in enumerate(f.names)}
    for name in ("ret_log_1", "ret_log_60", "mom_vol_adj_20", "mom_vol_adj_120", "ema_mom_30", "ema_mom_300"):
        a, b = f.features[w:, col[name]].double(), g.features[w:, col[name]].double()
        assert float(a.abs().max()) > 0 and float((a + b).abs().max()) <= 1e-5 * float(a.abs().max()), name
    for name in ("rvol_20", "parkinson_vol_20", "ret_kurt_20", "volume_z_20", "ema_vol_30", "ema_vol_300"):
        a, b = f.features[w:, col[name]].double(), g.features[w:, col[name]].double()
        assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max()), name


def test_mirror_extra_negates_a_scenarios_direction_columns():
    out = mirror_extra({"signal_x": np.array([0.5, -1.0, 0.0])})
    assert list(out) == ["signal_x"] and np.array_equal(out["signal_x"], [-0.5, 1.0, 0.0])
