"""Flat parameters and the masked Adam: equal to torch's Adam when ok, bitwise frozen when not."""

from __future__ import annotations

import torch

from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.networks import DuelingQNet, action_category


def _net(seed: int = 0) -> DuelingQNet:
    torch.manual_seed(seed)
    return DuelingQNet(10, 45, hidden=(32, 32), head_hidden=16)


def test_flat_params_are_views_and_grads_accumulate_into_the_flat_buffer():
    net = _net()
    ref = _net()
    flat = FlatParams(net)
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    x = torch.randn(7, 10)
    net(x).sum().backward()
    ref(x).sum().backward()
    expect = torch.cat([q.grad.reshape(-1) for q in ref.parameters()])
    assert torch.equal(flat.grad, expect)
    flat.data.add_(1.0)
    assert torch.equal(next(net.parameters()).reshape(-1)[:3], flat.data[:3])


def test_masked_adam_matches_torch_adam_on_good_steps():
    net, ref = _net(1), _net(1)
    flat = FlatParams(net)
    opt = MaskedAdam(flat, torch.tensor(1e-3))
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-3)
    ok = torch.tensor(True)
    for i in range(5):
        x = torch.randn(16, 10, generator=torch.Generator().manual_seed(i))
        flat.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step(flat.grad, ok)
        ref_opt.zero_grad()
        ref(x).pow(2).mean().backward()
        ref_opt.step()
    expect = torch.cat([q.detach().reshape(-1) for q in ref.parameters()])
    torch.testing.assert_close(flat.data, expect, rtol=1e-5, atol=1e-7)


def test_masked_step_leaves_parameters_and_moments_bitwise_unchanged_even_with_nan_grads():
    net = _net(2)
    flat = FlatParams(net)
    opt = MaskedAdam(flat, torch.tensor(1e-3))
    flat.zero_grad()
    net(torch.randn(4, 10)).sum().backward()
    opt.step(flat.grad, torch.tensor(True))
    before = [t.clone() for t in (flat.data, opt.m, opt.v, opt.step_count)]
    flat.grad.fill_(float("nan"))
    opt.step(flat.grad, torch.tensor(False))
    for b, a in zip(before, (flat.data, opt.m, opt.v, opt.step_count)):
        assert torch.equal(b, a)


def test_action_category_maps_exposures_to_short_flat_long():
    factored = torch.arange(45)
    cats = action_category(factored, 45)
    assert cats[:18].eq(0).all() and cats[18:27].eq(1).all() and cats[27:].eq(2).all()
    assert action_category(torch.arange(5), 5).tolist() == [0, 0, 1, 2, 2]
