"""A sampled (stochastic) policy for backtests: actions drawn from softmax(net(obs)), reproducibly.

For a PPO model file the network is the actor packed as a DuelingQNet with a zero value head, so
softmax of its output is exactly the trained policy (``ActorCritic.greedy_net``); for a DQN model
it is a Boltzmann policy over Q (temperature 1).

The draws are counter-based, not a generator's stream: window w at step t uses a hash of
(seed, w, t, action), so a run is reproducible from the seed alone, independent of the chunking
or CUDA-graph capture of the backtest, and reads nothing back to the host.
"""

from __future__ import annotations

import torch
from torch import nn

_MASK = (1 << 62) - 1


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A few rounds of an integer hash on int64 values kept below 2^62 (no sign trouble)."""
    for mul in (0x2545F4914F6CDD1D, 0x5851F42D4C957F2D):
        x = (x ^ (x >> 29)) & _MASK
        x = (x * (mul & 0x3FFFFFFF)) & _MASK
    return x ^ (x >> 31)


def counter_uniform(seed: int, rows: int, cols: int, t: torch.Tensor) -> torch.Tensor:
    """[rows, cols] uniforms in (0, 1) from (seed, row, step ``t`` (0-d int64), col)."""
    dev = t.device
    r = torch.arange(rows, device=dev, dtype=torch.int64)[:, None]
    c = torch.arange(cols, device=dev, dtype=torch.int64)[None, :]
    x = _mix(_mix(_mix((r * 1_000_003 + c + seed * 7_919) & _MASK) + t.to(torch.int64)) + seed)
    return ((x & ((1 << 24) - 1)).to(torch.float32) + 0.5) / float(1 << 24)


class SampledPolicy:
    """a ~ softmax(net(obs)) by the Gumbel-max trick on counter-based uniforms (see module doc)."""

    def __init__(self, net: nn.Module, seed: int = 0, decision_interval: int = 1) -> None:
        self.net = net
        self.seed = int(seed)
        self.decision_interval = int(decision_interval)  # drawn every k bars, held in between (GreedyPolicy's rule)

    def bind_history(self, features: torch.Tensor, bar: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor) -> None:
        """As ``GreedyPolicy.bind_history``: the bars a network over the last bars reads."""
        bind = getattr(self.net, "bind_history", None)
        if bind is not None:
            bind(features, bar, mean, inv_std)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = self.net(obs)
        u = counter_uniform(self.seed, logits.shape[0], logits.shape[1], t)
        return (logits - torch.log(-torch.log(u))).argmax(dim=1)
