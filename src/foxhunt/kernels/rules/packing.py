"""The packed dueling network that the fused kernels read (host side: torch only, no Triton).

``pack_dueling`` lays a dueling net out as four dense layers with transposed, zero-padded weights
[K, N] (``DuelingWeights``; the device functions that read them are ``rules/dueling.py``);
``pack_net`` does it for a DuelingQNet-shaped module and ``pack_dueling_into`` refreshes a packed
copy in place (CUDA-graph safe). Shared by the acting kernel and the backtest kernel. This module
is part of the ``foxhunt.kernels`` leaf: it imports nothing of ours outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

Pairs = Sequence[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class DuelingWeights:
    """A dueling net as four padded dense layers, weights transposed [K, N] (see rules/dueling.py).
    The head-hidden layer holds the value head's units in columns [0, H3 / 2) and the advantage
    head's in [H3 / 2, H3), so either head alone is a power-of-two block."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor
    w3: torch.Tensor
    b3: torch.Tensor
    w4: torch.Tensor
    b4: torch.Tensor
    obs_dim: int
    n_actions: int
    slope: float

    @property
    def dims(self) -> tuple[int, int, int, int, int]:
        """Padded (D, H1, H2, H3, A) (of each member's, for a stack of M packs: every tensor [M, ...])."""
        return self.w1.shape[-2], self.w1.shape[-1], self.w2.shape[-1], self.w3.shape[-1], self.w4.shape[-1]

    @property
    def members(self) -> int:
        """1 for one net's pack, M for a stack of M members' packs (every tensor with a leading [M] axis)."""
        return int(self.w1.shape[0]) if self.w1.dim() == 3 else 1


def pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, 1 << (max(1, int(n)) - 1).bit_length())


def pack_dueling(trunk: list[tuple[torch.Tensor, torch.Tensor]], value: list[tuple[torch.Tensor, torch.Tensor]],
                 advantage: list[tuple[torch.Tensor, torch.Tensor]], slope: float,
                 dtype: torch.dtype = torch.float32, min_head: int = 16, min_width: int = 16) -> DuelingWeights:
    """Pack (weight [out, in], bias [out]) pairs of nn.Linear layers: two trunk layers, the value
    head (hidden, 1 output) and the advantage head (hidden, n_actions outputs). min_head: the
    smallest padded output block A (a power of two >= 16; the acting kernel asks for more, see
    ``foxhunt.kernels.acting.kernel.MIN_HEAD``); min_width: the smallest padded input and hidden
    block D, H1, H2, H3 (the same rule; ``foxhunt.kernels.acting.kernel.MIN_WIDTH``)."""
    for name, v in (("min_head", min_head), ("min_width", min_width)):
        if v < 16 or v & (v - 1):
            raise ValueError(f"pack_dueling: {name} = {v} must be a power of two >= 16")
    if len(trunk) != 2 or len(value) != 2 or len(advantage) != 2:
        raise ValueError("pack_dueling: expected 2 trunk layers and 2 layers per head")
    (t1w, t1b), (t2w, t2b) = trunk
    (v1w, v1b), (v2w, v2b) = value
    (a1w, a1b), (a2w, a2b) = advantage
    obs_dim, h1, h2, hh, n_act = t1w.shape[1], t1w.shape[0], t2w.shape[0], v1w.shape[0], a2w.shape[0]
    if (t2w.shape[1] != h1 or v1w.shape[1] != h2 or a1w.shape != (hh, h2) or v2w.shape != (1, hh)
            or a2w.shape[1] != hh):
        raise ValueError("pack_dueling: layer shapes do not chain")
    D, H1, H2, H3 = (pow2_at_least(n, min_width) for n in (obs_dim, h1, h2, 2 * hh))
    A = pow2_at_least(n_act + 1, min_head)
    dev = t1w.device
    f32 = dict(dtype=torch.float32, device=dev)
    w1 = torch.zeros(D, H1, **f32)
    w1[:obs_dim, :h1] = t1w.detach().T
    w2 = torch.zeros(H1, H2, **f32)
    w2[:h1, :h2] = t2w.detach().T
    w3 = torch.zeros(H2, H3, **f32)
    hp = H3 // 2  # the advantage head's hidden units start at the middle (a power-of-two block each)
    w3[:h2, :hh] = v1w.detach().T
    w3[:h2, hp:hp + hh] = a1w.detach().T
    w4 = torch.zeros(H3, A, **f32)
    w4[hp:hp + hh, :n_act] = a2w.detach().T
    w4[:hh, n_act] = v2w.detach()[0]
    b1, b2, b3, b4 = (torch.zeros(n, **f32) for n in (H1, H2, H3, A))
    b1[:h1], b2[:h2] = t1b.detach(), t2b.detach()
    b3[:hh], b3[hp:hp + hh] = v1b.detach(), a1b.detach()
    b4[:n_act], b4[n_act] = a2b.detach(), v2b.detach()[0]
    ws = [w.to(dtype).contiguous() for w in (w1, w2, w3, w4)]
    return DuelingWeights(ws[0], b1, ws[1], b2, ws[2], b3, ws[3], b4, obs_dim, n_act, float(slope))



