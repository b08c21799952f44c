"""Action decoding: all 45 factored actions, exposure-mode routing at its boundaries, categories."""

from __future__ import annotations

import pytest
import torch

from foxhunt.env.actions import category, decode

M = 2.0**-7  # binary-exact medians: the boundary products are exact in float32
V = 2.0**-10


def test_every_factored_action_decodes_as_9e_plus_3o_plus_u():
    a = torch.arange(45)
    d = decode(a, "factored")
    for action in range(45):
        e, o, u = action // 9, (action // 3) % 3, action % 3
        assert (d.level[action].item(), d.order[action].item(), d.urgency[action].item()) == (e, o, u)
        assert d.mult[action].item() == (0.5, 1.0, 2.0)[u]
    assert sorted(zip(d.level.tolist(), d.order.tolist(), d.urgency.tolist())) == [
        (e, o, u) for e in range(5) for o in range(3) for u in range(3)
    ]


def test_exposure_mode_level_is_the_action():
    rg = torch.full((5,), 0.01)
    d = decode(torch.arange(5), "exposure", rg, torch.tensor(0.01), torch.full((5,), 1e-3), torch.tensor(1e-3))
    assert d.level.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "rg,med,expect",
    [
        (M * 0.99, M, 1),  # below the median: limit-maker
        (M, M, 2),  # at the median: IoC
        (M * 1.5, M, 2),
        (M * 2, M, 2),  # exactly 2× the median: IoC
        (M * 2.01, M, 0),  # above 2×: market
        (0.0, 0.0, 0),  # median ≤ 0: market
        (0.5, -1.0, 0),
    ],
)
def test_exposure_mode_order_type_routing_at_the_boundaries(rg, med, expect):
    d = decode(torch.tensor([4]), "exposure", torch.tensor([rg]), torch.tensor(med), torch.tensor([1e-3]), torch.tensor(1e-3))
    assert d.order.item() == expect


@pytest.mark.parametrize(
    "v,med,expect",
    [
        (V * 1.5, V, 1),  # exactly 1.5×: normal
        (V * 1.51, V, 2),  # above 1.5×: aggressive
        (V * 0.5, V, 1),  # exactly 0.5×: normal
        (V * 0.49, V, 0),  # below 0.5×: patient
        (V, V, 1),
        (5.0, 0.0, 1),  # median ≤ 0: normal
    ],
)
def test_exposure_mode_urgency_routing_at_the_boundaries(v, med, expect):
    d = decode(torch.tensor([0]), "exposure", torch.tensor([0.01]), torch.tensor(0.01), torch.tensor([v], dtype=torch.float32), torch.tensor(med))
    assert d.urgency.item() == expect
    assert d.mult.item() == (0.5, 1.0, 2.0)[expect]


def test_diversity_category_is_short_flat_long():
    assert category(torch.arange(5)).tolist() == [0, 0, 1, 2, 2]
