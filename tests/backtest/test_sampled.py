"""SampledPolicy: draws follow softmax(net(obs)), depend only on (seed, window, step), never read the host."""

from __future__ import annotations

import torch
from torch import nn

from foxhunt.backtest.sampled import SampledPolicy, counter_uniform
from foxhunt.testing import forbid_host_reads


class FixedLogits(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(obs.shape[0], -1)


def test_sampled_actions_follow_the_softmax_of_the_logits():
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0, 0.5]])
    pol = SampledPolicy(FixedLogits(logits), seed=11)
    obs = torch.zeros(512, 3)
    with forbid_host_reads():
        draws = torch.stack([pol(obs, torch.tensor(t)) for t in range(100)])  # [100, 512]
    freq = torch.bincount(draws.reshape(-1), minlength=5).double() / draws.numel()
    expect = torch.softmax(logits[0].double(), 0)
    assert (freq - expect).abs().max() < 0.01, (freq, expect)  # 51 200 draws: 4+ standard errors


def test_draws_depend_only_on_seed_window_and_step():
    pol = SampledPolicy(FixedLogits(torch.zeros(1, 5)), seed=3)
    obs = torch.zeros(8, 3)
    a, b = pol(obs, torch.tensor(7)), pol(obs, torch.tensor(7))
    assert torch.equal(a, b)
    assert not torch.equal(torch.stack([pol(obs, torch.tensor(t)) for t in range(4)]),
                           torch.stack([SampledPolicy(pol.net, seed=4)(obs, torch.tensor(t)) for t in range(4)]))
    # A window's draws do not depend on how many windows run beside it.
    assert torch.equal(pol(torch.zeros(3, 3), torch.tensor(7)), a[:3])


def test_counter_uniforms_are_in_the_open_unit_interval_and_flat():
    u = counter_uniform(5, 512, 7, torch.tensor(123))
    assert u.min() > 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.005
