"""The dueling Q-network's forward and backward written by hand on a flat parameter vector.

Why: autograd records a tape and replays ~100 small backward kernels (one per op, plus
accumulation into ``.grad``), which torch.compile can only fuse piecewise because the autograd
boundary splits the step into a forward graph, a backward graph and an update graph. Written as
plain tensor algebra, forward + backward + update are ONE function without autograd, so Inductor
sees the whole step and fuses every elementwise op (bias, LeakyReLU and its derivative, the
dueling combination, Huber and its derivative, bias gradients) around the GEMMs.

The network is ``foxhunt.agents.networks.DuelingQNet`` or ``BranchingQNet`` (checked by
``DuelingLayout.from_module``):

    h_0 = x;  z_i = h_{i-1} W_iᵀ + b_i,  h_i = leaky(z_i)           (trunk, i = 1..L)
    V = leaky(h_L W_v1ᵀ + b_v1) W_v2ᵀ + b_v2                          [R, 1]
    A = leaky(h_L W_a1ᵀ + b_a1) W_a2ᵀ + b_a2                          [R, n_actions]
    Q = (V + A) − mean_a A                                            [R, n_actions]

or, branching, one advantage head A_b [R, n_b] per branch (same form) and
    Q(a_0, a_1, a_2) = V + Σ_b (A_b(a_b) − mean A_b)                  [R, Π n_b], row-major joint index

Parameters are read as views of one flat vector (``FlatParams`` order = ``module.parameters()``
order: trunk, value head, advantage head(s); each Linear weight [out, in] row-major then its bias),
and the gradient comes back as one flat vector in the same order. Any floating dtype works
(the tests compare with autograd in float64).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from foxhunt.agents.networks import BranchingQNet, DuelingQNet


@dataclass(frozen=True)
class LinearSlot:
    """Where one ``nn.Linear`` lives in the flat vector: weight [n_out, n_in] at ``w``, bias at ``b``."""

    w: int
    b: int
    n_in: int
    n_out: int


@dataclass(frozen=True)
class DuelingLayout:
    """Flat-vector layout of a DuelingQNet or BranchingQNet: offsets of every Linear, the LeakyReLU
    slope, sizes. advs: the advantage head's (Linear, Linear), one pair per branch when branching
    (``branches`` then holds the branch sizes; None: the flat dueling head)."""

    trunk: tuple[LinearSlot, ...]
    value: tuple[LinearSlot, LinearSlot]
    advs: tuple[tuple[LinearSlot, LinearSlot], ...]
    slope: float
    n_actions: int
    numel: int
    branches: tuple[int, ...] | None = None

    @property
    def adv(self) -> tuple[LinearSlot, LinearSlot]:
        """The (first) advantage head."""
        return self.advs[0]

    @staticmethod
    def from_module(net: nn.Module) -> "DuelingLayout":
        """Offsets in ``net.parameters()`` order (the order FlatParams and the target buffer use).

        Raises ValueError if ``net`` is not the trunk / value / advantage stack this module
        differentiates (so a changed network cannot silently get a wrong gradient).
        """
        if type(net) not in (DuelingQNet, BranchingQNet):
            raise ValueError(f"DuelingLayout: the network is a {type(net).__name__}, not a DuelingQNet or BranchingQNet")
        offsets: dict[int, int] = {}
        off = 0
        for p in net.parameters():
            offsets[id(p)] = off
            off += p.numel()
        slopes: set[float] = set()

        def slots(seq: nn.Module) -> tuple[LinearSlot, ...]:
            out = []
            for m in seq.children():
                if isinstance(m, nn.Linear):
                    if m.bias is None:
                        raise ValueError("DuelingLayout: every Linear needs a bias")
                    out.append(LinearSlot(offsets[id(m.weight)], offsets[id(m.bias)], m.in_features, m.out_features))
                elif isinstance(m, nn.LeakyReLU):
                    slopes.add(float(m.negative_slope))
                else:
                    raise ValueError(f"DuelingLayout: unexpected layer {type(m).__name__}")
            return tuple(out)

        branching = isinstance(net, BranchingQNet)
        heads = list(net.branches) if branching else [net.advantage]
        trunk, value, advs = slots(net.trunk), slots(net.value), [slots(h) for h in heads]
        # Every trunk Linear is followed by a LeakyReLU; each head is Linear, LeakyReLU, Linear.
        kinds = [type(m) for m in net.trunk.children()]
        if kinds != [nn.Linear, nn.LeakyReLU] * len(trunk) or len(value) != 2 or any(len(a) != 2 for a in advs):
            raise ValueError("DuelingLayout: expected trunk (Linear, LeakyReLU)×L and heads Linear, LeakyReLU, Linear")
        if value[1].n_out != 1 or len(slopes) != 1:
            raise ValueError("DuelingLayout: value head must end in 1 unit; one LeakyReLU slope throughout")
        sizes = tuple(a[1].n_out for a in advs)
        if branching and sizes != tuple(net.branch_sizes):
            raise ValueError("DuelingLayout: the branches' outputs do not match the net's branch sizes")
        return DuelingLayout(trunk, (value[0], value[1]), tuple((a[0], a[1]) for a in advs), slopes.pop(),
                             net.n_actions, off, sizes if branching else None)


def _weight(flat: torch.Tensor, s: LinearSlot) -> torch.Tensor:
    return flat[s.w : s.w + s.n_out * s.n_in].view(s.n_out, s.n_in)


def _bias(flat: torch.Tensor, s: LinearSlot) -> torch.Tensor:
    return flat[s.b : s.b + s.n_out]


def _linear(flat: torch.Tensor, s: LinearSlot, x: torch.Tensor) -> torch.Tensor:
    # F.linear, as nn.Linear does: the uncompiled forward is bitwise the module's forward.
    return F.linear(x, _weight(flat, s), _bias(flat, s))


class Activations(NamedTuple):
    """What the backward pass needs from the forward pass (all [R, ·] rows of the input)."""

    trunk_in: tuple[torch.Tensor, ...]  # input of trunk Linear i
    trunk_z: tuple[torch.Tensor, ...]  # pre-activation of trunk Linear i
    h: torch.Tensor  # trunk output [R, hidden[-1]]
    zv: torch.Tensor  # value-head pre-activation [R, head]
    hv: torch.Tensor
    za: tuple[torch.Tensor, ...]  # advantage-head pre-activation [R, head], one per branch
    ha: tuple[torch.Tensor, ...]

    def rows(self, n: int) -> "Activations":
        """The first n rows of every tensor (views)."""
        return Activations(tuple(t[:n] for t in self.trunk_in), tuple(t[:n] for t in self.trunk_z),
                           *(t[:n] for t in (self.h, self.zv, self.hv)), tuple(t[:n] for t in self.za),
                           tuple(t[:n] for t in self.ha))


def _joint(v: torch.Tensor, advs: list[torch.Tensor]) -> torch.Tensor:
    """BranchingQNet.forward's combination: V [R, 1] + centred branch advantages → Q [R, Π n_b]."""
    k = len(advs)
    q = v.view(-1, *([1] * k))
    for b, a in enumerate(advs):
        q = q + a.view(-1, *([1] * b), a.shape[1], *([1] * (k - b - 1)))
    return q.reshape(v.shape[0], -1)


