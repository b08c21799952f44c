"""Triton device functions of the training env step that the backtest kernel does not compute.

Triple barrier, reward shaping (return / pnl / DSR base, barrier scale, risk penalty, diversity ring
entropy, curiosity clamp) and the auto-reset start draw. Each function is the elementwise twin of a
torch function in ``foxhunt.env`` (named in its docstring) over [BLOCK] register vectors, one lane
per env, with the same float32 operation order: the kernel is launched with
``enable_fp_fusion=False`` and uses ``div_rn`` / ``sqrt_rn`` (IEEE, as torch).

Transcendentals follow the torch device they must equal:
* compiled for CUDA (``LIBDEVICE``): ``log2`` and ``pow`` are libdevice's ``__nv_log2f`` /
  ``__nv_powf``, the functions torch's CUDA kernels call, so the results are the same bits;
* interpreted (CPU): ``tl.log2`` (numpy) and ``v·sqrt(v)`` for ``v^1.5`` (libdevice does not run
  in the interpreter); torch's CPU kernels use SLEEF, so these may differ by an ulp. ``log2`` only
  feeds the entropy threshold test, whose values (counts of a 100-slot ring) are at least 7.7e-5
  away from the thresholds tested unless exact (dyadic); ``pow`` only feeds the DSR reward output.
* ``counts / 100``: torch's CUDA division by a host scalar multiplies by its float32 reciprocal,
  its CPU division divides (``RECIP_DIV`` picks which).

This module is part of the ``foxhunt.kernels`` leaf: it imports nothing of ours.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from foxhunt.kernels.rules.env import sign

DSR_VAR_FLOOR = tl.constexpr(1e-12)
"""reward.DSR_VAR_FLOOR: the DSR variance below which D is 0."""
MODE_RETURN = tl.constexpr(0)
MODE_PNL = tl.constexpr(1)
MODE_DSR = tl.constexpr(2)
REWARD_MODES = {"return": 0, "pnl": 1, "dsr": 2}
"""reward_mode name → the kernel's MODE constexpr."""


@triton.jit
def update_barrier(active, side, upper, lower, expiry, opened, q2, entry2, high1, low1, t1,
                   profit_frac, stop_frac, max_holding):
    """execution.update_barrier: set on open (not checked this step), check an earlier barrier on
    bar t+1 (the stop wins ties), expire at t+1 ≥ expiry, deactivate on a hit or on going flat.

    Returns (active, upper, lower, expiry, side, hit, label); label int32 −1 stop, 0 time, +1 profit.
    """
    flat = q2 == 0
    check = active & (opened == 0) & (flat == 0)
    long = side > 0
    touch_up = high1 >= upper
    touch_lo = low1 <= lower
    stop = tl.where(long, touch_lo, touch_up)
    profit = (stop == 0) & tl.where(long, touch_up, touch_lo)
    timed = (stop == 0) & (profit == 0) & (t1 >= expiry)
    hit = check & (stop | profit | timed)
    label = tl.where(hit & stop, -1, tl.where(hit & profit, 1, 0))
    new_side = sign(q2)
    new_long = new_side > 0
    new_up = tl.where(new_long, entry2 * (1.0 + profit_frac), entry2 * (1.0 + stop_frac))
    new_lo = tl.where(new_long, entry2 * (1.0 - stop_frac), entry2 * (1.0 - profit_frac))
    active2 = opened | (active & (hit == 0) & (flat == 0))
    upper2 = tl.where(opened, new_up, upper)
    lower2 = tl.where(opened, new_lo, lower)
    expiry2 = tl.where(opened, t1 + max_holding, expiry)
    side2 = tl.where(opened, new_side, side)
    return active2, upper2, lower2, expiry2, side2, hit, label


@triton.jit
def pow_1_5(v, LIBDEVICE: tl.constexpr):
    """v^1.5 as torch's ``pow(v, 1.5)``: libdevice powf when compiled, v·sqrt(v) interpreted."""
    if LIBDEVICE:
        r = libdevice.pow(v, 1.5)
    else:
        r = v * tl.sqrt_rn(v)
    return r


@triton.jit
def base_reward(pnl, equity, capital, a, b, dsr_eta, dsr_clip, MODE: tl.constexpr, LIBDEVICE: tl.constexpr):
    """reward.base_reward: ΔE/E (return), ΔE/capital (pnl), or the clamped differential Sharpe
    ratio of R = ΔE/E (dsr). Returns (base, A', B'); the moments change only in DSR mode."""
    if MODE == MODE_PNL:
        base = tl.div_rn(pnl, capital)
        a2 = a
        b2 = b
    elif MODE == MODE_RETURN:
        base = tl.div_rn(pnl, equity)
        a2 = a
        b2 = b
    else:
        r = tl.div_rn(pnl, equity)
        da = r - a
        db = r * r - b
        var = b - a * a
        ok = var > DSR_VAR_FLOOR
        d = tl.div_rn(b * da - 0.5 * a * db, pow_1_5(tl.where(ok, var, 1.0), LIBDEVICE))
        d = tl.where(ok, d, 0.0)
        base = tl.maximum(tl.minimum(d, dsr_clip), -dsr_clip)
        a2 = a + dsr_eta * da
        b2 = b + dsr_eta * db
    return base, a2, b2


