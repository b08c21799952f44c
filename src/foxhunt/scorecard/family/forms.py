"""The family's edge forms: what each draw plants on top of its noise, its latent state, its oracle
rules, and the calibration of its strength.

Conventions (all arrays [T] float64, one value a bar, index t):

* ``eps_t`` is the draw's noise (``family.noise``), ``sigma_t`` its conditional std, ``sigma_bar``
  the interval's base per-bar volatility. A form adds a *planted drift* ``d_t``: the expected log
  return of bar t given the latent state at bar t-1, so ``r_t = eps_t + d_t`` (mean reversion adds
  the deviation's increments, below).
* ``strength`` ``s`` is per bar, in sigma units: the planted drift per unit of the latent signal
  over the bar's sigma. An oracle exposure ``e_t`` (decided at bar t, in [-1, 1]) earns ``e_t r_{t+1}``.

Forms (``u`` = a unit-variance AR(1) latent ``markets.ar1``; ``theta`` in ``THRESHOLDS``; ``band(x, b)``
the hysteresis of a latent x: +1 once x > b, -1 once x < -b, held in between, 0 before the first
crossing, for b in ``BANDS``: with costs the persistent latents are best traded with a band, which
cuts the round trips a threshold rule makes each time x wanders around theta):

* ``next_bar``  ``d_{t+1} = s sigma_{t+1} sign(r_t)`` (as ``edge_daily``). Oracle ``sign(r_t)``. Latent: ``r``.
* ``drift``     a wandering drift: ``m`` AR(1) with persistence ``1 - 1/h`` (h = the horizon, bars),
  ``d_{t+1} = s sigma_{t+1} m_t``. Oracles ``sign(m_t) [|m_t| > theta]`` and ``band(m, b)_t``. Latent: ``m``.
* ``mean_revert`` log price = fair value (the noise's random walk) + deviation ``D_t = A sigma_bar u_t``
  (``u`` AR(1), persistence ``0.5^(1/half_life)``), ``r_t = eps_t + D_t - D_{t-1}``, so
  ``d_{t+1} = -s sigma_bar u_t`` with ``s = A (1 - phi)``. Oracles ``-sign(u_t) [|u_t| > theta]`` and
  ``-band(u, b)_t``. Latent: ``u``.
* ``vol_state`` a hidden calm / turbulent Markov state multiplies the volatility (observable through
  it); the drift's sign follows the state: ``d_{t+1} = s sigma_{t+1} c_t``, ``c_t = calm_sign`` when
  calm, ``-calm_sign`` when turbulent. Oracle ``c_t``. Latent: ``calm`` (1 calm, 0 turbulent).
* ``volume``    volume carries a latent shock ``w`` (AR(1); volume x exp(k w)); high-volume moves
  continue and low-volume moves reverse: ``d_{t+1} = s sigma_{t+1} sign(r_t) sign(w_t)``.
  Oracles ``sign(r_t) sign(w_t) [|w_t| > theta]``. Latents: ``r``, ``w``.
* ``regime``    the ``drift`` edge (short horizon h) gated by a hidden on/off Markov regime ``g``:
  ``d_{t+1} = s sigma_{t+1} g_t m_t``. Oracles ``g_t sign(m_t) [|m_t| > theta]`` and ``g_t band(m, b)_t``.
  Latents: ``g``, ``m``.
* ``no_edge``   nothing planted. Oracle flat.

Calibration: the strength is solved so that the best oracle rule's *expected* annualised Sharpe
after costs over the series equals a drawn target (``TARGET_SHARPE`` per interval): per bar the
expected P&L is ``e_t d_{t+1} - rate |e_t - e_{t-1}|`` and its variance ``e_t^2 var_{t+1} +
Var(e d)`` (``var`` the noise's variance: sigma^2, jumps, the deviation's innovations); the noise
realisation itself never enters, so the solve is exact in expectation and cheap (bisection in
log s; the sign-feedback forms re-solve their returns at each step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from foxhunt.scorecard.family.noise import Noise, sign_feedback, two_state
from foxhunt.scorecard.markets import ar1

FORMS = ("next_bar", "drift", "mean_revert", "vol_state", "volume", "regime", "no_edge")
EDGE_FORMS = FORMS[:-1]
THRESHOLDS = (0.0, 0.5, 1.0)
BANDS = (0.25, 0.5, 1.0)
H_MIN, H_MAX = 10, 10_000  # the wandering drift's horizon range, bars (capped by the training window)
S_MIN, S_MAX = 1e-4, 1.5  # strength search range, sigma units per bar
TARGET_SHARPE = {"minute": (5.0, 15.0), "five_minute": (4.0, 14.0), "hourly": (2.0, 12.0), "daily": (1.0, 6.0)}
"""The oracle's expected annualised Sharpe after costs, drawn log-uniform in this range per interval:
clearly above the noise of the validation windows (minute windows are the noisiest per year) and
not trivial."""


def loguniform(u: float, lo: float, hi: float) -> float:
    """The point a fraction ``u`` in [0, 1] of the way from lo to hi on a log scale (hi >= lo > 0)."""
    hi = max(hi, lo)
    return float(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))))


def horizon_cap(train: int) -> float:
    """The longest latent horizon a training window of ``train`` bars can show: a fifth of it."""
    return max(float(H_MIN), train / 5.0)


@dataclass
class Planted:
    """A form planted at one strength: r [T] log returns, sigma [T] conditional std (bars' ranges),
    drift [T] planted drift of bar t, var [T] variance of bar t's unpredictable part, latent
    {name: [T]}, volume_mult [T] or None (multiplies the bars' volume)."""

    r: np.ndarray
    sigma: np.ndarray
    drift: np.ndarray
    var: np.ndarray
    latent: dict[str, np.ndarray]
    volume_mult: np.ndarray | None = None


@dataclass(frozen=True)
class Form:
    """One edge form: params(rng, u, cap) -> dict; latents(rng, n, p) -> {name: [T]} (strength-free);
    plant(s, noise, latents, p, sigma_bar) -> Planted; oracles(latent, p) -> {rule: [T] exposure}."""

    name: str
    params: Callable[[np.random.Generator, float, float], dict[str, Any]]
    latents: Callable[[np.random.Generator, int, dict[str, Any]], dict[str, np.ndarray]]
    plant: Callable[[float, Noise, dict[str, np.ndarray], dict[str, Any], float], Planted]
    oracles: Callable[[dict[str, np.ndarray], dict[str, Any]], dict[str, np.ndarray]]
    horizon_key: str | None = None  # the params entry reported as the draw's horizon
    extra: dict[str, Any] = field(default_factory=dict)


def _lag(x: np.ndarray) -> np.ndarray:
    """[T] x_{t-1} (0 at t = 0)."""
    return np.concatenate([[0.0], x[:-1]])


def _gated_sign(x: np.ndarray, theta: float) -> np.ndarray:
    return np.sign(x) * (np.abs(x) > theta)


def band(x: np.ndarray, b: float) -> np.ndarray:
    """[T] hysteresis of x: +1 from the first bar with x > b, -1 from one with x < -b, held in
    between; 0 before the first crossing."""
    ev = np.where(x > b, 1.0, np.where(x < -b, -1.0, np.nan))
    last = np.maximum.accumulate(np.where(np.isnan(ev), -1, np.arange(x.shape[0])))
    return np.where(last >= 0, ev[np.maximum(last, 0)], 0.0)


def _latent_rules(x: np.ndarray, sign: float = 1.0, gate: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The threshold and band oracles of a persistent latent x (times sign, times gate)."""
    g = 1.0 if gate is None else gate
    out = {f"oracle_theta{th:g}": sign * g * _gated_sign(x, th) for th in THRESHOLDS}
    out.update({f"oracle_band{b:g}": sign * g * band(x, b) for b in BANDS})
    return out


def _plain(noise: Noise, drift_signal: np.ndarray, s: float, latent: dict[str, np.ndarray],
           vol_mult: np.ndarray | None = None) -> Planted:
    """r = eps + s sigma_t signal_{t-1}: the forms whose drift does not feed back on returns."""
    sigma, eps = noise.eps(vol_mult)
    drift = s * sigma * _lag(drift_signal)
    return Planted(eps + drift, sigma, drift, sigma**2 + noise.jump_var, latent)


# --------------------------------------------------------------------------- the forms
def _no_edge() -> Form:
    return Form("no_edge", lambda rng, u, cap: {},
                lambda rng, n, p: {},
                lambda s, noise, lat, p, sb: _plain(noise, np.zeros(noise.sigma.shape[0]), 0.0, {}),
                lambda lat, p: {"oracle_flat": np.zeros(p["n_bars"])})


def _next_bar() -> Form:
    def plant(s: float, noise: Noise, lat: dict[str, np.ndarray], p: dict[str, Any], sb: float) -> Planted:
        sigma, eps = noise.eps()
        r = sign_feedback(eps, s * sigma)
        drift = s * sigma * np.sign(_lag(r))
        return Planted(r, sigma, drift, sigma**2 + noise.jump_var, {"r": r})

    return Form("next_bar", lambda rng, u, cap: {"horizon": 1.0}, lambda rng, n, p: {}, plant,
                lambda lat, p: {"oracle": np.sign(lat["r"])}, "horizon")


def _drift() -> Form:
    def params(rng: np.random.Generator, u: float, cap: float) -> dict[str, Any]:
        return {"horizon": loguniform(u, H_MIN, min(H_MAX, cap))}

    return Form("drift", params,
                lambda rng, n, p: {"m": ar1(n, 1.0 - 1.0 / p["horizon"], rng)},
                lambda s, noise, lat, p, sb: _plain(noise, lat["m"], s, dict(lat)),
                lambda lat, p: _latent_rules(lat["m"]), "horizon")


def _mean_revert() -> Form:
    def params(rng: np.random.Generator, u: float, cap: float) -> dict[str, Any]:
        hl = loguniform(u, 3.0, min(300.0, cap))
        return {"horizon": hl, "half_life": hl, "phi": float(0.5 ** (1.0 / hl))}

    def plant(s: float, noise: Noise, lat: dict[str, np.ndarray], p: dict[str, Any], sb: float) -> Planted:
        sigma, eps = noise.eps()
        phi = p["phi"]
        amp = s / (1.0 - phi)  # deviation std, sigma_bar units
        dev = amp * sb * lat["u"]
        r = eps + dev - _lag(dev)
        drift = -s * sb * _lag(lat["u"])
        return Planted(r, sigma, drift, sigma**2 + noise.jump_var + (amp * sb) ** 2 * (1.0 - phi * phi), dict(lat))

    return Form("mean_revert", params, lambda rng, n, p: {"u": ar1(n, p["phi"], rng)}, plant,
                lambda lat, p: _latent_rules(lat["u"], sign=-1.0), "half_life")


def _vol_state() -> Form:
    def params(rng: np.random.Generator, u: float, cap: float) -> dict[str, Any]:
        calm_mean = loguniform(u, 20.0, min(2000.0, cap))
        p_calm = float(rng.uniform(0.4, 0.7))
        return {"horizon": calm_mean, "calm_mean_bars": calm_mean, "turbulent_mean_bars": calm_mean * (1 - p_calm) / p_calm,
                "vol_ratio": float(rng.uniform(1.5, 3.0)), "calm_sign": float(rng.choice([-1.0, 1.0]))}

    def latents(rng: np.random.Generator, n: int, p: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"calm": two_state(n, p["calm_mean_bars"], p["turbulent_mean_bars"], rng).astype(np.float64)}

    def direction(lat: dict[str, np.ndarray], p: dict[str, Any]) -> np.ndarray:
        return np.where(lat["calm"] > 0, p["calm_sign"], -p["calm_sign"])

    def plant(s: float, noise: Noise, lat: dict[str, np.ndarray], p: dict[str, Any], sb: float) -> Planted:
        calm = lat["calm"]
        f = float(np.mean(calm))
        lo = 1.0 / np.sqrt(f + (1.0 - f) * p["vol_ratio"] ** 2)  # mean variance multiplier 1 over the series
        mult = np.where(calm > 0, lo, lo * p["vol_ratio"])
        return _plain(noise, direction(lat, p), s, dict(lat), vol_mult=mult)

    return Form("vol_state", params, latents, plant, lambda lat, p: {"oracle": direction(lat, p)}, "calm_mean_bars")


def _volume() -> Form:
    def params(rng: np.random.Generator, u: float, cap: float) -> dict[str, Any]:
        phi = float(rng.uniform(0.0, 0.8))
        return {"horizon": 1.0 / (1.0 - phi), "volume_phi": phi, "volume_loading": float(rng.uniform(0.4, 1.0))}

    def plant(s: float, noise: Noise, lat: dict[str, np.ndarray], p: dict[str, Any], sb: float) -> Planted:
        sigma, eps = noise.eps()
        w = lat["w"]
        r = sign_feedback(eps, s * sigma * np.sign(_lag(w)))
        drift = s * sigma * np.sign(_lag(r)) * np.sign(_lag(w))
        return Planted(r, sigma, drift, sigma**2 + noise.jump_var, {"r": r, "w": w},
                       volume_mult=np.exp(p["volume_loading"] * w))

    return Form("volume", params, lambda rng, n, p: {"w": ar1(n, p["volume_phi"], rng)}, plant,
                lambda lat, p: {f"oracle_theta{th:g}": np.sign(lat["r"]) * _gated_sign(lat["w"], th) for th in THRESHOLDS},
                "horizon")


def _regime() -> Form:
    def params(rng: np.random.Generator, u: float, cap: float) -> dict[str, Any]:
        on = loguniform(u, 50.0, min(3000.0, cap))
        p_on = float(rng.uniform(0.25, 0.6))
        return {"horizon": loguniform(float(rng.random()), H_MIN, min(300.0, cap)), "on_mean_bars": on,
                "off_mean_bars": on * (1.0 - p_on) / p_on}

    def latents(rng: np.random.Generator, n: int, p: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"g": two_state(n, p["on_mean_bars"], p["off_mean_bars"], rng).astype(np.float64),
                "m": ar1(n, 1.0 - 1.0 / p["horizon"], rng)}

    return Form("regime", params, latents,
                lambda s, noise, lat, p, sb: _plain(noise, lat["g"] * lat["m"], s, dict(lat)),
                lambda lat, p: _latent_rules(lat["m"], gate=lat["g"]), "on_mean_bars")


FORM = {f.name: f for f in (_next_bar(), _drift(), _mean_revert(), _vol_state(), _volume(), _regime(), _no_edge())}
assert tuple(FORM) == ("next_bar", "drift", "mean_revert", "vol_state", "volume", "regime", "no_edge")


# --------------------------------------------------------------------------- calibration
def expected_sharpe(e: np.ndarray, pl: Planted, rate: float, bars_per_year: float, start: int = 1) -> float:
    """Expected annualised Sharpe after costs of exposures e [T] (decided at t, earning bar t+1)
    on ``pl`` from bar ``start`` (see the module docstring)."""
    ex = e[start - 1 : -1]
    pnl = ex[1:] * pl.drift[start + 1 :]
    cost = rate * np.abs(np.diff(ex))
    mean = float(np.mean(pnl - cost))
    var = float(np.mean(ex[1:] ** 2 * pl.var[start + 1 :]) + np.var(pnl))
    return mean / np.sqrt(var) * np.sqrt(bars_per_year) if var > 0 else 0.0


def oracle_sharpes(form: Form, pl: Planted, p: dict[str, Any], rate: float, bpy: float, start: int) -> dict[str, float]:
    return {k: expected_sharpe(v, pl, rate, bpy, start) for k, v in form.oracles(pl.latent, p).items()}


def calibrate(form: Form, noise: Noise, lat: dict[str, np.ndarray], p: dict[str, Any], sb: float, rate: float,
              bpy: float, target: float, start: int) -> tuple[float, Planted, dict[str, float], bool]:
    """The strength whose best oracle's expected Sharpe is ``target`` (bisection in log s on
    [S_MIN, S_MAX]; the expected Sharpe increases with s). Returns (s, planted, expected Sharpe per
    oracle rule, reached): ``reached`` False when even S_MAX falls short (the caller draws again)."""

    drawn: list[dict[str, np.ndarray]] = []  # the oracle rules of the drawn latent state, once computed

    def best(s: float) -> tuple[float, Planted, dict[str, float]]:
        pl = form.plant(s, noise, lat, p, sb)
        # The oracle rules read only the planted latent state. Where that is the drawn latent state
        # (the same arrays at every strength), they are computed once; where it holds the planted
        # returns (next_bar, volume), at every strength.
        if all(any(v is w for w in lat.values()) for v in pl.latent.values()):
            if not drawn:
                drawn.append(form.oracles(pl.latent, p))
            rules = drawn[0]
        else:
            rules = form.oracles(pl.latent, p)
        sh = {k: expected_sharpe(v, pl, rate, bpy, start) for k, v in rules.items()}
        return max(sh.values()), pl, sh

    top, pl, sh = best(S_MAX)
    if top < target:
        return S_MAX, pl, sh, False
    lo, hi = np.log(S_MIN), np.log(S_MAX)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if best(float(np.exp(mid)))[0] < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3:
            break
    s = float(np.exp(hi))
    _, pl, sh = best(s)
    return s, pl, sh, True
