"""compute_metrics equals empyrical(-reloaded) on the real S&P 500 and NASDAQ daily series from `arch`,
and (with the float64 reference) on edge cases and wipe-outs (bar returns of -1 or below).

Our input is float32, so empyrical gets the same float32-rounded returns (as float64). Both then
work in float64; the brief's bound is 1e-5 relative, we assert 1e-9 (the measured gap is ~1e-15).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from foxhunt.backtest.metrics import METRIC_INDEX, compute_metrics
from foxhunt.backtest.metrics_reference import window_metrics

empyrical = pytest.importorskip("empyrical")
arch = pytest.importorskip("arch")
pd = pytest.importorskip("pandas")

RTOL = 1e-9

# our column → the empyrical function on one window of daily (252 / year) returns
EMPYRICAL = {
    "sharpe": lambda r: empyrical.sharpe_ratio(r, period="daily"),
    "sortino": lambda r: empyrical.sortino_ratio(r, period="daily"),
    "calmar": lambda r: empyrical.calmar_ratio(r, period="daily"),
    "max_drawdown": lambda r: empyrical.max_drawdown(r),
    "annual_return": lambda r: empyrical.annual_return(r, period="daily"),
    "annual_volatility": lambda r: empyrical.annual_volatility(r, period="daily"),
    "value_at_risk": lambda r: empyrical.value_at_risk(r),
    "conditional_value_at_risk": lambda r: empyrical.conditional_value_at_risk(r),
    "total_return": lambda r: empyrical.cum_returns_final(r),
    "omega_ratio": lambda r: empyrical.omega_ratio(r),
    "tail_ratio": lambda r: empyrical.tail_ratio(r),
    "stability": lambda r: empyrical.stability_of_timeseries(r),
}


def _daily_returns(name: str) -> np.ndarray:
    """Close-to-close simple returns of 'Adj Close', float32 (our input precision)."""
    path = os.path.join(os.path.dirname(arch.__file__), "data", name, f"{name}.csv.gz")
    close = pd.read_csv(path, index_col=0, parse_dates=True)["Adj Close"]
    return close.pct_change().dropna().to_numpy().astype(np.float32)


def _empyrical_row(r32: np.ndarray) -> dict[str, float]:
    r = r32.astype(np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {k: float(f(r)) for k, f in EMPYRICAL.items()}


def _assert_row(ours: np.ndarray, theirs: dict[str, float], label: str, vol_atol: float = 0.0) -> None:
    for name, want in theirs.items():
        got = ours[METRIC_INDEX[name]]
        atol = vol_atol if name == "annual_volatility" else 0.0
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol, equal_nan=True, err_msg=f"{label}: {name}")


@pytest.mark.parametrize("series", ["sp500", "nasdaq"])
def test_full_series_metrics_equal_empyrical(device, series):
    r = _daily_returns(series)
    assert len(r) > 5_000
    m = compute_metrics(torch.from_numpy(r)[None].to(device), torch.tensor([len(r)], device=device))
    _assert_row(m[0].cpu().numpy(), _empyrical_row(r), series)


def test_windows_of_both_series_batched_with_padding_equal_empyrical_per_window(device):
    """Slices of odd lengths from both series in one [W, T] call, NaN beyond each length."""
    sp, nq = _daily_returns("sp500"), _daily_returns("nasdaq")
    slices = [(sp, 0, 1), (sp, 10, 2), (nq, 5, 3), (sp, 2_000, 21), (nq, 2_200, 252), (sp, 100, 1_001),
              (nq, 1_234, 2_517), (sp, 0, len(sp)), (nq, 2_000, len(nq) - 2_000)]
    T = max(n for _, _, n in slices)
    batch = np.full((len(slices), T), np.nan, np.float32)
    for w, (src, start, n) in enumerate(slices):
        batch[w, :n] = src[start : start + n]
    lengths = torch.tensor([n for _, _, n in slices])
    m = compute_metrics(torch.from_numpy(batch).to(device), lengths.to(device)).cpu().numpy()
    for w, (src, start, n) in enumerate(slices):
        _assert_row(m[w], _empyrical_row(src[start : start + n]), f"window {w} (n={n})")


@pytest.mark.parametrize(
    "label, returns",
    [
        ("all zero", [0.0] * 30),
        ("constant gain", [0.01] * 30),
        ("constant loss", [-0.01] * 30),
        ("one bar gain", [0.01]),
        ("one bar loss", [-0.02]),
        ("two bars", [0.03, -0.01]),
        ("never recovers", [0.1, -0.2, 0.05, 0.01]),
    ],
)
def test_edge_case_nan_and_inf_choices_equal_empyrical(label, returns):
    """Our NaN/±inf conventions are empyrical's; the one deliberate difference is the volatility of a
    constant series, exactly 0 here where empyrical leaves a ~1e-17 residue (atol 1e-15)."""
    r = np.array(returns, np.float32)
    m = compute_metrics(torch.from_numpy(r)[None], torch.tensor([len(r)]))[0].numpy()
    _assert_row(m, _empyrical_row(r), label, vol_atol=1e-15)


@pytest.mark.parametrize(
    "label, returns",
    [
        ("wipe-out mid-window", [0.01, -0.02, -1.0, 0.0, 0.01]),
        ("wipe-out then gains", [0.01, -0.02, -1.0, 0.05, 0.01]),
        ("ends on the wipe-out", [0.01, -0.02, 0.03, -1.0]),
        ("starts with the wipe-out", [-1.0, 0.01, -0.02, 0.03]),
        ("one-bar wipe-out", [-1.0]),
        ("two wipe-outs", [-1.0, -1.0]),
        ("beyond the wipe-out mid-window", [0.01, -0.02, -1.5, 0.0, 0.01]),
        ("ends beyond the wipe-out", [0.01, 0.02, -1.5]),
        ("starts beyond the wipe-out", [-1.5, 0.01, -0.02, 0.03]),
        ("one-bar beyond the wipe-out", [-1.5]),
        ("twice beyond: equity positive again", [0.01, -1.5, -1.5, 0.03]),
    ],
)
def test_wipe_out_windows_reference_and_device_equal_empyrical_except_nan_cagr_below_zero_equity(label, returns):
    """Issue 30: a bar return of -1 or below. The float64 reference (which raised ValueError: math
    domain error here) and the device equal empyrical on every metric empyrical has, NaN in the same
    places (stability is NaN), except annual_return and calmar of a window ending below zero equity:
    NaN by our convention, where empyrical's real power of a negative base E ** (252 / n) is NaN too
    when 252 / n is not whole (5 bars) but a real number when it is (1, 3, 4 bars: -1 + tiny here)."""
    r = np.array(returns, np.float32)
    theirs = _empyrical_row(r)
    ref = window_metrics(r)
    ours = {
        "reference": np.array([ref[name] for name in METRIC_INDEX]),
        "device": compute_metrics(torch.from_numpy(r)[None], torch.tensor([len(r)]))[0].numpy(),
    }
    assert np.isnan(theirs["stability"])
    if ref["final_equity"] < 0:
        for row in ours.values():
            assert np.isnan(row[METRIC_INDEX["annual_return"]]) and np.isnan(row[METRIC_INDEX["calmar"]])
        e = ref["final_equity"]
        want = np.nan if (252 / len(r)) % 1 else np.sign(e) ** (252 // len(r)) * abs(e) ** (252 / len(r)) - 1
        np.testing.assert_allclose(theirs["annual_return"], want, rtol=RTOL, equal_nan=True, err_msg=label)
        theirs = {k: v for k, v in theirs.items() if k not in ("annual_return", "calmar")}
    for which, row in ours.items():
        _assert_row(row, theirs, f"{label} ({which})", vol_atol=1e-15)
