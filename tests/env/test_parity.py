"""Parity: the float32 vectorised env (foxhunt.env.VecTradingEnv) against the float64 oracle.

Both step the same random action sequences on a CPU MarketData built from a random-walk OHLCV
series; every step compares state, rewards and step outputs env by env.

Tolerances (``_compare``): every continuous value within 1e-4 relative plus an absolute floor for
values that cross or sit at zero, |device − oracle| ≤ atol + 1e-4·|oracle|:
* cash / equity / peak: atol 1e-5·capital·max(1, max_position). Cash is a float32 running sum of
  fills of notional up to capital·max_position (≈ 1e6 each, rounded at 6e-8), so after an episode
  of fills it carries ~1e-6·notional absolute error; seen: ≤ 0.5 of this floor.
* units (position, q*, trade size): atol 1e-5·capital·max_position/100 (≈ 1e-5 of a full position
  at the start price 100). q* inherits E's ~1e-6 float32 error, and a small position made by a
  cancellation (an IoC reversal's opening leg K − |q|, a partial fill) keeps it as absolute error;
  seen: 0.042 units on a 32-unit leg after a 25,000-unit close (1.6e-6 of the position scale).
* reward: atol 1e-6·reward_scale in return / pnl mode. Typical |reward| is 1e-3..1e-2, so the floor
  is ≤ 1e-3 of it; it covers the float32 cancellation in (E' − E)/E with E ≈ 1e6 (ulp 0.06).
  DSR mode: atol 2e-3·reward_scale (D is O(1) and amplifies R's ~1e-7 error by about 1/sqrt(B)).
* DSR moments A / B: atol 1e-7 / 1e-9 (A averages returns of both signs: R's error, not A's size).
* costs 1e-3 currency, v 1e-9, Kelly EMAs 1e-7, trade return 1e-6, portfolio features 1e-5 / 1e-6.
Discrete outcomes (fill status, barrier hit/label, done, trade closed and its side/bars, bars,
levels, barrier flags/expiry, Kelly count, diversity counts) must be identical.

Ties: the market is built so that no bar's high/low lies within 0.6 % of the previous close, so a
limit price (within 0.4 % of it for spread ≤ 10 bps) is never near a trade-through. Other
thresholds (barrier touches, IoC capacity, routing, entropy, bust, Kelly win) cannot be kept away
from float32 rounding by construction; when a mismatch coincides with an oracle comparison whose
margin is below ``TIE_TOL`` it is counted and printed as a tie and that env leaves the comparison.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.reference import ReferenceEnv, ReferenceMarket, decode_factored
from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.env.env_helpers import mirrored_market

N_BARS, TRAIN_END = 3_000, 2_600
BAND = 0.006
TIE_TOL = {"limit": 1e-6, "barrier": 1e-6, "ioc": 1e-5, "route_range": 0.0, "route_vol": 1e-5,
           "entropy": 1e-5, "bust": 1e-5, "kelly_win": 1e-5, "dsr_var": 1e-3, "target": 1e-5}
"""Oracle comparison margins (see ReferenceEnv.last_margins) below which float32 may decide otherwise.