def forward(flat: torch.Tensor, lay: DuelingLayout, x: torch.Tensor) -> tuple[torch.Tensor, Activations]:
    """Q-values [R, n_actions] of observations x [R, obs_dim], and the activations for ``backward``."""
    s = lay.slope
    ins, zs = [], []
    h = x
    for slot in lay.trunk:
        z = _linear(flat, slot, h)
        ins.append(h)
        zs.append(z)
        h = F.leaky_relu(z, s)
    zv = _linear(flat, lay.value[0], h)
    hv = F.leaky_relu(zv, s)
    za = [_linear(flat, a0, h) for a0, _ in lay.advs]
    ha = [F.leaky_relu(z, s) for z in za]
    v = _linear(flat, lay.value[1], hv)
    a = [_linear(flat, a1, hb) for (_, a1), hb in zip(lay.advs, ha)]
    if lay.branches is None:
        q = v + a[0] - a[0].mean(dim=-1, keepdim=True)  # the module's order of operations
    else:
        q = _joint(v, [ab - ab.mean(dim=-1, keepdim=True) for ab in a])
    return q, Activations(tuple(ins), tuple(zs), h, zv, hv, tuple(za), tuple(ha))


def backward(flat: torch.Tensor, lay: DuelingLayout, act: Activations, dq: torch.Tensor) -> torch.Tensor:
    """Flat gradient [numel] of Σ dq ⊙ Q with respect to the flat parameters (dq: [R, n_actions]).

    LeakyReLU'(z) is taken as 1 for z > 0 and ``slope`` otherwise, as autograd does.
    """
    s = lay.slope
    grads: dict[int, torch.Tensor] = {}  # flat offset -> gradient piece

    def leaky_back(z: torch.Tensor, dh: torch.Tensor) -> torch.Tensor:
        return torch.where(z > 0, dh, dh * s)

    def linear_back(slot: LinearSlot, x: torch.Tensor, dz: torch.Tensor, need_dx: bool) -> torch.Tensor | None:
        grads[slot.w] = dz.t() @ x  # [out, in]: one GEMM over the batch rows
        grads[slot.b] = dz.sum(0)
        return dz @ _weight(flat, slot) if need_dx else None

    # Q = V + A − mean(A): dV = Σ_a dQ, dA = dQ − mean_a dQ. Branching: branch b's A_b enters every
    # joint action with sub-action a_b, so dA_b = m_b − mean m_b with m_b = dQ summed over the other axes.
    dv = dq.sum(1, keepdim=True)  # [R, 1]
    if lay.branches is None:
        das = [dq - dq.mean(1, keepdim=True)]
    else:
        grid = dq.view(-1, *lay.branches)
        k = len(lay.branches)
        margins = [grid.sum(dim=tuple(d for d in range(1, k + 1) if d != b + 1)) for b in range(k)]
        das = [m - m.mean(1, keepdim=True) for m in margins]
    # Value output layer has one unit: its GEMMs are an outer product and a column reduction,
    # written elementwise so that Inductor fuses them with their neighbours.
    v1 = lay.value[1]
    grads[v1.w] = (dv * act.hv).sum(0, keepdim=True)  # [1, head]
    grads[v1.b] = dv.sum(0)
    dzv = leaky_back(act.zv, dv * _weight(flat, v1))
    dh = linear_back(lay.value[0], act.h, dzv, True)
    for (a0, a1), za, ha, da in zip(lay.advs, act.za, act.ha, das):
        dza = leaky_back(za, linear_back(a1, ha, da, True))
        dh = dh + linear_back(a0, act.h, dza, True)
    for i in reversed(range(len(lay.trunk))):
        dz = leaky_back(act.trunk_z[i], dh)
        dh = linear_back(lay.trunk[i], act.trunk_in[i], dz, i > 0)  # no input gradient for layer 0
    order = sorted(grads)
    assert order[0] == 0 and len(order) == 2 * (len(lay.trunk) + 2 + 2 * len(lay.advs)), "layout does not tile the flat vector"
    return torch.cat([grads[k].reshape(-1) for k in order])


