"""A universe backtest (``foxhunt.backtest.universe``) in process: windows stay inside their symbol, a
symbol's rows are its single-file backtest, the portfolios are the float64 loop's, and the fused
kernel (Triton interpreter on a CPU) equals the torch path on a universe."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from foxhunt.accel.backend import resolve  # noqa: E402
from foxhunt.agents.model_io import load_model  # noqa: E402
from foxhunt.backtest.portfolio import portfolio_reference, training_volatility, union_axis  # noqa: E402
from foxhunt.backtest.standalone import run_models  # noqa: E402
from foxhunt.backtest.universe import BENCHMARK, QUANT, run_universe, universe_windows  # noqa: E402
from foxhunt.config import build_config, load_config  # noqa: E402
from foxhunt.data.universe import load_universe  # noqa: E402
from foxhunt.errors import ConfigError  # noqa: E402
from foxhunt.features.spec import WARMUP  # noqa: E402
from foxhunt.features.universe import universe_features  # noqa: E402
from tests.backtest.test_cli_backtest import _model  # noqa: E402
from tests.data.universe_files import bars_frame, days, write  # noqa: E402

DEV = torch.device("cpu")


def tiny_universe(d: Path, n: int = 350) -> Path:
    """Three symbols on different calendars: every day; business days starting a month later; every
    day from February with a 12-day gap inside the backtested bars (after the 303-bar warm-up)."""
    write(d / "AAA.csv", bars_frame(days("2020-01-01", n), 1))
    write(d / "BBB.parquet", bars_frame(pd.bdate_range("2020-02-03", periods=n - 20), 2))
    write(d / "CCC.csv", bars_frame(days("2020-02-01", n + 12).delete(slice(320, 332)), 3))
    return d


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("uni")
    tiny_universe(d / "u")
    _model(d / "m.safetensors")
    cfg = build_config({"data": {"source": "file", "path": str(d / "u")}}, source="options")
    universe = load_universe([str(d / "u")], cfg.data)
    uf = universe_features(universe, d / "cache", device=DEV)
    return d, universe, uf, [load_model(d / "m.safetensors", DEV)]


def _plan(eval_: str):
    return resolve(load_config(None, [f"accel.eval={eval_}"]).accel, None, DEV, parts=("eval",))


def _run(setup, eval_: str = "torch", windows: int = 2):
    d, universe, uf, loaded = setup
    return run_universe([d / "m.safetensors"], loaded, uf, universe, DEV, windows=windows, ensemble_mode="vote",
                        plan=_plan(eval_), bars_per_year=252.0, barriers=False, say=lambda _: None)


def test_every_window_lies_inside_its_symbol_and_the_last_fills_on_the_symbols_last_bar(setup):
    _, universe, uf, _ = setup
    starts, lengths = universe_windows(uf.offsets, WARMUP, 3, universe.symbols, universe.files)
    off = uf.offsets
    for s in range(len(universe)):
        st, ln = starts[3 * s: 3 * s + 3], lengths[3 * s: 3 * s + 3]
        assert st[0] == off[s] + WARMUP and (st[1:] == st[:-1] + ln[:-1]).all()  # contiguous, from the warm-up on
        assert st[-1] + ln[-1] == off[s + 1] - 1  # the last step fills on the symbol's own last bar
    with pytest.raises(ConfigError, match=r"^symbol AAA \(file .*AAA.csv\): 46 usable bars after the 303-bar feature "
                       r"warm-up cannot make 30 window\(s\) of at least 2 bars$"):
        universe_windows(uf.offsets, WARMUP, 30, universe.symbols, universe.files)


def test_a_symbols_rows_equal_its_single_file_backtest(setup):
    """Symbol BBB's model and buy-and-hold rows in the universe are what `foxhunt backtest --data
    BBB.parquet` computes (same windows, normalisation, medians, annualisation)."""
    d, universe, uf, loaded = setup
    run = _run(setup)
    from foxhunt.features.cache import load_or_build

    one = load_or_build(universe.bars[1], d / "cache", device=DEV).features
    single = run_models([d / "m.safetensors"], loaded, one, DEV, windows=2, ensemble_mode="vote", plan=_plan("torch"),
                        bars_per_year=252.0, barriers=False, say=lambda _: None)
    mine = [r for r in run.rows if r["symbol"] == "BBB"]
    theirs = single.rows
    assert [(r["window"], r["label"]) for r in mine if r["label"] != QUANT] == [(r["window"], r["label"]) for r in theirs]
    for a, b in zip([r for r in mine if r["label"] != QUANT], theirs):
        for k in ("total_return", "sharpe", "max_drawdown", "trade_count", "turnover", "bars", "beta", "start", "end"):
            if k in b:
                if isinstance(b[k], float) and not math.isnan(b[k]):
                    assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-9), k
                else:
                    assert a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])), k


def test_a_poisoned_symbol_changes_no_other_symbols_rows(tmp_path, setup):
    """BBB's prices times 50 with a spike: AAA's and CCC's rows (every policy) are unchanged."""
    d, universe, uf, loaded = setup
    base = _run(setup)
    u2 = tiny_universe(tmp_path / "u")
    df = pd.read_parquet(u2 / "BBB.parquet")
    for c in ("open", "high", "low", "close"):
        df[c] = df[c] * 50.0
    df.loc[100:110, ["high", "close"]] *= 3.0
    write(u2 / "BBB.parquet", df)
    cfg = build_config({"data": {"source": "file", "path": str(u2)}}, source="options")
    poisoned = load_universe([str(u2)], cfg.data)
    uf2 = universe_features(poisoned, tmp_path / "cache", device=DEV)
    run = run_universe([d / "m.safetensors"], loaded, uf2, poisoned, DEV, windows=2, ensemble_mode="vote",
                       plan=_plan("torch"), bars_per_year=252.0, barriers=False, say=lambda _: None)
    for sym in ("AAA", "CCC"):
        a = [r for r in base.rows if r["symbol"] == sym]
        b = [r for r in run.rows if r["symbol"] == sym]
        assert len(a) == len(b) == 6
        for x, y in zip(a, b):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k] == y[k] or (isinstance(x[k], float) and math.isnan(x[k]) and math.isnan(y[k])), (sym, k)
    assert [r["sharpe"] for r in base.rows if r["symbol"] == "BBB"] != [r["sharpe"] for r in run.rows if r["symbol"] == "BBB"]


def test_the_portfolio_rows_are_the_float64_loop_over_the_symbols_returns(setup):
    """On the union of the symbols' return dates, with each symbol's volatility from its bars before
    its first window (the warm-up bars: closes 0 … WARMUP)."""
    _, universe, _, _ = setup
    run = _run(setup)
    axis, grids = union_axis([t[1:] for t in run.times], run.returns)
    assert (axis == run.axis).all()
    present = ~np.isnan(grids[run.label])
    assert present.sum() == sum(len(r) for r in run.returns[run.label])  # every symbol's return on its own date
    assert (present.sum(0) >= 1).all() and not present.all()  # calendars differ: some dates lack a symbol
    vols = [training_volatility(b.close[: WARMUP + 1]) for b in universe.bars]
    for label in (run.label, BENCHMARK, QUANT):
        for rule in ("equal", "inverse_vol"):
            ref_r, ref_m = portfolio_reference(grids[label], rule, vols, bars_per_year=252.0)
            row = next(r for r in run.rows if r["symbol"] == "portfolio" and r["label"] == label and r["weights"] == rule)
            np.testing.assert_allclose(run.portfolios[(label, rule)].returns, ref_r, rtol=1e-12, atol=1e-16)
            for k in ("total_return", "sharpe", "sortino", "max_drawdown", "annual_volatility", "value_at_risk"):
                assert row[k] == pytest.approx(ref_m[k], rel=1e-9), (label, rule, k)


def test_fused_and_torch_universe_backtests_agree(setup):
    """One window per symbol (26 to 46 steps), the fused kernel in the Triton interpreter."""
    a, b = _run(setup, "torch", windows=1), _run(setup, "fused", windows=1)
    assert "model backtest: fused Triton kernel" in b.notes
    assert [(r["symbol"], r["label"]) for r in a.rows] == [(r["symbol"], r["label"]) for r in b.rows]
    for x, y in zip(a.rows, b.rows):
        for k, v in x.items():
            if isinstance(v, float):
                np.testing.assert_allclose(y[k], v, rtol=1e-4, atol=1e-9, equal_nan=True, err_msg=f"{x['symbol']} {x['label']} {k}")
            else:
                assert y[k] == v, k
