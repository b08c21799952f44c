"""`foxhunt backtest`: saved models over a bar file; outputs and one-line errors."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from foxhunt.agents.model_io import load_model, save_model
from foxhunt.agents.networks import DuelingQNet
from foxhunt.cli import app
from foxhunt.data.synthetic import generate_bars
from foxhunt.data.writer import write_bars
from foxhunt.features.spec import FEATURE_SPEC_VERSION, feature_names
from foxhunt.market import NormStats


def _model(path, seed=0):
    torch.manual_seed(seed)
    names = feature_names()
    net = DuelingQNet(len(names) + 3, 45, (16, 16), 8)
    norm = NormStats(torch.randn(len(names), dtype=torch.float64), torch.rand(len(names), dtype=torch.float64) + 0.5)
    save_model(path, net, norm, feature_names=tuple(names), spec_version=FEATURE_SPEC_VERSION,
               env={"cost_bps": 1.0}, extra={"medians": {"abs_return": 1e-3, "range": 2e-3, "volume": 100.0}})
    return net, norm


def test_model_files_round_trip_bitwise(tmp_path):
    net, norm = _model(tmp_path / "m.safetensors")
    net2, norm2, meta = load_model(tmp_path / "m.safetensors")
    for a, b in zip(net.parameters(), net2.parameters()):
        assert torch.equal(a, b)
    assert torch.equal(norm.mean, norm2.mean) and meta.n_actions == 45 and meta.env == {"cost_bps": 1.0}


def test_backtest_cli_writes_metrics_trades_and_report(tmp_path):
    bars_path = write_bars(generate_bars(1_000, seed=2), tmp_path / "bars.parquet")  # 303 warm-up bars + 2 windows
    _model(tmp_path / "a.safetensors", 0)
    _model(tmp_path / "b.safetensors", 1)
    out = tmp_path / "bt"
    args = ["backtest", "--model", str(tmp_path / "a.safetensors"), "--data", str(bars_path), "--windows", "2",
            "--out", str(out), "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = json.loads((out / "metrics.json").read_text())
    assert len(rows) == 4 and {r["label"] for r in rows} == {"model", "buy & hold"}
    assert (out / "metrics.csv").read_text().count("\n") == 5
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "sharpe" in html  # the joined windows' tearsheet + one per window
    assert "Out of sample: 2 backtest windows joined" in html and "Trades per window and holding time" in html
    for r in rows:  # the model's exposure and timing against buy-and-hold on its window (foxhunt.backtest.timing)
        assert ("verdict" in r and "beta" in r and "long_share" in r) == (r["label"] == "model")
    assert "Timing apart from holding (against buy &amp; hold, the windows joined)" in html and "<th>timing_sharpe</th>" in html
    ens = CliRunner().invoke(app, args[:3] + ["--model", str(tmp_path / "b.safetensors")] + args[3:])
    assert ens.exit_code == 0, ens.output
    assert "ensemble (vote)" in (out / "metrics.json").read_text()


def test_backtest_cli_rejects_a_bad_model_file_in_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a model")
    out = tmp_path / "bt"
    res = CliRunner().invoke(app, ["backtest", "--model", str(bad), "--out", str(out), "--device", "cpu"])
    assert res.exit_code == 2
    assert "bad.safetensors" in res.output and "not a foxhunt model" in res.output
    assert not out.exists()


def test_backtest_of_a_run_directory_reproduces_the_runs_fold_metrics(tmp_path):
    """`foxhunt backtest --run RUN_DIR` rebuilds the run's market from its config.toml and backtests
    each fold's saved model on its validation window: on the CPU the agent and buy-and-hold metrics
    equal the ones the training run wrote (same normalisation, medians and evaluation settings)."""
    from tests.train.conftest import tiny_config

    cfg = tiny_config(tmp_path, epochs=1)
    res = CliRunner().invoke(app, ["train", "--config", str(cfg), "--name", "r"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "r"
    res = CliRunner().invoke(app, ["backtest", "--run", str(run)])
    assert res.exit_code == 0, res.output
    rows = json.loads((run / "backtest" / "metrics.json").read_text())
    folds = sorted(int(p.name[5:]) for p in (run / "folds").glob("fold_*"))
    assert [(r["window"], r["label"]) for r in rows] == [(k, lab) for k in folds for lab in ("agent", "buy & hold")]
    for r in rows:
        saved = json.loads((run / "folds" / f"fold_{r['window']}" / "metrics.json").read_text())
        want = saved["agent" if r["label"] == "agent" else "buy_and_hold"]
        for key in ("sharpe", "total_return", "max_drawdown", "trade_count", "bars"):
            assert r[key] == want[key], (r["window"], r["label"], key)
        if r["label"] == "agent":  # and the fold's beta / timing record
            for key in ("beta", "timing_sharpe", "time_in_market", "long_share", "short_share", "verdict"):
                assert r[key] == saved["timing"][key], (r["window"], key)
    assert (run / "backtest" / "report.html").is_file() and (run / "backtest" / "trades.json").is_file()
    # the run's own [accel] (eval only, for the run's agent), printed and written beside the metrics
    plan = json.loads((run / "backtest" / "accel.json").read_text())
    assert plan["parts"] == ["eval"] and plan["agent"] == "dqn" and "accel: backend=" in res.output
    res = CliRunner().invoke(app, ["backtest", "--run", str(run), "--set", "accel.eval=torch", "--set", "backtest.barriers=true",
                                   "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "again" / "accel.json").read_text())["named"] == ["eval"]
    assert json.loads((tmp_path / "again" / "metrics.json").read_text()) == rows  # same path, same numbers
    assert "triple-barrier labels" in (tmp_path / "again" / "report.html").read_text()


def test_backtest_needs_exactly_one_of_model_and_run_and_a_real_run_directory(tmp_path):
    res = CliRunner().invoke(app, ["backtest"])
    assert res.exit_code == 2 and "--model" in res.output and "--run" in res.output
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["backtest", "--run", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "not a training run directory" in res.output
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == []
