"""The feature spec (51 causal market features, fixed order) and ``build_features``.

The DQN's input is these 51 market features + 3 portfolio features = 54. Formulas live in
``foxhunt.features.indicators``; this module fixes names, order, lookbacks (hence the warm-up) and
turns bars into a ``FeatureSet``.

Causality: row t of every feature uses bars <= t only, and the computation is prefix-stable
(features of ``bars[:cut]`` are bitwise equal to the first ``cut`` rows of the full features).
Targets (forward log returns) are labels, computed separately, never fed to a feature.

Bump ``FEATURE_SPEC_VERSION`` whenever a formula, a parameter, the order or the warm-up changes:
it is part of the feature-cache key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.features import indicators as ind
from foxhunt.features.featureset import TARGET_HORIZONS, FeatureSet
from foxhunt.features.ops import ema_lookback, rolling_mean, safe_div

FEATURE_SPEC_VERSION = "1"
"""Version of the feature formulas; part of the cache key. Bump on any formula change."""


@dataclass(frozen=True)
class FeatureDef:
    """One feature column. lookback: first row at which it is fully formed (bars before it it needs)."""

    name: str
    lookback: int
    volume: bool = False
    """True: derived from volume (exactly 0 when the bars have no volume)."""


def _ema_lb(n: int) -> int:
    return ema_lookback(2.0 / (n + 1))


def _wilder_lb(n: int) -> int:
    return 1 + ema_lookback(1.0 / n)  # +1: the first price change is at row 1


_RET_H = (1, 2, 5, 10, 20, 60)
_RVOL_W = (5, 20, 60)
_EMA_N = (5, 10, 20, 50, 100)
_MACD_LB = _ema_lb(26)

FEATURES: tuple[FeatureDef, ...] = (
    # returns: log(C[t] / C[t-h])
    *(FeatureDef(f"ret_log_{h}", h) for h in _RET_H),
    # volatility (per bar, log-return units) and its regime
    *(FeatureDef(f"rvol_{w}", w) for w in _RVOL_W),
    FeatureDef("parkinson_vol_20", 19),
    FeatureDef("garman_klass_vol_20", 19),
    FeatureDef("rvol_log_ratio_5_60", 60),
    # distribution of 1-bar returns
    FeatureDef("ret_skew_20", 20),
    FeatureDef("ret_kurt_20", 20),
    FeatureDef("ret_autocorr_20", 21),
    # momentum
    FeatureDef("mom_vol_adj_20", 20),
    FeatureDef("mom_vol_adj_60", 60),
    FeatureDef("efficiency_ratio_20", 20),
    # oscillators (0-100 scale)
    FeatureDef("rsi_7", _wilder_lb(7)),
    FeatureDef("rsi_14", _wilder_lb(14)),
    FeatureDef("stoch_k_14", 13),
    FeatureDef("stoch_d_14_3", 15),
    # trend (fractions of price)
    FeatureDef("macd_line", _MACD_LB),
    FeatureDef("macd_signal", _MACD_LB + ema_lookback(2.0 / 10)),
    FeatureDef("macd_hist", _MACD_LB + ema_lookback(2.0 / 10)),
    *(FeatureDef(f"ema_ratio_{n}", _ema_lb(n)) for n in _EMA_N),
    # bands, ranges, extremes
    FeatureDef("bb_pctb_20", 19),
    FeatureDef("bb_bandwidth_20", 19),
    FeatureDef("atr_14", _wilder_lb(14)),
    FeatureDef("dist_max_20", 19),
    FeatureDef("dist_min_20", 19),
    FeatureDef("dist_max_60", 59),
    FeatureDef("dist_min_60", 59),
    # single-bar shape
    FeatureDef("hl_range", 0),
    FeatureDef("close_loc", 0),
    FeatureDef("upper_shadow", 0),
    FeatureDef("lower_shadow", 0),
    FeatureDef("ret_intrabar", 0),
    FeatureDef("ret_gap", 1),
    # volume (0 without volume)
    FeatureDef("volume_z_20", 19, volume=True),
    FeatureDef("volume_z_60", 59, volume=True),
    FeatureDef("volume_log_ratio_5_60", 59, volume=True),
    FeatureDef("vwap_dist_20", 19, volume=True),
    # calendar (time of day is 0 for daily bars)
    FeatureDef("tod_sin", 0),
    FeatureDef("tod_cos", 0),
    FeatureDef("dow_sin", 0),
    FeatureDef("dow_cos", 0),
)

N_FEATURES = len(FEATURES)
WARMUP = max(f.lookback for f in FEATURES)
"""First row at which every feature is formed (the longest lookback: EMA-100's 3 * 101 bars)."""

_INDEX = {f.name: i for i, f in enumerate(FEATURES)}


def feature_names() -> tuple[str, ...]:
    """The 51 feature names, in column order."""
    return tuple(f.name for f in FEATURES)


def volume_feature_names() -> tuple[str, ...]:
    """Names of the features that are exactly 0 when the bars have no volume."""
    return tuple(f.name for f in FEATURES if f.volume)


Put = Callable[[str, torch.Tensor], None]


def _compute(put: Put, o: torch.Tensor, h: torch.Tensor, lo: torch.Tensor, c: torch.Tensor,
             v: torch.Tensor | None, ts: torch.Tensor, intraday: bool) -> None:
    """Compute every feature (float64 [T] each) and hand it to ``put`` as soon as it is done.

    v is None when the bars have no volume (volume features are then left at 0 by the caller).
    """
    rets = {hz: ind.log_return(c, hz) for hz in _RET_H}
    for hz, r in rets.items():
        put(f"ret_log_{hz}", r)
    r1 = rets[1]

    rvol = {w: ind.realised_vol(r1, w) for w in _RVOL_W}
    for w, x in rvol.items():
        put(f"rvol_{w}", x)
    put("parkinson_vol_20", ind.parkinson_vol(h, lo, 20))
    put("garman_klass_vol_20", ind.garman_klass_vol(o, h, lo, c, 20))
    put("rvol_log_ratio_5_60", ind.safe_log_ratio(rvol[5], rvol[60]))

    skew, kurt = ind.skew_kurt(r1, 20)
    put("ret_skew_20", skew)
    put("ret_kurt_20", kurt)
    put("ret_autocorr_20", ind.autocorr_1(r1, 20))
    for w in (20, 60):
        # |sum of w returns| <= w * rvol_w, so this is bounded by sqrt(w); 0 when there was no movement.
        put(f"mom_vol_adj_{w}", safe_div(rets[w], rvol[w] * math.sqrt(w), eps=1e-12))
    put("efficiency_ratio_20", ind.efficiency_ratio(c, 20))
    del rets, rvol

    put("rsi_7", ind.rsi(c, 7))
    put("rsi_14", ind.rsi(c, 14))
    k, d = ind.stochastic(h, lo, c, 14, 3)
    put("stoch_k_14", k)
    put("stoch_d_14_3", d)

    line, sig, hist = ind.macd(c, 12, 26, 9)
    put("macd_line", line)
    put("macd_signal", sig)
    put("macd_hist", hist)
    for n in _EMA_N:
        put(f"ema_ratio_{n}", c / ind.ema_span(c, n) - 1.0)

    pctb, bw = ind.bollinger(c, 20, 2.0)
    put("bb_pctb_20", pctb)
    put("bb_bandwidth_20", bw)
    put("atr_14", ind.atr(h, lo, c, 14))
    for w in (20, 60):
        dmax, dmin = ind.dist_from_extremes(h, lo, c, w)
        put(f"dist_max_{w}", dmax)
        put(f"dist_min_{w}", dmin)

    for name, x in ind.bar_shape(o, h, lo, c).items():
        put(name, x)

    if v is not None:
        put("volume_z_20", ind.volume_zscore(v, 20))
        put("volume_z_60", ind.volume_zscore(v, 60))
        put("volume_log_ratio_5_60", ind.safe_log_ratio(rolling_mean(v, 5), rolling_mean(v, 60)))
        put("vwap_dist_20", ind.vwap_distance(h, lo, c, v, 20))

    for name, x in ind.calendar(ts, intraday).items():
        put(name, x)


def forward_log_returns(close: torch.Tensor) -> torch.Tensor:
    """Targets: log(close[t+h] / close[t]) for h in TARGET_HORIZONS; NaN where t+h >= T.

    close: [T] float64. Returns [T, 4] float32 (computed in float64). Labels only.
    """
    T = close.shape[0]
    out = torch.full((T, len(TARGET_HORIZONS)), math.nan, dtype=torch.float64, device=close.device)
    for i, hz in enumerate(TARGET_HORIZONS):
        if hz < T:
            out[: T - hz, i] = torch.log(close[hz:] / close[: T - hz])
    return out.to(torch.float32)


def _column(arr: np.ndarray, dtype: type, dev: torch.device) -> torch.Tensor:
    """A bar column as a tensor on dev (no copy on the CPU unless the array is read-only or strided)."""
    a = np.ascontiguousarray(arr, dtype=dtype)
    if not a.flags.writeable:  # e.g. arrays from a loaded file: torch refuses to share them
        a = a.copy()
    return torch.from_numpy(a).to(dev)


def build_features(bars: Bars, device: torch.device | str | None = None, *, source_sha256: str | None = None) -> FeatureSet:
    """Build the 51 causal features and the 4 targets of a bar series.

    bars: T bars. device: where to compute (cuda for the GPU; default CPU); all maths in float64.
    source_sha256: ``bars.content_hash()`` if the caller already has it (saves a pass over the data).
    Returns a FeatureSet of CPU tensors: features [T, 51] float32 with rows < ``WARMUP`` exactly 0,
    targets [T, 4] float32, ohlc [T, 4] float64, volume [T] float64, timestamps [T] int64.

    Whether the series is intraday (time-of-day columns filled) is a property of the whole
    series, like has_volume, decided by ``bars.is_intraday()``.
    Raises BarDataError naming the feature and row if a formed feature is not finite
    (bars that break the Bars invariants, e.g. a non-positive price).
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    T = len(bars)
    o, h, lo, c, v = (_column(a, np.float64, dev) for a in (bars.open, bars.high, bars.low, bars.close, bars.volume))
    ts = _column(bars.timestamps, np.int64, dev)

    # [F, T]: one contiguous row per feature while computing, transposed once at the end.
    out = torch.empty((N_FEATURES, T), dtype=torch.float32, device=dev)
    finite = torch.ones(N_FEATURES, dtype=torch.bool, device=dev)
    if T > 0:
        done: set[str] = set()

        def put(name: str, x: torch.Tensor) -> None:
            if name in done:
                raise AssertionError(f"feature {name!r} computed twice")
            j = _INDEX[name]
            out[j] = x  # float64 -> float32, correctly rounded
            finite[j] = torch.isfinite(out[j, WARMUP:]).all()  # on device: no sync per feature
            done.add(name)

        with torch.no_grad():
            _compute(put, o, h, lo, c, v if bars.has_volume else None, ts, bars.is_intraday())
        missing = set(_INDEX) - done
        if not bars.has_volume:
            out[[_INDEX[n] for n in volume_feature_names()]] = 0.0
            missing -= set(volume_feature_names())
        if missing:  # a spec/implementation mismatch is a bug, not a data problem
            raise AssertionError(f"features {sorted(missing)} of the spec were not computed")
        out[:, :WARMUP] = 0.0
        if not bool(finite.all()):
            _raise_not_finite(out, bars)

    return FeatureSet(
        features=_transpose(out).cpu(),
        targets=forward_log_returns(c).cpu(),
        ohlc=torch.from_numpy(np.stack([np.asarray(a, dtype=np.float64) for a in (bars.open, bars.high, bars.low, bars.close)], axis=1)),
        volume=torch.from_numpy(np.array(bars.volume, dtype=np.float64)),
        timestamps=torch.from_numpy(np.array(bars.timestamps, dtype=np.int64)),
        names=feature_names(),
        warmup=WARMUP,
        has_volume=bool(bars.has_volume),
        spec_version=FEATURE_SPEC_VERSION,
        source_sha256=source_sha256 if source_sha256 is not None else bars.content_hash(),
    )


def _transpose(x: torch.Tensor, rows: int = 65_536) -> torch.Tensor:
    """[F, T] -> contiguous [T, F], copied in blocks of rows (3x faster than one strided copy on a CPU)."""
    F_, T = x.shape
    y = torch.empty((T, F_), dtype=x.dtype, device=x.device)
    for i in range(0, T, rows):
        y[i : i + rows] = x[:, i : i + rows].t()
    return y


def _raise_not_finite(out: torch.Tensor, bars: Bars) -> None:
    """Raise BarDataError at the first (earliest row) non-finite formed value."""
    bad = (~torch.isfinite(out[:, WARMUP:])).nonzero()
    j, t = (int(i) for i in bad[bad[:, 1].argmin()])
    row = t + WARMUP
    ts = np.datetime_as_string(np.datetime64(int(bars.timestamps[row]), "ns"))
    raise BarDataError(
        "features finite",
        f"feature '{FEATURES[j].name}' is {out[j, row].item()} (bars must have positive prices and finite values)",
        path=bars.source,
        row=row + 1,
        timestamp=ts,
        column=FEATURES[j].name,
    )
