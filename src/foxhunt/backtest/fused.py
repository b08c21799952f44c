"""The fused backtest path: ``Backtester`` runs of a greedy DuelingQNet in one Triton kernel.

``run_fused(backtester, starts, lengths, net, norms=None)`` returns the same ``BacktestResult`` as
``backtester.run(starts, lengths, GreedyPolicy(net), norms=norms)``: it unpacks MarketData,
the backtester's execution parameters (shaping off) and the network's weights into plain tensors
for ``foxhunt.kernels.backtest.kernel`` and reduces its [W, T] returns / positions / trades with the
unchanged ``compute_metrics``. ``Backtester.run(backend="fused")`` calls it with the policy itself.

Covered: every execution parameter of EnvParams (costs, spread, impact, participation, vol EMA,
reserve, max_position, Kelly sizing, bust), factored and exposure action modes, markets with and
without volume, per-window normalisation, any window lengths, triple-barrier labels of the round
trips (``barriers``); policies: ``GreedyPolicy`` of a ``DuelingQNet`` with two trunk layers and
LeakyReLU activations, a voting ``EnsemblePolicy`` of such nets (K members' votes inside the
kernel, one window per program), ``ActionPolicy`` (fixed actions, ``ExposurePolicy``). Not covered
(``unsupported`` says why; ``Backtester.run(backend="fused")`` raises a ValueError with it; the
caller settles a fallback to ``backend="torch"``, ``foxhunt.accel.backend.fall_back``):
mean-Q ensembles, other networks (PPO actors, other layers), networks wider than 512 units (``agents.networks.fused_net_unsupported``), and a device where
Triton cannot run (``foxhunt.accel.triton``: a CPU needs TRITON_INTERPRET=1). DSR, diversity and curiosity are not
computed: with shaping off they change no return, position or trade.

Precision: "tf32" by default (``DEFAULT_PRECISION``); "ieee" is float32 throughout (slower),
"bf16" halves the weight bytes (see the kernel's performance model); bench/bench_backtest.py and
tests/kernels/test_backtest_fused.py report how often each one's greedy actions differ from the
torch path's (only at near-ties of Q).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np
import torch
from torch import nn

from foxhunt.accel.triton import unavailable
from foxhunt.agents.networks import DuelingQNet, fused_net_unsupported
from foxhunt.backtest.policies import (
    ActionPolicy, EnsemblePolicy, GreedyPolicy, MemberGreedyPolicy, decision_interval, policy_params,
)
from foxhunt.backtest.result import BacktestResult, assemble_result, trade_rows
from foxhunt.env.params import EnvParams, EnvTensors
from foxhunt.kernels.backtest.host import EnsembleWeights, ExecParams, FusedOutputs, MarketArrays, WindowNets
from foxhunt.kernels.rules.packing import pack_net
from foxhunt.market import MarketData, NormStats, inverse_std

DEFAULT_PRECISION = "tf32"


class BacktesterView(Protocol):
    """What the fused path reads of the ``Backtester`` (``backtest.evaluator``) that calls it: its
    market, device, execution parameters (shaping off) and annualisation (``assemble_result``). A
    protocol, so that this module sits below the evaluator and never imports it."""

    market: MarketData
    device: torch.device
    params: EnvParams
    bars_per_year: float


def unsupported(backtester: BacktesterView, policy: object) -> str | None:
    """Why ``Backtester.run(…, policy, backend="fused")`` cannot run (None when it can)."""
    if not isinstance(policy, (GreedyPolicy, ActionPolicy, EnsemblePolicy, MemberGreedyPolicy)):
        return (f"the policy is a {type(policy).__name__}, not a GreedyPolicy, an EnsemblePolicy, a MemberGreedyPolicy or "
                "an ActionPolicy")
    dev = backtester.device
    reason = unavailable(dev)
    if reason is not None:
        return reason
    if isinstance(policy, ActionPolicy):
        return None
    if isinstance(policy, MemberGreedyPolicy):
        shapes = {tuple((k, tuple(v.shape)) for k, v in n.state_dict().items()) for n in policy.nets}
        if len(shapes) > 1:
            return "the member networks differ in shape (the kernel strides one stacked layout)"
        for n in policy.nets:
            reason = _net_reason(backtester, n)
            if reason is not None:
                return f"member network: {reason}"
        return None
    if isinstance(policy, EnsemblePolicy):
        if policy.mode != "vote":
            return f"the ensemble's mode is {policy.mode!r}: the fused kernel runs 'vote' (mean Q needs every Q-value)"
        for n in policy.nets:
            reason = _net_reason(backtester, n)
            if reason is not None:
                return f"ensemble member: {reason}"
        return None
    return _net_reason(backtester, policy.net)


def _net_reason(backtester: BacktesterView, net: nn.Module) -> str | None:
    if any(p.device != backtester.device for p in net.parameters()):
        return "the network is not on the market's device"
    return fused_net_unsupported(net, backtester.market.obs_dim, backtester.params.n_actions)


def pack_ensemble(policy: EnsemblePolicy, precision: str, n_feat: int, device: torch.device) -> EnsembleWeights:
    """The kernel's form of a voting ensemble: packed members, weights and per-member norms."""
    if policy.norm_mean is None:  # members see the window's normalisation: identity inside the kernel
        mean = torch.zeros(len(policy.nets), n_feat, dtype=torch.float32, device=device)
        inv = torch.ones_like(mean)
    else:
        mean, inv = policy.norm_mean[:, 0, :], policy.norm_inv[:, 0, :]
    return EnsembleWeights([pack_net(n, precision) for n in policy.nets], policy.weights.to(device, torch.float32),
                           mean.to(device, torch.float32).contiguous(), inv.to(device, torch.float32).contiguous())


