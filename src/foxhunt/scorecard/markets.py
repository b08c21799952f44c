"""Scorecard markets: synthetic scenarios whose best policy is known, and the real sample series.

Each generator returns a :class:`Scenario`: the bars, optional extra causal feature columns
(appended after the 51 standard features), and the **oracle rules** the generator knows: exposure
arrays ``[T]`` in {-1, 0, +1} where ``exposure[t]`` is the position decided at bar ``t`` (after
seeing bar t's close), filled at bar t+1's open and held from then on (ENV_SPEC: fills are never on
the decision bar). The scorecard backtests every rule on each validation window with the env's
costs, next to flat and buy-and-hold, and takes the best as the reference ("best achievable").

All synthetic scenarios start from the GARCH(1,1)-t martingale of ``foxhunt.data.synthetic``
(``simulate(regimes=False)``: log return ``eps_t = sigma_t z_t``) and plant one thing on top:

* ``no_edge``   minute bars, nothing planted. Oracle: flat (stay out; buy-and-hold is also fair).
* ``edge_daily`` daily bars, ``synthetic``'s planted next-bar edge (``signal``): the next bar's
  drift is ``signal * sigma * sign(previous return)``. Oracle: ``sign(r_t)``.
* ``edge_minute`` minute bars, an observable AR(1) signal ``x`` (extra feature ``signal_x``,
  persistence ``phi``, unit variance) with ``r_{t+1} += s * sigma_{t+1} * x_t``. The per-bar edge is
  below a round trip's cost, so trading it on every bar loses; the rule pays only when entered
  selectively and held. Oracle rules: ``sign(x_t) * [|x_t| > theta]`` for a grid of thresholds.
* ``regime``    daily bars, a hidden two-state Markov drift ``+-d * sigma_bar`` per bar lasting
  ``MEAN_REGIME_BARS`` bars on average. Oracle: the sign of the current hidden drift.
* ``mean_revert`` daily bars, log price = anchor (a slow random walk) + OU deviation ``D`` with
  pull ``kappa`` per bar. Oracle rules: ``-sign(D_t) * [|D_t| > theta * sd(D)]``.
* ``leak``      daily martingale plus an extra feature ``leak_next_return`` = the next bar's log
  return (a look-ahead bug on purpose). Oracle: ``sign(leak)``.
* ``sp500`` / ``nasdaq``: the built-in daily index series; no oracle (flat and buy-and-hold only).

Daily volume is in shares at a constant *notional* (``constant_notional_volume``): over tens of thousands
of daily bars a drifting price wanders by orders of magnitude (the regime series fell to 1e-5 of its
start), and share volume drawn around a fixed count would leave the account's orders at thousands
of times a bar's volume, filled over many bars by the participation limit: every daily reference
and agent would be scored on a broken execution, not on its decisions. (Minute series, two years
long, stay within tens of percent of their start and keep the generator's volume.)

Every generator is deterministic in (n_bars, seed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from foxhunt.data import synthetic as syn
from foxhunt.data.bars import Bars

MINUTE, HOUR, DAY = 60, 3_600, 86_400


@dataclass(frozen=True)
class Scenario:
    """One scorecard market.

    bars: T bars. extra: feature name -> [T] float64 causal column (row t uses information
    available at bar t's close; the leak scenario breaks this on purpose). oracles: rule name ->
    [T] float64 exposure in [-1, 1] decided at bar t.

    Procedural draws (``foxhunt.scorecard.family``) also carry: env, the draw's own costs (env
    section keys such as cost_bps, spread_bps, impact_eta, capital; None: the scorecard's
    ``SCENARIO_ENV``); params, what the draw chose (JSON-safe); family ("dev" | "heldout"), index
    and seed; latent, the hidden state arrays [T] its oracles are computed from.
    """

    name: str
    description: str
    bars: Bars
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    oracles: dict[str, np.ndarray] = field(default_factory=dict)
    synthetic: bool = True
    kind: str = "edge"  # "no_edge" | "edge" | "minute_edge" | "real"
    env: dict[str, float] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    family: str | None = None
    index: int | None = None
    seed: int | None = None
    latent: dict[str, np.ndarray] = field(default_factory=dict)


def _noise(n: int, seed: int, bar_seconds: int) -> syn.SyntheticMarket:
    """The GARCH-t martingale: sigma [T] and eps = log_return [T] (= sigma * z exactly)."""
    return syn.simulate(n, seed, bar_seconds, regimes=False)


def bars_from_log_returns(r: np.ndarray, sigma: np.ndarray, timestamps: np.ndarray, daily: bool,
                          seed: int, source: str) -> Bars:
    """OHLCV bars whose closes follow the log returns ``r`` [T], as ``synthetic.simulate`` builds them.

    sigma: [T] per-bar std (sets the intrabar range and the overnight gap of daily bars); volume
    rises with |r| / sigma as in the synthetic market. The close-to-close log returns equal ``r``.
    """
    n = r.shape[0]
    r_gap, r_path, r_vol = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 99]).spawn(3))
    log_close = np.log(syn.START_PRICE) + np.cumsum(r)
    log_prev = np.concatenate([[np.log(syn.START_PRICE)], log_close[:-1]])
    gap = r_gap.standard_normal(n) * (syn.DAILY_GAP * sigma) if daily else np.zeros(n)
    o, hi, lo, c = syn._ohlc(log_prev + gap, log_close, sigma, r_path)
    scale = np.median(sigma)
    noise = np.exp(r_vol.standard_normal(n) * 0.4 - 0.08)
    volume = np.maximum(1.0, np.rint(syn.BASE_VOLUME * (0.5 + np.abs(r) / scale) * noise))
    bars = Bars(timestamps, o, hi, lo, c, volume, has_volume=True, source=source)
    return constant_notional_volume(bars) if daily else bars


def constant_notional_volume(bars: Bars) -> Bars:
    """``bars`` with volume × START_PRICE / close: the notional a bar trades stays at its starting
    level whatever the price does (as share counts follow splits in real data), so the account's
    orders are the same fraction of a bar's volume at every price."""
    vol = np.maximum(1.0, np.rint(bars.volume * (syn.START_PRICE / bars.close)))
    return Bars(bars.timestamps, bars.open, bars.high, bars.low, bars.close, vol, has_volume=bars.has_volume,
                source=bars.source + "+notional-volume")


