"""A seeded, procedural family of markets: the scorecard's measure of generalisation.

The named scenarios (``scorecard.markets``) are few, and the learners' settings were tuned on
them. A *family draw* is a market nobody tuned on: each draw, deterministic in its seed, chooses an
edge form (``family.forms``: next-bar sign, a wandering drift, mean reversion, vol-state- and
volume-conditioned returns, an edge gated by a hidden regime, or none), its strength (solved so that
the oracle's expected annualised Sharpe after costs hits a drawn target), the bar interval (minute,
five-minute, hourly, daily), the cost level, and the noise (``family.noise``: GARCH or stochastic volatility,
Student-t tails, Poisson jumps). It returns a :class:`~foxhunt.scorecard.markets.Scenario` with the
draw's own env costs, its params, its latent arrays and its oracle rules, scored by the same
``run_scenario`` as the named scenarios.

THE RULE OF THE TWO SEED SETS: ``DEVELOPMENT`` draws may be used for anything, tuning included.
``HELD_OUT`` draws are for reporting only: no setting, default, threshold or design choice may ever
be chosen by looking at their scores. Their scores are reported, never optimised. (The sets are
disjoint integer ranges; a test asserts it.)

Stratification: draw ``i``'s form is ``PATTERN[i % 12]``. Any 12 consecutive draws (a rotation of
the pattern) therefore hold exactly 3 no-edge draws and every edge form at least once; the drift
form three times, its horizons spread over the thirds of the log horizon range. Everything else
varies with the seed.

Sizes (``LAYOUTS``): a draw's length and walk-forward folds come from the scorecard size and its
interval (expanding folds after the 303-bar feature warm-up and the config's purge):

=====  ==========================  ==========  =========  ========
size   interval                    bars        train      val x folds
=====  ==========================  ==========  =========  ========
tiny   all                         2,600       1,200      400 x 2
cpu    all                         12,000      6,000      1,500 x 3
gpu    minute, five-minute, hourly 1,000,000   400,000    100,000 x 5
gpu    daily                       60,000      30,000     8,000 x 3
=====  ==========================  ==========  =========  ========

The intraday ``gpu`` layout is what a user with two years of minute bars has, with the H200
configurations' own folds, so that a learner as good as the quant rule can pass abstention's bar
(an 80 K-bar held-back minute window: 3 SE = 7.7).

(daily series stop at ~60 K bars: business days from 2024 reach pandas' year 2262 near 62 K). Latent
horizons are capped at a fifth of the training window (``forms.horizon_cap``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from foxhunt.backtest.annualisation import infer_bars_per_year
from foxhunt.data import synthetic as syn
from foxhunt.data.bars import Bars
from foxhunt.features.spec import WARMUP
from foxhunt.scorecard.build import SCENARIO_ENV, Size
from foxhunt.scorecard.family.forms import BANDS, FORM, FORMS, TARGET_SHARPE, THRESHOLDS, calibrate, horizon_cap, loguniform, oracle_sharpes
from foxhunt.scorecard.family.noise import describe_noise, draw_noise_params, sigma_bar, simulate_noise
from foxhunt.scorecard.markets import Scenario, bars_from_log_returns
from foxhunt.backtest.quant_rules import cost_rate

# --------------------------------------------------------------------------- the two seed sets
DEVELOPMENT = range(1_000_000, 2_000_000)
"""Seeds of the development draws (draw i has seed DEVELOPMENT[i]): configurations may be tuned on them."""
HELD_OUT = range(7_000_000, 8_000_000)
"""Seeds of the held-out draws (draw i has seed HELD_OUT[i]): NO setting may ever be chosen on
them; their scores are reported, never optimised."""
FAMILIES = {"dev": DEVELOPMENT, "heldout": HELD_OUT}

# --------------------------------------------------------------------------- stratification
PATTERN = ("drift", "no_edge", "mean_revert", "vol_state", "drift", "no_edge",
           "regime", "volume", "drift", "no_edge", "next_bar", "mean_revert")
"""Draw i's edge form is PATTERN[i % 12] (see the module docstring)."""
assert sorted(set(PATTERN)) == sorted(FORMS) and PATTERN.count("no_edge") == 3

