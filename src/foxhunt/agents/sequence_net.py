"""A policy over the last L bars: lag attention, and the Q-network that runs it in the torch backtester.

``LagAttention`` summarises the normalised features of the last L bars before (and at) a decision
bar for the first trunk layer: every bar's features are embedded once (LeakyReLU(W_e x + b_e),
width d), the decision bar's embedding is the query, the L bars' embeddings the keys and values
(``heads`` heads of d / heads), the scores carry a learned bias per head and lag (how far back a bar
is), and the heads' mixture is projected to the trunk's first width (no bias). Over a span of
S = T + L − 1 consecutive bars it returns the T decision bars' summaries at once, one lag at a time
(L products of [N, T, d], never an [N, T, L, d] copy of the windows), so training (T bars a window)
and the backtester (T = 1) run the same code.

``SequenceQNet`` is a ``DuelingQNet`` whose first trunk layer also adds that summary: Q(obs) =
the dueling heads over trunk(W_0·obs + b_0 + LagAttention(last L bars)). The observation is the
backtester's (the decision bar's normalised features and the portfolio features); the L bars come
from the market's feature matrix by index: ``bind_history`` hands it the backtest's live bar index
[W], the feature matrix and each window's normalisation ([W, F] mean and 1/std), which the torch
backtester (``backtest.evaluator``) does before its first step. Bars before the data's first are
its first bar (index clamped at 0), in training as in the backtester. It runs in the torch
backtester only: the fused kernels run a per-bar MLP (``fused_net_unsupported`` refuses it); an
ensemble of it (``merge_mean`` of more than one, ``EnsemblePolicy``) is refused too.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from foxhunt.agents.networks import N_FACTORED_ACTIONS, DuelingQNet


class LagAttention(nn.Module):
    """span [N, S, F] (normalised features of S = T + L − 1 consecutive bars) → [N, T, out]: the
    summary of bars t … t + L − 1 for the decision bar t + L − 1, t = 0 … T − 1."""

    def __init__(self, n_features: int, length: int, width: int, heads: int, out: int, slope: float = 0.01) -> None:
        super().__init__()
        if length < 1 or width < 1 or heads < 1 or width % heads:
            raise ValueError(f"LagAttention: length {length} >= 1 and width {width} a multiple of heads {heads} >= 1")
        self.n_features, self.length, self.width, self.heads, self.slope = int(n_features), int(length), int(width), int(heads), slope
        self.embed = nn.Linear(n_features, width)
        self.query = nn.Linear(width, width, bias=False)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, out, bias=False)
        self.lag_bias = nn.Parameter(torch.zeros(heads, length))
        for m in (self.embed, self.query, self.key, self.value):
            nn.init.orthogonal_(m.weight, gain=math.sqrt(2.0) if m is self.embed else 1.0)
        nn.init.zeros_(self.embed.bias)
        nn.init.orthogonal_(self.out.weight, gain=1.0)  # the bars before weigh as much as the decision bar at the start

    def forward(self, span: torch.Tensor, t: int) -> torch.Tensor:
        n, s, _ = span.shape
        big_l, nh = self.length, self.heads
        if s != t + big_l - 1:
            raise ValueError(f"LagAttention: a span of {s} bars for {t} decisions over {big_l} lags (needs {t + big_l - 1})")
        dh = self.width // nh
        h = nn.functional.leaky_relu(self.embed(span), self.slope)  # [N, S, d]
        q = self.query(h[:, big_l - 1:]).view(n, t, nh, dh) * (1.0 / math.sqrt(dh))
        k = self.key(h).view(n, s, nh, dh)
        v = self.value(h).view(n, s, nh, dh)
        first = lambda lag: big_l - 1 - lag  # noqa: E731  (the span index of decision 0's bar `lag` bars back)
        scores = torch.stack([(q * k[:, first(lag): first(lag) + t]).sum(-1) for lag in range(big_l)], dim=-1)  # [N, T, nh, L]
        attn = torch.softmax(scores + self.lag_bias, dim=-1)
        mix = attn[..., 0:1] * v[:, first(0): first(0) + t]
        for lag in range(1, big_l):
            mix = mix + attn[..., lag: lag + 1] * v[:, first(lag): first(lag) + t]
        return self.out(mix.reshape(n, t, self.width))


def history_index(bar: torch.Tensor, length: int, offsets: torch.Tensor, base: torch.Tensor | int, last: int) -> torch.Tensor:
    """[..., len(offsets)] row indices bar − length + 1 + offsets, clamped to [base, last] (the span
    of bars a decision at ``bar`` reads; ``offsets`` = arange(T + length − 1))."""
    idx = bar.unsqueeze(-1) - (length - 1) + offsets
    if isinstance(base, torch.Tensor):
        return torch.maximum(idx, base.unsqueeze(-1)).clamp(max=last)
    return idx.clamp(base, last)


class SequenceQNet(DuelingQNet):
    """A DuelingQNet (obs [W, obs_dim] → Q [W, n_actions]) whose first trunk layer also adds the lag
    attention over the last ``length`` bars of the bound market (module docstring)."""

    def __init__(self, obs_dim: int, n_actions: int = N_FACTORED_ACTIONS, hidden: Sequence[int] = (64, 64),
                 head_hidden: int = 32, slope: float = 0.01, *, n_features: int, length: int, width: int, heads: int) -> None:
        super().__init__(obs_dim, n_actions, hidden, head_hidden, slope)
        self.slope = slope
        self.encoder = LagAttention(n_features, length, width, heads, int(hidden[0]), slope)
        self.register_buffer("offsets", torch.arange(length, dtype=torch.int64), persistent=False)
        self._history: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def sequence_meta(self) -> dict[str, int]:
        """What a model file records of the encoder (``model_io``)."""
        e = self.encoder
        return {"length": e.length, "width": e.width, "heads": e.heads}

    def bind_history(self, features: torch.Tensor, bar: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor) -> None:
        """Read the last L bars from ``features`` [n_bars, F] (raw) at the live decision bars ``bar`` [W]
        (int64, updated in place by the caller), normalised per window with ``mean`` / ``inv_std`` [W, F]."""
        self._history = (features, bar, mean, inv_std)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self._history is None:
            raise RuntimeError("SequenceQNet reads the last bars of a market: it runs in the torch backtester "
                               "(Backtester.run binds them), not on observations alone")
        features, bar, mean, inv = self._history
        w, big_l = obs.shape[0], self.encoder.length
        idx = history_index(bar.clamp(0, features.shape[0] - 1), big_l, self.offsets, 0, features.shape[0] - 1)
        span = features.index_select(0, idx.reshape(-1)).view(w, big_l, -1)
        span = (span - mean.unsqueeze(1)) * inv.unsqueeze(1)
        pre = self.trunk[0](obs) + self.encoder(span, 1)[:, 0]
        h = self.trunk[1](pre)
        for layer in list(self.trunk)[2:]:
            h = layer(h)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=-1, keepdim=True)

    @torch.no_grad()
    def detached_copy(self) -> "SequenceQNet":
        """An unbound eval-mode copy with the same weights (``merge_mean`` of one network)."""
        e = self.encoder
        hidden = [m.out_features for m in self.trunk if isinstance(m, nn.Linear)]
        net = SequenceQNet(self.obs_dim, self.n_actions, hidden, self.value[0].out_features, self.slope,
                           n_features=e.n_features, length=e.length, width=e.width, heads=e.heads)
        net.load_state_dict(self.state_dict())
        return net.to(next(self.parameters()).device).eval()


def sequence_tensors(meta: Any, n_features: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name → (safetensors dtype, shape) of the encoder's tensors in a model file whose metadata has
    ``sequence`` = {length, width, heads} (``model_io.expected_tensors``)."""
    seq, d = meta.sequence, meta.sequence.width
    return {"net.encoder.embed.weight": ("F32", (d, n_features)), "net.encoder.embed.bias": ("F32", (d,)),
            "net.encoder.query.weight": ("F32", (d, d)), "net.encoder.key.weight": ("F32", (d, d)),
            "net.encoder.value.weight": ("F32", (d, d)), "net.encoder.out.weight": ("F32", (meta.hidden[0], d)),
            "net.encoder.lag_bias": ("F32", (seq.heads, seq.length))}


__all__ = ["LagAttention", "SequenceQNet", "history_index", "sequence_tensors"]