def exec_params(backtester: BacktesterView) -> ExecParams:
    """The backtester's execution parameters, derived exactly as EnvTensors derives them."""
    v = {k: float(a[0]) for k, a in EnvTensors._host_values(backtester.params, 1, None).items()}
    return ExecParams(
        capital=v["capital"], max_position=v["max_position"], reserve=v["reserve"], cost_rate=v["cost_rate"],
        half_spread=v["half_spread"], impact_eta=v["impact_eta"], max_impact=v["max_impact"],
        participation=v["participation"], vol_lambda=v["vol_lambda"], max_holding=v["max_holding_f"],
        kelly_fraction=v["kelly_fraction"], kelly_min_mult=v["kelly_min_mult"], kelly_alpha=v["kelly_alpha"],
        kelly_min_trades=int(v["kelly_min_trades"]), bust_level=v["bust_level"],
        profit_frac=v["profit_frac"], stop_frac=v["stop_frac"], max_holding_bars=int(v["max_holding"]),
    )


def market_arrays(m: MarketData, starts: torch.Tensor | None = None) -> MarketArrays:
    """The kernel's market arrays; with ``starts`` ([W] int64 on the device) the medians are
    ``m.medians_at(starts)``: the fold's 0-d pair, or a pooled universe's [W], each window's own symbol's
    (a window never leaves its symbol: ``UniverseMarket.window_symbols``), as the torch step reads them."""
    med_range, med_absret = (m.median_range, m.median_abs_return) if starts is None else m.medians_at(starts)
    return MarketArrays(m.features, m.ohlc, m.volume, m.log_return, m.bar_range, med_range.float().contiguous(),
                        med_absret.float().contiguous(), m.has_volume)


