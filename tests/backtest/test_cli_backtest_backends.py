"""`foxhunt backtest` follows [accel] (``--config FILE`` / ``--set accel.…``), in a fresh process:
the fused kernel (Triton interpreter on a CPU) gives the torch path's metrics; the resolved plan is
printed and written to accel.json; annualisation, medians and episode rules are reported; bad
options are one line with exit code 2 and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars
from tests.backtest.test_cli_backtest import _model
from tests.cli_run import assert_refused

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
def test_the_accel_sections_fused_eval_equals_the_torch_eval_from_the_cli(small):
    """--set accel.eval=torch against a --config file whose [accel] says eval = "fused"."""
    d, bars = small
    common = ["--model", str(d / "m.safetensors"), "--data", str(bars), "--windows", "2", "--device", "cpu",
              "--cache-dir", str(d / "cache"), "--bars-per-year", "1234"]
    a = _run(common + ["--set", "accel.eval=torch", "--out", str(d / "torch")])
    assert a.returncode == 0, a.stderr
    (d / "fused.toml").write_text('[accel]\neval = "fused"\n\n[dqn]\nhidden = [600, 600]  # not read by backtest\n')
    b = _run(common + ["--config", str(d / "fused.toml"), "--out", str(d / "fused")], TRITON_INTERPRET="1")
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
    assert "accel: backend=torch on cpu (triton interpreted): eval=fused graphs=off" in b.stdout
    plans = {k: json.loads((d / k / "accel.json").read_text()) for k in ("torch", "fused")}
    assert plans["torch"]["eval"] == "torch" and plans["fused"]["eval"] == "fused"
    assert plans["fused"]["parts"] == ["eval"] and "acting" not in plans["fused"] and plans["fused"]["named"] == ["eval"]
    html = (d / "fused" / "report.html").read_text()
    assert "1,234.0 bars per year (set by the user)" in html and "episode rules: plain windows" in html
    assert "medians (order routing, initial volatility): recorded in" in html and "accel: backend=torch" in html


def test_removed_backend_flag_foreign_keys_and_contradictions_are_one_line_errors_with_nothing_written(small, tmp_path):
    """Fresh processes; every check runs before any data is read."""
    d, bars = small
    base = ["backtest", "--model", str(d / "m.safetensors"), "--data", str(bars), "--out", "out", "--device", "cpu"]
    assert_refused(tmp_path, [*base, "--backend", "fused"], "--backend was removed: foxhunt backtest follows [accel]; "
                   "use --set accel.eval=fused|torch (or accel.backend), or --config FILE")
    assert_refused(tmp_path, [*base, "--set", "dqn.hidden=[8]"],
                   "--set dqn.hidden=[8]: foxhunt backtest takes accel.*, backtest.* and data.* keys only")
    assert_refused(tmp_path, [*base, "--set", "data.bars=5"],
                   "--set data.bars=5: the data keys foxhunt backtest takes are timestamp_format, dayfirst, timestamp_unit, "
                   "adjust, repair, symbols, symbol_column")
    assert_refused(tmp_path, [*base, "--set", "accel.backend=compiled"],
                   "accel.backend = 'compiled' on cpu: torch.compile paths are tested on CUDA only; use 'torch' on the CPU")
    assert_refused(tmp_path, [*base, "--bars-per-year", "0"], "--bars-per-year 0.0: must be a number in (0, 1e9]")
    assert_refused(tmp_path, ["backtest", "--run", str(d), "--config", "x.toml"],
                   "--config applies to --model; --run uses the run's own config.toml (override it with --set)")


def test_an_uncovered_policy_falls_back_under_auto_and_is_an_error_when_fused_is_named(monkeypatch):
    """``run_models`` settles the plan's eval against the models: a mean-Q ensemble runs the torch
    path with a note (plan eval = torch, buy-and-hold too) unless the user named the fused backend."""
    from foxhunt.accel import triton as accel_triton
    from foxhunt.backtest.standalone import run_models
    from foxhunt.errors import ConfigError
    from tests.backtest.test_fidelity import _tiny_model
    from tests.helpers import random_feature_set

    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: True)  # the kernel is never launched here
    fs = random_feature_set(200, seed=6, warmup=20)
    loaded = [_tiny_model(fs.n_features, seed=s) for s in (0, 1)]
    kw = dict(windows=2, ensemble_mode="mean", bars_per_year=None, barriers=False)
    said: list[str] = []
    auto = ExecutionPlan(eval="fused", parts=("eval",), backend="fused")
    res = run_models(["a", "b"], loaded, fs, torch.device("cpu"), plan=auto, say=said.append, **kw)
    assert res.plan.eval == "torch" and "the ensemble's mode is 'mean'" in res.plan.notes["eval"]
    assert said[0].startswith("accel: backend=fused on cpu") and "eval=torch" in said[0]
    assert "model backtest: torch path" in said and any(s.startswith("fallback to the torch path: ") for s in said)
    named = ExecutionPlan(eval="fused", parts=("eval",), backend="fused", named=("eval",))
    with pytest.raises(ConfigError, match="accel.eval = 'fused' on cpu: the fused kernel cannot run a: the ensemble's "
                                          "mode is 'mean'"):
        run_models(["a", "b"], loaded, fs, torch.device("cpu"), plan=named, say=said.append, **kw)


@pytest.mark.gpu
def test_gpu_fused_backend_agrees_with_the_torch_backend_from_the_cli(tmp_path):
    """On CUDA: the default plan (auto: the fused kernel; with 4 windows its row path computes
    float32 FMA) against `--set accel.eval=torch` on 4 windows of the S&P 500 sample with a small
    model, both at ``accel.matmul_precision = fp32``. Every row must agree to float32 rounding.
    (Under the default tf32 the torch path's matmuls carry ~1e-3 relative error: a greedy action
    then flips at a near-tie of Q, as a 0.5 % total-return difference on the H200 showed.)"""
    _model(tmp_path / "m.safetensors", 3)
    common = ["--model", str(tmp_path / "m.safetensors"), "--sample", "sp500", "--windows", "4", "--device", "cuda",
              "--cache-dir", str(tmp_path / "cache"), "--set", "accel.matmul_precision=fp32"]
    a = _run(common + ["--set", "accel.eval=torch", "--out", str(tmp_path / "torch")])
    assert a.returncode == 0, a.stderr
    b = _run(common + ["--out", str(tmp_path / "fused")])
    assert b.returncode == 0, b.stderr
    assert "model backtest: fused Triton kernel" in b.stdout and "accel: backend=fused on cuda" in b.stdout
    ra, rb = _metrics(tmp_path / "torch"), _metrics(tmp_path / "fused")
    for x, y in zip(ra, rb):
        assert (x["window"], x["label"]) == (y["window"], y["label"])
        for k in ("total_return", "sharpe", "max_drawdown", "turnover", "trade_count"):
            np.testing.assert_allclose(y[k], x[k], rtol=1e-3, atol=1e-6, equal_nan=True,
                                       err_msg=f"window {x['window']} {x['label']}: {k}")
