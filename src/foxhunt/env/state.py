"""Env state as a structure of arrays, and the branch-free resets that act on it in place.

Every function here writes into preallocated tensors with masks (``torch.where``), never reads a
tensor value on the host, and allocates only fixed-shape temporaries: it can run inside a captured
CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from foxhunt.env.counter_draws import StepDraws
from foxhunt.env.actions import FLAT_LEVEL
from foxhunt.env.params import DIVERSITY_WINDOW, EnvTensors
from foxhunt.market import MarketData

# Reset flag bits (ENV_SPEC "Reset flags"; bits 3 and 4 are the Clarifications' additions).
RESET_PORTFOLIO = 1
RESET_DSR = 2
RESET_VOL = 4
RESET_KELLY = 8
RESET_DIVERSITY = 16
RESET_ALL = RESET_PORTFOLIO | RESET_DSR | RESET_VOL | RESET_KELLY | RESET_DIVERSITY


@dataclass
class EnvState:
    """Per-env state, [N] tensors unless noted.

    Money and prices float32 (currency units / price units), bars int64 (indices into MarketData).
    """

    cash: torch.Tensor  # float32
    position: torch.Tensor  # float32, units, signed (q)
    equity: torch.Tensor  # float32, E = cash + q·C_t
    entry_price: torch.Tensor  # float32, 0 when flat
    entry_bar: torch.Tensor  # int64, 0 when flat
    bar: torch.Tensor  # int64, t
    episode_start: torch.Tensor  # int64
    step: torch.Tensor  # int64, steps taken in this episode
    level: torch.Tensor  # int64, requested exposure level e (2 = flat)
    target: torch.Tensor  # float32, q* (units)
    barrier_active: torch.Tensor  # bool
    barrier_upper: torch.Tensor  # float32
    barrier_lower: torch.Tensor  # float32
    barrier_expiry: torch.Tensor  # int64, bar
    barrier_side: torch.Tensor  # float32, +1 long / −1 short (0 when never set)
    vol: torch.Tensor  # float32, absolute-return EMA v
    kelly_p: torch.Tensor  # float32, win-rate EMA
    kelly_win: torch.Tensor  # float32, mean-win EMA
    kelly_loss: torch.Tensor  # float32, mean-loss EMA (positive)
    kelly_count: torch.Tensor  # int64, closed trades
    dsr_a: torch.Tensor  # float32
    dsr_b: torch.Tensor  # float32
    ring: torch.Tensor  # [N, W] int8, last W diversity categories (circular)
    ring_counts: torch.Tensor  # [N, 3] float32, counts of short / flat / long in the ring
    ring_fill: torch.Tensor  # int64, number of entries held (≤ W)
    ring_head: torch.Tensor  # int64, next write slot
    peak: torch.Tensor  # float32, equity peak of the episode
    cum_costs: torch.Tensor  # float32, costs of the episode
    open_costs: torch.Tensor  # float32, costs of the open trade
    finished: torch.Tensor  # bool, done and frozen (auto_reset=False only)

    @classmethod
    def allocate(cls, n_envs: int, device: torch.device | str, window: int = DIVERSITY_WINDOW) -> "EnvState":
        dev = torch.device(device)
        f32 = dict(dtype=torch.float32, device=dev)
        i64 = dict(dtype=torch.int64, device=dev)
        b = dict(dtype=torch.bool, device=dev)
        n = n_envs
        return cls(
            cash=torch.zeros(n, **f32),
            position=torch.zeros(n, **f32),
            equity=torch.zeros(n, **f32),
            entry_price=torch.zeros(n, **f32),
            entry_bar=torch.zeros(n, **i64),
            bar=torch.zeros(n, **i64),
            episode_start=torch.zeros(n, **i64),
            step=torch.zeros(n, **i64),
            level=torch.full((n,), FLAT_LEVEL, **i64),
            target=torch.zeros(n, **f32),
            barrier_active=torch.zeros(n, **b),
            barrier_upper=torch.zeros(n, **f32),
            barrier_lower=torch.zeros(n, **f32),
            barrier_expiry=torch.zeros(n, **i64),
            barrier_side=torch.zeros(n, **f32),
            vol=torch.zeros(n, **f32),
            kelly_p=torch.full((n,), 0.5, **f32),
            kelly_win=torch.zeros(n, **f32),
            kelly_loss=torch.zeros(n, **f32),
            kelly_count=torch.zeros(n, **i64),
            dsr_a=torch.zeros(n, **f32),
            dsr_b=torch.zeros(n, **f32),
            ring=torch.zeros((n, window), dtype=torch.int8, device=dev),
            ring_counts=torch.zeros((n, 3), **f32),
            ring_fill=torch.zeros(n, **i64),
            ring_head=torch.zeros(n, **i64),
            peak=torch.zeros(n, **f32),
            cum_costs=torch.zeros(n, **f32),
            open_costs=torch.zeros(n, **f32),
            finished=torch.zeros(n, **b),
        )

    @property
    def n_envs(self) -> int:
        return int(self.cash.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def clone(self) -> "EnvState":
        """A deep copy (new tensors)."""
        return EnvState(**{k: v.clone() for k, v in self.tensors().items()})

    def copy_(self, other: "EnvState") -> None:
        """Copy every tensor of ``other`` into this state, in place."""
        for k, v in self.tensors().items():
            v.copy_(getattr(other, k))


def put(dst: torch.Tensor, new: torch.Tensor | float | int | bool, mask: torch.Tensor | None) -> None:
    """dst ← new where mask (everywhere when mask is None), in place."""
    if mask is None:
        if isinstance(new, torch.Tensor):
            dst.copy_(new)
        else:
            dst.fill_(new)
    elif isinstance(new, torch.Tensor):
        torch.where(mask, new, dst, out=dst)
    else:
        dst.masked_fill_(mask, new)


def fresh_portfolio_(state: EnvState, params: EnvTensors, mask: torch.Tensor | None, starts: torch.Tensor) -> None:
    """A fresh portfolio starting at bar ``starts`` ([N] int64) for envs in ``mask`` (all if None).

    Persistent statistics (v, Kelly, DSR, diversity ring) are untouched.
    """
    put(state.cash, params.capital, mask)
    put(state.position, 0.0, mask)
    put(state.equity, params.capital, mask)
    put(state.entry_price, 0.0, mask)
    put(state.entry_bar, 0, mask)
    put(state.bar, starts, mask)
    put(state.episode_start, starts, mask)
    put(state.step, 0, mask)
    put(state.level, FLAT_LEVEL, mask)
    put(state.target, 0.0, mask)
    put(state.barrier_active, False, mask)
    put(state.barrier_upper, 0.0, mask)
    put(state.barrier_lower, 0.0, mask)
    put(state.barrier_expiry, 0, mask)
    put(state.barrier_side, 0.0, mask)
    put(state.peak, params.capital, mask)
    put(state.cum_costs, 0.0, mask)
    put(state.open_costs, 0.0, mask)


def reset_persistent_(state: EnvState, market: MarketData, flags: torch.Tensor | int) -> None:
    """Reset the persistent statistics selected by ``flags`` (bits RESET_DSR, RESET_VOL, RESET_KELLY,
    RESET_DIVERSITY), flags a 0-d or [N] int64 device tensor (or a Python int)."""
    if isinstance(flags, int):
        sel = {bit: (None if flags & bit else False) for bit in (RESET_DSR, RESET_VOL, RESET_KELLY, RESET_DIVERSITY)}
    else:
        n = state.n_envs
        sel = {bit: ((flags & bit) != 0).expand(n) for bit in (RESET_DSR, RESET_VOL, RESET_KELLY, RESET_DIVERSITY)}

    def apply(bit: int, dst: torch.Tensor, value: torch.Tensor | float | int) -> None:
        m = sel[bit]
        if m is False:
            return
        if m is not None and dst.dim() == 2:
            m = m.unsqueeze(1)
        put(dst, value, m)

    apply(RESET_DSR, state.dsr_a, 0.0)
    apply(RESET_DSR, state.dsr_b, 0.0)
    # a pooled universe starts each env's volatility EMA at its own symbol's median (the env's bar is its new start)
    apply(RESET_VOL, state.vol, market.medians_at(state.bar)[1] if market.pooled else market.median_abs_return)
    apply(RESET_KELLY, state.kelly_p, 0.5)
    apply(RESET_KELLY, state.kelly_win, 0.0)
    apply(RESET_KELLY, state.kelly_loss, 0.0)
    apply(RESET_KELLY, state.kelly_count, 0)
    apply(RESET_DIVERSITY, state.ring, 0)
    apply(RESET_DIVERSITY, state.ring_counts, 0.0)
    apply(RESET_DIVERSITY, state.ring_fill, 0)
    apply(RESET_DIVERSITY, state.ring_head, 0)


def apply_reset_flags_(state: EnvState, params: EnvTensors, market: MarketData, flags: torch.Tensor) -> None:
    """Apply reset bit flags from a device int64 tensor (0-d: every env; [N]: per env), no host read.

    bit 0 fresh portfolio and a new episode at the same bar where a full episode fits in the fold's
    training range (else at the bar wrapped back into it: ``epoch_reset_starts``), bit 1 DSR moments,
    bit 2 volatility EMA ← med_absret, bit 3 Kelly statistics, bit 4 diversity ring.
    """
    n = state.n_envs
    port = ((flags & RESET_PORTFOLIO) != 0).expand(n)
    fresh_portfolio_(state, params, port, epoch_reset_starts(state.bar, params, market))
    reset_persistent_(state, market, flags)


def epoch_reset_starts(bar: torch.Tensor, params: EnvTensors, market: MarketData) -> torch.Tensor:
    """Where a portfolio reset flag starts the new episode of an env at ``bar`` ([N] int64, device).

    A new episode runs ``episode_length`` more steps and reads bar ``start + episode_length``, so its
    start must lie in the random starts' range ``[train_start, train_start + S)``, S = train_end −
    episode_length − train_start (``StartSampler.draw``): there the bar is kept; a later bar (at most
    episode_length − 1 past that range) wraps to ``train_start + (bar − train_start) mod S``.
    Starting at the bar itself let an env read up to episode_length − 1 bars past train_end (the
    purge gap and validation window: a leak), and, when an epoch is shorter than an episode, march
    on to the end of the data (the step counter restarts every epoch, so it never truncates).
    Deterministic (no draw from the start generator, so the random stream and a resumed run are
    unchanged) and read on the device (no host sync; a new fold needs no new graph). A pooled
    universe wraps inside the bar's own symbol (``foxhunt.env.pooled.pooled_wrap``).
    """
    if market.pooled:
        from foxhunt.env.pooled import pooled_wrap

        return pooled_wrap(bar, params.episode_length, market)
    lo = market.fold_bounds[0]
    span = (market.fold_bounds[1] - params.episode_length - lo).clamp_min(1)
    if market.mirror_offset:  # an env in the mirrored copy stays in it
        lo = lo + market.copy_offset(bar)
    return lo + torch.remainder(bar - lo, span)


def init_state_(state: EnvState, params: EnvTensors, market: MarketData, starts: torch.Tensor) -> None:
    """Everything fresh: portfolio at ``starts``, persistent statistics initial, not finished."""
    fresh_portfolio_(state, params, None, starts)
    reset_persistent_(state, market, RESET_ALL)
    state.finished.fill_(False)


def portfolio_features(
    state: EnvState, params: EnvTensors, market: MarketData, out: torch.Tensor
) -> torch.Tensor:
    """(exposure, unrealised return, bars in position) at the state's bar, written into out [N, 3].

    exposure = q·C_t / E; unrealised = side·(C_t − entry)/entry; bars = (t − entry bar)/max_holding
    (the last two 0 when flat). E is floored at 1e-6·capital (only a bust can take it to ≤ 0).
    """
    close = market.ohlc[:, 3]
    bar = state.bar.clamp(0, market.n_rows - 1)
    c = close.index_select(0, bar)
    q = state.position
    flat = q == 0
    eq = torch.maximum(state.equity, params.capital * 1e-6)
    entry = torch.where(flat, 1.0, state.entry_price)
    torch.div(q * c, eq, out=out[:, 0])
    out[:, 1].copy_(torch.where(flat, 0.0, torch.sign(q) * (c - entry) / entry))
    out[:, 2].copy_(torch.where(flat, 0.0, (state.bar - state.entry_bar).to(torch.float32) / params.max_holding_f))
    return out


class StartSampler:
    """Uniform episode starts in the fold's training range from a seeded device generator, or from counter-based
    draws (``use_counter``: a hash of (seed, draw count, env), ``foxhunt.env.counter_draws``, so a stack of members
    draws its starts in one launch).

    Every draw fills a preallocated [N] float64 uniform buffer for all envs (the step uses it only for
    done envs), so the random stream advances the same way every step, eager or graph-replayed.
    """

    def __init__(self, n_envs: int, device: torch.device | str, seed: int = 0) -> None:
        dev = torch.device(device)
        self.draws = StepDraws(dev, int(seed), counted=False)
        self.uniform = torch.zeros(n_envs, dtype=torch.float64, device=dev)
        self.starts = torch.zeros(n_envs, dtype=torch.int64, device=dev)
        self.counter = torch.zeros((), dtype=torch.int64, device=dev)  # draws so far (read by counter-based draws)

    @property
    def generator(self) -> torch.Generator:
        return self.draws.generator

    def use_counter(self, seed: int) -> None:
        """Draw from counter-based draws from now on (seeded ``seed``; ``seed`` re-seeds them)."""
        self.draws = StepDraws(self.uniform.device, int(seed), counted=True)
        self.counter.zero_()

    def seed(self, seed: int) -> None:
        self.draws.seed(int(seed))
        self.counter.zero_()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The counter-based draws' live seed and draw count (empty with a generator)."""
        return {} if self.draws.seed_t is None else {"start_seed": self.draws.seed_t, "start_counter": self.counter}

    def generators(self) -> dict[str, torch.Generator]:
        """The generator a state dict saves and a CUDA graph of a draw registers (none with counter-based draws)."""
        return {"start_generator": g for g in self.draws.generators().values()}

    def draw(self, params: EnvTensors, market: MarketData) -> torch.Tensor:
        """starts [N] int64 uniform in [train_start, train_end − episode_length − 1] (read on device).

        With a mirrored market (``market.mirror_offset`` M > 0) one uniform u decides both: u < ½
        starts at lo + ⌊2u·S⌋ in the data, u ≥ ½ at lo + M + ⌊(2u − 1)·S⌋ in its mirror (2u is exact
        in float64, so each half is as uniform as the plain draw)."""
        self.fill_uniform()
        return starts_from_uniform(self.uniform, params, market, out=self.starts)

    def fill_uniform(self) -> None:
        """The draw's random half: ``uniform`` [N] float64 (the fused step maps it itself)."""
        self.draws.uniform64(self.uniform, self.counter)
        if self.draws.seed_t is not None:
            self.counter.add_(1)


def starts_from_uniform(u: torch.Tensor, params: EnvTensors, market: MarketData, out: torch.Tensor) -> torch.Tensor:
    """The start of each uniform u ([N] float64 in [0, 1)) as ``StartSampler.draw`` maps it, into out
    (a pooled universe: a symbol, then a start in its training rows, ``foxhunt.env.pooled``)."""
    if market.pooled:
        from foxhunt.env.pooled import pooled_starts

        return pooled_starts(u, params.episode_length, market, out=out)
    lo = market.fold_bounds[0]
    span = (market.fold_bounds[1] - params.episode_length - lo).clamp_min(1)
    if market.mirror_offset:  # (guarded: no extra op on the plain path, drawn every step)
        u, shift = market.split_uniform(u)
        lo = lo + shift
    off = torch.minimum((u * span).to(torch.int64), span - 1)
    return torch.add(off, lo, out=out)
