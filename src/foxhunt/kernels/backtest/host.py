"""Host-side data of the fused backtest: the argument bundles (the packed dueling network is
``foxhunt.kernels.rules.packing``'s), and the
arrays prepared before the bar loop (layer 1's precomputed feature part, the stand-in network of
fixed-action runs). Plain tensors and numbers; part of the ``foxhunt.kernels`` leaf."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from foxhunt.kernels.rules.packing import DuelingWeights, pow2_at_least


class MarketArrays(NamedTuple):
    """Device-resident market arrays (``MarketData``'s): features [T, F] f32, ohlc [T, 4] f32,
    volume [T] f32, log_return [T] f32, bar_range [T] f32, median_range and median_abs_return 0-d
    f32 tensors (read on the device) or [W] f32, one a window (a pooled universe: each window's symbol's),
    has_volume a host fact."""

    features: torch.Tensor
    ohlc: torch.Tensor
    volume: torch.Tensor
    log_return: torch.Tensor
    bar_range: torch.Tensor
    median_range: torch.Tensor
    median_abs_return: torch.Tensor
    has_volume: bool


@dataclass(frozen=True)
class ExecParams:
    """The execution parameters the step reads (EnvTensors' derived values, as host floats)."""

    capital: float
    max_position: float
    reserve: float
    cost_rate: float  # cost_bps · 1e-4
    half_spread: float  # ½ · spread_bps · 1e-4
    impact_eta: float
    max_impact: float
    participation: float
    vol_lambda: float
    max_holding: float
    kelly_fraction: float
    kelly_min_mult: float
    kelly_alpha: float
    kelly_min_trades: int
    bust_level: float  # bust_fraction · capital
    profit_frac: float = 0.0  # profit_bps · 1e-4 (barrier labels only)
    stop_frac: float = 0.0  # stop_bps · 1e-4
    max_holding_bars: int = 1  # barrier expiry, bars


@dataclass
class FusedOutputs:
    """Kernel outputs. [W, T] unless noted; columns past a window's length (or after a bust) are 0."""

    returns: torch.Tensor  # f32, the env's reward with shaping off: ΔE / E
    positions: torch.Tensor  # f32, exposure q·C/E after the step
    trade_return: torch.Tensor  # f32, return of the round trip closed on the step (0 if none)
    trade_closed: torch.Tensor  # bool
    final_equity: torch.Tensor  # [W] f32
    traded: torch.Tensor | None = None  # f32, traded notional / initial capital: |Δq|·O_{t+1} / capital
    actions: torch.Tensor | None = None  # int32, the greedy action (store_debug)
    fill_status: torch.Tensor | None = None  # int8, 0 none, 1 filled, 2 partial, 3 missed (store_debug)
    trade_side: torch.Tensor | None = None  # int8 (store_trades)
    trade_size: torch.Tensor | None = None  # f32 units (store_trades)
    trade_costs: torch.Tensor | None = None  # f32 currency (store_trades)
    trade_entry_bar: torch.Tensor | None = None  # int64 (store_trades)
    trade_barrier: torch.Tensor | None = None  # int8: +1 profit, -1 stop, 0 time, 2 none (barriers)


def value_bound(net: DuelingWeights) -> torch.Tensor:
    """[4] float32 on the net's device: (Σ|w_v2|, max_j Σ_k |W_v1[k, j]|, max|b_v1|, |b_v2|), so
    that |V| ≤ b0 · (b1 · max|h2| + b2) + b3 for any trunk output h2 (Hölder; LeakyReLU is
    1-Lipschitz with LeakyReLU(0) = 0). Computed in float64 and rounded up; no host read."""
    hp, n = net.dims[3] // 2, net.n_actions
    w3v = net.w3[:, :hp].to(torch.float64).abs()
    parts = [net.w4[:hp, n].to(torch.float64).abs().sum(), w3v.sum(0).max(),
             net.b3[:hp].to(torch.float64).abs().max(), net.b4[n].to(torch.float64).abs()]
    return (torch.stack(parts) * (1 + 1e-6)).to(torch.float32)


def layer1_features(market: MarketArrays, starts: torch.Tensor, mean: torch.Tensor, inv: torch.Tensor,
                     net: DuelingWeights, n_steps: int) -> torch.Tensor:
    """[W, n_steps, H1] float32: b1 + Σ_f ((feature_f(bar) − mean_wf) · inv_wf) · W1[f, :] for bar =
    starts[w] + i (clamped to the data), i.e. layer 1's pre-activation without the 3 portfolio inputs.

    The row path's bar loop then adds the portfolio rows of W1 and skips the first layer (its
    weights are a tenth of the bytes streamed per bar). The normalised features and the product
    are computed in float64 and rounded once, so the result does not depend on TF32 settings."""
    n_bars, f = market.features.shape
    bars = (starts.to(torch.int64)[:, None] + torch.arange(n_steps, device=starts.device)[None, :]).clamp(max=n_bars - 1)
    x = (market.features[bars].to(torch.float64) - mean[:, None, :].to(torch.float64)) * inv[:, None, :].to(torch.float64)
    w1 = net.w1[:f].to(torch.float64)  # [F, H1]
    return (x @ w1 + net.b1.to(torch.float64)).to(torch.float32).contiguous()


@dataclass
class EnsembleWeights:
    """K same-shape dueling nets voting (``EnsemblePolicy`` mode "vote"), for the row path.

    members: K ``pack_dueling`` outputs (one shape and dtype); weights: [K] float32, normalised;
    norm_mean / norm_inv: [K, F] float32, each member's own feature normalisation (the window's
    features arrive un-normalised: identity window norms)."""

    members: list[DuelingWeights]
    weights: torch.Tensor
    norm_mean: torch.Tensor
    norm_inv: torch.Tensor

    def stacked(self) -> dict[str, torch.Tensor]:
        """w1 … b4 of every member, each member's block after the previous one (flat, contiguous)."""
        return stack_members(self.members)


@dataclass
class WindowNets:
    """Per-window networks for the row path: window w acts with ``members[index[w]]``.

    members: M ``pack_dueling`` outputs of one shape and dtype; index: [W] int32 on the device."""

    members: list[DuelingWeights]
    index: torch.Tensor

    def stacked(self) -> dict[str, torch.Tensor]:
        return stack_members(self.members)


def stack_members(members: list[DuelingWeights]) -> dict[str, torch.Tensor]:
    """w1 … b4 of every member, each member's block after the previous one (flat, contiguous)."""
    return {k: torch.cat([getattr(m, k).reshape(-1) for m in members]).contiguous()
            for k in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")}


def given_actions_net(n_feat: int, precision: str, device: torch.device) -> DuelingWeights:
    """A stand-in network for fixed actions: never evaluated, it only fixes the kernel's shapes
    (the observation width D covers the features; every other dimension is the smallest tile)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    d = pow2_at_least(n_feat + 3)
    z = lambda *shape: torch.zeros(*shape, dtype=dtype, device=device)  # noqa: E731
    b = lambda n: torch.zeros(n, dtype=torch.float32, device=device)  # noqa: E731
    return DuelingWeights(z(d, 16), b(16), z(16, 16), b(16), z(16, 16), b(16), z(16, 16), b(16),
                          n_feat + 3, 1, 0.01)
