"""Properties over random policies: accounting identity, no look-ahead, cost monotonicity, no reward
drift against equity, and no host reads in the hot path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.market import MarketData
from foxhunt.testing import forbid_host_reads
from tests.env.env_helpers import feature_set, random_market, random_walk_ohlcv

NO_SHAPING = dict(
    barrier_profit_scale=0.0, barrier_stop_scale=0.0, risk_weight=0.0, diversity_penalty=0.0, reward_scale=1.0, bust_fraction=0.0
)


def policy_actions(g: np.random.Generator, n: int, orders: tuple[int, ...] = (0, 1, 2)) -> torch.Tensor:
    """Random factored actions with order types restricted to ``orders``."""
    e = g.integers(0, 5, n)
    o = np.asarray(orders)[g.integers(0, len(orders), n)]
    u = g.integers(0, 3, n)
    return torch.as_tensor(9 * e + 3 * o + u)


@pytest.mark.parametrize("mode,max_position", [("factored", 1.0), ("factored", 2.0), ("exposure", 1.0)])
def test_cash_plus_position_times_close_equals_equity_every_step_and_costs_never_decrease(market, device, mode, max_position):
    """|cash + q·C_t − E| ≤ 1e-5 · (|cash| + |q·C_t|) at every step of 100-step episodes (float32)."""
    n = 64
    env = VecTradingEnv(market, n, EnvParams(episode_length=100, action_mode=mode, max_position=max_position, bust_fraction=0.0), seed=1)
    g = np.random.default_rng(0)
    close = market.ohlc[:, 3].double()
    for _ in range(250):
        costs_before = env.state.cum_costs.clone()
        out = env.step(torch.as_tensor(g.integers(0, env.n_actions, n), device=device))
        s = env.state
        qc = s.position.double() * close[s.bar]
        gap = (s.cash.double() + qc - s.equity.double()).abs()
        assert bool((gap <= 1e-5 * (s.cash.double().abs() + qc.abs())).all())
        assert bool((out.trade_costs >= 0).all()) and bool((s.cum_costs >= 0).all())
        cont = ~out.done
        assert bool((s.cum_costs[cont] >= costs_before[cont]).all())


def _market_pair(t_cut: int, device) -> tuple[MarketData, MarketData]:
    """Two markets equal up to bar t_cut and different after it, with the same fold statistics."""
    ohlc, volume = random_walk_ohlcv(800, seed=11)
    fs_a = feature_set(ohlc, volume, 4, seed=11)
    ohlc_b, volume_b = ohlc.copy(), volume.copy()
    g = np.random.default_rng(99)
    ohlc_b[t_cut + 1 :] *= np.exp(g.normal(0, 0.01, (800 - t_cut - 1, 1)))
    volume_b[t_cut + 1 :] *= 3.0
    feats_b = fs_a.features.clone()
    feats_b[t_cut + 1 :] += 1.0
    fs_b = dataclasses.replace(fs_a, ohlc=torch.from_numpy(ohlc_b), volume=torch.from_numpy(volume_b), features=feats_b)
    from foxhunt.folds import FoldRange

    fold = FoldRange(0, 10, 600, 610, 800)
    a, b = MarketData(fs_a, device), MarketData(fs_b, device)
    a.set_fold(fold)
    b.set_fold(fold)
    for name in ("norm_mean", "norm_inv_std", "median_abs_return", "median_range", "median_volume"):
        getattr(b, name).copy_(getattr(a, name))  # fold statistics are not what this test is about
    return a, b


@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_prices_after_bar_t_change_nothing_reported_up_to_t(device, mode):
    t_cut, n = 350, 8
    ma, mb = _market_pair(t_cut, device)
    params = EnvParams(episode_length=120, action_mode=mode)
    envs = [VecTradingEnv(m, n, params, auto_reset=False) for m in (ma, mb)]
    starts = list(range(300, 300 + 5 * n, 5))  # crosses t_cut at different steps
    for e in envs:
        e.reset(starts)
    g = np.random.default_rng(5)
    differed = False
    for _ in range(100):
        obs = [e.observe().clone() for e in envs]
        seen = envs[0].state.bar <= t_cut
        assert torch.equal(obs[0][seen], obs[1][seen])
        a = torch.as_tensor(g.integers(0, envs[0].n_actions, n), device=device)
        outs = [e.step(a) for e in envs]
        known = outs[0].next_bar <= t_cut  # the step used bars ≤ t_cut only
        for name, t in outs[0].tensors().items():
            assert torch.equal(t[known], outs[1].tensors()[name][known]), name
        for name, t in envs[0].state.tensors().items():
            assert torch.equal(t[known], envs[1].state.tensors()[name][known]), name
        differed |= not torch.equal(outs[0].reward, outs[1].reward)
    assert differed  # and the test can see a difference once the bars differ


def _final_equity(market: MarketData, name: str, levels: list[float], orders: tuple[int, ...], seed: int) -> np.ndarray:
    """Final equity [policies, levels]: every policy runs once per level of ``name``, same actions and start."""
    n_pol, n_lev = 6, len(levels)
    params = EnvParams(episode_length=250, bust_fraction=0.0)
    per_env = {name: torch.tensor(levels * n_pol)}
    env = VecTradingEnv(market, n_pol * n_lev, params, per_env=per_env, auto_reset=False)
    g = np.random.default_rng(seed)
    env.reset(np.repeat(g.integers(10, 300, n_pol), n_lev))
    for _ in range(250):
        env.step(policy_actions(g, n_pol, orders).repeat_interleave(n_lev).to(market.device))
    return env.state.equity.cpu().double().numpy().reshape(n_pol, n_lev)


@pytest.mark.parametrize(
    "name,levels,orders",
    [
        ("cost_bps", [0.0, 1.0, 5.0, 20.0], (0, 1, 2)),  # every order type
        ("spread_bps", [0.0, 1.0, 5.0, 20.0], (0, 2)),  # market / IoC (spread moves limit prices)
        ("impact_eta", [0.0, 0.1, 1.0, 5.0], (0, 1, 2)),  # limit orders have no impact
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_higher_costs_never_raise_final_equity(device, name, levels, orders, seed):
    """Same actions and starts; IoC capacity never binds (volume ~1e9 units) and bust is off, so the
    paths differ only by costs: final equity is non-increasing in the cost parameter (1e-6 slack)."""
    market = random_market(600, seed=seed, device=device, volume_scale=1e9, fold=None)
    eq = _final_equity(market, name, levels, orders, seed)
    assert (eq[:, 1:] <= eq[:, :-1] * (1 + 1e-6)).all(), eq
    assert (eq[:, -1] < eq[:, 0]).any()  # the parameter matters


@pytest.mark.parametrize("mode", ["return", "pnl"])
def test_rewards_reproduce_equity_without_drift(device, mode):
    """return: capital·Π(1 + r) = E; pnl: capital·(1 + Σ r) = E; at every step of 400, within 2e-6
    relative (float32 rounding of E and r; no shaping terms)."""
    market = random_market(1_000, seed=4, device=device)
    n = 32
    env = VecTradingEnv(market, n, EnvParams(episode_length=400, reward_mode=mode, **NO_SHAPING), auto_reset=False)
    g = np.random.default_rng(4)
    env.reset(g.integers(10, 500, n))
    acc = torch.zeros(n, dtype=torch.float64, device=device) + (1.0 if mode == "return" else 0.0)
    worst = 0.0
    for _ in range(400):
        out = env.step(torch.as_tensor(g.integers(0, 45, n), device=device))
        r = out.reward.double()
        acc = acc * (1 + r) if mode == "return" else acc + r
        implied = 1e6 * (acc if mode == "return" else 1 + acc)
        worst = max(worst, float(((implied - env.state.equity.double()) / env.state.equity.double()).abs().max()))
    assert worst < 2e-6


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(action_mode="exposure", reward_mode="dsr", kelly=True, kelly_min_trades=1),
        dict(end_on_barrier=True, reward_mode="pnl"),
    ],
)
@pytest.mark.parametrize("auto_reset", [True, False])
def test_step_observe_and_reset_flags_do_no_host_reads(market, device, kw, auto_reset):
    env = VecTradingEnv(market, 16, EnvParams(episode_length=7, **kw), auto_reset=auto_reset)
    actions = torch.randint(0, env.n_actions, (30, 16), generator=torch.Generator().manual_seed(0)).to(device)
    bonus = torch.rand(16, device=device) * 1e-3
    active = torch.arange(16, device=device) % 3 != 0
    with forbid_host_reads():
        for k in range(30):
            env.step(actions[k], bonus if k % 2 else None, active if k % 5 == 0 else None)
            env.observe()
        env.reset_flags.fill_(31)
        env.apply_reset_flags()
        env.sampler.draw(env.params, market)
    assert bool(torch.isfinite(env.out.reward).all())
