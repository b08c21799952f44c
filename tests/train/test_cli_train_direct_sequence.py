"""`foxhunt train` with direct.policy = "attention" in fresh processes: its model files run in
`foxhunt backtest --run` on the torch path to the run's own fold metrics and with --model; the fused
kernel named for them, and train.ensemble > 1, are one-line refusals."""

from __future__ import annotations

import json

import pytest

from tests.cli_run import assert_refused
from tests.train.test_cli_train_direct import _by_fold, _run, direct_config

ATTENTION = '[direct]\npolicy = "attention"\nsequence = 8\nattention_heads = 2\n'


def _attention_config(directory, **kw):
    path = direct_config(directory, **kw)
    path.write_text(path.read_text().replace("[direct]\n", ATTENTION, 1))
    return path


@pytest.mark.slow
def test_foxhunt_train_runs_the_attention_policy_and_backtest_runs_its_models_in_torch(tmp_path):
    cfg = _attention_config(tmp_path, epochs=2, every=1, select="inner")
    # a 10 % held-back window and 100-bar validation on 1,800 bars (the tiny config's 20 % and 300 bars on 3,000:
    # fold 0 still trains on more than its 800): the held-back window and validation are backtested bar by bar
    cfg.write_text(cfg.read_text().replace('select = "inner"\n', 'select = "inner"\ninner_fraction = 0.1\n', 1)
                   .replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text()
    _run(["train", "--config", str(cfg), "--name", "d"])
    run = tmp_path / "runs" / "d"
    assert 'policy = "attention"' in (run / "config.toml").read_text()
    from foxhunt.agents.model_io import load_model
    from foxhunt.agents.sequence_net import SequenceQNet

    net, _, _ = load_model(run / "folds" / "fold_1" / "model.safetensors")
    assert isinstance(net, SequenceQNet) and net.sequence_meta() == {"length": 8, "width": 16, "heads": 2}
    _run(["backtest", "--run", str(run), "--device", "cpu", "--set", "accel.eval=torch", "--out", str(tmp_path / "bt")])
    rows = _by_fold(tmp_path / "bt" / "metrics.json")
    for k in (0, 1):
        saved = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["agent"]
        assert rows[(k, "agent")]["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)
    from foxhunt.data.synthetic import generate_bars
    from foxhunt.data.writer import write_bars

    bars = write_bars(generate_bars(500, seed=7), tmp_path / "bars.parquet")  # minute bars: 197 after the warm-up
    out = tmp_path / "bt_model"
    _run(["backtest", "--model", str(run / "folds" / "fold_1" / "model.safetensors"), "--data", str(bars), "--out", str(out),
          "--device", "cpu", "--cache-dir", str(tmp_path / "c")])
    assert json.loads((out / "metrics.json").read_text())[0]["label"] == "model"


def test_an_attention_policy_in_an_ensemble_is_a_one_line_error_that_writes_nothing(tmp_path):
    work = tmp_path / "w"
    cfg = _attention_config(work, epochs=1, every=0, cache=tmp_path / "cache")
    assert_refused(work, ["train", "--config", str(cfg), "--set", "train.ensemble=2"],
                   "direct.policy = 'attention' runs alone in the torch backtester (its network reads the last bars of the "
                   "market), not as a merged ensemble; set train.ensemble = 1 (got 2)")
