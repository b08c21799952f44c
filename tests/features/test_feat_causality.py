"""Causality: features never look ahead, bitwise, and targets are labels only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.features.spec import WARMUP, build_features

from .conftest import gbm_bars, with_prices


def _bars_with_pathologies(n: int) -> "object":
    """GBM bars with a flat stretch, zero-range bars and a no-trade stretch, to exercise every guard."""
    b = gbm_bars(n, seed=11)
    o, h, lo, c, v = (a.copy() for a in (b.open, b.high, b.low, b.close, b.volume))
    o[1500:1600] = h[1500:1600] = lo[1500:1600] = c[1500:1600] = c[1499]  # constant price
    h[2000:2100:3] = lo[2000:2100:3] = o[2000:2100:3] = c[2000:2100:3]  # zero-range bars
    v[2500:2700] = 0.0  # nothing traded
    return with_prices(b, o, h, lo, c, v)


def test_features_of_truncated_bars_are_bitwise_equal_at_20_random_cuts() -> None:
    bars = _bars_with_pathologies(4000)
    full = build_features(bars).features
    cuts = np.random.default_rng(2024).choice(np.arange(2, len(bars)), size=20, replace=False)
    for cut in sorted(int(c) for c in cuts):
        part = build_features(bars.slice(0, cut)).features
        assert torch.equal(part, full[:cut]), f"cut {cut}: rows before the cut changed"


def test_generated_market_features_are_finite_and_bitwise_causal() -> None:
    synthetic = pytest.importorskip("foxhunt.data.synthetic")
    bars = synthetic.generate_bars(6000, seed=7, bar_seconds=60)
    full = build_features(bars)
    assert torch.isfinite(full.features).all() and torch.all(full.features[:WARMUP] == 0)
    for cut in (WARMUP + 1, 1024, 3071, 5999):
        assert torch.equal(build_features(bars.slice(0, cut)).features, full.features[:cut]), cut


def test_changing_future_bars_leaves_past_features_unchanged_but_changes_targets() -> None:
    bars = gbm_bars(1500, seed=3)
    t0 = 900
    scale = np.ones(len(bars))
    scale[t0 + 1 :] = 1.05  # every price after t0 jumps 5 %
    moved = with_prices(bars, bars.open * scale, bars.high * scale, bars.low * scale, bars.close * scale)
    a, b = build_features(bars), build_features(moved)
    assert torch.equal(a.features[: t0 + 1], b.features[: t0 + 1])
    assert not torch.equal(a.features[t0 + 1 :], b.features[t0 + 1 :])
    # The labels at t0 look at close[t0 + h], which moved: targets must differ there.
    assert torch.all(a.targets[t0] != b.targets[t0])
    assert torch.equal(a.targets[: t0 - 60 + 1], b.targets[: t0 - 60 + 1])


def test_targets_are_not_inputs_perturbing_one_future_close_changes_no_feature_at_or_before_t() -> None:
    bars = gbm_bars(1200, seed=4)
    t = 1000
    c = bars.close.copy()
    c[t + 1] *= 1.01
    moved = with_prices(bars, bars.open, np.maximum(bars.high, c), np.minimum(bars.low, c), c)
    a, b = build_features(bars), build_features(moved)
    assert torch.equal(a.features[: t + 1], b.features[: t + 1])
    assert a.targets[t, 0] != b.targets[t, 0]


@pytest.mark.gpu
def test_cuda_features_are_prefix_stable_and_match_cpu() -> None:
    bars = _bars_with_pathologies(4000)
    cpu = build_features(bars).features
    gpu = build_features(bars, "cuda").features
    assert gpu.device.type == "cpu" and gpu.dtype == torch.float32
    torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-6)
    cuts = [20, 333, 1024, 1501, 2047, 2048, 3999] + np.random.default_rng(5).integers(2, 4000, 13).tolist()
    for cut in cuts:
        assert torch.equal(build_features(bars.slice(0, cut), "cuda").features, gpu[:cut]), cut