def dqn_loss_and_grad(online: torch.Tensor, target: torch.Tensor, lay: DuelingLayout, obs: torch.Tensor,
                      action: torch.Tensor, reward: torch.Tensor, done: torch.Tensor, next_obs: torch.Tensor,
                      discount: torch.Tensor, weights: torch.Tensor, delta: float):
    """``QLearner._loss`` and its gradient, without autograd.

    online, target: [P] flat parameters. obs, next_obs: [B, obs_dim]; action [B] int64; reward,
    discount, weights [B] float; done [B] bool. Returns (loss 0-d, grad [P], td = q_taken − y [B],
    q_taken [B], q [B, n_actions]: the online Q of obs, every action, for the Q monitor). Double DQN: the online net picks the next action, the target net values it.
    """
    b = obs.shape[0]
    q_both, act = forward(online, lay, torch.cat([obs, next_obs]))
    q_taken = q_both[:b].gather(1, action.unsqueeze(1)).squeeze(1)
    best_next = q_both[b:].argmax(dim=1, keepdim=True)
    q_next = forward(target, lay, next_obs)[0].gather(1, best_next).squeeze(1)
    y = reward + discount * (~done).float() * q_next
    td = q_taken - y
    loss = (weights * F.huber_loss(q_taken, y, reduction="none", delta=delta)).mean()
    # d loss / d q_taken = (w / B) · clamp(td, −δ, δ)  (Huber's derivative; autograd's at |td| = δ).
    g = (weights / b) * td.clamp(-delta, delta)
    # Only the taken action's Q of the first B rows carries gradient (the next-state half is
    # under no_grad in the reference): backward over B rows with a one-hot dQ.
    onehot = action.unsqueeze(1) == torch.arange(lay.n_actions, device=action.device)
    dq = torch.where(onehot, g.unsqueeze(1), torch.zeros_like(g).unsqueeze(1))
    grad = backward(online, lay, act.rows(b), dq)
    return loss, grad, td, q_taken, q_both[:b]
