"""Universes of the procedural family: S symbols sharing one edge form, or S symbols with no edge.

A *universe draw* (``universe_draw(family, index, n_symbols)``), deterministic in (family, index,
n_symbols, interval, layout), is what pooled training is for: many instruments with the same kind of
edge, each on its own path. Shared by every symbol of the draw (drawn from the universe's seed):

* the edge form, ``PATTERN[index % 12]`` as for single draws (universe 1, 5 and 9 of every 12 have no
  edge), and its form parameters (the horizon, thresholds, the vol-state's sign …);
* the oracle's target expected Sharpe after costs (``TARGET_SHARPE`` of the interval), the cost level
  (one env per universe: one run's costs), the bar interval (daily unless asked) and the calendar.

Each symbol's own (seeds ``SeedSequence([universe seed, 0x0E1, j])``): its noise parameters and noise
(GARCH or stochastic volatility, tails, jumps), its latent path (the *phase*: where its drift wanders,
when its regime switches), and its planted strength, solved so that its own best oracle reaches the
shared target (``forms.calibrate``; a symbol whose target is out of reach at the strength cap draws its
paths again, up to ``MAX_ATTEMPTS``). No-edge universes plant nothing: every symbol is its noise alone.

Symbols are named ``U<index>S<j>`` (sorted as the universe orders them). Nothing is shipped: the bars are
generated on demand; ``write_universe`` writes them as one Parquet file a symbol, a directory ``foxhunt
train --data DIR`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.backtest.annualisation import infer_bars_per_year
from foxhunt.backtest.quant_rules import cost_rate
from foxhunt.data import synthetic as syn
from foxhunt.data.bars import Bars
from foxhunt.features.spec import WARMUP
from foxhunt.scorecard.build import SCENARIO_ENV
from foxhunt.scorecard.family import COSTS, INTERVALS, LAYOUTS, MAX_ATTEMPTS, START, Layout, form_of, seed_of
from foxhunt.scorecard.family.forms import FORM, TARGET_SHARPE, calibrate, horizon_cap, loguniform, oracle_sharpes
from foxhunt.scorecard.family.noise import describe_noise, draw_noise_params, sigma_bar, simulate_noise
from foxhunt.scorecard.markets import bars_from_log_returns

__all__ = ["FamilyUniverse", "universe_draw", "write_universe"]


@dataclass(frozen=True)
class FamilyUniverse:
    """One universe draw. symbols: S names; bars: S Bars (one calendar); oracles: S {rule: [T] exposure};
    env: the shared costs (env section keys); params: what the draw chose (JSON-safe), ``symbols`` a
    list of each symbol's own choices (noise, strength, expected oracle Sharpe)."""

    name: str
    kind: str  # "edge" | "no_edge"
    form: str
    symbols: tuple[str, ...]
    bars: tuple[Bars, ...]
    oracles: tuple[dict[str, np.ndarray], ...]
    env: dict[str, float]
    params: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.symbols)