def norm_tensors(m: MarketData, norms: Sequence[NormStats] | None, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[W, F] float32 mean and inverse std, exactly as the torch backtester builds them."""
    f = m.n_features
    if norms is None:
        return m.norm_mean.expand(w, f).contiguous(), m.norm_inv_std.expand(w, f).contiguous()
    if len(norms) != w:
        raise ValueError(f"norms: expected {w} NormStats, got {len(norms)}")
    mean = torch.stack([n.mean.to(torch.float32) for n in norms]).to(m.device)
    std = torch.stack([n.std for n in norms]).to(m.device)
    inv = inverse_std(std).to(torch.float32)
    return mean.contiguous(), inv.contiguous()


def check_windows(m: MarketData, starts: Sequence[int] | np.ndarray,
                  lengths: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host-side window checks (Backtester.run's)."""
    st = np.asarray(starts, dtype=np.int64).reshape(-1)
    ln = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if st.shape[0] == 0 or ln.shape != st.shape:
        raise ValueError("Backtester.run: starts and lengths must be non-empty and of equal length")
    bad = (ln < 1) | (st < 0) | (st + ln > m.n_bars - 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"window {i}: start {st[i]} + length {ln[i]} must lie inside the data (last bar {m.n_bars - 1})")
    return st, ln


def launch(backtester: BacktesterView, st: np.ndarray, ln: np.ndarray, net: DuelingQNet | None,
           norms: Sequence[NormStats] | None = None, *, precision: str = DEFAULT_PRECISION,
           store_debug: bool = False, store_trades: bool = False, actions: torch.Tensor | None = None,
           action_mode: str | None = None, barriers: bool = False, ensemble: EnsemblePolicy | None = None,
           decision_interval: int = 1, members: MemberGreedyPolicy | None = None, **tuning: int) -> FusedOutputs:
    """Run the kernel on checked windows; the raw [W, T] outputs (T = max length).

    net: the greedy policy's network, or None with ``actions`` ([W, C] int, an ActionPolicy's).
    action_mode: the policy's own action mode (``policy_params``), default the backtester's.
    ensemble: a voting EnsemblePolicy instead of ``net`` (the row path: one window per program)."""
    m, dev = backtester.market, backtester.device
    mean, inv = norm_tensors(m, norms, st.shape[0])
    if actions is not None:
        actions = actions.to(device=dev, dtype=torch.int64).contiguous()
        if actions.dim() != 2 or actions.shape[0] != st.shape[0]:
            raise ValueError(f"actions: expected [{st.shape[0]}, T] (one row per window), got {tuple(actions.shape)}")
    from foxhunt.kernels.backtest.kernel import fused_backtest  # Triton: imported only when a kernel runs

    ens = pack_ensemble(ensemble, precision, m.n_features, dev) if ensemble is not None else None
    per_window = None
    if members is not None:  # window w: member index[w]'s block of the stacked weights (row path)
        per_window = WindowNets([pack_net(n, precision) for n in members.nets],
                                torch.tensor(members.window_index(), dtype=torch.int32, device=dev))
        net = None
    if ens is not None or per_window is not None:
        tuning = {**tuning, "block_w": 1}
    starts = torch.as_tensor(st, device=dev)
    return fused_backtest(
        market_arrays(m, starts), starts, torch.as_tensor(ln, device=dev), mean, inv,
        pack_net(net, precision) if net is not None else None, exec_params(backtester), n_steps=int(ln.max()),
        exposure_mode=(action_mode or backtester.params.action_mode) == "exposure", kelly=bool(backtester.params.kelly),
        precision=precision, store_debug=store_debug, store_trades=store_trades, actions=actions,
        barriers=barriers, ensemble=ens, decision_interval=decision_interval, window_nets=per_window, **tuning,
    )


def run_fused(backtester: BacktesterView, starts: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray,
              net: DuelingQNet | GreedyPolicy | ActionPolicy | EnsemblePolicy, norms: Sequence[NormStats] | None = None, *,
              keep_curves: bool = False,
              keep_trades: bool = False, precision: str = DEFAULT_PRECISION, barriers: bool = False,
              **tuning: int) -> BacktestResult:
    """``backtester.run(starts, lengths, GreedyPolicy(net), norms=norms, …)`` in one fused kernel;
    ``net`` may also be a policy: GreedyPolicy, a voting EnsemblePolicy, an ActionPolicy (fixed
    actions, e.g. ExposurePolicy: buy-and-hold).

    Raises ValueError when the kernel cannot run this network / device (``unsupported``).
    barriers: with keep_trades, each round trip's triple-barrier label (``Backtester.run``'s rule).
    tuning: block_w, bk, stages, num_warps (see ``fused_backtest``).
    """
    policy = net if isinstance(net, (GreedyPolicy, ActionPolicy, EnsemblePolicy, MemberGreedyPolicy)) \
        or not isinstance(net, nn.Module) else GreedyPolicy(net)
    reason = unsupported(backtester, policy)
    if reason is not None:
        raise ValueError(f"fused backtest unavailable: {reason}")
    assert isinstance(policy, (GreedyPolicy, ActionPolicy, EnsemblePolicy, MemberGreedyPolicy))
    m = backtester.market
    st, ln = check_windows(m, starts, lengths)
    given = policy.actions if isinstance(policy, ActionPolicy) else None
    with torch.no_grad():
        ens = policy if isinstance(policy, EnsemblePolicy) else None
        greedy = policy.net if isinstance(policy, GreedyPolicy) else None
        per_window = policy if isinstance(policy, MemberGreedyPolicy) else None
        if per_window is not None and per_window.n_windows != st.shape[0]:
            raise ValueError(f"MemberGreedyPolicy: its blocks cover {per_window.n_windows} windows, the run has {st.shape[0]}")
        out = launch(backtester, st, ln, greedy, norms, members=per_window,
                     precision=precision, store_trades=keep_trades, actions=given, ensemble=ens,
                     action_mode=policy_params(backtester.params, policy).action_mode, barriers=barriers,
                     decision_interval=decision_interval(policy), **tuning)
        bust = out.final_equity <= exec_params(backtester).bust_level
        res = assemble_result(backtester, st, ln, out.returns, out.positions, out.trade_return, out.trade_closed,
                              bust, keep_curves, traded=out.traded)
    if keep_trades:
        assert out.trade_side is not None and out.trade_size is not None
        assert out.trade_costs is not None and out.trade_entry_bar is not None
        exit_bar = st[:, None] + np.arange(out.trade_closed.shape[1])[None, :] + 1
        res.trades = trade_rows(out.trade_closed, {"return": out.trade_return, "entry_bar": out.trade_entry_bar,
                                                   "exit_bar": exit_bar, "side": out.trade_side,
                                                   "size": out.trade_size, "costs": out.trade_costs,
                                                   **({"barrier": out.trade_barrier} if barriers else {})})
    return res


__all__ = ["DEFAULT_PRECISION", "BacktesterView", "run_fused", "unsupported"]
