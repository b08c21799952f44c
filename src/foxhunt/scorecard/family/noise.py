"""The family's noise: conditional volatility, fat tails and jumps, plus two latent building blocks
(a two-state Markov chain and the sign-feedback recursion of next-bar edges).

A draw's noise is ``eps_t = sigma_t * z_t + J_t`` (log returns, one per bar):

* ``sigma_t = sigma_bar * sqrt(h_t) * s(tod_t)`` [T]: ``sigma_bar`` the per-bar volatility for
  ``ANNUAL_VOL`` a year (``foxhunt.data.synthetic``'s convention: 252 bars a year for daily bars,
  24/7 otherwise), ``s`` the synthetic market's intraday U-shape (1 for daily bars) and ``h`` the
  variance state, mean ~1:
    - ``garch``: GARCH(1,1) on the standardised innovations, ``h_t = (1 - a - b) + (a z_{t-1}^2 + b) h_{t-1}``
      (``h_0 = 1``), persistence ``a + b < 1``;
    - ``sv``: stochastic volatility, ``log h_t = x_t - sd^2 / 2`` with ``x`` a stationary AR(1)
      of persistence ``phi`` and standard deviation ``sd`` (so E[h] = 1).
* ``z_t`` [T]: Student-t(df) scaled to unit variance (df > 2).
* ``J_t`` [T]: Poisson jumps: ``Poisson(rate)`` jumps a bar, each N(0, (scale * sigma_bar)^2).

Everything is float64 and deterministic in the generator passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from foxhunt.data import synthetic as syn
from foxhunt.scorecard.markets import ar1

DAY = 86_400


def bars_per_year_nominal(bar_seconds: int) -> float:
    """Bars a year of ``synthetic``'s volatility convention (252 daily bars; 24/7 intraday bars)."""
    return 252.0 if bar_seconds >= DAY else 365.25 * DAY / bar_seconds


def sigma_bar(bar_seconds: int) -> float:
    """Per-bar log-return volatility for ``syn.ANNUAL_VOL`` a year."""
    return float(syn.ANNUAL_VOL / np.sqrt(bars_per_year_nominal(bar_seconds)))


def draw_noise_params(rng: np.random.Generator) -> dict[str, Any]:
    """Noise parameters of one draw (JSON-safe scalars): the volatility model, tails and jumps."""
    p: dict[str, Any] = {"vol_model": "garch" if rng.random() < 0.5 else "sv"}
    if p["vol_model"] == "garch":
        persistence = rng.uniform(0.95, 0.99)
        p["garch_alpha"] = float(rng.uniform(0.03, 0.08))
        p["garch_beta"] = float(persistence - p["garch_alpha"])
    else:
        p["sv_phi"] = float(rng.uniform(0.97, 0.998))
        p["sv_sd"] = float(rng.uniform(0.2, 0.6))
    p["df"] = float(np.exp(rng.uniform(np.log(3.5), np.log(30.0))))
    jumps = rng.random() < 2.0 / 3.0
    p["jump_rate"] = float(np.exp(rng.uniform(np.log(1e-4), np.log(2e-3)))) if jumps else 0.0
    p["jump_scale"] = float(rng.uniform(3.0, 8.0)) if jumps else 0.0
    return p


def describe_noise(p: dict[str, Any]) -> str:
    vol = (f"GARCH({p['garch_alpha']:.3f}, {p['garch_beta']:.3f})" if p["vol_model"] == "garch"
           else f"SV(phi {p['sv_phi']:.3f}, sd {p['sv_sd']:.2f})")
    jumps = f", jumps {p['jump_rate'] * 1e3:.2f}/1k bars x {p['jump_scale']:.1f} sigma" if p["jump_rate"] > 0 else ""
    return f"{vol}, t({p['df']:.1f}){jumps}"


