"""train.abstain: a fold whose members' mean selected held-back Sharpe is within z standard errors
of zero gets the flat network instead of their ensemble (foxhunt.train.abstain).

The runner tests script the held-back Sharpes (so the claims do not depend on what a tiny run
learns): the tiny run's held-back window is 399 minute bars, SE = sqrt(525,960 / 399) ≈ 36, so the
bar at the default z = 3 is ≈ 109 (fold 1, with more held-back bars: ≈ 102)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.agents.model_io import load_model
from foxhunt.agents.networks import DuelingQNet, fused_net_unsupported
from foxhunt.cli import app
from foxhunt.errors import ConfigError
from foxhunt.train import abstain
from foxhunt.train import runner as runner_mod
from foxhunt.train.config import default_train_config
from tests.train.conftest import tiny_config

FOXHUNT = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())"]


# ---------------------------------------------------------------------- the rule
def test_the_bar_is_z_standard_errors_of_a_sharpe_over_the_held_back_bars():
    assert abstain.sharpe_standard_error(500, 252.0) == pytest.approx(math.sqrt(252 / 500))
    assert abstain.noise_bar(2.0, 80_000, 525_960.0) == pytest.approx(2 * math.sqrt(525_960 / 80_000))
    assert abstain.noise_bar(0.0, 10, 252.0) == 0.0  # z = 0: only members at or below zero abstain


def test_the_fold_trades_only_when_the_members_mean_held_back_sharpe_is_above_the_bar():
    assert abstain.trades([1.5, 0.1], 0.7) and not abstain.trades([1.5, -0.2], 0.7)  # means 0.8 and 0.65
    assert abstain.mean_sharpe([1.0, None, float("nan"), 1.0]) == 0.5  # no score counts as a flat member's 0
    assert not abstain.trades([0.7], 0.7)  # strictly above
    assert not abstain.trades([-1.0, 0.5], 0.0)


@pytest.mark.parametrize("n_actions, flat", [(5, 2), (45, 19)])
def test_the_flat_network_always_picks_the_flat_exposure_and_the_fused_kernels_accept_it(n_actions, flat):
    like = DuelingQNet(23, n_actions, [16, 12], 8)
    net = abstain.flat_net(like)
    obs = torch.randn(257, 23) * 50.0  # any observation, however large
    q = net(obs)
    assert bool((q.argmax(-1) == flat).all())
    assert bool((torch.softmax(q, -1)[:, flat] >= 1 - 1e-6).all())  # a sampling policy stays flat as well
    assert abstain.flat_action(n_actions) == flat and flat // (9 if n_actions == 45 else 1) == 2
    assert [p.shape for p in net.parameters()] == [p.shape for p in like.parameters()]
    assert fused_net_unsupported(net, 23, n_actions) is None


def test_abstain_z_must_be_a_non_negative_number_of_standard_errors():
    assert default_train_config().train.abstain and default_train_config().train.abstain_z == 3.0
    with pytest.raises(ConfigError, match="abstain_z"):
        default_train_config(["train.abstain_z=-1"])


def test_foxhunt_train_refuses_a_bad_abstention_setting_in_one_line_with_exit_2_and_nothing_written(tmp_path):
    from tests.cli_run import assert_refused

    assert_refused(tmp_path, ["train", "--set", "train.abstain_z=-1"],
                   "<built-in train defaults> + overrides: train.abstain_z: Input should be greater than or equal to 0 (got -1)")
    assert_refused(tmp_path, ["train", "--set", "train.abstain=maybe"],
                   "<built-in train defaults> + overrides: train.abstain: Input should be a valid boolean, "
                   "unable to interpret input (got 'maybe')")


# ---------------------------------------------------------------------- in the runner
def _scripted(monkeypatch, per_member: list[float]) -> None:
    """Every epoch's held-back Sharpe of member k is per_member[k] (members are scored in order)."""
    calls = {"n": 0}

    def window_sharpe(self, start, steps, policy):
        calls["n"] += 1
        return per_member[(calls["n"] - 1) % len(per_member)]

    def members_sharpes(self, start, steps, nets, k):  # the members of a fold scored by one backtest
        return [window_sharpe(self, start, steps, None) for _ in nets]

    monkeypatch.setattr(runner_mod.WalkForwardRunner, "_window_sharpe", window_sharpe)
    monkeypatch.setattr(runner_mod.WalkForwardRunner, "_members_sharpes", members_sharpes)