INTERVALS = {"minute": 60, "five_minute": 300, "hourly": 3_600, "daily": 86_400}
DRAWN_INTERVALS = ("minute", "hourly", "daily")
"""A draw picks one of these with its parameter generator; then half of the minute draws (an
independent uniform of the seed, so that every other parameter is drawn as before) become
five-minute draws."""
START = "2024-01-02T00:00:00Z"
MAX_ATTEMPTS = 24  # a draw whose target Sharpe is out of reach at the strength cap is drawn again

COSTS: dict[str, dict[str, float]] = {
    "low": {"cost_bps": 0.5, "spread_bps": 0.5, "impact_eta": 0.05},
    "medium": {"cost_bps": 1.0, "spread_bps": 1.0, "impact_eta": 0.1},  # = SCENARIO_ENV
    "high": {"cost_bps": 2.5, "spread_bps": 3.0, "impact_eta": 0.2},
}
"""Cost levels: commission and quoted spread in bps, square-root impact coefficient (capital as SCENARIO_ENV)."""


@dataclass(frozen=True)
class Layout:
    """A draw's length and expanding walk-forward folds: bars, train bars before the first
    validation window, validation bars a fold, folds."""

    bars: int
    train: int
    val: int
    folds: int


_TINY, _CPU = Layout(2_600, 1_200, 400, 2), Layout(12_000, 6_000, 1_500, 3)
_GPU = Layout(1_000_000, 400_000, 100_000, 5)
LAYOUTS: dict[str, dict[str, Layout]] = {
    "tiny": {"minute": _TINY, "five_minute": _TINY, "hourly": _TINY, "daily": _TINY},
    "cpu": {"minute": _CPU, "five_minute": _CPU, "hourly": _CPU, "daily": _CPU},
    "gpu": {"minute": _GPU, "five_minute": _GPU, "hourly": _GPU, "daily": Layout(60_000, 30_000, 8_000, 3)},
}


def seed_of(family: str, index: int) -> int:
    """The seed of draw ``index`` of ``family`` ("dev" | "heldout")."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: expected one of {', '.join(FAMILIES)}")
    return FAMILIES[family][index]


def form_of(index: int) -> str:
    return PATTERN[index % len(PATTERN)]


def horizon_stratum(index: int) -> int | None:
    """For a drift draw, which third of the log horizon range it takes (0, 1, 2); else None."""
    k = index % len(PATTERN)
    return PATTERN[:k].count("drift") if PATTERN[k] == "drift" else None


def size_for(size: Size, scenario: Scenario) -> Size:
    """The scorecard ``Size`` a family draw runs at: its layout's folds, the size's other settings."""
    lay = scenario.params["layout"]
    return replace(size, bars=lay["bars"], train=lay["train"], val=lay["val"], max_folds=lay["folds"],
                   daily_bars=None, daily_train=None, daily_val=None)


def draws(family: str, n: int, size: str = "cpu") -> list[Scenario]:
    """The first ``n`` draws of ``family`` ("dev" | "heldout") at scorecard size ``size``."""
    return [draw(family, i, size) for i in range(n)]


def draw(family: str, index: int, size: str = "cpu", layout: Layout | None = None) -> Scenario:
    """Draw ``index`` of ``family`` at scorecard size ``size`` ("tiny" | "cpu" | "gpu"); see the
    module docstring. Deterministic in (family, index, size). ``layout``: one length and fold layout
    for every interval instead of the size's (research runs between the sizes, e.g. bench/)."""
    if size not in LAYOUTS:
        raise ValueError(f"size {size!r}: expected one of {', '.join(LAYOUTS)}")
    seed = seed_of(family, index)
    form = FORM[form_of(index)]
    stratum = horizon_stratum(index)
    u0 = float(np.random.default_rng([seed, 0xF0]).random())
    u = (stratum + u0) / 3.0 if stratum is not None else u0
    best = None
    for attempt in range(MAX_ATTEMPTS):
        got = _attempt(family, index, size, seed, attempt, form, u, layout)
        if got.params["reached"]:
            return got
        best = got if best is None or got.params["expected_oracle_sharpe_best"] > best.params["expected_oracle_sharpe_best"] else best
    assert best is not None
    return best  # pragma: no cover - a target out of reach in every attempt (params["reached"] is False)


