"""`foxhunt scorecard` in a fresh process: outputs at a tiny size, the gates, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A tiny agent (seconds a scenario on a 2-core CPU); otherwise the built-in config at the scorecard's tiny size.
TINY = ["--set", "dqn.n_envs=32", "--set", "dqn.rounds_per_epoch=8", "--set", "dqn.buffer_capacity=20000",
        "--set", "dqn.warmup_transitions=512", "--set", "env.episode_length=128", "--set", "train.epochs=3"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "foxhunt.cli", "scorecard", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_an_unknown_scenario_is_one_line_exit_2_and_nothing_written(tmp_path):
    res = _run("--scenarios", "no_edge,bogus", "--out", str(tmp_path / "sc"), cwd=tmp_path)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == ["error: --scenarios: unknown scenario 'bogus' (known: no_edge, edge_daily, edge_minute, regime, "
                     "mean_revert, leak, sp500, nasdaq)"]
    assert not (tmp_path / "sc").exists()


def test_an_unknown_baseline_is_one_line_exit_2_and_nothing_written(tmp_path):
    res = _run("--baselines", "supervised,sb3_a2c", "--out", str(tmp_path / "sc"), cwd=tmp_path)
    assert res.returncode == 2
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        "error: --baselines: unknown baseline 'sb3_a2c' (known: quant, supervised, sb3_dqn, sb3_ppo, or none)"]
    assert not (tmp_path / "sc").exists()


def test_a_bad_override_is_one_line_exit_2_and_nothing_written(tmp_path):
    res = _run("--scenarios", "leak", "--set", "dqn.gamma=2", "--out", str(tmp_path / "sc"), cwd=tmp_path)
    assert res.returncode == 2 and "dqn.gamma" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "sc").exists()


@pytest.mark.slow
def test_a_tiny_scorecard_writes_json_and_html_and_passes_no_edge_and_leak(tmp_path):
    out = tmp_path / "sc"
    res = _run("--size", "tiny", "--scenarios", "no_edge,leak", "--baselines", "supervised", "--out", str(out),
               "--set", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}", *TINY, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    by = {s["scenario"]: s for s in card["scenarios"]}
    assert set(by) == {"no_edge", "leak"}
    for s in by.values():
        assert {"flat", "buy_and_hold"} <= set(s["references"]) and "supervised" in s["baselines"]
        assert s["env_steps"] > 0 and s["wall_s"] > 0
        assert {"sharpe", "total_return", "max_drawdown", "trades_per_1000", "costs_pct", "capture"} <= set(s["agent"])
    assert by["no_edge"]["gate"]["passed"], by["no_edge"]["gate"]["rule"]
    assert by["leak"]["gate"]["passed"], by["leak"]["gate"]["rule"]
    assert by["leak"]["agent"]["capture"] >= 0.6
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "no_edge" in html
    assert "gates:" in res.stdout

    # bench/bench_baselines.py (the baseline rows without the agent, e.g. SB3 at the gpu size on a CPU)
    # scores the same references and baselines on the same folds: its rows equal the card's (on the leak
    # scenario: the same code scores every scenario, and each costs its folds' bar-by-bar backtests).
    root = Path(__file__).resolve().parents[2]
    bl = tmp_path / "baselines.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(root), str(root / "src")])}
    r = subprocess.run([sys.executable, "-m", "bench.bench_baselines", "--size", "tiny", "--config",
                        str(root / "configs" / "train-default.toml"), "--scenarios", "leak", "--baselines",
                        "supervised", "--out", str(bl)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(bl.read_text())["scenarios"]
    assert set(rows) == {"leak"}
    for name, s in [("leak", by["leak"])]:
        pairs = [(rows[name]["references"][ref], v) for ref, v in s["references"].items()]
        pairs.append((rows[name]["baselines"]["supervised"], s["baselines"]["supervised"]))
        for got, want in pairs:
            for k, v in want.items():  # every field of the card's but the fit's seconds and what the card
                # computes against other rows (capture vs quant; beta and timing against buy-and-hold)
                if k.endswith("_s") or k in ("capture_vs_quant", "beta", "timing_sharpe", "timing_capture_vs_quant"):
                    continue
                assert got[k] == (pytest.approx(v) if v is not None else None), (name, k)


@pytest.mark.slow
def test_a_ppo_config_runs_through_the_scorecard_beside_sb3_ppo_and_the_json_names_the_agent(tmp_path):
    out = tmp_path / "sc"
    cfg = Path(__file__).resolve().parents[2] / "configs" / "train-ppo.toml"
    res = _run("--size", "tiny", "--config", str(cfg), "--scenarios", "leak", "--baselines", "sb3_ppo", "--sb3-steps", "128",
               "--out", str(out),
               "--set", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}", "--set", "ppo.n_envs=16",
               "--set", "ppo.iterations_per_epoch=2", "--set", "env.episode_length=128", "--set", "train.epochs=2",
               "--set", "folds.val=200",  # 200-bar validation windows (tiny: 400): the backtests step them bar by bar
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["agent"] == "ppo"
    (leak,) = card["scenarios"]
    assert leak["agent_kind"] == "ppo"
    assert leak["env_steps"] == 2 * 2 * 32 * 16 * leak["folds"]  # epochs × iterations × rollout × envs × folds
    assert set(leak["baselines"]) == {"sb3_ppo"} and card["sb3_steps_per_fold"] == 128
    assert "agent (ppo)" in (out / "report.html").read_text()


@pytest.mark.parametrize("args, message", [
    (("--family", "dev", "--scenarios", "leak"),
     "error: --family and --scenarios are mutually exclusive (a run scores the named scenarios or family draws)"),
    (("--draws", "3"), "error: --draws needs --family dev|heldout"),
    (("--family", "test", "--draws", "3"), "error: --family 'test': expected one of dev, heldout"),
    (("--family", "heldout", "--draws", "0"), "error: --draws 0: must be between 1 and 10000"),
])
def test_a_bad_family_argument_is_one_line_exit_2_and_nothing_written(tmp_path, args, message):
    res = _run(*args, "--out", str(tmp_path / "sc"), cwd=tmp_path)
    assert res.returncode == 2
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [message]
    assert not (tmp_path / "sc").exists()


def test_a_tiny_family_scorecard_writes_the_family_block_with_quant_and_its_gates(tmp_path):
    """--family dev --draws 1 at the tiny size, the built-in config for one epoch (the TINY agent):
    scorecard.json carries the draw's params, the quant baseline with its chosen rules, capture vs
    quant, and the family's rows and gates; the console prints the gate lines."""
    out = tmp_path / "sc"
    res = _run("--size", "tiny", "--family", "dev", "--draws", "1", "--baselines", "quant", "--out", str(out),
               "--set", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}", *TINY, "--set", "train.epochs=1",
               "--set", "folds.val=200",  # 200-bar validation windows (tiny: 400): the backtests step them bar by bar
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["family_set"] == "dev" and card["draws"] == 1 and card["baselines"] == ["quant"]
    (s,) = card["scenarios"]
    assert s["scenario"] == "dev00_drift" and s["params"]["form"] == "drift" and s["params"]["seed"] == 1_000_000
    assert s["gate"]["kind"] == "family not below flat" and set(s["baselines"]) == {"quant"}
    assert len(s["baselines"]["quant"]["rules"]) == s["folds"] == 2
    assert "capture_vs_quant" in s and "capture_vs_quant" in s["agent"]
    fam = card["family"]
    assert fam["set"] == "dev" and fam["draws"] == 1 and fam["edge_draws"] == 1
    assert [g["name"] for g in fam["gates"]] == ["capture vs quant", "capture vs oracle", "not below flat", "no-edge flat"]
    row = fam["rows"][0]
    for key in ("form", "interval", "horizon", "strength", "costs", "noise", "oracle_sharpe", "quant_sharpe", "quant_rules",
                "buy_and_hold_sharpe", "agent_sharpe", "capture_vs_quant", "capture_vs_oracle", "trades_per_1000", "walk_forward_s"):
        assert key in row, key
    assert row["walk_forward_s"] > 0 and row["quant_rules"] == s["baselines"]["quant"]["rules"]
    assert "family dev: " in res.stdout and "not below flat" in res.stdout
    html = (out / "report.html").read_text()
    assert "family dev" in html and "capture vs quant" in html and "dev00_drift" in html