route_range compares the same float32 values on both sides (rg_t against med_range and 2·med_range,
both exact), so it has no rounding ties. A zero margin is exact on both sides, hence no tie, for an
entropy at the threshold (a dyadic value such as counts 50/50/0 against 1 bit) and for a limit
price with zero spread (P = C_t exactly) against a flat bar's low/high. A zero margin is a real tie
for a trade return (an exactly break-even round trip: the float32 size-weighted average entry may
round either way, and "win = ret > 0" follows the rounding) and for a fresh q* equal to q."""


def _is_tie(name: str, margin: float) -> bool:
    return margin < TIE_TOL[name] and not (name in ("entropy", "limit") and margin == 0.0)


def parity_feature_set(seed: int = 0, has_volume: bool = True, n_features: int = 6, flat: float = 0.0) -> FeatureSet:
    """Random-walk bars of three kinds: wide (trades through ±0.6 % of the previous close on both
    sides), gap up and gap down (the whole bar beyond +0.6 % / −0.6 %); volatility regimes; random
    features. Volumes are lognormal around 5e4 so IoC capacity cuts orders of ~1e4 units.
    A share ``flat`` of bars are O = H = L = C = previous close (above ½ the medians of range and
    |return| are 0, the spec's degenerate routing / spread case)."""
    rng = np.random.default_rng(seed)
    regime = np.exp(np.convolve(rng.normal(0, 0.25, N_BARS + 50), np.ones(50) / 7, "valid")[:N_BARS])
    ohlc = np.empty((N_BARS, 4))
    prev = 100.0
    for t in range(N_BARS):
        s = 0.006 * regime[t]
        kind = rng.random()
        if rng.random() < flat:
            ohlc[t] = prev, prev, prev, prev
            continue
        if kind < 0.6:
            lo = prev * (1 - BAND - abs(rng.normal(0, s)))
            hi = prev * (1 + BAND + abs(rng.normal(0, s)))
            op, cl = rng.uniform(lo, hi, 2)
        elif kind < 0.8:
            lo = prev * (1 + BAND + abs(rng.normal(0, s / 2)))
            op, cl = lo * (1 + rng.uniform(0, 2 * s, 2))
            hi = max(op, cl) * (1 + abs(rng.normal(0, s / 2)))
        else:
            hi = prev * (1 - BAND - abs(rng.normal(0, s / 2)))
            op, cl = hi * (1 - rng.uniform(0, 2 * s, 2))
            lo = min(op, cl) * (1 - abs(rng.normal(0, s / 2)))
        ohlc[t] = op, hi, lo, cl
        prev = cl
    volume = rng.lognormal(np.log(5e4), 0.7, N_BARS) if has_volume else np.ones(N_BARS)
    return FeatureSet(
        features=torch.from_numpy(rng.normal(0, 1, (N_BARS, n_features)).astype(np.float32)),
        targets=torch.zeros((N_BARS, 4), dtype=torch.float32),
        ohlc=torch.from_numpy(ohlc), volume=torch.from_numpy(volume),
        timestamps=torch.arange(N_BARS, dtype=torch.int64) * 60_000_000_000,
        names=tuple(f"f{i}" for i in range(n_features)), warmup=0, has_volume=has_volume,
        spec_version="parity", source_sha256="0" * 64,
    )


def parity_market(seed: int = 0, has_volume: bool = True, flat: float = 0.0) -> MarketData:
    m = MarketData(parity_feature_set(seed, has_volume, flat=flat))
    m.set_fold(FoldRange(0, 50, TRAIN_END, TRAIN_END, N_BARS))
    return m


CHOICES: dict[str, tuple[Any, ...]] = {
    "capital": (1e6, 2.5e5), "max_position": (0.5, 1.0, 2.0, 3.0), "reserve": (0.0, 0.05, 0.3),
    "cost_bps": (0.0, 1.0, 5.0), "spread_bps": (0.0, 1.0, 5.0, 10.0), "impact_eta": (0.0, 0.1, 1.0),
    "max_impact": (0.05, 5e-4), "participation": (0.05, 0.1, 1.0), "vol_lambda": (0.94, 0.8),
    "profit_bps": (50.0, 150.0, 400.0), "stop_bps": (50.0, 100.0, 400.0), "max_holding": (1, 3, 20, 60),
    "barrier_profit_scale": (0.5, 1.0), "barrier_stop_scale": (-0.5, -1.0), "end_on_barrier": (False, True),
    "risk_threshold": (0.8, 0.3), "risk_weight": (0.001, 0.01), "diversity_threshold": (1.0, 1.5),
    "diversity_penalty": (1e-4, 1e-3), "curiosity_weight": (1.0, 0.5), "curiosity_max": (1e-4, 1e-3),
    "dsr_eta": (0.01, 0.05), "dsr_clip": (10.0, 2.0), "reward_scale": (1.0, 10.0), "kelly": (False, True),
    "kelly_fraction": (0.5, 1.0), "kelly_min_mult": (0.1, 0.3), "kelly_min_trades": (2, 5),
    "kelly_alpha": (0.05, 0.2), "episode_length": (100, 250), "bust_fraction": (0.1, 0.97),
}
"""Per-env parameter values; each env draws one of each (so one run covers many parameter sets)."""


def per_env_params(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: np.array([v[i] for i in rng.integers(len(v), size=n)]) for k, v in CHOICES.items()}


def oracle_params(per_env: dict[str, np.ndarray], i: int, **glob: str) -> dict[str, Any]:
    out: dict[str, Any] = dict(glob)
    for k, arr in per_env.items():
        v = arr[i].item()
        out[k] = bool(v) if k in ("kelly", "end_on_barrier") else v
    return out


@dataclass
class Report:
    """What a parity run saw: coverage counters, ties and real mismatches."""

    coverage: Counter = field(default_factory=Counter)
    near: Counter = field(default_factory=Counter)
    ties: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    used: dict[str, float] = field(default_factory=dict)


def _oracle_row(ref: ReferenceEnv) -> dict[str, float]:
    return {"cash": ref.cash, "position": ref.position, "equity": ref.equity, "entry_price": ref.entry_price,
            "target": ref.target, "vol": ref.vol_ema, "kelly_p": ref.kelly_win_rate, "kelly_win": ref.kelly_mean_win,
            "kelly_loss": ref.kelly_mean_loss, "dsr_a": ref.dsr_a, "dsr_b": ref.dsr_b, "peak": ref.equity_peak,
            "cum_costs": ref.cum_costs, "open_costs": ref.open_trade_costs, "entry_bar": ref.entry_bar,
            "bar": ref.bar, "step": ref.step_in_episode, "level": ref.requested_level,
            "barrier_active": ref.barrier_active, "barrier_upper": ref.barrier_upper,
            "barrier_lower": ref.barrier_lower, "barrier_expiry": ref.barrier_expiry,
            "barrier_side": ref.barrier_side, "kelly_count": ref.kelly_count, "ring_fill": len(ref.diversity_ring),
            **{f"ring{c}": ref.diversity_counts[c] for c in range(3)}}


_DISC = ("done", "fill_status", "barrier_hit", "barrier_label", "trade_closed", "next_bar", "bar", "step",
         "entry_bar", "level", "barrier_active", "kelly_count", "ring_fill", "ring0", "ring1", "ring2")
_DISC_CLOSED = ("trade_side", "trade_entry_bar", "trade_exit_bar")
_DISC_ACTIVE = ("barrier_expiry", "barrier_side")


def _compare(dev: dict[str, list], i: int, ref: dict[str, Any], scales: dict[str, float], dsr: bool,
             used: dict[str, float]) -> list[str]:
    """Names of the quantities on which device (env ``i`` of the per-quantity lists ``dev``) and
    oracle disagree (one env, one step).

    ``used`` (empty on entry) gets, per continuous quantity, |device − oracle| / tolerance.
    """
    bad = []
    closed, active = bool(ref["trade_closed"]), bool(ref["barrier_active"])
    money, units = scales["money"], scales["units"]
    cont = [("cash", money), ("equity", money), ("peak", money), ("position", units), ("target", units),
            ("cum_costs", 1e-3), ("open_costs", 1e-3), ("entry_price", 0.0), ("vol", 1e-9), ("kelly_p", 1e-7),
            ("kelly_win", 1e-7), ("kelly_loss", 1e-7), ("reward", scales["reward"]), ("exposure", 1e-5),
            ("unrealised", 1e-6), ("held", 1e-6), ("dsr_a", 1e-7), ("dsr_b", 1e-9), ("obs_exposure", 1e-5),
            ("obs_unrealised", 1e-6), ("obs_held", 1e-6)]
    if closed:
        cont += [("trade_return", 1e-6), ("trade_size", units), ("trade_costs", 1e-3)]
    if active:
        cont += [("barrier_upper", 0.0), ("barrier_lower", 0.0)]
    for k, atol in cont:
        d, r = float(dev[k][i]), float(ref[k])
        if d != r:
            frac = abs(d - r) / (atol + 1e-4 * abs(r))
            used[k] = frac if frac > 0.0 else 0.0  # (a NaN counts 0, as max(0.0, nan) did)
            if frac > 1.0:
                bad.append(k)
        else:
            used[k] = 0.0
    disc = _DISC + (_DISC_CLOSED if closed else ()) + (_DISC_ACTIVE if active else ())
    bad += [k for k in disc if int(dev[k][i]) != int(ref[k])]
    return bad


def _device_rows(env: VecTradingEnv) -> dict[str, np.ndarray]:
    s, o = env.state, env.out
    rows = {k: getattr(s, k).numpy().copy() for k in (
        "cash", "position", "equity", "entry_price", "target", "vol", "kelly_p", "kelly_win", "kelly_loss",
        "dsr_a", "dsr_b", "peak", "cum_costs", "open_costs", "entry_bar", "bar", "step", "level",
        "barrier_active", "barrier_upper", "barrier_lower", "barrier_expiry", "barrier_side", "kelly_count",
        "ring_fill", "episode_start")}
    for c in range(3):
        rows[f"ring{c}"] = s.ring_counts[:, c].numpy().copy()
    for k in ("reward", "done", "next_bar", "fill_status", "barrier_hit", "barrier_label", "trade_closed",
              "trade_return", "trade_side", "trade_size", "trade_costs", "trade_entry_bar", "trade_exit_bar"):
        rows[k] = getattr(o, k).numpy().copy()
    obs = env.observe()[:, -3:]
    for j, k in enumerate(("exposure", "unrealised", "held")):
        rows[k] = o.next_portfolio[:, j].numpy().copy()
        rows[f"obs_{k}"] = obs[:, j].numpy().copy()
    return rows


def run_parity(n_envs: int, steps: int, *, seed: int, action_mode: str = "factored", reward_mode: str = "return",
               has_volume: bool = True, flags_at: int | None = None, hold: float = 0.6, flat: float = 0.0,
               curiosity_input: bool = True, mirror: bool = False, decision_interval: int = 1) -> Report:
    """Step device env and oracles side by side; returns coverage, ties and mismatches. mirror: the
    market's mirror appended (``train.mirror``), half of the episodes start in it. decision_interval
    k > 1: every step is one decision of k bars (``ReferenceEnv.step_decision`` on the oracle side)."""
    market = parity_market(seed, has_volume, flat)
    if mirror:
        market = mirrored_market(parity_feature_set(seed, has_volume, flat=flat), market.fold)
    rmarket = ReferenceMarket.from_market(market)
    per_env = per_env_params(n_envs, seed + 1)
    env = VecTradingEnv(market, n_envs, EnvParams(action_mode=action_mode, reward_mode=reward_mode,
                                                  decision_interval=decision_interval), seed=seed, per_env=per_env)
    env.reset()
    refs = [ReferenceEnv(rmarket, oracle_params(per_env, i, action_mode=action_mode, reward_mode=reward_mode))
            for i in range(n_envs)]
    starts = env.state.episode_start.numpy()
    for i, ref in enumerate(refs):
        ref.reset(int(starts[i]))
    n_act = 45 if action_mode == "factored" else 5
    rng = np.random.default_rng(seed + 2)
    actions = rng.integers(n_act, size=n_envs)
    alive = np.ones(n_envs, bool)
    rep = Report()
    dsr = reward_mode == "dsr"
    env_scales = [{"money": 1e-5 * float(r.p["capital"]) * max(1.0, float(r.p["max_position"])),
                   "units": 1e-5 * float(r.p["capital"]) * float(r.p["max_position"]) / 100.0,
                   "reward": (2e-3 if dsr else 1e-6) * float(r.p["reward_scale"])} for r in refs]  # tolerances per env
    for k in range(steps):
        change = rng.random(n_envs) > hold  # sticky actions: retries, holdings, barrier expiries
        actions = np.where(change, rng.integers(n_act, size=n_envs), actions)
        curiosity = rng.uniform(-1e-4, 2e-3, n_envs) if curiosity_input else np.zeros(n_envs)
        if flags_at is not None and k == flags_at:
            env.reset_flags.fill_(1 | 2 | 4)
            env.apply_reset_flags()
            for ref in refs:
                ref.apply_reset_flags(1 | 2 | 4)
        bonus = torch.from_numpy(curiosity).float() if curiosity_input else None
        env.step(torch.from_numpy(actions.astype(np.int64)), curiosity=bonus)
        dev = _device_rows(env)
        dev_py = {k2: v.tolist() for k2, v in dev.items()}  # the same values as Python numbers: cheap per-env reads
        acts, cur32 = actions.tolist(), curiosity.astype(np.float32).tolist()
        for i in np.flatnonzero(alive).tolist():
            ref = refs[i]
            q_before, a = ref.position, acts[i]
            if decision_interval == 1:
                reward, done, info = ref.step(a, cur32[i])
            else:
                reward, done, info = ref.step_decision(a, decision_interval, cur32[i])
            margins = dict(ref.last_margins)
            _cover(rep.coverage, ref, a, q_before, info, action_mode)
            if done and dev_py["done"][i]:  # the device auto-reset: restart the oracle at its new start
                start = int(dev_py["episode_start"][i])
                in_mirror = start >= N_BARS and mirror
                rep.coverage["start_mirror" if in_mirror else "start_data"] += 1
                base = start - N_BARS if in_mirror else start
                assert 50 <= base <= TRAIN_END - int(ref.p["episode_length"]) - 1, f"start {start} outside the fold"
                ref.reset(start)
            obs = ref.portfolio_features()
            row = {**_oracle_row(ref), **info, "exposure": info["next_portfolio"][0],
                   "unrealised": info["next_portfolio"][1], "held": info["next_portfolio"][2],
                   "obs_exposure": obs[0], "obs_unrealised": obs[1], "obs_held": obs[2]}
            used: dict[str, float] = {}
            bad = _compare(dev_py, i, row, env_scales[i], dsr, used)
            near = [m for m, v in margins.items() if _is_tie(m, v)]
            if near:
                rep.near.update(near)
            if bad:
                alive[i] = False
                what = ", ".join(f"{b}: device {dev[b][i]!r} oracle {row[b]!r}" for b in bad)
                msg = f"step {k} env {i} bar {info['next_bar'] - 1} action {a}: {what}; margins {margins}"
                (rep.ties if near else rep.mismatches).append(msg)
                continue
            worst = rep.used
            for key, frac in used.items():
                if frac > worst.get(key, -1.0):
                    worst[key] = frac
    rep.coverage["alive_at_end"] = int(alive.sum())
    print(f"\nparity {action_mode}/{reward_mode} volume={has_volume}: near-threshold {dict(rep.near)}; "
          f"ties {len(rep.ties)}; mismatches {len(rep.mismatches)}; worst fraction of tolerance "
          + str({k: f"{rep.used.get(k, 0.0):.3f}" for k in ("equity", "cash", "position", "reward", "dsr_a")}))
    for msg in rep.ties + rep.mismatches[:5]:
        print("  ", msg)
    return rep


def _cover(c: Counter, ref: ReferenceEnv, a: int, q_before: float, info: dict[str, Any], mode: str) -> None:
    """Coverage counters: actions, fill statuses per order type, reversals, barriers, done causes."""
    if mode == "factored":
        c[f"action{a}"] += 1
        o = decode_factored(a)[1]
        c[f"fill{info['fill_status']}_o{o}"] += 1
    else:
        c[f"action{a}"] += 1
        c[f"fill{info['fill_status']}"] += 1
    if info["trade_closed"] and ref.position != 0.0 and np.sign(ref.position) != np.sign(q_before):
        c["reversal"] += 1
        c["reversal_partial"] += info["fill_status"] == 2
    if mode == "factored" and decode_factored(a)[1] == 1 and ref.last_fills:
        c["limit_gap"] += ref.last_fills[0][1] == ref.m.open[info["next_bar"]]
    if info["barrier_hit"]:
        c[f"label{info['barrier_label']}_end{int(bool(ref.p['end_on_barrier']))}"] += 1
    if info["done"]:
        bust = ref.equity <= float(ref.p["bust_fraction"]) * float(ref.p["capital"])
        c["done_bust" if bust else ("done_barrier" if info["barrier_hit"] else "done_length")] += 1
    if ref.p["kelly"] and ref.kelly_count >= int(ref.p["kelly_min_trades"]) and ref.kelly_multiplier() < 1.0:
        c["kelly_sized"] += 1
    if ref.m.has_volume and info["fill_status"] in (1, 2) and ref.last_margins.get("ioc", 0) > 0:
        c["ioc_checked"] += 1


def _check(rep: Report, required: list[str], n_envs: int, max_ties: int | None = None) -> None:
    """Coverage reached, no real mismatch, and few ties (each tie removes one env from the run)."""
    missing = [k for k in required if rep.coverage[k] == 0]
    assert not missing, f"scenario did not exercise {missing}"
    assert not rep.mismatches, f"{len(rep.mismatches)} mismatches; first: " + "\n".join(rep.mismatches[:3])
    limit = max(2, n_envs // 8) if max_ties is None else max_ties
    assert len(rep.ties) <= limit, f"too many float32 ties: {rep.ties}"


FACTORED_REQUIRED = ([f"action{a}" for a in range(45)] + [f"fill{s}_o{o}" for s, o in
                     ((0, 0), (1, 0), (1, 1), (3, 1), (1, 2), (2, 2))]
                     + ["reversal", "reversal_partial", "limit_gap", "label1_end0", "label-1_end0", "label0_end0",
                        "label1_end1", "label-1_end1",
                        "done_bust", "done_barrier", "done_length", "kelly_sized"])


def test_factored_actions_match_the_float64_oracle_for_2000_steps():
    rep = run_parity(32, 2_000, seed=0, flags_at=1_000)
    _check(rep, FACTORED_REQUIRED, 32)


def test_exposure_mode_with_routing_matches_the_float64_oracle_for_2000_steps():
    rep = run_parity(24, 2_000, seed=3, action_mode="exposure")
    _check(rep, [f"action{a}" for a in range(5)] + ["fill0", "fill1", "fill2", "fill3", "reversal", "kelly_sized"], 24)


def test_a_mirrored_market_matches_the_float64_oracle_and_restarts_in_both_copies():
    rep = run_parity(24, 2_000, seed=4, action_mode="exposure", flags_at=900, mirror=True)
    _check(rep, ["reversal", "fill1", "start_data", "start_mirror"], 24)
    starts = rep.coverage["start_data"] + rep.coverage["start_mirror"]
    assert 0.3 < rep.coverage["start_mirror"] / starts < 0.7, dict(rep.coverage)


@pytest.mark.parametrize("reward_mode", ["dsr", "pnl"])
def test_dsr_and_pnl_rewards_match_the_float64_oracle_for_2000_steps(reward_mode):
    rep = run_parity(16, 2_000, seed=5, reward_mode=reward_mode)
    _check(rep, ["reversal", "label1_end0", "done_length"], 16)


def test_without_volume_impact_is_zero_and_ioc_uncapped_in_parity():
    rep = run_parity(16, 2_000, seed=7, has_volume=False)
    _check(rep, ["fill1_o2", "reversal"], 16)
    assert rep.coverage["fill2_o2"] == 0


@pytest.mark.parametrize("action_mode", ["factored", "exposure"])
def test_zero_median_range_and_return_route_to_market_normal_and_match_the_oracle(action_mode):
    rep = run_parity(16, 2_000, seed=9, action_mode=action_mode, flat=0.7, curiosity_input=False)
    market = parity_market(9, flat=0.7)
    assert float(market.median_range) == 0.0 and float(market.median_abs_return) == 0.0
    # Flat bars with zero spread/impact make exactly break-even round trips (Kelly-win ties): allow 3.
    _check(rep, ["reversal", "label1_end0"] + (["fill1_o1", "fill3_o1"] if action_mode == "factored" else []), 16, 3)
    if action_mode == "exposure":
        assert rep.coverage["fill3"] == 0 and rep.coverage["fill2"] == 0  # everything routed to market


@pytest.mark.slow
@pytest.mark.parametrize("seed,action_mode", [(11, "factored"), (12, "exposure")])  # a seed each: ~24 s a case on 2 cores
def test_many_envs_match_the_float64_oracle_for_2000_steps(seed, action_mode):
    rep = run_parity(64, 2_000, seed=seed, action_mode=action_mode, flags_at=777)
    _check(rep, ["reversal", "kelly_sized", "done_bust"], 64)


@pytest.mark.parametrize("k,action_mode", [(3, "factored"), (7, "exposure")])
def test_decisions_of_k_bars_match_the_float64_oracle_held_for_k_bars(k, action_mode):
    """env.decision_interval: each step holds the action for k bars; sums, the ends inside an interval
    (length, barrier, bust), the last trade and the auto-reset agree with ReferenceEnv.step_decision."""
    rep = run_parity(24, 600, seed=13 + k, action_mode=action_mode, flags_at=300, decision_interval=k)
    _check(rep, ["reversal", "label1_end1", "done_length", "done_barrier"], 24)