@triton.jit
def barrier_multiplier(hit, label, profit_scale, stop_scale):
    """reward.barrier_multiplier: 1 + the profit / stop scale of a hit on this step (1 otherwise)."""
    scale = tl.where(hit & (label > 0), profit_scale, 0.0)
    scale = tl.where(hit & (label < 0), stop_scale, scale)
    return 1.0 + scale


@triton.jit
def risk_penalty(q2, close1, equity1, capital, bust_level, risk_weight, risk_threshold):
    """reward.risk_penalty: risk_weight · max(0, |q·C_{t+1}|/E' − threshold), E' ≥ max(bust level, 1e-6·capital)."""
    eq = tl.maximum(equity1, tl.maximum(bust_level, capital * 1e-6))
    expo = tl.div_rn(tl.abs(q2 * close1), eq)
    return risk_weight * tl.maximum(expo - risk_threshold, 0.0)


@triton.jit
def _p_log2_p(count, WINDOW: tl.constexpr, RECIP_DIV: tl.constexpr, LIBDEVICE: tl.constexpr):
    """One term p·log2 p of the ring entropy, p = count / WINDOW (0 when p = 0)."""
    if RECIP_DIV:
        p = count * (1.0 / WINDOW)
    else:
        p = tl.div_rn(count, WINDOW * 1.0)
    safe = tl.where(p > 0, p, 1.0)
    if LIBDEVICE:
        lg = libdevice.log2(safe)
    else:
        lg = tl.log2(safe)
    return tl.where(p > 0, p * lg, 0.0)


@triton.jit
def diversity(cat, old, rc0, rc1, rc2, fill, head, threshold, penalty,
              WINDOW: tl.constexpr, RECIP_DIV: tl.constexpr, LIBDEVICE: tl.constexpr):
    """reward.diversity: push category ``cat`` into the ring whose head slot holds ``old`` (evicted
    when the ring is full); the penalty applies when the full ring's entropy is below the threshold.

    Returns (counts c0, c1, c2, fill, head, penalty).
    """
    full_before = fill >= WINDOW
    c0 = (rc0 + (cat == 0).to(tl.float32)) - ((old == 0) & full_before).to(tl.float32)
    c1 = (rc1 + (cat == 1).to(tl.float32)) - ((old == 1) & full_before).to(tl.float32)
    c2 = (rc2 + (cat == 2).to(tl.float32)) - ((old == 2) & full_before).to(tl.float32)
    fill2 = tl.minimum(fill + 1, WINDOW)
    head2 = head + 1
    head2 = tl.where(head2 >= WINDOW, 0, head2)
    ent = -((_p_log2_p(c0, WINDOW, RECIP_DIV, LIBDEVICE) + _p_log2_p(c1, WINDOW, RECIP_DIV, LIBDEVICE))
            + _p_log2_p(c2, WINDOW, RECIP_DIV, LIBDEVICE))
    low = (fill2 >= WINDOW) & (ent < threshold)
    return c0, c1, c2, fill2, head2, tl.where(low, penalty, 0.0)


@triton.jit
def curiosity_bonus(bonus, weight, cap):
    """reward.curiosity_bonus: curiosity_weight · clamp(bonus, 0, curiosity_max)."""
    return weight * tl.minimum(tl.maximum(bonus, 0.0), cap)


@triton.jit
def start_from_uniform(u, lo, hi, episode_length, mirror):
    """state.StartSampler.draw for one uniform u ∈ [0, 1) (float64): lo + min(⌊u·S⌋, S − 1) with
    S = max(hi − episode_length − lo, 1), the product in float64 as torch promotes it. mirror > 0 (the
    mirrored copy's row offset): u < ½ maps 2u into the data, u ≥ ½ maps 2u − 1 into the mirror."""
    span = tl.maximum(hi - episode_length - lo, 1)
    u2 = u * 2.0
    half = (u2 >= 1.0) & (mirror > 0)
    uu = tl.where(mirror > 0, u2 - half.to(tl.float64), u)
    base = lo + half.to(tl.int64) * mirror
    off = tl.minimum((uu * span.to(tl.float64)).to(tl.int64), span - 1)
    return off + base
