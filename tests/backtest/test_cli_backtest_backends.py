"""`foxhunt backtest --model` in a fresh process: the fused kernel (Triton interpreter on a CPU)
gives the torch path's metrics; annualisation, medians and episode rules are reported; bad
options are one line with exit code 2 and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars
from tests.backtest.test_cli_backtest import _model

CLI = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())", "backtest"]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("bt")
    bars = write_bars(generate_bars(303 + 57, seed=2), d / "bars.parquet")  # 303 warm-up bars + 56 steps
    _model(d / "m.safetensors", 0)
    return d, bars


def _metrics(out) -> list[dict]:
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
def test_fused_backend_equals_the_torch_backend_from_the_cli(small):
    d, bars = small
    common = ["--model", str(d / "m.safetensors"), "--data", str(bars), "--windows", "2", "--device", "cpu",
              "--cache-dir", str(d / "cache"), "--bars-per-year", "1234"]
    a = _run(common + ["--backend", "torch", "--out", str(d / "torch")])
    assert a.returncode == 0, a.stderr
    b = _run(common + ["--backend", "fused", "--out", str(d / "fused")], TRITON_INTERPRET="1")
    assert b.returncode == 0, b.stderr
    ra, rb = _metrics(d / "torch"), _metrics(d / "fused")
    assert [r["label"] for r in ra] == [r["label"] for r in rb] == ["model", "buy & hold"] * 2
    for x, y in zip(ra, rb):
        for k, v in x.items():
            if isinstance(v, float):
                np.testing.assert_allclose(y[k], v, rtol=1e-4, atol=1e-9, equal_nan=True, err_msg=k)
            else:
                assert y[k] == v, k
    assert all(r["bars_per_year"] == 1234.0 for r in ra + rb)
    assert "model backtest: fused Triton kernel" in b.stdout and "model backtest: torch path" in a.stdout
    html = (d / "fused" / "report.html").read_text()
    assert "1,234.0 bars per year (set by the user)" in html and "episode rules: plain windows" in html
    assert "medians (order routing, initial volatility): recorded in" in html


def test_bad_backend_and_bars_per_year_are_one_line_errors_with_nothing_written(small):
    """In-process (typer's runner, like tests/backtest/test_cli_backtest.py): the checks run before
    any data is read."""
    d, bars = small
    for opt, msg in ((["--backend", "cuda"], "--backend 'cuda': expected one of auto, torch, fused"),
                     (["--bars-per-year", "0"], "--bars-per-year 0.0: must be a number in (0, 1e9]")):
        res = CliRunner().invoke(app, ["backtest", "--model", str(d / "m.safetensors"), "--data", str(bars),
                                       "--out", str(d / "bad"), *opt])
        assert res.exit_code == 2 and msg in res.output
        assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1
        assert not (d / "bad").exists()


@pytest.mark.gpu
def test_gpu_fused_backend_agrees_with_the_torch_backend_from_the_cli(tmp_path):
    """On CUDA: `--backend fused` (the kernel's default precision; its row path computes float32)
    against `--backend torch` on 4 windows of the S&P 500 sample with a small model. Buy-and-hold
    must agree to float32 rounding; the model rows too, unless a greedy action flips at a float32
    near-tie of Q (then the windows' trade lists differ and this test reports which)."""
    _model(tmp_path / "m.safetensors", 3)
    common = ["--model", str(tmp_path / "m.safetensors"), "--sample", "sp500", "--windows", "4", "--device", "cuda",
              "--cache-dir", str(tmp_path / "cache")]
    a = _run(common + ["--backend", "torch", "--out", str(tmp_path / "torch")])
    assert a.returncode == 0, a.stderr
    b = _run(common + ["--backend", "fused", "--out", str(tmp_path / "fused")])
    assert b.returncode == 0, b.stderr
    assert "model backtest: fused Triton kernel" in b.stdout
    ra, rb = _metrics(tmp_path / "torch"), _metrics(tmp_path / "fused")
    for x, y in zip(ra, rb):
        assert (x["window"], x["label"]) == (y["window"], y["label"])
        for k in ("total_return", "sharpe", "max_drawdown", "turnover", "trade_count"):
            np.testing.assert_allclose(y[k], x[k], rtol=1e-3, atol=1e-6, equal_nan=True,
                                       err_msg=f"window {x['window']} {x['label']}: {k}")
