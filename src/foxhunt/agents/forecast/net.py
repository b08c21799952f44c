"""The forecast network: normalised features [..., F] → forecasts [..., Q] (Q = 1, or the quantiles).

A LeakyReLU MLP ``F → hidden… → Q`` (no activation on the output). It reads the decision bar's
features alone, never the portfolio: a forecast of the market, which the execution rule
(``agents.forecast.execution``) turns into a position given the current one.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

SLOPE = 0.01
"""The LeakyReLU slope of every layer (the DuelingQNet's, so that the greedy network packs it exactly)."""


class ForecastNet(nn.Module):
    """features [..., F] (normalised) → [..., n_outputs] forecasts in units of the fold's h-bar volatility."""

    def __init__(self, n_features: int, hidden: Sequence[int] = (64, 64), n_outputs: int = 1) -> None:
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

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(self.trunk(features))

    def linears(self) -> list[nn.Linear]:
        """The trunk's Linear layers, first to last."""
        return [m for m in self.trunk if isinstance(m, nn.Linear)]


__all__ = ["SLOPE", "ForecastNet"]
