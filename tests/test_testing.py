"""The no-host-read guard really catches every kind of host read, and restores torch afterwards."""

from __future__ import annotations

import pytest
import torch

from foxhunt.testing import HostReadError, forbid_host_reads


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.sum().item(),
        lambda t: t.tolist(),
        lambda t: t.cpu(),
        lambda t: t.numpy(),
        lambda t: bool(t[0] > 0),
        lambda t: float(t[0]),
        lambda t: int(t[0]),
        lambda t: [0, 1, 2][t[0].long()],
        lambda t: f"{t}",
    ],
    ids=["item", "tolist", "cpu", "numpy", "bool", "float", "int", "index", "format"],
)
def test_every_host_read_raises_inside_the_block(read):
    t = torch.ones(3)
    with forbid_host_reads():
        with pytest.raises(HostReadError):
            read(t)


def test_device_ops_are_allowed_and_torch_is_restored():
    t = torch.arange(4.0)
    with forbid_host_reads():
        u = torch.where(t > 1, t * 2, t).sum()
        assert t.shape == (4,)
    assert u.item() == 1.0 + 4.0 + 6.0
    assert bool(t[1] > 0)
