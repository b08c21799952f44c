"""bench/bench_learning.py's --eval networks (averaged, ensembled) against their definitions, and --seeds K
(K agents a fold, member 0 paired with the plain run)."""

from __future__ import annotations

import pytest
import torch

from bench.bench_learning import EVALS, eval_policy
from foxhunt.agents.networks import DuelingQNet


def _nets(k: int) -> list[DuelingQNet]:
    out = []
    for i in range(k):
        torch.manual_seed(i)
        out.append(DuelingQNet(6, 5, hidden=(8, 8), head_hidden=4))
    return out


class _Trainer:
    class learner:  # noqa: N801 - a stand-in with no target network (PPO's shape)
        pass


def test_swa_policy_acts_greedily_on_the_parameter_mean_of_the_last_k_snapshots() -> None:
    snaps = _nets(6)
    policy = eval_policy("swa4", snaps[-1], _Trainer(), snaps)
    avg = policy.net
    for name, p in avg.named_parameters():
        want = torch.stack([dict(m.named_parameters())[name] for m in snaps[-4:]]).mean(0)
        assert torch.equal(p, want)
    obs = torch.randn(32, 6)
    assert torch.equal(policy(obs, torch.zeros(())), avg(obs).argmax(1))


def test_ensemble_policy_takes_the_argmax_of_the_mean_q_and_target_falls_back_to_the_online_net() -> None:
    snaps = _nets(5)
    obs = torch.randn(64, 6)
    ens = eval_policy("ens4", snaps[-1], _Trainer(), snaps)
    mean_q = torch.stack([m(obs) for m in snaps[-4:]]).mean(0)
    assert torch.equal(ens(obs, torch.zeros(())), mean_q.argmax(1))
    target = eval_policy("target", snaps[-1], _Trainer(), snaps)
    assert target.net is snaps[-1]
    assert set(EVALS) == {"online", "target", "swa4", "swa8", "ens4"}


TINY = {"env": {"episode_length": 32}, "train": {"epochs": 1},
        "dqn": {"n_envs": 16, "rollout_len": 4, "rounds_per_epoch": 2, "train_steps_per_round": 1, "batch_size": 32,
                "hidden": [16, 16], "head_hidden": 8, "buffer_capacity": 2048, "warmup_transitions": 64}}


# 200-bar validation windows (the tiny size's are 400): every epoch's scoring steps them bar by bar
CPU = ['run.device="cpu"', "folds.val=200"]


@pytest.mark.slow
def test_seeds_k_members_equal_separate_runs_of_their_seeds_and_the_ensemble_is_scored_too() -> None:
    from bench.bench_learning import curves

    plain = curves("edge_daily", TINY, "tiny", 2, 0.2, CPU)
    team = curves("edge_daily", TINY, "tiny", 2, 0.2, CPU, seeds=2)
    rows = [r for f in team["folds"] for r in f]
    assert len(team["folds"]) == 2  # two folds: the members cross a fold boundary as separate runs do
    assert [r["val_sharpe"] for f in plain["folds"] for r in f] == [r["val_sharpe"] for r in rows]  # member 0 = plain
    assert team["val_selected_mean"] == plain["val_selected_mean"]
    for sfx in ("_m1", "_seeds2"):
        assert all(f"inner_sharpe{sfx}" in r and f"val_turnover{sfx}" in r for r in rows)
        assert len(team[f"val_mean_by_epoch{sfx}"]) == 2 and f"val_selected_mean{sfx}" in team
    sel = team["selens2_by_fold"]  # each member's own inner pick, merged: one validation score a fold
    assert len(sel) == len(team["folds"]) and all(len(x["picks"]) == 2 and set(x["picks"]) <= {1, 2} for x in sel)
    assert sel[0]["picks"][0] == plain["selected_epochs"][0]  # member 0 keeps what the plain run keeps
    assert team["val_selected_mean_selens2"] == pytest.approx(sum(x["val_sharpe"] for x in sel) / len(sel))
    seed1 = curves("edge_daily", TINY, "tiny", 2, 0.2, [*CPU, "run.seed=1"])
    assert [r["val_sharpe_m1"] for r in rows] == [r["val_sharpe"] for f in seed1["folds"] for r in f]  # = a seed-1 run
    assert [r["val_sharpe_m1"] for r in rows] != [r["val_sharpe"] for r in rows]  # another seed: another agent
