"""bench/bench_learning.py's --eval networks (averaged, ensembled) against their definitions."""

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
