"""The vectorised backtester: W windows of any lengths step in lockstep on the device.

Windows are index ranges into ``MarketData``: window w starts at bar ``starts[w]`` and takes
``lengths[w]`` steps (its returns cover bars starts+1 … starts+lengths). All windows step together
(padded to the longest); a finished window stops changing (the env's ``finished`` mask). Each
window can carry its own normalisation (the statistics of the fold it belongs to).

Execution is the environment's (``foxhunt.env``) with reward shaping switched off: no exploration,
no barrier scaling, no penalties, no curiosity; barriers never end a window. A policy may ask for
its own action mode (``policy.action_mode``): ``ExposurePolicy`` always sends factored market
orders of normal urgency, even when the env routes exposure actions (``action_mode = "exposure"``).

Annualisation: ``bars_per_year`` is the user's value or the rate inferred from the bars present in
the data (``foxhunt.backtest.annualisation``); it is kept with every result (``BacktestResult`` and
each metrics row's ``bars_per_year``). The loop does no host
reads; a chunk of steps is captured in a CUDA graph on the GPU; the host reads the metrics [W, M]
once at the end (and, on request, the curves and trades).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from foxhunt.accel.graphs import GraphedStep
from foxhunt.backtest.annualisation import Annualisation, resolve_bars_per_year
from foxhunt.backtest.fused import run_fused
from foxhunt.backtest.metrics import METRIC_NAMES
from foxhunt.backtest.policies import Policy, decision_interval, policy_params
from foxhunt.backtest.result import NO_BARRIER, STATUS_BUST, STATUS_OK, BacktestResult, assemble_result, trade_rows
from foxhunt.env import EnvParams, EnvState, EnvTensors, StepOutput
from foxhunt.env.state import portfolio_features
from foxhunt.env.vec_env import reset as env_reset
from foxhunt.env.vec_env import step as env_step
from foxhunt.market import MarketData, NormStats, inverse_std

_SHAPING_OFF = dict(
    risk_weight=0.0, diversity_penalty=0.0, curiosity_weight=0.0, barrier_profit_scale=0.0,
    barrier_stop_scale=0.0, end_on_barrier=False, reward_mode="return", reward_scale=1.0,
)


def execution_params(params: EnvParams) -> EnvParams:
    """The same execution (costs, spread, impact, sizing, barriers as labels) with shaping off."""
    return params.model_copy(update=_SHAPING_OFF)


def bars_per_year(market: MarketData) -> float:
    """Bars per year present in the market's data (``annualisation.infer_bars_per_year``)."""
    return resolve_bars_per_year(market.calendar_host()).bars_per_year


class Backtester:
    """Runs policies over windows of ``market`` with ``params``' execution semantics."""

    def __init__(self, market: MarketData, params: EnvParams | None = None, *, chunk: int = 64,
                 cuda_graphs: bool = True, bars_per_year: float | None = None) -> None:
        """bars_per_year: the annualisation factor; None infers it from the market's timestamps."""
        self.market = market
        self.device = market.device
        self.params = execution_params(params or EnvParams())
        self.chunk = max(1, int(chunk))
        self.cuda_graphs = cuda_graphs
        self.annualisation: Annualisation = resolve_bars_per_year(market.calendar_host(), bars_per_year)
        self.bars_per_year = self.annualisation.bars_per_year

    def run(
        self,
        starts: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray,
        policy: Policy,
        *,
        norms: Sequence[NormStats] | None = None,
        keep_curves: bool = False,
        keep_trades: bool = False,
        backend: str = "torch",
        progress: Callable[[int, int], None] | None = None,
        barriers: bool = False,
    ) -> BacktestResult:
        """Backtest ``policy`` on windows (starts[w], lengths[w] steps).

        norms: one NormStats per window (default: the market's current fold for all).
        backend: the plan's ``eval`` choice (``foxhunt.accel``): "torch" → this torch path; "fused" →
        the fused Triton kernel (``foxhunt.backtest.fused``), a ValueError saying why when it cannot
        run this policy (``backtest.fused.unsupported``; the caller settles fallbacks, see
        ``accel.backend.fall_back``).
        progress: torch path only, called on the host after each chunk with (steps done, total steps)
        (no device read: it only counts launches).
        barriers: triple-barrier evaluation: each round trip (``keep_trades``) gets ``barrier`` = +1
        (profit target), -1 (stop), 0 (expiry), the first barrier the env reported while it was open,
        or None when the policy closed it before any; on both paths. Barriers never end a window and
        change no return.
        """
        m = self.market
        st = np.asarray(starts, dtype=np.int64).reshape(-1)
        ln = np.asarray(lengths, dtype=np.int64).reshape(-1)
        w = st.shape[0]
        if w == 0 or ln.shape != st.shape:
            raise ValueError("Backtester.run: starts and lengths must be non-empty and of equal length")
        bad = (ln < 1) | (st < 0) | (st + ln > m.n_bars - 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"window {i}: start {st[i]} + length {ln[i]} must lie inside the data (last bar {m.n_bars - 1})")
        if getattr(m, "pooled", False):  # a universe: every window inside one symbol's rows (host check)
            m.window_symbols(st, ln)
        if backend == "fused":
            return run_fused(self, st, ln, policy, norms, keep_curves=keep_curves, keep_trades=keep_trades,
                             barriers=barriers)
        if backend != "torch":
            raise ValueError(f"Backtester.run: backend = {backend!r}: expected 'torch' or 'fused'")
        run = _Run(self, st, ln, policy, norms, keep_trades, barriers)
        run.execute(progress)
        return run.result(keep_curves, keep_trades)


