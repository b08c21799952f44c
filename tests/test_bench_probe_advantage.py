"""bench/probe_advantage.py: forward sums equal a loop, the advantage statistics read Q(long) − Q(short),
and a quick probe run in a fresh process writes every portfolio's row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.probe_advantage import advantage_rows, forward_sums

ROOT = Path(__file__).resolve().parents[1]


def test_forward_sums_equal_a_float64_loop_including_the_series_end():
    r = np.random.default_rng(0).normal(0, 1e-3, 250)
    bars = np.array([0, 5, 149, 200, 248, 249])
    want = [r[t + 1 : t + 101].sum() for t in bars]
    np.testing.assert_allclose(forward_sums(r, bars), want, rtol=0, atol=1e-15)


def test_the_advantage_is_q_long_minus_q_short_and_follows_what_it_is_built_from():
    rng = np.random.default_rng(1)
    latent = rng.normal(size=500)
    q = np.zeros((500, 5))
    q[:, 2] = 1.0  # flat is greedy everywhere
    q[:, 4], q[:, 0] = 0.3 * latent, -0.3 * latent
    row = advantage_rows(q, latent, -latent, {"ema_mom_10": np.ones(500)})
    assert row["greedy_counts"] == [0, 0, 500, 0, 0]
    assert row["advantage_mean"] == pytest.approx(0.6 * latent.mean()) and row["advantage_sd"] == pytest.approx(0.6 * latent.std())
    assert row["corr_latent"] == pytest.approx(1.0) and row["corr_forward"] == pytest.approx(-1.0)
    assert row["corr_ema"] == {"ema_mom_10": None}  # a constant column has no correlation


@pytest.mark.parametrize("select", ["last", "inner"])
def test_a_quick_probe_in_a_fresh_process_writes_every_portfolio(tmp_path, select):
    """With inner selection the probe reads the network under its training part's normalisation (it raises
    if that is not what the runner left on the market)."""
    out = tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "bench.probe_advantage", "--quick", "--set", f"train.select={select}",
                           "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())
    assert row["draw"] == "dev00_drift" and set(row["portfolios"]) == {"flat", "long", "short"}
    assert all(sum(p["greedy_counts"]) == row["bars"] for p in row["portfolios"].values())
    assert "from short" in proc.stdout and len(row["validation"]) == 2
