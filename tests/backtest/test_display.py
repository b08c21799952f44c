"""foxhunt.backtest.display: a flat window reads "flat" and ranks as Sharpe 0; None / NaN / missing
values never raise and print as "–"."""

from __future__ import annotations

import math

import torch

from foxhunt.backtest import display
from foxhunt.backtest.metrics import compute_metrics, metrics_to_dicts, METRIC_NAMES
from foxhunt.train.logs import clean_floats


def _row(returns: list[float]) -> dict:
    m = compute_metrics(torch.tensor([returns], dtype=torch.float32), torch.tensor([len(returns)]))
    return metrics_to_dicts(m, METRIC_NAMES)[0]


def test_an_all_zero_window_is_flat_in_memory_and_after_a_json_round_trip():
    row = _row([0.0] * 50)
    assert math.isnan(row["sharpe"]) and row["annual_volatility"] == 0.0  # empyrical's 0 / 0
    for r in (row, clean_floats(row)):  # NaN floats, then JSON nulls
        assert display.is_flat(r) and display.sharpe_or_zero(r) == 0.0
        assert display.cell(r, "sharpe", "{:+.2f}") == "flat" and display.cell(r, "total_return", "{:+.1%}") == "+0.0%"
        assert display.sharpe_text(r) == "flat (no position, Sharpe –)"


def test_a_window_that_trades_is_not_flat_and_keeps_its_sharpe():
    row = _row([0.01, -0.005, 0.002, 0.0, 0.003])
    assert not display.is_flat(row)
    assert display.cell(row, "sharpe", "{:+.2f}") == f"{row['sharpe']:+.2f}"
    assert display.sharpe_text(row).startswith("Sharpe +")


def test_comparisons_count_flat_as_zero_and_never_raise_on_undefined_values():
    flat, win, lose = _row([0.0] * 10), {"sharpe": 0.5}, {"sharpe": -0.5}
    assert display.beats(flat, lose) and display.beats(win, flat) and not display.beats(flat, win)
    undefined = {"sharpe": None, "total_return": 0.1}
    assert not display.beats(undefined, lose) and not display.beats(win, undefined)
    assert not display.beats(None, win) and not display.beats({}, {})


def test_missing_none_nan_inf_and_text_values_print_as_a_dash():
    for v in (None, math.nan, math.inf, -math.inf, "x", True):
        assert display.number(v, "{:+.2f}") == "–"
    assert display.cell({}, "sharpe", "{:+.2f}") == "–" and display.cell(None, "max_drawdown", "{:.1%}") == "–"
    assert display.sharpe_text({"sharpe": None}) == "Sharpe –"


def test_a_trial_fold_without_volatility_is_flat_when_it_made_nothing_and_closed_no_trade():
    assert display.is_flat({"total_return": 0.0, "trade_count": 0, "sharpe": None})
    assert not display.is_flat({"total_return": 0.0, "trade_count": 2, "sharpe": None})
    assert not display.is_flat({"total_return": 0.01, "trade_count": 0, "sharpe": math.nan})