def universe_draw(family: str, index: int, n_symbols: int, *, interval: str = "daily", size: str = "tiny",
                  layout: Layout | None = None) -> FamilyUniverse:
    """Universe ``index`` of ``family`` ("dev" | "heldout": the single draws' seed sets and rule) with
    ``n_symbols`` symbols of ``interval`` bars, ``layout`` (default: the size's for the interval)."""
    if n_symbols < 1:
        raise ValueError(f"n_symbols = {n_symbols}: a universe needs at least one symbol")
    if interval not in INTERVALS:
        raise ValueError(f"interval {interval!r}: expected one of {', '.join(INTERVALS)}")
    seed = seed_of(family, index)
    form = FORM[form_of(index)]
    lay = layout or LAYOUTS[size][interval]
    r_p = np.random.default_rng([seed, 0x0E1])
    u = float(r_p.random())
    p: dict[str, Any] = {"n_bars": lay.bars, **form.params(r_p, u, horizon_cap(lay.train))}
    target = loguniform(float(r_p.random()), *TARGET_SHARPE[interval])
    level = str(r_p.choice(list(COSTS)))
    env = {"capital": float(SCENARIO_ENV["capital"]), **COSTS[level]}
    bar_s = INTERVALS[interval]
    ts = syn._timestamps(lay.bars, bar_s, START)
    sb = sigma_bar(bar_s)
    rate = cost_rate(env, sb, 0.95 * env["capital"] / (syn.START_PRICE * 1.3 * syn.BASE_VOLUME))
    bpy = infer_bars_per_year(ts)
    start = min(WARMUP, lay.bars // 4)
    kind = "no_edge" if form.name == "no_edge" else "edge"
    names, bars, oracles, rows = [], [], [], []
    for j in range(n_symbols):
        sym = f"U{index:02d}S{j:02d}"
        got: Any = None
        for attempt in range(MAX_ATTEMPTS):
            r_n, r_z, r_vol, r_jump, r_lat = (np.random.default_rng(x) for x in
                                              np.random.SeedSequence([seed, 0x0E1, j, attempt]).spawn(5))
            noise_p = draw_noise_params(r_n)
            noise = simulate_noise(lay.bars, bar_s, ts, noise_p, r_z, r_vol, r_jump)
            lat = form.latents(r_lat, lay.bars, p)
            if kind == "no_edge":
                pl = form.plant(0.0, noise, lat, p, sb)
                this = (0.0, pl, oracle_sharpes(form, pl, p, rate, bpy, start), True, attempt, noise_p)
            else:
                this = (*calibrate(form, noise, lat, p, sb, rate, bpy, target, start), attempt, noise_p)
            if got is None or max(this[2].values()) > max(got[2].values()):
                got = this  # the best attempt is kept where none reaches the target (as single draws)
            if this[3]:
                got = this
                break
        s, pl, sh, reached, attempt, noise_p = got
        src = f"scorecard:universe({family}, {index}, {sym}, seed={seed})"
        b = bars_from_log_returns(pl.r, pl.sigma, ts, bar_s >= INTERVALS["daily"], seed * 4096 + j * 64 + attempt, src)
        if pl.volume_mult is not None:
            vol = np.maximum(1.0, np.rint(b.volume * pl.volume_mult))
            b = Bars(b.timestamps, b.open, b.high, b.low, b.close, vol, has_volume=True, source=b.source)
        names.append(sym)
        bars.append(b)
        oracles.append(form.oracles(pl.latent, p))
        best = max(sh, key=lambda k: sh[k])
        rows.append({"symbol": sym, "attempt": attempt, "reached": bool(reached), "noise": noise_p,
                     "noise_text": describe_noise(noise_p), "strength": s, "expected_oracle_sharpe": sh,
                     "expected_oracle_sharpe_best": sh[best], "best_oracle": best})
    params = {"family": family, "index": index, "seed": seed, "form": form.name, "kind": kind, "interval": interval,
              "bar_seconds": bar_s, "layout": {"bars": lay.bars, "train": lay.train, "val": lay.val, "folds": lay.folds},
              "costs": level, "env": env, "cost_rate_bps": rate * 1e4, "horizon": p.get(form.horizon_key) if form.horizon_key else None,
              "form_params": {k: v for k, v in p.items() if k != "n_bars"}, "target_sharpe": target if kind == "edge" else 0.0,
              "n_symbols": n_symbols, "symbols": rows}
    return FamilyUniverse(f"{family}_u{index:02d}_{form.name}", kind, form.name, tuple(names), tuple(bars), tuple(oracles),
                          env, params)


def write_universe(u: FamilyUniverse, directory: Path) -> Path:
    """One Parquet file a symbol (``<symbol>.parquet``: time, open, high, low, close, volume; exact float64) in ``directory``."""
    import pandas as pd

    directory.mkdir(parents=True, exist_ok=True)
    for sym, b in zip(u.symbols, u.bars):
        frame = pd.DataFrame({"time": pd.to_datetime(b.timestamps, utc=True), "open": b.open, "high": b.high, "low": b.low,
                              "close": b.close, "volume": b.volume})
        tmp = directory / f".{sym}.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.replace(directory / f"{sym}.parquet")
    return directory
