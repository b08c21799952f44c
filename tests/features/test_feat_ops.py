"""The prefix-stable building blocks agree with plain float64 loops and are bitwise prefix-stable."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from .feature_reference import ema_loop

from foxhunt.features.ops import (
    ema,
    ema_chunk_size,
    ema_lookback,
    rolling_max,
    rolling_min,
    rolling_sum,
    row_cumsum,
    shift,
)


def _loop_window(x: np.ndarray, w: int, f) -> np.ndarray:  # noqa: ANN001
    return np.array([f(x[max(0, t - w + 1) : t + 1]) for t in range(len(x))])


@pytest.mark.parametrize("alpha", [2 / 3, 1 / 3, 0.2, 2 / 27, 1 / 14, 2 / 101, 0.9, 1.0])
def test_ema_matches_float64_loop_within_1e_12_relative(alpha: float, rng: np.random.Generator) -> None:
    # Positive (price-like) data over several chunks, so chunk carries are exercised.
    x = 100.0 + np.cumsum(rng.normal(0, 1, 5000))
    got = ema(torch.from_numpy(x), alpha).numpy()
    ref = ema_loop(x, alpha)
    assert np.max(np.abs(got - ref) / np.abs(ref)) <= 1e-12


@pytest.mark.parametrize("alpha", [1 / 3, 2 / 101, 1 / 7])
def test_ema_of_signed_data_matches_loop_relative_to_scale(alpha: float, rng: np.random.Generator) -> None:
    x = rng.normal(0, 1, 4000)
    got = ema(torch.from_numpy(x), alpha, seed=torch.tensor(0.5, dtype=torch.float64)).numpy()
    ref = ema_loop(x, alpha, seed=0.5)
    assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(np.abs(ref))


def test_ema_batches_rows_independently(rng: np.random.Generator) -> None:
    x = torch.from_numpy(rng.normal(0, 1, (3, 1500)))
    both = ema(x, 0.1)
    for i in range(3):
        assert torch.equal(both[i], ema(x[i].clone(), 0.1))


def test_ema_chunk_scale_stays_far_below_float64_overflow() -> None:
    for alpha in (1e-4, 0.01, 0.1, 1 / 3, 0.5, 0.9, 0.999):
        c = ema_chunk_size(alpha)
        assert 1 <= c <= 1024 and (c & (c - 1)) == 0
        assert -c * math.log1p(-alpha) <= 460.0
    assert ema_lookback(2 / 101) == 303 and ema_lookback(1 / 14) == 84


@pytest.mark.parametrize("w", [1, 2, 3, 14, 20, 60])
def test_rolling_sum_max_min_match_window_loops(w: int, rng: np.random.Generator) -> None:
    x = rng.normal(0, 1, 1000) * 10 + 50
    t = torch.from_numpy(x)
    np.testing.assert_allclose(rolling_sum(t, w).numpy(), _loop_window(x, w, np.sum), rtol=1e-13, atol=1e-12)
    assert np.array_equal(rolling_max(t, w).numpy(), _loop_window(x, w, np.max))
    assert np.array_equal(rolling_min(t, w).numpy(), _loop_window(x, w, np.min))


def test_shift_delays_and_fills() -> None:
    x = torch.arange(5, dtype=torch.float64)
    assert shift(x, 2, fill=-1.0).tolist() == [-1, -1, 0, 1, 2]
    assert shift(x, 9).tolist() == [0, 0, 0, 0, 0]


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_row_cumsum_adds_strictly_left_to_right_bitwise(rows: int, rng: np.random.Generator, device: torch.device) -> None:
    x = rng.normal(0, 1, (rows, 300)) * np.exp(rng.normal(0, 5, (rows, 300)))  # wide magnitudes: order matters
    got = row_cumsum(torch.from_numpy(x).to(device)).cpu().numpy()
    for r in range(rows):
        acc, ref = 0.0, []
        for v in x[r].tolist():
            acc += v
            ref.append(acc)
        assert got[r].tolist() == ref


def test_ops_are_bitwise_prefix_stable(rng: np.random.Generator, device: torch.device) -> None:
    x = torch.from_numpy(rng.normal(0, 1, 6000).cumsum() + 200).to(device)
    fns = {
        "ema": lambda a: ema(a, 2 / 27),
        "ema_short": lambda a: ema(a, 0.5),
        "sum20": lambda a: rolling_sum(a, 20),
        "sum7": lambda a: rolling_sum(a, 7),
        "max60": lambda a: rolling_max(a, 60),
    }
    full = {k: f(x) for k, f in fns.items()}
    for cut in rng.integers(1, len(x), 25).tolist() + [1, 20, 333, 512, 1024, 1025, 1500, 2047, 2048]:
        for k, f in fns.items():
            assert torch.equal(f(x[:cut].clone()), full[k][:cut]), (k, cut)