@dataclass(frozen=True)
class Noise:
    """sigma [T] conditional std (no jumps), z [T] unit-variance innovations, jump [T] jump part,
    jump_var: variance of a bar's jump part (rate * (scale * sigma_bar)^2)."""

    sigma: np.ndarray
    z: np.ndarray
    jump: np.ndarray
    jump_var: float

    def eps(self, vol_mult: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(sigma [T], eps [T]) with the volatility optionally multiplied by ``vol_mult`` [T]."""
        sigma = self.sigma if vol_mult is None else self.sigma * vol_mult
        return sigma, sigma * self.z + self.jump


def simulate_noise(n: int, bar_seconds: int, timestamps: np.ndarray, p: dict[str, Any],
                   rng_z: np.random.Generator, rng_vol: np.random.Generator, rng_jump: np.random.Generator) -> Noise:
    """The noise of ``n`` bars under parameters ``p`` (see the module docstring)."""
    df = float(p["df"])
    z = rng_z.standard_t(df, n) * np.sqrt((df - 2.0) / df)
    if p["vol_model"] == "garch":
        a_, b_ = float(p["garch_alpha"]), float(p["garch_beta"])
        a = np.empty(n)
        a[0] = 0.0
        a[1:] = a_ * z[:-1] ** 2 + b_
        b = np.full(n, 1.0 - a_ - b_)
        b[0] = 1.0
        h = syn.affine_scan(a, b)
    else:
        sd = float(p["sv_sd"])
        h = np.exp(sd * ar1(n, float(p["sv_phi"]), rng_vol) - 0.5 * sd * sd)
    s_vol, _ = syn._seasonality(timestamps, bar_seconds >= DAY)
    sb = sigma_bar(bar_seconds)
    sigma = sb * np.sqrt(h) * s_vol
    rate, scale = float(p["jump_rate"]), float(p["jump_scale"])
    jump = np.zeros(n)
    if rate > 0:
        k = rng_jump.poisson(rate, n)
        hit = np.nonzero(k)[0]
        jump[hit] = rng_jump.standard_normal(hit.shape[0]) * np.sqrt(k[hit]) * (scale * sb)
    return Noise(sigma, z, jump, rate * (scale * sb) ** 2)


def two_state(n: int, mean_a: float, mean_b: float, rng: np.random.Generator) -> np.ndarray:
    """[T] int8 path of a two-state Markov chain (states 1 = "a", 0 = "b") with geometric stays of
    mean ``mean_a`` and ``mean_b`` bars (>= 1), started from its stationary law."""
    first = 1 if rng.random() < mean_a / (mean_a + mean_b) else 0
    lengths: list[np.ndarray] = []
    total = 0
    while total < n:
        m = int(n / min(mean_a, mean_b)) // 2 + 16
        la = rng.geometric(1.0 / max(mean_a, 1.0), m)
        lb = rng.geometric(1.0 / max(mean_b, 1.0), m)
        pair = np.stack([la, lb], 1) if first else np.stack([lb, la], 1)
        lengths.append(pair.reshape(-1))
        total += int(pair.sum())
    seg = np.concatenate(lengths)
    states = np.resize(np.array([first, 1 - first], np.int8), seg.shape[0])
    return np.repeat(states, seg)[:n].astype(np.int8)


def sign_feedback(base: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[T] r with ``r_t = base_t + k_t * sign(r_{t-1})`` (``sign(r_{-1}) = 0``), exactly.

    A causal system solved by iterating "returns from the current signs, signs from the returns" to
    its fixed point (as ``synthetic._returns``): a sign can change only where |base| < |k|, and each
    pass settles at least one more bar, so a handful of vectorised passes give the sequential answer;
    a plain loop takes over if a pathological chain is very long."""
    n = base.shape[0]
    signs = np.zeros(n)
    for _ in range(200):
        r = base + k * signs
        new = np.concatenate([[0.0], np.sign(r[:-1])])
        if np.array_equal(new, signs):
            return r
        signs = new
    r = np.empty(n)  # pragma: no cover - the fixed point settles long before
    prev = 0.0
    for t in range(n):
        r[t] = base[t] + k[t] * prev
        prev = float(np.sign(r[t]))
    return r
