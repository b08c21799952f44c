"""The direct policy: normalised features (and the current exposure) → a target exposure, and its
greedy form as the DuelingQNet that model files, both backtesters and ensembles already run.

``DirectPolicy`` is a LeakyReLU MLP, trunk ``F (+1) → hidden…`` and head ``hidden[-1] →
head_hidden → out``: out = 5 logits over the env's exposure levels (relaxations "softmax" and
"straight_through") or 1 pre-activation u with exposure tanh(u) ("continuous"). ``exposure`` turns
the output into the exposure the training P&L trades (``agents.direct.pnl``).

``greedy_net`` packs it as a ``DuelingQNet`` over the env's 45 factored actions whose argmax is a
market order of normal urgency (the fill path the training P&L books, as ``ExposurePolicy``'s) at
the policy's level: the argmax level (level relaxations) or the level nearest tanh(u) (continuous:
the argmax of five lines a_e·u + c_e whose upper envelope switches at atanh of the midpoints between
levels). Every other action's advantage is its level's less ``MARGIN``, the value head is zero, the
observation's unrealised-return and bars-in-position columns get zero weight (the training P&L has
no entry price for a fractional exposure), and the exposure column gets the policy's weight when
``position_input``. So everything that runs a DuelingQNet runs the policy unchanged: the torch and
fused backtests, ``foxhunt backtest --model``, ``merge_mean`` ensembles, abstention's flat network.
With ``direct.policy = "attention"`` (``sequence`` = L) the first layer also adds lag attention over
the last L bars and the greedy network is a ``SequenceQNet`` (the same packing plus the encoder),
which the torch backtester runs (it binds the market's bars to it); the fused kernels and ensembles
do not.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from foxhunt.agents.direct.pnl import LEVELS
from foxhunt.agents.networks import DuelingQNet
from foxhunt.agents.sequence_net import LagAttention, SequenceQNet
from foxhunt.env.actions import MARKET, NORMAL

N_LEVELS = len(LEVELS)
N_FACTORED = 45
MARGIN = 100.0
"""How far below its level's market order every limit / IoC variant of that level sits in the greedy
network: the argmax is always a market order of normal urgency, the level decided by the policy."""
MARKET_NORMAL = 3 * MARKET + NORMAL  # the order type × urgency offset inside a factored action (9·e + 3·o + u)


def _mlp(sizes: Sequence[int], slope: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.LeakyReLU(slope)]
    return nn.Sequential(*layers)


class DirectPolicy(nn.Module):
    """features [..., F] (normalised) and exposure [...] → output [..., 5] logits or [..., 1] u."""

    def __init__(self, n_features: int, hidden: Sequence[int] = (64, 64), head_hidden: int = 32,
                 relaxation: str = "softmax", position_input: bool = True, temperature: float = 1.0,
                 slope: float = 0.01, sequence: int = 0, heads: int = 4) -> None:
        """sequence: 0 for the per-bar MLP; L > 0 adds lag attention over the last L bars
        (``agents.sequence_net.LagAttention``, ``heads`` heads of width hidden[0]) to the first layer."""
        super().__init__()
        if relaxation not in ("softmax", "straight_through", "continuous"):
            raise ValueError(f"relaxation {relaxation!r}: expected softmax, straight_through or continuous")
        self.n_features, self.hidden, self.head_hidden = int(n_features), tuple(int(h) for h in hidden), int(head_hidden)
        self.relaxation, self.position_input, self.temperature, self.slope = relaxation, bool(position_input), float(temperature), slope
        n_out = 1 if relaxation == "continuous" else N_LEVELS
        self.trunk = _mlp([self.n_features + int(self.position_input), *self.hidden], slope)
        self.head = nn.Sequential(nn.Linear(self.hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, n_out))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=math.sqrt(2.0))
                nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.head[2].weight, gain=0.01)  # a near-flat first policy that still varies by bar
        self.sequence = int(sequence)
        self.encoder = LagAttention(self.n_features, self.sequence, self.hidden[0], heads, self.hidden[0], slope) \
            if self.sequence else None
        self.register_buffer("levels", torch.tensor(LEVELS, dtype=torch.float32), persistent=False)

    # ------------------------------------------------------------------ forward, in two parts
    def first_layer(self, features: torch.Tensor) -> torch.Tensor:
        """The trunk's first affine map of the features alone, [..., hidden[0]] (batched over every bar:
        the exposure's column is added per bar by ``rest``)."""
        lin = self.trunk[0]
        return nn.functional.linear(features, lin.weight[:, : self.n_features], lin.bias)

    def first_layer_span(self, span: torch.Tensor, t: int) -> torch.Tensor:
        """``first_layer`` of T decision bars from a span [N, T + L − 1, F] of normalised features
        (the last T rows are the decision bars), plus the lag attention over each one's last L bars:
        [N, T, hidden[0]]. The per-bar MLP (sequence 0) reads the last T rows alone."""
        pre = self.first_layer(span[:, span.shape[1] - t:])
        return pre if self.encoder is None else pre + self.encoder(span, t)

    def rest(self, pre: torch.Tensor, exposure: torch.Tensor | None) -> torch.Tensor:
        """The output from ``first_layer``'s result [..., hidden[0]] and the exposure [...] (ignored
        without ``position_input``)."""
        if self.position_input:
            assert exposure is not None
            pre = pre + exposure.unsqueeze(-1) * self.trunk[0].weight[:, self.n_features]
        h = self.trunk[1](pre)
        for layer in list(self.trunk)[2:]:
            h = layer(h)
        return self.head(h)

    def forward(self, features: torch.Tensor, exposure: torch.Tensor | None = None) -> torch.Tensor:
        return self.rest(self.first_layer(features), exposure)

    # ------------------------------------------------------------------ output → exposure
    def exposure(self, out: torch.Tensor) -> torch.Tensor:
        """The exposure [...] the training P&L trades, from ``rest``'s output [..., 5 | 1]."""
        if self.relaxation == "continuous":
            return torch.tanh(out[..., 0])
        levels = self.levels.to(out.dtype)
        soft = torch.softmax(out / self.temperature, dim=-1) @ levels
        if self.relaxation == "softmax":
            return soft
        hard = levels[out.argmax(dim=-1)]
        return hard + (soft - soft.detach())  # value: the level exactly; gradient: the softmax expectation's

    def level(self, out: torch.Tensor) -> torch.Tensor:
        """The level index [...] (0 … 4) the backtest trades for this output (the greedy network's)."""
        if self.relaxation == "continuous":
            x = torch.tanh(out[..., 0])
            return (x.unsqueeze(-1) - self.levels.to(x.dtype)).abs().argmin(dim=-1)
        return out.argmax(dim=-1)

    # ------------------------------------------------------------------ the greedy network
    @torch.no_grad()
    def greedy_net(self) -> DuelingQNet:
        """A detached DuelingQNet (obs = features ++ the 3 portfolio features, 45 factored actions)
        whose argmax is the market order of normal urgency at the policy's level (module docstring)."""
        f = self.n_features
        if self.encoder is None:
            net = DuelingQNet(f + 3, N_FACTORED, self.hidden, self.head_hidden, self.slope)
        else:
            e = self.encoder
            net = SequenceQNet(f + 3, N_FACTORED, self.hidden, self.head_hidden, self.slope, n_features=f, length=e.length,
                               width=e.width, heads=e.heads)
        net = net.to(self.trunk[0].weight.device)
        for p in net.parameters():
            p.zero_()
        first = net.trunk[0]
        first.weight[:, :f] = self.trunk[0].weight[:, :f]
        if self.position_input:
            first.weight[:, f] = self.trunk[0].weight[:, f]
        first.bias.copy_(self.trunk[0].bias)
        for i in range(2, len(self.trunk), 2):
            net.trunk[i].load_state_dict(self.trunk[i].state_dict())
        net.advantage[0].load_state_dict(self.head[0].state_dict())
        w, b = self.level_lines()
        out = net.advantage[2]
        for a in range(N_FACTORED):
            e = a // 9
            out.weight[a] = w[e]
            out.bias[a] = b[e] - (0.0 if a % 9 == MARKET_NORMAL else MARGIN)
        if self.encoder is not None:
            net.encoder.load_state_dict(self.encoder.state_dict())
        return net.eval()

    def level_lines(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [5, head_hidden], bias [5]) of the five level scores on the head's hidden layer:
        the logits (level relaxations), or the lines L_e·u + c_e whose upper envelope picks the level
        nearest tanh(u) (continuous)."""
        last = self.head[2]
        if self.relaxation != "continuous":
            return last.weight.detach().clone(), last.bias.detach().clone()
        lv = torch.tensor(LEVELS, dtype=torch.float64)
        cuts = torch.atanh((lv[:-1] + lv[1:]) / 2.0)  # u where tanh(u) is halfway between two levels
        c = torch.zeros(N_LEVELS, dtype=torch.float64)
        for e in range(N_LEVELS - 1):  # consecutive lines cross at cuts[e]
            c[e + 1] = c[e] + (lv[e] - lv[e + 1]) * cuts[e]
        lv32, c32 = lv.to(last.weight), c.to(last.weight)
        return lv32[:, None] * last.weight[0][None, :], lv32 * last.bias[0] + c32


__all__ = ["MARGIN", "DirectPolicy"]
