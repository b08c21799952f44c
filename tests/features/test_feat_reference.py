"""Every feature agrees with an independent float64 loop reference (tests/features/feature_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.features import indicators as ind
from foxhunt.features.spec import WARMUP, build_features, feature_names

from .conftest import gbm_bars
from .feature_reference import (
    atr_ref,
    bollinger_ref,
    ema_loop,
    macd_ref,
    reference_features,
    rsi_ref,
    stochastic_ref,
    zscore_ref,
)

N = 900
_BARS = gbm_bars(N, seed=21, bar_seconds=600)


@pytest.fixture(scope="module")
def built() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    fs = build_features(_BARS)
    got = {n: fs.features[:, i].numpy().astype(np.float64) for i, n in enumerate(fs.names)}
    return got, reference_features(_BARS)


@pytest.mark.parametrize("name", feature_names())
def test_built_feature_matches_float64_reference_after_warmup(name: str, built) -> None:  # noqa: ANN001
    got, ref = built
    g, r = got[name][WARMUP:], ref[name][WARMUP:]
    scale = max(np.max(np.abs(r)), 1e-30)
    # float32 output of a float64 computation: ~1e-7 relative, plus a little for cancellation.
    np.testing.assert_allclose(g, r, rtol=2e-6, atol=2e-6 * scale, err_msg=name)


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))


o, h, lo, c, v = _BARS.open, _BARS.high, _BARS.low, _BARS.close, _BARS.volume
TIGHT = dict(rtol=1e-10, atol=1e-12)


def test_rsi_matches_wilder_loop_in_float64() -> None:
    for n in (7, 14):
        np.testing.assert_allclose(ind.rsi(_t(c), n).numpy(), rsi_ref(c, n), **TIGHT)


def test_macd_line_signal_hist_match_ema_loops_in_float64() -> None:
    for got, ref in zip(ind.macd(_t(c)), macd_ref(c)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9, atol=1e-13)


def test_atr_matches_wilder_true_range_loop_in_float64() -> None:
    np.testing.assert_allclose(ind.atr(_t(h), _t(lo), _t(c), 14).numpy(), atr_ref(h, lo, c, 14), **TIGHT)


def test_bollinger_pctb_and_bandwidth_match_window_loop_in_float64() -> None:
    for got, ref in zip(ind.bollinger(_t(c), 20), bollinger_ref(c, 20)):
        np.testing.assert_allclose(got.numpy()[19:], ref[19:], rtol=1e-9, atol=1e-12)


def test_stochastic_k_and_d_match_window_loop_in_float64() -> None:
    for got, ref in zip(ind.stochastic(_t(h), _t(lo), _t(c), 14, 3), stochastic_ref(h, lo, c, 14, 3)):
        np.testing.assert_allclose(got.numpy()[15:], ref[15:], **TIGHT)


def test_ema_span_matches_loop_in_float64() -> None:
    for n in (5, 20, 100):
        np.testing.assert_allclose(ind.ema_span(_t(c), n).numpy(), ema_loop(c, 2 / (n + 1)), rtol=1e-12, atol=0)


def test_volume_zscore_matches_two_pass_window_loop_in_float64() -> None:
    for w in (20, 60):
        np.testing.assert_allclose(ind.volume_zscore(_t(v), w).numpy()[w - 1 :], zscore_ref(v, w)[w - 1 :], rtol=1e-8, atol=1e-10)
