"""The universe report's pieces (``foxhunt.backtest.universe_report``) on awkward values."""

from __future__ import annotations

import base64
import math

import numpy as np

from foxhunt.backtest.universe_report import ranked_symbols, sharpe_heatmap


def test_symbols_rank_best_first_by_the_sharpe_of_their_windows_joined_with_undefined_ones_last():
    rng = np.random.default_rng(0)
    up, down = rng.normal(0.002, 0.01, 300), rng.normal(-0.002, 0.01, 300)
    flat = np.zeros(300)  # Sharpe 0 / 0: undefined
    returns = {"model": [down, flat, up], "buy & hold": [up, up, up]}
    rows = ranked_symbols(["D", "F", "U"], returns, "model", "buy & hold", 252.0)
    assert [r["symbol"] for r in rows] == ["U", "D", "F"]
    assert rows[0]["sharpe"] > 0 > rows[1]["sharpe"] and math.isnan(rows[2]["sharpe"])
    assert rows[0]["buy & hold sharpe"] == rows[1]["buy & hold sharpe"]  # the same bars under buy-and-hold


def test_the_sharpe_heat_map_is_a_png_even_with_undefined_and_infinite_cells():
    sharpe = np.array([[1.2, np.nan], [np.inf, -0.4], [np.nan, np.nan]])
    png = base64.b64decode(sharpe_heatmap(["A", "B", "C"], sharpe, "model"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    allnan = base64.b64decode(sharpe_heatmap(["A"], np.full((1, 1), np.nan), "model"))
    assert allnan[:8] == b"\x89PNG\r\n\x1a\n"
