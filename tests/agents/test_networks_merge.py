"""merge_mean: one wide DuelingQNet equals the weighted mean of its members' Q-values."""

from __future__ import annotations

import copy

import pytest
import torch

from foxhunt.agents.networks import ActorCritic, DuelingQNet, merge_mean


def _members(k: int, obs_dim: int, n_actions: int, hidden: tuple[int, ...], head: int, seed: int) -> list[DuelingQNet]:
    nets = []
    for i in range(k):
        torch.manual_seed(seed + i)
        net = DuelingQNet(obs_dim, n_actions, hidden, head)
        with torch.no_grad():  # non-zero biases, so a misplaced bias shows
            for p in net.parameters():
                p.add_(0.1 * torch.randn_like(p))
        nets.append(net)
    return nets


def _mean_q64(nets: list[DuelingQNet], obs: torch.Tensor, weights: list[float] | None) -> torch.Tensor:
    w = torch.ones(len(nets), dtype=torch.float64) if weights is None else torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    qs = [copy.deepcopy(n).double()(obs.double()) for n in nets]
    return sum(wk * q for wk, q in zip(w, qs))


@pytest.mark.parametrize("k,obs_dim,n_actions,hidden,head,weights", [
    (1, 7, 5, (5, 3), 4, None),
    (3, 11, 5, (6, 9), 2, None),
    (4, 54, 45, (64, 64), 32, None),
    (2, 3, 5, (1, 1), 1, [0.2, 0.8]),
    (3, 13, 45, (8, 4), 5, [3.0, 0.0, 1.0]),
])
def test_merged_q_equals_weighted_mean_of_members_q_on_random_and_odd_shapes(k, obs_dim, n_actions, hidden, head, weights):
    nets = _members(k, obs_dim, n_actions, hidden, head, seed=17 * k + obs_dim)
    merged = merge_mean(nets, weights)
    assert [l.out_features for l in merged.trunk if isinstance(l, torch.nn.Linear)] == [h * k for h in hidden]
    obs = torch.randn(257, obs_dim)
    got = merged(obs)
    want = _mean_q64(nets, obs, weights)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-5)


def test_merged_ppo_actors_argmax_is_the_argmax_of_the_mean_logits():
    torch.manual_seed(3)
    actors = [ActorCritic(9, 5, (6, 6), 4) for _ in range(3)]
    merged = merge_mean([a.greedy_net() for a in actors])
    obs = torch.randn(500, 9)
    mean_logits = torch.stack([a(obs)[0].double() for a in actors]).mean(0)
    torch.testing.assert_close(merged(obs).double(), mean_logits - mean_logits.mean(-1, keepdim=True), atol=1e-5, rtol=1e-5)


def test_merge_mean_refuses_mixed_architectures_and_bad_weights():
    a, b = DuelingQNet(5, 5, (4, 4), 2), DuelingQNet(5, 5, (4, 3), 2)
    with pytest.raises(ValueError, match="one architecture"):
        merge_mean([a, b])
    with pytest.raises(ValueError, match="at least one"):
        merge_mean([])
    with pytest.raises(ValueError, match="not all zero"):
        merge_mean([a, a], [0.0, 0.0])
    with pytest.raises(ValueError, match="one non-negative weight per network"):
        merge_mean([a, a], [1.0])