class _Run:
    """Buffers and the step body of one backtest call."""

    def __init__(self, bt: Backtester, starts: np.ndarray, lengths: np.ndarray, policy: Policy,
                 norms: Sequence[NormStats] | None, keep_trades: bool, barriers: bool = False) -> None:
        m, dev = bt.market, bt.device
        self.bt, self.m, self.policy = bt, m, policy
        w = starts.shape[0]
        self.t_max = int(lengths.max())
        self.t_pad = -(-self.t_max // bt.chunk) * bt.chunk
        self.starts, self.lengths = starts, lengths
        self.params = EnvTensors.build(policy_params(bt.params, policy), w, dev, {"episode_length": lengths})
        self.state = EnvState.allocate(w, dev)
        self.out = StepOutput.allocate(w, dev)
        f = m.n_features
        if norms is None:
            self.mean = m.norm_mean.expand(w, f)
            self.inv = m.norm_inv_std.expand(w, f)
        else:
            if len(norms) != w:
                raise ValueError(f"norms: expected {w} NormStats, got {len(norms)}")
            self.mean = torch.stack([n.mean.to(torch.float32) for n in norms]).to(dev)
            std = torch.stack([n.std for n in norms]).to(dev)
            self.inv = inverse_std(std).to(torch.float32)
        self.k = decision_interval(policy)
        self.held = torch.zeros(w, dtype=torch.int64, device=dev)  # k > 1: the action of the last decision
        self.obs = torch.zeros((w, m.obs_dim), dtype=torch.float32, device=dev)
        self.port = torch.zeros((w, 3), dtype=torch.float32, device=dev)
        self.t = torch.zeros((), dtype=torch.int64, device=dev)
        self.col = torch.zeros(1, dtype=torch.int64, device=dev)
        self.returns = torch.zeros((w, self.t_pad), dtype=torch.float32, device=dev)
        self.positions = torch.zeros((w, self.t_pad), dtype=torch.float32, device=dev)
        self.eq_prev = torch.zeros(w, dtype=torch.float32, device=dev)
        self.q_prev = torch.zeros(w, dtype=torch.float32, device=dev)
        self.traded = torch.zeros((w, self.t_pad), dtype=torch.float32, device=dev)
        self.keep_trades = keep_trades
        self.trade_ret = torch.zeros((w, self.t_pad), dtype=torch.float32, device=dev)
        self.trade_closed = torch.zeros((w, self.t_pad), dtype=torch.bool, device=dev)
        if keep_trades:
            names = ("trade_side", "trade_size", "trade_costs", "trade_entry_bar", "trade_exit_bar")
            self.trade_more = {n: torch.zeros((w, self.t_pad), dtype=getattr(self.out, n).dtype, device=dev) for n in names}
        self.barriers = barriers and keep_trades
        if self.barriers:  # the open trade's first barrier label (NO_BARRIER until one is hit)
            self.open_label = torch.full((w,), NO_BARRIER, dtype=torch.int8, device=dev)
            self.trade_more["trade_barrier"] = torch.zeros((w, self.t_pad), dtype=torch.int8, device=dev)
        env_reset(self.state, self.params, m, torch.as_tensor(starts, device=dev), None, persistent=True)
        bind = getattr(policy, "bind_history", None)  # a policy over the last bars reads them by the live bar index
        if bind is not None:
            bind(m.features, self.state.bar, self.mean, self.inv)

    def observe(self) -> torch.Tensor:
        m, f = self.m, self.m.n_features
        portfolio_features(self.state, self.params, m, self.port)
        bar = self.state.bar.clamp(0, m.n_bars - 1)
        feats = self.obs[:, :f]
        torch.index_select(m.features, 0, bar, out=feats)
        feats.sub_(self.mean).mul_(self.inv)
        self.obs[:, f:].copy_(self.port)
        return self.obs

    def one_step(self) -> None:
        st, out = self.state, self.out
        obs = self.observe()
        actions = self.policy(obs, self.t)
        if self.k > 1:  # decide on steps 0, k, 2k, … of the window, hold in between
            torch.where(torch.remainder(self.t, self.k) == 0, actions, self.held, out=self.held)
            actions = self.held
        active = ~st.finished
        self.q_prev.copy_(st.position)
        open1 = self.m.ohlc[:, 0].index_select(0, (st.bar + 1).clamp(0, self.m.n_bars - 1))
        env_step(st, self.params, self.m, actions, None, out, active=active, auto_reset=False)
        # Traded notional of this bar in units of the initial capital: |Δq| at the fill bar's open.
        traded = torch.where(out.stepped, (st.position - self.q_prev).abs() * open1 / self.params.capital,
                             torch.zeros_like(self.eq_prev))
        # With shaping off the env's reward is the bar's equity return, computed from the PnL
        # decomposition (accurate to float32 relative to the PnL, unlike a ratio of two equities).
        ret = torch.where(out.stepped, out.reward, torch.zeros_like(self.eq_prev))
        pos = torch.where(out.stepped, out.next_portfolio[:, 0], torch.zeros_like(self.eq_prev))
        self.col.copy_(self.t.reshape(1))
        self.returns.index_copy_(1, self.col, ret.unsqueeze(1))
        self.positions.index_copy_(1, self.col, pos.unsqueeze(1))
        self.traded.index_copy_(1, self.col, traded.unsqueeze(1))
        self.trade_ret.index_copy_(1, self.col, out.trade_return.unsqueeze(1))
        self.trade_closed.index_copy_(1, self.col, (out.trade_closed & out.stepped).unsqueeze(1))
        if self.keep_trades:
            for name, buf in self.trade_more.items():
                if name != "trade_barrier":
                    buf.index_copy_(1, self.col, getattr(out, name).unsqueeze(1))
        if self.barriers:
            # A barrier is reported only on steps where the trade stays open, so a closing step emits
            # the label of the bars before it; then the label is cleared for the next trade.
            closed = out.trade_closed & out.stepped
            self.trade_more["trade_barrier"].index_copy_(1, self.col, self.open_label.unsqueeze(1))
            first = out.barrier_hit & out.stepped & (self.open_label == NO_BARRIER)
            self.open_label.copy_(torch.where(first, out.barrier_label, self.open_label))
            self.open_label.masked_fill_(closed, NO_BARRIER)
        self.t.add_(1)

    def chunk_body(self) -> None:
        for _ in range(self.bt.chunk):
            self.one_step()

    def execute(self, progress: Callable[[int, int], None] | None = None) -> None:
        step = GraphedStep(self.chunk_body, self.bt.device, self.bt.cuda_graphs)
        n_chunks = self.t_pad // self.bt.chunk
        with torch.no_grad():
            for i in range(n_chunks):
                step()
                if progress is not None:
                    progress(min((i + 1) * self.bt.chunk, self.t_max), self.t_max)

    def result(self, keep_curves: bool, keep_trades: bool) -> BacktestResult:
        bust = self.state.equity <= self.params.bust_level
        res = assemble_result(self.bt, self.starts, self.lengths, self.returns[:, : self.t_max],
                              self.positions[:, : self.t_max], self.trade_ret, self.trade_closed, bust, keep_curves,
                              traded=self.traded[:, : self.t_max])
        if keep_trades:
            res.trades = trade_rows(self.trade_closed, {"return": self.trade_ret, "entry_bar": self.trade_more["trade_entry_bar"],
                                                        "exit_bar": self.trade_more["trade_exit_bar"],
                                                        "side": self.trade_more["trade_side"],
                                                        "size": self.trade_more["trade_size"],
                                                        "costs": self.trade_more["trade_costs"],
                                                        **({"barrier": self.trade_more["trade_barrier"]}
                                                           if self.barriers else {})})
        return res


__all__ = ["NO_BARRIER", "STATUS_BUST", "STATUS_OK", "Backtester", "BacktestResult", "METRIC_NAMES",
           "assemble_result", "bars_per_year", "execution_params", "policy_params", "trade_rows"]