def dueling_pairs(net: torch.nn.Module) -> tuple[list, list, list, float]:
    """(trunk, value, advantage) lists of (weight [out, in], bias [out]) and the LeakyReLU slope of
    a DuelingQNet-shaped module (``.trunk`` / ``.value`` / ``.advantage`` Sequentials of Linear and
    LeakyReLU; duck-typed so that this leaf imports no network class). Callers check the shape."""
    lin = lambda seq: [(m.weight, m.bias) for m in seq.children() if isinstance(m, torch.nn.Linear)]  # noqa: E731
    slope = next(m.negative_slope for m in net.trunk.children() if isinstance(m, torch.nn.LeakyReLU))
    return lin(net.trunk), lin(net.value), lin(net.advantage), float(slope)


def pack_net(net: torch.nn.Module, precision: str, min_head: int = 16, min_width: int = 16) -> DuelingWeights:
    """``pack_dueling`` of a DuelingQNet-shaped module in the weight dtype of ``precision``."""
    trunk, value, adv, slope = dueling_pairs(net)
    return pack_dueling(trunk, value, adv, slope, torch.bfloat16 if precision == "bf16" else torch.float32, min_head, min_width)


@torch.no_grad()
def pack_dueling_into(trunk: Pairs, value: Pairs, advantage: Pairs, out: DuelingWeights) -> None:
    """Refresh ``out`` (a ``pack_dueling`` result of a net of the same shape) from the layers'
    current values: in-place copies into the unpadded regions only (the padding stays zero), no
    allocation and no host read, so it can sit inside a captured CUDA graph. Weights are converted
    to ``out``'s dtype by the copies (round to nearest for bf16, as ``pack_dueling``'s ``.to``)."""
    (t1w, t1b), (t2w, t2b) = trunk
    (v1w, v1b), (v2w, v2b) = value
    (a1w, a1b), (a2w, a2b) = advantage
    obs_dim, h1, h2, hh, n_act = t1w.shape[1], t1w.shape[0], t2w.shape[0], v1w.shape[0], a2w.shape[0]
    D, H1, H2, H3, A = out.dims
    if (obs_dim, n_act) != (out.obs_dim, out.n_actions) or h1 > H1 or h2 > H2 or 2 * hh > H3 or n_act + 1 > A:
        raise ValueError("pack_dueling_into: the network does not match the packed buffers")
    out.w1[:obs_dim, :h1].copy_(t1w.T)
    out.w2[:h1, :h2].copy_(t2w.T)
    hp = H3 // 2  # pack_dueling's layout: the advantage hidden units start at the middle
    out.w3[:h2, :hh].copy_(v1w.T)
    out.w3[:h2, hp:hp + hh].copy_(a1w.T)
    out.w4[hp:hp + hh, :n_act].copy_(a2w.T)
    out.w4[:hh, n_act].copy_(v2w[0])
    out.b1[:h1].copy_(t1b)
    out.b2[:h2].copy_(t2b)
    out.b3[:hh].copy_(v1b)
    out.b3[hp:hp + hh].copy_(a1b)
    out.b4[:n_act].copy_(a2b)
    out.b4[n_act:n_act + 1].copy_(v2b)


WEIGHT_FIELDS = ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")
"""DuelingWeights' tensors, in the acting kernel's argument order."""

__all__ = ["WEIGHT_FIELDS", "DuelingWeights", "Pairs", "dueling_pairs", "pack_dueling", "pack_dueling_into", "pack_net",
           "pow2_at_least"]
