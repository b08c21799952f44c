"""train.abstain: a member whose selected held-back Sharpe is within z standard errors of zero
drops out of the fold's model; a fold with no voter gets the flat network (foxhunt.train.abstain).

The runner tests script the held-back Sharpes (so the claims do not depend on what a tiny run
learns): the tiny run's held-back window is 399 minute bars, SE = sqrt(525,960 / 399) ≈ 36, so the
bar at z = 2 is ≈ 73 (fold 1: ≈ 68); 100 clears it, 1 does not."""

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


def test_a_member_votes_only_when_its_held_back_sharpe_is_strictly_above_the_bar():
    assert abstain.voters([1.5, 0.5, 0.7, None, float("nan"), 0.71], 0.7) == [0, 5]
    assert abstain.voters([-1.0, 0.0], 0.0) == []


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
    assert default_train_config().train.abstain and default_train_config().train.abstain_z == 2.0
    with pytest.raises(ConfigError, match="abstain_z"):
        default_train_config(["train.abstain_z=-1"])


# ---------------------------------------------------------------------- in the runner
def _scripted(monkeypatch, per_member: list[float]) -> None:
    """Every epoch's held-back Sharpe of member k is per_member[k] (members are scored in order)."""
    calls = {"n": 0}

    def window_sharpe(self, start, steps, policy):
        calls["n"] += 1
        return per_member[(calls["n"] - 1) % len(per_member)]

    monkeypatch.setattr(runner_mod.WalkForwardRunner, "_window_sharpe", window_sharpe)


def _train(tmp_path: Path, name: str, *sets: str, ensemble: int = 2) -> Path:
    cfg = tiny_config(tmp_path, epochs=2, every=0, select="inner", abstain=True)
    args = ["train", "--config", str(cfg), "--name", name, "--set", f"train.ensemble={ensemble}"]
    res = CliRunner().invoke(app, args + [a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.output
    return tmp_path / "runs" / name


def _fold(run: Path, k: int) -> dict:
    return json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())


@pytest.mark.slow
def test_a_member_within_noise_drops_out_and_the_model_is_the_other_members_alone(tmp_path, monkeypatch):
    _scripted(monkeypatch, [100.0, 1.0])
    team = _train(tmp_path / "team", "t", "train.abstain_ablation=true")
    _scripted(monkeypatch, [100.0])
    alone = _train(tmp_path / "alone", "a", ensemble=1)  # member 0 is the agent a run of seed 0 trains
    obs = torch.randn(300, load_model(alone / "folds" / "fold_0" / "model.safetensors")[0].obs_dim)
    for k in (0, 1):
        m = _fold(team, k)
        rec = m["selection"]["abstain"]
        assert rec["voters"] == [0] and rec["abstained"] == [1] and not rec["flat"]
        assert rec["bar"] == pytest.approx(2.0 * rec["standard_error"]) and 60 < rec["bar"] < 76  # folds expand: 399, then more held-back bars
        assert rec["inner_sharpes"] == [100.0, 1.0]
        net_team, net_alone = (load_model(r / "folds" / f"fold_{k}" / "model.safetensors")[0] for r in (team, alone))
        assert torch.equal(net_team(obs), net_alone(obs))  # member 0's selected network, unchanged
        assert m["agent"] == _fold(alone, k)["agent"]
        # what abstention did not pick, scored on the same validation window
        assert [b["members"] for b in rec["by_members"]] == [[0], [0, 1]]
        assert rec["by_members"][0]["sharpe"] == m["agent"]["sharpe"]  # top-1 = the voters = the model
        assert rec["all_members"] == {k2: v for k2, v in rec["by_members"][1].items() if k2 != "members"}


@pytest.mark.slow
def test_a_fold_where_every_member_abstains_is_flat_and_trades_nothing(tmp_path, monkeypatch):
    _scripted(monkeypatch, [1.0, -3.0])
    run = _train(tmp_path, "f")
    for k in (0, 1):
        m = _fold(run, k)
        rec = m["selection"]["abstain"]
        assert rec["flat"] and rec["voters"] == [] and rec["abstained"] == [0, 1]
        assert m["agent"]["trade_count"] == 0 and m["agent"]["total_return"] == 0.0
        assert "all_members" in rec and "by_members" not in rec
        net = load_model(run / "folds" / f"fold_{k}" / "model.safetensors")[0]
        assert bool((net(torch.randn(64, net.obs_dim)).argmax(-1) == 2).all())


@pytest.mark.slow
def test_abstain_off_keeps_every_member_and_writes_no_record(tmp_path, monkeypatch):
    _scripted(monkeypatch, [1.0, -3.0])
    run = _train(tmp_path, "o", "train.abstain=false")
    assert all("abstain" not in _fold(run, k)["selection"] for k in (0, 1))
    assert _fold(run, 0)["agent"]["trade_count"] > 0


@pytest.mark.slow
def test_foxhunt_train_reports_a_flat_fold_in_a_fresh_process(tmp_path):
    """The tiny run's held-back windows cannot clear a bar of ~73 (unscripted): every fold is flat,
    the console says why, and `foxhunt backtest --run` replays the flat model files."""
    cfg = tiny_config(tmp_path, epochs=1, every=0, select="inner", abstain=True)
    out = subprocess.run(FOXHUNT + ["train", "--config", str(cfg), "--name", "r"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("flat: no member's held-back Sharpe beat the noise bar") == 2
    run = tmp_path / "runs" / "r"
    assert all(_fold(run, k)["agent"]["trade_count"] == 0 for k in (0, 1))
    bt = subprocess.run(FOXHUNT + ["backtest", "--run", str(run)], capture_output=True, text=True, timeout=600)
    assert bt.returncode == 0, bt.stderr
