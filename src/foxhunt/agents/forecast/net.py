"""The forecast network: normalised features → forecasts [N, Q] (Q = 1, or the quantiles).

A LeakyReLU MLP ``F → hidden… → Q`` (no activation on the output) on the decision bar's features
[N, F]; with ``sequence`` = L > 0 (``forecast.policy = "attention"``) it reads a span [N, L, F] of
the decision bar and the L − 1 bars before it, and its first layer also adds lag attention over the
span (``agents.sequence_net.LagAttention``, as the direct learner's). It never reads the portfolio: a
forecast of the market, which the execution rule (``agents.forecast.execution``) turns into a
position given the current one. ``gather`` builds its input from market rows (past bars only).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from foxhunt.agents.sequence_net import LagAttention, history_index
from foxhunt.market import MarketData

SLOPE = 0.01
"""The LeakyReLU slope of every layer (the DuelingQNet's, so that the greedy network packs it exactly)."""


class ForecastNet(nn.Module):
    """features [N, F] (or a span [N, L, F] with ``sequence`` = L), normalised → [N, n_outputs]
    forecasts in units of the fold's h-bar volatility."""

    def __init__(self, n_features: int, hidden: Sequence[int] = (64, 64), n_outputs: int = 1, sequence: int = 0,
                 heads: int = 4) -> None:
        super().__init__()
        self.n_features, self.hidden, self.n_outputs = int(n_features), tuple(int(h) for h in hidden), int(n_outputs)
        layers: list[nn.Module] = []
        for a, b in zip((self.n_features, *self.hidden[:-1]), self.hidden):
            layers += [nn.Linear(a, b), nn.LeakyReLU(SLOPE)]
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(self.hidden[-1], self.n_outputs)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=math.sqrt(2.0))
                nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.out.weight, gain=0.01)  # near-zero first forecasts: no edge, no trade
        self.sequence = int(sequence)
        self.encoder = LagAttention(self.n_features, self.sequence, self.hidden[0], heads, self.hidden[0], SLOPE) \
            if self.sequence else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.encoder is None:
            return self.out(self.trunk(x))
        pre = self.trunk[0](x[:, -1]) + self.encoder(x, 1)[:, 0]  # the decision bar is the span's last
        h = self.trunk[1](pre)
        for layer in list(self.trunk)[2:]:
            h = layer(h)
        return self.out(h)

    def linears(self) -> list[nn.Linear]:
        """The trunk's Linear layers, first to last."""
        return [m for m in self.trunk if isinstance(m, nn.Linear)]


def gather(market: MarketData, bars: torch.Tensor, sequence: int = 0, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """The forecast's input at market rows ``bars`` ([N] int64), normalised with the market's fold: their
    features [N, F], or (``sequence`` = L > 0) the spans [N, L, F] of each bar and the L − 1 before it,
    clamped to the first row of the bar's copy (the data's, or the mirror's), as the backtester and
    the direct learner read them. offsets: ``torch.arange(L)`` (pass it to avoid an allocation)."""
    m = market
    if not sequence:
        return (m.features.index_select(0, bars) - m.norm_mean) * m.norm_inv_std
    if offsets is None:
        offsets = torch.arange(sequence, dtype=torch.int64, device=bars.device)
    base = m.copy_offset(bars)
    idx = history_index(bars, sequence, offsets, base, m.n_rows - 1)
    span = m.features.index_select(0, idx.reshape(-1)).view(bars.shape[0], sequence, -1)
    return (span - m.norm_mean) * m.norm_inv_std


__all__ = ["SLOPE", "ForecastNet", "gather"]
