"""Per-window risk metrics for W backtest windows at once, on the device, with no host reads.

``compute_metrics(returns [W, T] float32, lengths [W] int64) -> [W, M] float64`` follows empyrical's
conventions (``sharpe_ratio``, ``sortino_ratio``, ``calmar_ratio``, ``max_drawdown``,
``annual_return``, ``annual_volatility``, ``value_at_risk``, ``conditional_value_at_risk``,
``cum_returns_final``), with ``annualization = bars_per_year``. Columns are ``METRIC_NAMES``.

Definitions (window of n = lengths[w] bars, simple returns r_1..r_n, rf = ``risk_free`` per bar):

- ``total_return``  prod(1 + r) - 1;  ``final_equity`` prod(1 + r) (equity starts at 1).
- ``annual_return``  CAGR: final_equity ** (1 / (n / bars_per_year)) - 1; NaN if final_equity < 0.
- ``annual_volatility``  std(r, ddof=1) * sqrt(bars_per_year); NaN if n < 2; exactly 0 when every
  return in the window is equal (empyrical leaves a ~1e-17 rounding residue there).
- ``sharpe``  mean(r - rf) / std(r, ddof=1) * sqrt(bars_per_year). NaN if n < 2. Zero dispersion
  (all returns equal) gives std = 0, so like empyrical: +inf / -inf by the sign of mean(r - rf), and
  NaN when that is 0 (e.g. all-zero returns).
- ``sortino``  mean(r - rf) * bars_per_year / (sqrt(mean(min(r - rf, 0)^2)) * sqrt(bars_per_year)),
  the downside mean taken over all n bars (empyrical's ``downside_risk``; required return = rf).
  NaN if n < 2; no downside: +inf if the mean is positive, NaN if it is 0.
- ``calmar``  annual_return / |max_drawdown| if max_drawdown < 0, else NaN; NaN if it is ±inf.
- ``max_drawdown``  min over i of E_i / max(E_0..E_i) - 1 for the equity E_0 = 1, E_i = prod_{j<=i}
  (1 + r_j); ≤ 0. E_0 is included, so a loss on the first bar counts.
- ``max_drawdown_duration``  the longest underwater spell, in bars: from the peak point p (the last
  point with E_p at its running maximum) to the first later point q with E_q >= that peak
  (q - p), or to the window end n (n - p) if it never recovers. 0 if never underwater.
- ``max_drawdown_recovery``  bars from the trough of the maximum drawdown (its first occurrence) to
  the first later point at or above the preceding peak. NaN if it never recovers within the window;
  0 if there is no drawdown at all.
- ``value_at_risk``  historical, ``cutoff`` = 5 %: np.percentile(r, 5) with linear interpolation,
  i.e. the order statistics s_(k), s_(k+1) at h = (n - 1) * cutoff, k = floor(h), lerped by h - k.
- ``conditional_value_at_risk``  empyrical's: mean of the k + 1 smallest returns, k = floor((n - 1)
  * cutoff). (Equals "mean of returns <= VaR" except with ties; we match empyrical.)
- ``turnover``  traded notional / mean equity: sum over the n bars of ``traded_t`` (the notional
  traded on bar t, |Δq_t| units at the fill bar's open, in units of the initial capital) divided by
  the mean of the equity points E_0..E_n (E_0 = 1). One buy-and-hold trade of 95 % of the capital
  reads ~0.95 (less when the equity grows, since the mean equity is larger); price drift of a held
  position is not trading. Opening the first position counts; closing after the window does not.
  NaN without ``traded``. (Before issue 14 it was mean |p_t - p_{t-1}| of the marked-to-market
  exposure, which counted price drift as trading.)
- ``exposure_time``  fraction of the n bars with p_t != 0.  NaN without ``positions``.
- ``trade_count``, ``win_rate`` (share of trades with return > 0), ``avg_trade_return``,
  ``profit_factor`` (sum of positive trade returns / -sum of negative ones): from ``trades``.
  No trades in a window: count 0, the other three NaN. Only winning (or zero) trades: profit factor
  +inf if some trade won, NaN if all are exactly 0. NaN columns without ``trades``.
- ``bars``  n, as a float.
- ``omega_ratio``  empyrical's ``omega_ratio`` with required return 0: sum of (r - rf) over bars
  above 0 / -(sum of (r - rf) over bars below 0); NaN when nothing is below, or n < 2.
- ``tail_ratio``  empyrical's: |percentile(r, 95)| / |percentile(r, 5)| (linear interpolation);
  +inf when the 5th percentile is 0 and the 95th is not, NaN when both are 0.
- ``stability``  empyrical's ``stability_of_timeseries``: R² of the least-squares line through the
  cumulative log returns y_i = sum_{j<=i} log(1 + r_j) against i; NaN if n < 2 or when y is constant
  (empyrical gives NaN there).

Wipe-outs: a bar with r <= -1 (the capital lost, or more with leverage) is a valid input and nothing
raises: the equity is 0 from that bar on (r = -1) or of flipped sign (r < -1), and every metric
follows its formula above, so max_drawdown <= -1 (no recovery unless a later bar lifts the equity
back to the peak), annual_return is -1 at final equity 0 and NaN below 0 (empyrical's real power of
a negative base is NaN too unless bars_per_year / n is whole, then a meaningless ±|E|^(bpy/n) - 1),
calmar follows it, stability is NaN (log(1 + r) is -inf or undefined; as empyrical), and turnover
is negative when the mean equity is (±inf / NaN when it is 0).

Inputs and padding: bars t >= lengths[w] of ``returns`` / ``positions`` may hold anything (NaN, inf,
garbage): they are replaced before any arithmetic. Bars inside the window must be finite. Lengths
must lie in [1, T]; they are clamped to it (checking would need a host read). Trade records with
``valid`` False or a window index outside [0, W) are ignored.

Precision: inputs are float32; everything after the padding mask is float64 (the compounded equity
over 1e5 bars, the moment sums and the CVaR tail sum would lose 1e-4 relative in float32, which is
the parity budget). The top-k / sort for VaR and CVaR run on the float32 values (exact; cheaper).

Device rules: fully vectorised over [W, T], no Python loop over windows or bars, no host reads and no
data-dependent control flow (Python branches only on shapes and on whether ``positions`` /
``trades`` are given), so a call can be captured in a CUDA graph: see ``foxhunt.backtest.graphed_metrics``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


__all__ = ["METRIC_NAMES", "TradeRecords", "compute_metrics", "metrics_to_dicts"]

METRIC_NAMES: tuple[str, ...] = (
    "total_return",
    "annual_return",
    "annual_volatility",
    "sharpe",
    "sortino",
    "calmar",
    "max_drawdown",
    "max_drawdown_duration",
    "max_drawdown_recovery",
    "value_at_risk",
    "conditional_value_at_risk",
    "turnover",
    "exposure_time",
    "trade_count",
    "win_rate",
    "avg_trade_return",
    "profit_factor",
    "final_equity",
    "bars",
    "omega_ratio",
    "tail_ratio",
    "stability",
)
METRIC_INDEX: dict[str, int] = {name: i for i, name in enumerate(METRIC_NAMES)}

_F64 = torch.float64
_NAN = float("nan")
_TAIL = 0.05  # tail ratio's percentiles (95 / 5), fixed as in empyrical
_SCAN_CHUNK = 256  # blocked scans: chunks of this many bars are scanned as rows of their own


def _scan(x: torch.Tensor, op: str) -> torch.Tensor:
    """Inclusive cumulative product ("prod") or maximum ("max") of [W, L] along dim 1.

    torch's scans parallelise over rows, so W = 8 rows of 1e5 bars keep most of a GPU idle. Here
    the row is cut into chunks of ``_SCAN_CHUNK``, each chunk scanned as its own row (W·L/C rows),
    the chunk totals scanned across chunks, and the carry folded back in (on an H200, 8 x 1e5:
    C = 256 beat 512 / 1024 / 2048 and a broadcast carry; end to end 740 vs 850 us graphed).
    Same result as ``torch.cumprod`` / ``torch.cummax`` up to the association of the products
    (~1 ulp per level; max is exact). For "max" on an integer tensor, values must be >= 0.
    """
    W, L = x.shape
    cum = (lambda t, d: torch.cumprod(t, dim=d)) if op == "prod" else (lambda t, d: torch.cummax(t, dim=d).values)
    C = _SCAN_CHUNK
    if L <= 2 * C:
        return cum(x, 1)
    B = -(-L // C)
    neutral = 1.0 if op == "prod" else (float("-inf") if x.is_floating_point() else 0)
    inner = cum(torch.nn.functional.pad(x, (0, B * C - L), value=neutral).view(W, B, C), 2)  # [W, B, C]
    carry = cum(inner[:, :-1, -1], 1)  # [W, B-1]: inclusive scan of the chunk totals
    if op == "prod":
        inner[:, 1:] *= carry[:, :, None]
    else:
        inner[:, 1:].clamp_(min=carry[:, :, None])
    return inner.view(W, B * C)[:, :L]


@dataclass(frozen=True, eq=False)
class TradeRecords:
    """Round trips as a structure of arrays, K records (K may be padded).

    window: [K] int64, the window index each trade belongs to (in [0, W) where valid).
    ret:    [K] float32, the round trip's simple return (e.g. exit/entry - 1 for a long).
    valid:  [K] bool, False for padding records (their window and ret may be anything).
    """

    window: torch.Tensor
    ret: torch.Tensor
    valid: torch.Tensor

    def __post_init__(self) -> None:
        k = self.window.shape
        if self.window.dim() != 1 or self.ret.shape != k or self.valid.shape != k:
            raise ValueError(
                f"TradeRecords: window, ret, valid must be 1-D of one length, got "
                f"{tuple(self.window.shape)}, {tuple(self.ret.shape)}, {tuple(self.valid.shape)}"
            )
        if self.valid.dtype != torch.bool or self.window.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"TradeRecords: valid must be bool and window int, got {self.valid.dtype}, {self.window.dtype}")


def _check_inputs(returns: torch.Tensor, lengths: torch.Tensor, positions: torch.Tensor | None,
                  trades: TradeRecords | None, traded: torch.Tensor | None = None) -> None:
    """Shape/dtype/device checks only (no value is read)."""
    if returns.dim() != 2 or returns.shape[1] < 1 or not returns.is_floating_point():
        raise ValueError(f"returns: expected a float [W, T] tensor with T >= 1, got {returns.dtype} {tuple(returns.shape)}")
    if lengths.shape != returns.shape[:1] or lengths.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"lengths: expected int64 [W={returns.shape[0]}], got {lengths.dtype} {tuple(lengths.shape)}")
    tensors = [("lengths", lengths)]
    if positions is not None:
        if positions.shape != returns.shape:
            raise ValueError(f"positions: expected {tuple(returns.shape)} like returns, got {tuple(positions.shape)}")
        tensors.append(("positions", positions))
    if traded is not None:
        if traded.shape != returns.shape:
            raise ValueError(f"traded: expected {tuple(returns.shape)} like returns, got {tuple(traded.shape)}")
        tensors.append(("traded", traded))
    if trades is not None:
        tensors += [("trades.window", trades.window), ("trades.ret", trades.ret), ("trades.valid", trades.valid)]
    for name, t in tensors:
        if t.device != returns.device:
            raise ValueError(f"{name}: on {t.device}, but returns are on {returns.device}")


def compute_metrics(
    returns: torch.Tensor,
    lengths: torch.Tensor,
    *,
    bars_per_year: float = 252.0,
    positions: torch.Tensor | None = None,
    trades: TradeRecords | None = None,
    risk_free: float = 0.0,
    cutoff: float = 0.05,
    traded: torch.Tensor | None = None,
) -> torch.Tensor:
    """The metric suite for W windows: [W, M] float64 on the device of ``returns``, M = len(METRIC_NAMES).

    returns:   [W, T] float32, simple return per bar; bars t >= lengths[w] are padding (ignored).
    lengths:   [W] int64, bars in each window, in [1, T].
    positions: [W, T] exposure per bar (any float dtype; padding ignored), or None → exposure_time
               is NaN.
    traded:    [W, T] traded notional per bar in units of the initial capital (padding ignored), or
               None → turnover is NaN.
    trades:    ``TradeRecords`` of round trips, or None → the four trade columns are NaN.
    bars_per_year: annualisation factor (252 for daily bars; empyrical's ``annualization``).
    risk_free: per-bar risk-free return (Sharpe) and required return (Sortino).
    cutoff:    VaR/CVaR tail probability.

    See the module docstring for every definition and edge case. No host reads.
    """
    _check_inputs(returns, lengths, positions, trades, traded)
    W, T = returns.shape
    dev = returns.device
    bpy = float(bars_per_year)
    rf = float(risk_free)
    n_i = lengths.to(torch.int64).clamp(1, T)  # [W]
    n = n_i.to(_F64)
    t_idx = torch.arange(T, device=dev)
    valid = t_idx < n_i[:, None]  # [W, T]
    r32 = torch.where(valid, returns, 0.0)  # padding → 0 (growth factor 1), before any arithmetic
    r = r32.to(_F64)

    # -- moments (float64) ------------------------------------------------------------------------
    mean = r.sum(1) / n
    centred = torch.where(valid, r - mean[:, None], 0.0)
    var = (centred * centred).sum(1) / (n - 1.0)  # n == 1 → 0/0 = NaN
    # zero dispersion (every return equal to the first): std is exactly 0 (empyrical's _zero_dispersion_std)
    constant = torch.where(valid, r32 != r32[:, :1], False).any(1).logical_not()
    std = torch.where(constant, 0.0, var.sqrt())
    two_plus = n_i >= 2
    std = torch.where(two_plus, std, _NAN)
    annual_vol = std * bpy ** 0.5
    excess_mean = mean - rf
    sharpe = excess_mean / std * bpy ** 0.5  # std 0 → ±inf, or NaN when excess_mean is 0
    downside = torch.where(valid, (r - rf).clamp(max=0.0), 0.0)
    downside_risk = ((downside * downside).sum(1) / n).sqrt() * bpy ** 0.5
    sortino = torch.where(two_plus, excess_mean * bpy / downside_risk, _NAN)

    # -- equity, drawdown and its durations --------------------------------------------------------
    ones = torch.ones(W, 1, dtype=_F64, device=dev)
    equity = _scan(torch.cat([ones, 1.0 + r], dim=1), "prod")  # [W, T+1]: E_0 = 1, E_1..E_T
    growth = equity[:, 1:]
    e_idx = torch.arange(T + 1, device=dev)
    valid_e = e_idx <= n_i[:, None]  # points 0..n
    final_equity = growth.gather(1, (n_i - 1)[:, None]).squeeze(1)
    total_return = final_equity - 1.0
    annual_return = torch.where(final_equity < 0, _NAN, final_equity.pow(1.0 / (n / bpy)) - 1.0)

    peak = _scan(equity, "max")
    underwater = (equity < peak) & valid_e  # [W, T+1]; point 0 is never underwater
    dd = torch.where(valid_e, equity / peak - 1.0, float("inf"))
    max_dd, trough = torch.min(dd, dim=1)  # trough: first occurrence of the maximum drawdown
    # index of the last point at its running peak, for every point (the start of the current spell)
    e_idx32 = e_idx.to(torch.int32)
    last_peak = _scan(torch.where(underwater, 0, e_idx32), "max")
    # a spell is measured at its recovery point q (q - p) or, if it never ends, at the last point n
    in_spell = underwater[:, 1:] | underwater[:, :-1]
    spell_len = torch.where(in_spell & valid_e[:, 1:], e_idx32[1:] - last_peak[:, :-1], 0)
    dd_duration = spell_len.amax(1).to(_F64)
    after = (e_idx[None, :] > trough[:, None]) & valid_e & ~underwater
    recovered_at = torch.where(after, e_idx, T + 1).amin(1)
    recovery = torch.where(recovered_at <= T, (recovered_at - trough).to(_F64), _NAN)
    recovery = torch.where(max_dd < 0, recovery, 0.0)
    calmar = torch.where(max_dd < 0, annual_return / max_dd.abs(), _NAN)
    calmar = torch.where(calmar.isinf(), _NAN, calmar)

    # -- historical VaR / CVaR: padding pushed to +inf, the smallest returns in order, gather by the
    # per-window order statistic. Only the lowest floor(cutoff (T-1)) + 2 can be needed, so a top-k
    # (then a sort of those) replaces a sort of all T (~3.5x faster for 256 x 1e5 on an H200).
    var_, srt, k = _low_quantile(r32, valid, n_i, cutoff)
    j = torch.arange(srt.shape[1], device=dev)
    tail = torch.where(j[None, :] <= k[:, None], srt, 0.0).to(_F64).sum(1)
    cvar = tail / (k + 1).to(_F64)
    # tail ratio (empyrical's fixed 95 / 5 percentiles): the 95th percentile of r is minus the 5th of -r
    p5 = var_ if cutoff == _TAIL else _low_quantile(r32, valid, n_i, _TAIL)[0]
    p95 = -_low_quantile(-r32, valid, n_i, _TAIL)[0]
    tail_ratio = p95.abs() / p5.abs()
    # omega (required return 0): gains over losses of the excess returns
    excess = torch.where(valid, r - rf, 0.0)
    gains, losses = excess.clamp(min=0.0).sum(1), (-excess).clamp(min=0.0).sum(1)
    omega = torch.where((losses > 0) & two_plus, gains / losses, _NAN)
    # stability: R² of cumulative log returns against the bar index (float64, centred sums)
    y = torch.cumsum(torch.log1p(r), dim=1)  # padding adds log1p(0) = 0
    y_mean = torch.where(valid, y, 0.0).sum(1) / n
    x_c = t_idx.to(_F64)[None, :] - (n[:, None] - 1.0) / 2.0
    y_c = torch.where(valid, y - y_mean[:, None], 0.0)
    sxy = (torch.where(valid, x_c, 0.0) * y_c).sum(1)
    sxx = n * (n * n - 1.0) / 12.0
    syy = (y_c * y_c).sum(1)
    stability = torch.where(syy > 0, sxy * sxy / (sxx * syy), _NAN)
    stability = torch.where(two_plus, stability.clamp(max=1.0), _NAN)

    # -- positions --------------------------------------------------------------------------------
    nan_w = torch.full((W,), _NAN, dtype=_F64, device=dev)
    if positions is not None:
        p = torch.where(valid, positions, 0.0)
        exposure = (p != 0).sum(1).to(_F64) / n
    else:
        exposure = nan_w
    if traded is not None:
        mean_equity = torch.where(valid_e, equity, 0.0).sum(1) / (n + 1.0)
        turnover = torch.where(valid, traded, 0.0).to(_F64).sum(1) / mean_equity
    else:
        turnover = nan_w

    # -- trades -----------------------------------------------------------------------------------
    if trades is not None:
        win = trades.window.to(torch.int64)
        ok = trades.valid & (win >= 0) & (win < W)
        x = torch.where(ok, trades.ret, 0.0).to(_F64)
        cols = torch.stack([ok.to(_F64), (x > 0).to(_F64), x, x.clamp(min=0.0), (-x).clamp(min=0.0)], dim=1)
        agg = torch.zeros(W, 5, dtype=_F64, device=dev).index_add_(0, torch.where(ok, win, 0), cols)
        count = agg[:, 0]
        win_rate = agg[:, 1] / count  # 0 trades → 0/0 = NaN
        avg_trade = agg[:, 2] / count
        profit_factor = agg[:, 3] / agg[:, 4]  # no losses: +inf with wins, NaN (0/0) without
    else:
        count, win_rate, avg_trade, profit_factor = nan_w, nan_w, nan_w, nan_w

    cols_out = {
        "total_return": total_return, "annual_return": annual_return, "annual_volatility": annual_vol,
        "sharpe": sharpe, "sortino": sortino, "calmar": calmar, "max_drawdown": max_dd,
        "max_drawdown_duration": dd_duration, "max_drawdown_recovery": recovery,
        "value_at_risk": var_, "conditional_value_at_risk": cvar, "turnover": turnover,
        "exposure_time": exposure, "trade_count": count, "win_rate": win_rate,
        "avg_trade_return": avg_trade, "profit_factor": profit_factor, "final_equity": final_equity,
        "bars": n, "omega_ratio": omega, "tail_ratio": tail_ratio, "stability": stability,
    }
    return torch.stack([cols_out[name] for name in METRIC_NAMES], dim=1)


def _low_quantile(r32: torch.Tensor, valid: torch.Tensor, n_i: torch.Tensor,
                  q: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """np.percentile(r, 100 q) (linear) of each window's valid float32 values, for a small q.

    Returns (quantile [W] float64, the lowest values in order [W, m] float32, k [W] the lower order
    statistic's index). Padding is pushed to +inf; only the lowest floor(q (T-1)) + 2 values can be
    needed, so a top-k (then a sort of those) replaces a sort of all T (~3.5x faster for 256 x 1e5).
    """
    T = r32.shape[1]
    n = n_i.to(_F64)
    m = min(T, math.floor(q * (T - 1)) + 2)
    masked = torch.where(valid, r32, float("inf"))
    low = torch.topk(masked, m, dim=1, largest=False, sorted=False).values
    srt = torch.sort(low, dim=1).values  # [W, m] float32, ascending
    h = (n - 1.0) * q
    k = h.floor().to(torch.int64).clamp(max=m - 1)
    k_hi = torch.minimum(k + 1, n_i - 1).clamp(max=m - 1)
    a = srt.gather(1, k[:, None]).squeeze(1).to(_F64)
    b = srt.gather(1, k_hi[:, None]).squeeze(1).to(_F64)
    return torch.lerp(a, b, h - k.to(_F64)), srt, k  # numpy's _lerp: same two-sided formula


def metrics_to_dicts(metrics: torch.Tensor, names: tuple[str, ...] = METRIC_NAMES) -> list[dict[str, float]]:
    """[W, M] metrics → W dicts {name: float}, with exactly one device → host transfer."""
    if metrics.dim() != 2 or metrics.shape[1] != len(names):
        raise ValueError(f"metrics: expected [W, {len(names)}], got {tuple(metrics.shape)}")
    rows = metrics.detach().to("cpu").tolist()  # the one readback
    return [dict(zip(names, row)) for row in rows]