def _train(tmp_path: Path, name: str, *sets: str) -> Path:
    cfg = tiny_config(tmp_path, epochs=2, every=0, select="inner", abstain=True)
    args = ["train", "--config", str(cfg), "--name", name, "--set", "train.ensemble=2"]
    res = CliRunner().invoke(app, args + [a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.output
    return tmp_path / "runs" / name


def _fold(run: Path, k: int) -> dict:
    return json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())


@pytest.mark.slow
def test_a_fold_whose_members_mean_clears_the_bar_trades_their_whole_ensemble(tmp_path, monkeypatch):
    """Member 1 alone (1.0) is far below the bar; the mean (250 + 1) / 2 clears it: the model is both members'."""
    _scripted(monkeypatch, [250.0, 1.0])
    team = _train(tmp_path / "team", "t")
    _scripted(monkeypatch, [250.0, 1.0])
    off = _train(tmp_path / "off", "o", "train.abstain=false")
    obs = torch.randn(300, load_model(off / "folds" / "fold_0" / "model.safetensors")[0].obs_dim)
    for k in (0, 1):
        m = _fold(team, k)
        rec = m["selection"]["abstain"]
        assert not rec["flat"] and rec["inner_sharpes"] == [250.0, 1.0] and rec["mean_inner_sharpe"] == 125.5
        assert rec["bar"] == pytest.approx(3.0 * rec["standard_error"]) and 95 < rec["bar"] < 115
        assert "all_members" not in rec  # nothing was replaced
        nets = [load_model(r / "folds" / f"fold_{k}" / "model.safetensors")[0] for r in (team, off)]
        assert torch.equal(nets[0](obs), nets[1](obs)) and m["agent"] == _fold(off, k)["agent"]


@pytest.mark.slow
def test_a_fold_within_noise_is_flat_trades_nothing_and_records_what_the_ensemble_would_have_scored(tmp_path, monkeypatch):
    _scripted(monkeypatch, [200.0, -3.0])  # mean 98.5: below the bar although member 0 alone is above it
    run = _train(tmp_path / "team", "f")
    _scripted(monkeypatch, [200.0, -3.0])
    off = _train(tmp_path / "off", "o", "train.abstain=false")
    for k in (0, 1):
        m = _fold(run, k)
        rec = m["selection"]["abstain"]
        assert rec["flat"] and rec["mean_inner_sharpe"] == 98.5
        assert m["agent"]["trade_count"] == 0 and m["agent"]["total_return"] == 0.0
        without = _fold(off, k)["agent"]
        assert rec["all_members"] == {key: without[key] for key in abstain.ALTERNATIVE_METRICS}
        net = load_model(run / "folds" / f"fold_{k}" / "model.safetensors")[0]
        assert bool((net(torch.randn(64, net.obs_dim)).argmax(-1) == 2).all())


@pytest.mark.slow
def test_abstain_off_keeps_every_member_and_writes_no_record(tmp_path, monkeypatch):
    _scripted(monkeypatch, [1.0, -3.0])
    run = _train(tmp_path, "o", "train.abstain=false")
    assert all("abstain" not in _fold(run, k)["selection"] for k in (0, 1))  # and the ensemble trades
    assert _fold(run, 0)["agent"]["trade_count"] > 0


@pytest.mark.slow
def test_foxhunt_train_reports_a_flat_fold_in_a_fresh_process(tmp_path):
    """The tiny run's held-back windows cannot clear a bar of ~109 (unscripted): every fold is flat,
    the console says why, and `foxhunt backtest --run` replays the flat model files."""
    cfg = tiny_config(tmp_path, epochs=1, every=0, select="inner", abstain=True)
    # 100-bar validation windows (the tiny config's are 300): the flat model files are backtested bar by bar
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1))
    out = subprocess.run(FOXHUNT + ["train", "--config", str(cfg), "--name", "r"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long lines at the pipe's 80 columns
    assert text.count("flat: the agent's held-back Sharpe") == 2 and "is within the noise bar" in text
    assert "abstention: a fold trades only if its agents' mean held-back Sharpe beats 3 standard errors" in text
    run = tmp_path / "runs" / "r"
    assert all(_fold(run, k)["agent"]["trade_count"] == 0 for k in (0, 1))
    bt = subprocess.run(FOXHUNT + ["backtest", "--run", str(run)], capture_output=True, text=True, timeout=600)
    assert bt.returncode == 0, bt.stderr


def test_the_report_says_whether_each_fold_traded_and_what_a_flat_fold_replaced():
    from foxhunt.train.report import fold_table_html

    fold = {"fold": 0, "train_start": 0, "train_end": 100, "val_start": 160, "val_end": 200}
    rec = {"z": 3.0, "standard_error": 0.5, "mean_inner_sharpe": 0.4, "flat": True, "all_members": {"sharpe": -0.31}}
    flat = {"fold": fold, "agent": {"sharpe": 0.0}, "selection": {"abstain": rec}}
    trades = {"fold": fold, "agent": {"sharpe": 1.0}, "selection": {"abstain": {**rec, "mean_inner_sharpe": 2.5, "flat": False}}}
    page = fold_table_html([flat, trades])
    assert "<th>abstention</th>" in page
    assert "flat (held-back +0.8 SE &le; 3; the ensemble would have scored -0.31)" in page
    assert "trades (held-back +5.0 SE &gt; 3)" in page
    assert "abstention" not in fold_table_html([{"fold": fold, "agent": {"sharpe": 1.0}}])


@pytest.mark.slow
def test_a_run_killed_inside_a_fold_resumes_to_the_same_abstention_decisions(tmp_path):
    """A bar of 0 SE (the fold trades when its members' mean held-back Sharpe is positive) so the
    decision depends on what was trained; SIGKILL after the first in-fold checkpoint, --resume in a
    fresh process: the same metrics.json files (abstention records included), bit for bit."""
    from foxhunt.train import checkpoint as ckpt
    from tests.train.conftest import CLI
    from tests.train.test_kill_resume import _assert_same_result, _finish, _kill, _popen, _wait

    cfg = tiny_config(tmp_path, epochs=2, every=1, select="inner", abstain=True)  # 2 epochs: the kill lands after epoch 1, inside fold 0
    # a 10 % held-back window (half the default): each epoch's selection scores half the bars; the claim is the same
    # and 100-bar validation windows (the tiny config's are 300): the decisions are taken on the held-back window
    text = cfg.read_text().replace("[train]\n", "[train]\nensemble = 2\nabstain_z = 0.0\ninner_fraction = 0.1\n", 1)
    cfg.write_text(text.replace("val = 300\n", "val = 100\n", 1))
    _finish(_popen(CLI + ["--config", str(cfg), "--name", "ref"], pause=False))
    ref = tmp_path / "runs" / "ref"
    assert all("abstain" in _fold(ref, k)["selection"] for k in (0, 1))
    run = tmp_path / "runs" / "k"
    proc = _popen(CLI + ["--config", str(cfg), "--name", "k"], pause=False)
    _wait(proc, lambda: bool(ckpt.committed(run / "checkpoints")), "the first committed checkpoint")
    _kill(proc)
    out = _finish(_popen(CLI + ["--resume", str(run)], pause=False))
    assert "from checkpoint" in out
    _assert_same_result(run, ref)