def _attempt(family: str, index: int, size: str, seed: int, attempt: int, form: Any, u: float,
             layout: Layout | None = None) -> Scenario:
    r_p, r_z, r_vol, r_jump, r_lat = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, attempt]).spawn(5))
    interval = str(r_p.choice(list(DRAWN_INTERVALS)))
    if interval == "minute" and np.random.default_rng([seed, attempt, 0x5F]).random() < 0.5:
        interval = "five_minute"
    bar_s = INTERVALS[interval]
    lay = layout or LAYOUTS[size][interval]
    n = lay.bars
    level = str(r_p.choice(list(COSTS)))
    env = {"capital": float(SCENARIO_ENV["capital"]), **COSTS[level]}
    noise_p = draw_noise_params(r_p)
    p: dict[str, Any] = {"n_bars": n, **form.params(r_p, u, horizon_cap(lay.train))}
    target = loguniform(float(r_p.random()), *TARGET_SHARPE[interval])
    ts = syn._timestamps(n, bar_s, START)
    noise = simulate_noise(n, bar_s, ts, noise_p, r_z, r_vol, r_jump)
    lat = form.latents(r_lat, n, p)
    sb = sigma_bar(bar_s)
    # a full position's share of a bar's volume: 95 % of the capital at START_PRICE against ~1.3 x BASE_VOLUME
    rate = cost_rate(env, sb, 0.95 * env["capital"] / (syn.START_PRICE * 1.3 * syn.BASE_VOLUME))
    bpy = infer_bars_per_year(ts)
    start = min(WARMUP, n // 4)
    if form.name == "no_edge":
        s, reached = 0.0, True
        pl = form.plant(0.0, noise, lat, p, sb)
        sh = oracle_sharpes(form, pl, p, rate, bpy, start)
    else:
        s, pl, sh, reached = calibrate(form, noise, lat, p, sb, rate, bpy, target, start)
    daily = bar_s >= INTERVALS["daily"]
    src = f"scorecard:family({family}, {index}, seed={seed}, size={size})"
    bars = bars_from_log_returns(pl.r, pl.sigma, ts, daily, seed * 64 + attempt, src)
    if pl.volume_mult is not None:
        vol = np.maximum(1.0, np.rint(bars.volume * pl.volume_mult))
        bars = Bars(bars.timestamps, bars.open, bars.high, bars.low, bars.close, vol, has_volume=True, source=bars.source)
    oracles = form.oracles(pl.latent, p)
    best_rule = max(sh, key=lambda k: sh[k])
    horizon = p.get(form.horizon_key) if form.horizon_key else None
    kind = "no_edge" if form.name == "no_edge" else "edge"
    params = {
        "family": family, "index": index, "seed": seed, "attempt": attempt, "size": size, "form": form.name, "kind": kind,
        "interval": interval, "bar_seconds": bar_s, "n_bars": n, "layout": {"bars": lay.bars, "train": lay.train, "val": lay.val, "folds": lay.folds},
        "costs": level, "env": env, "cost_rate_bps": rate * 1e4, "noise": noise_p, "noise_text": describe_noise(noise_p),
        "horizon": horizon, "form_params": {k: v for k, v in p.items() if k != "n_bars"},
        "strength": s, "strength_unit": "planted drift per unit latent signal, sigma per bar",
        "sigma_bar": sb, "target_sharpe": target if kind == "edge" else 0.0, "reached": bool(reached),
        "expected_oracle_sharpe": sh, "expected_oracle_sharpe_best": sh[best_rule], "best_oracle": best_rule,
        "thresholds": list(THRESHOLDS) if len(oracles) > 1 else [],
        "bands": list(BANDS) if any(k.startswith("oracle_band") for k in oracles) else [],
    }
    hz = f", horizon {horizon:,.0f} bars" if horizon is not None and form.name != "next_bar" else ""
    desc = (f"family {family} #{index}: {form.name} edge{hz}, strength {s:.3g} sigma, {interval} bars, {level} costs "
            f"({rate * 1e4:.2f} bps a unit), {describe_noise(noise_p)}; oracle's expected Sharpe {sh[best_rule]:+.1f}"
            if kind == "edge" else
            f"family {family} #{index}: no edge, {interval} bars, {level} costs, {describe_noise(noise_p)}")
    return Scenario(f"{family}{index:02d}_{form.name}", desc, bars, oracles=oracles, kind=kind, env=env, params=params,
                    family=family, index=index, seed=seed, latent=pl.latent)