def no_edge(n: int, seed: int = 11) -> Scenario:
    m = _noise(n, seed, MINUTE)
    flat = np.zeros(n)
    return Scenario("no_edge", "minute bars, GARCH-t martingale: nothing pays after costs; best is flat or hold",
                    m.bars, oracles={"oracle_flat": flat}, kind="no_edge")


def edge_daily(n: int, seed: int = 12, signal: float = 0.25) -> Scenario:
    m = syn.simulate(n, seed, DAY, signal=signal, regimes=False)
    rule = np.sign(m.log_return)  # decided at t from r_t; the drift of bar t+1 leans this way
    return Scenario("edge_daily", f"daily bars, planted next-bar edge: drift {signal} sigma x sign(previous return)",
                    constant_notional_volume(m.bars), oracles={"oracle": rule})


def ar1(n: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    """[T] stationary AR(1) with unit variance: x_t = phi x_{t-1} + sqrt(1 - phi^2) e_t."""
    e = rng.standard_normal(n) * np.sqrt(1.0 - phi * phi)
    e[0] = rng.standard_normal()
    a = np.full(n, phi)
    a[0] = 0.0
    return syn.affine_scan(a, e)


THRESHOLDS = (0.0, 0.5, 1.0, 1.5, 2.0)


def edge_minute(n: int, seed: int = 13, strength: float = 0.2, phi: float = 0.9) -> Scenario:
    base = _noise(n, seed, MINUTE)
    x = ar1(n, phi, np.random.default_rng([seed, 1]))
    drift = np.zeros(n)
    drift[1:] = strength * base.sigma[1:] * x[:-1]  # x_t sets bar t+1's drift
    r = base.log_return + drift
    bars = bars_from_log_returns(r, base.sigma, base.bars.timestamps, False, seed, f"scorecard:edge_minute(n={n}, seed={seed})")
    oracles = {f"oracle_theta{th:g}": np.sign(x) * (np.abs(x) > th) for th in THRESHOLDS}
    return Scenario("edge_minute", f"minute bars, AR(1) signal (phi {phi}) drift {strength} sigma x_t: per-bar edge below a round trip's cost",
                    bars, extra={"signal_x": x}, oracles=oracles, kind="minute_edge")


REGIME_BARS = 400


def regime(n: int, seed: int = 14, drift: float = 0.12, mean_bars: int = REGIME_BARS) -> Scenario:
    base = _noise(n, seed, DAY)
    rng = np.random.default_rng([seed, 2])
    switches = rng.random(n) < 1.0 / mean_bars
    state = np.where(np.cumsum(switches) % 2 == 0, 1.0, -1.0) * (1.0 if rng.random() < 0.5 else -1.0)
    sigma_bar = syn.ANNUAL_VOL / np.sqrt(252.0)
    r = base.log_return + drift * sigma_bar * state
    bars = bars_from_log_returns(r, base.sigma, base.bars.timestamps, True, seed, f"scorecard:regime(n={n}, seed={seed})")
    return Scenario("regime", f"daily bars, hidden up/down drift +-{drift} sigma a bar, ~{mean_bars} bars a regime",
                    bars, oracles={"oracle": state.copy()})


def intraday_drift(n: int, seed: int = 17, drift: float = 0.08, mean_bars: int = 1_500,
                   bar_seconds: int = MINUTE) -> Scenario:
    """Intraday bars (minute by default) whose drift ``+-drift * sigma_t`` keeps its sign for ~``mean_bars``
    bars (a hidden two-state Markov chain): an edge a momentum rule takes over hundreds of bars while
    each bar's share of it (``drift`` sigma) is far below a round trip's cost. Not a named scorecard
    scenario: the tests' and probes' market for ``env.decision_interval`` (a decision every bar sees a
    tiny edge against its cost; one every k bars sees k times more). Oracle: the hidden drift's sign."""
    base = _noise(n, seed, bar_seconds)
    rng = np.random.default_rng([seed, 4])
    switches = rng.random(n) < 1.0 / mean_bars
    state = np.where(np.cumsum(switches) % 2 == 0, 1.0, -1.0) * (1.0 if rng.random() < 0.5 else -1.0)
    r = base.log_return + drift * base.sigma * state
    src = f"scorecard:intraday_drift(n={n}, seed={seed}, drift={drift}, mean_bars={mean_bars}, bar_seconds={bar_seconds})"
    bars = bars_from_log_returns(r, base.sigma, base.bars.timestamps, False, seed, src)
    return Scenario("intraday_drift", f"{bar_seconds // 60}-minute bars, hidden up/down drift +-{drift} sigma a bar, "
                    f"~{mean_bars} bars a regime", bars, oracles={"oracle": state.copy()})


def regime_filter(r: np.ndarray, sigma: np.ndarray, drift: float, switch: float) -> np.ndarray:
    """[T] P(next bar's drift is +drift | log returns r[0..t]): the two-state forward (Wonham/Hamilton)
    filter with the generator's parameters (drift per bar, switch probability per bar, the bars'
    GARCH sigma, Gaussian likelihoods). Its sign is the best *causal* rule the generator knows of:
    a policy that sees only past prices cannot beat it by much, so the gap between the hidden-state
    oracle and this filter is the price of not seeing the regime (docs/LEARNING.md computes it
    close to close; it is not a scorecard reference)."""
    p = 0.5
    out = np.empty(r.shape[0])
    for t in range(r.shape[0]):
        up = np.exp(-0.5 * ((r[t] - drift) / sigma[t]) ** 2)
        down = np.exp(-0.5 * ((r[t] + drift) / sigma[t]) ** 2)
        p = p * up / (p * up + (1.0 - p) * down)  # posterior of bar t's state
        p = p * (1.0 - switch) + (1.0 - p) * switch  # the next bar's state
        out[t] = p
    return out


def mean_revert(n: int, seed: int = 15, kappa: float = 0.05, anchor_step: float = 0.1) -> Scenario:
    base = _noise(n, seed, DAY)
    sigma_bar = syn.ANNUAL_VOL / np.sqrt(252.0)
    a = np.full(n, 1.0 - kappa)
    a[0] = 0.0
    dev = syn.affine_scan(a, base.log_return)  # D_t = (1 - kappa) D_{t-1} + eps_t
    anchor = np.cumsum(np.random.default_rng([seed, 3]).standard_normal(n) * anchor_step * sigma_bar)
    level = anchor + dev
    r = np.diff(np.concatenate([[0.0], level]))
    bars = bars_from_log_returns(r, base.sigma, base.bars.timestamps, True, seed, f"scorecard:mean_revert(n={n}, seed={seed})")
    sd = float(np.std(dev))
    oracles = {f"oracle_theta{th:g}": -np.sign(dev) * (np.abs(dev) > th * sd) for th in (0.0, 0.5, 1.0)}
    return Scenario("mean_revert", f"daily bars, OU deviation (pull {kappa} a bar) around a slow random-walk fair value",
                    bars, oracles=oracles)


def leak(n: int, seed: int = 16) -> Scenario:
    m = _noise(n, seed, DAY)
    nxt = np.zeros(n)
    nxt[:-1] = m.log_return[1:]
    return Scenario("leak", "daily martingale plus a feature equal to the next bar's log return (a look-ahead leak)",
                    constant_notional_volume(m.bars), extra={"leak_next_return": nxt}, oracles={"oracle": np.sign(nxt)})


def real(name: str) -> Callable[[int, int], Scenario]:
    def make(n: int, seed: int = 0) -> Scenario:
        from foxhunt.data.samples import SAMPLES, load_sample

        bars = load_sample(name)
        return Scenario(name, SAMPLES[name], bars, synthetic=False, kind="real")

    return make


GENERATORS: dict[str, Callable[..., Scenario]] = {
    "no_edge": no_edge,
    "edge_daily": edge_daily,
    "edge_minute": edge_minute,
    "regime": regime,
    "mean_revert": mean_revert,
    "leak": leak,
    "sp500": real("sp500"),
    "nasdaq": real("nasdaq"),
}
SCENARIOS = tuple(GENERATORS)
SPACING = {name: (MINUTE if name in ("no_edge", "edge_minute") else DAY) for name in SCENARIOS}
"""Bar spacing of each scenario, seconds (known before generating it)."""


def make_scenario(name: str, n_bars: int) -> Scenario:
    """The named scenario with ``n_bars`` bars (the real series keep their own length)."""
    return GENERATORS[name](n_bars)
