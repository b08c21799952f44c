"""MarketData: the device-resident arrays, uploaded once, and per-fold normalisation.

Everything the environments, learners and backtester read lives here, on one device, for the life
of the process. A fold is a set of integer bounds; switching folds recomputes a handful of
per-fold statistics *in place* (normalisation mean / inverse std, medians used for order routing)
and allocates nothing proportional to the data: reductions run over fixed-size chunks through a
preallocated float64 scratch buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from foxhunt.features.featureset import FeatureSet
from foxhunt.folds import FoldRange

N_PORTFOLIO_FEATURES = 3
"""Portfolio features appended to every observation: exposure, unrealised return, bars in position."""

_CHUNK_ROWS = 16_384
"""Rows per float64 reduction chunk: bounds the scratch memory of norm_stats (16K × F × 8 bytes)."""

_MEDIAN_SAMPLES = 65_536
"""Medians are taken over at most this many evenly spaced bars of the training slice."""

STD_FLOOR = 1e-8
"""Features whose training-slice std is below this are treated as constant (normalised to 0)."""


def inverse_std(std: torch.Tensor) -> torch.Tensor:
    """1 / std where std > ``STD_FLOOR``, else 0 (a constant feature reads 0 after normalising): the
    inverse standard deviations every normaliser multiplies by (same shape and dtype as ``std``)."""
    return torch.where(std > STD_FLOOR, 1.0 / std.clamp_min(STD_FLOOR), torch.zeros_like(std))


def _log_returns(fs: FeatureSet) -> torch.Tensor:
    """[T] float64 log(close[t] / close[t-1]); 0 at t = 0."""
    close64 = fs.ohlc[:, 3].to(torch.float64)
    log_ret = torch.zeros_like(close64)
    log_ret[1:] = torch.log(close64[1:] / close64[:-1])
    return log_ret


@dataclass(frozen=True)
class NormStats:
    """Per-feature mean and std over a fold's training slice, float64 on the device. [F] each."""

    mean: torch.Tensor
    std: torch.Tensor


class MarketData:
    """Device-resident market arrays and the current fold's statistics.

    pooled: False here; True for a universe of several symbols (``foxhunt.universe_market``), whose
    episode starts come from per-symbol tables instead of ``fold_bounds`` (``foxhunt.env.pooled``).

    features:   [R, F] float32   causal features (raw, un-normalised)
    targets:    [R, 4] float32   forward log returns (labels only)
    ohlc:       [R, 4] float32   open/high/low/close
    volume:     [R]    float32
    log_return: [R]    float32   log(close[t] / close[t-1]); 0 at t = 0
    bar_range:  [R]    float32   (high - low) / close, a per-bar spread / activity proxy
    timestamps: [R]    int64     UTC ns

    R = n_rows: the T = n_bars bars of the data, then (with a mirror) their T mirrored bars at
    rows T … 2T − 1, which only training envs visit. Folds, backtests and normalisation use rows < T.

    Per-fold state (device tensors updated in place by ``set_fold``, so captured CUDA graphs that
    read them stay valid):
    norm_mean, norm_inv_std: [F] float32
    fold_bounds: [4] int64  (train_start, train_end, val_start, val_end)
    median_abs_return, median_range, median_volume: 0-d float32, over the training slice
    """

    def __init__(self, fs: FeatureSet, device: torch.device | str = "cpu", mirror: FeatureSet | None = None) -> None:
        """mirror: the features of the mirrored bars (``foxhunt.data.mirror``), appended after ``fs``'s rows
        for training envs to start in (``train.mirror``); every index below ``n_bars`` is the real data."""
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            # Resolve "cuda" to "cuda:N" once, as tensors report it, so device checks can compare.
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.names = fs.names
        self.warmup = int(fs.warmup)
        self.has_volume = bool(fs.has_volume)
        self.spec_version = fs.spec_version
        self.source_sha256 = fs.source_sha256
        self.n_bars = len(fs)
        self.n_features = fs.n_features
        halves = [fs]
        if mirror is not None:
            if len(mirror) != len(fs) or mirror.names != fs.names:
                raise ValueError(f"mirror: {len(mirror)} bars × {mirror.names} do not match {len(fs)} bars × {fs.names}")
            halves.append(mirror)
        self.mirror_offset = self.n_bars if mirror is not None else 0
        """Row of the mirrored copy of bar 0 (0: no mirror). Training starts in [lo, hi) draw half of
        the envs into [lo + offset, hi + offset) (``StartSampler``)."""
        self.n_rows = self.n_bars * len(halves)
        """Rows held on the device: the data, and its mirror when there is one."""

        def cat(get) -> torch.Tensor:
            return torch.cat([get(h) for h in halves]) if len(halves) > 1 else get(fs)

        # Upload once. float64 host arrays become float32 on the device.
        self.features = cat(lambda h: h.features).to(dev, torch.float32).contiguous()
        self.raw_features = self.features
        """The un-normalised features statistics are taken over: ``features`` itself here (one tensor); a
        pooled universe keeps its own copy, as ``features`` holds each symbol's normalised rows there."""
        self.targets = cat(lambda h: h.targets).to(dev, torch.float32).contiguous()
        self.ohlc = cat(lambda h: h.ohlc).to(dev, torch.float32).contiguous()
        self.volume = cat(lambda h: h.volume).to(dev, torch.float32).contiguous()
        self.timestamps = cat(lambda h: h.timestamps).to(dev, torch.int64).contiguous()
        self.log_return = cat(_log_returns).to(dev, torch.float32)
        self.bar_range = cat(lambda h: (h.ohlc[:, 1] - h.ohlc[:, 2]) / h.ohlc[:, 3]).to(dev, torch.float32)
        self.timestamps_host = fs.timestamps.numpy()
        # Per-fold state, preallocated.
        f = self.n_features
        self.norm_mean = torch.zeros(f, dtype=torch.float32, device=dev)
        self.norm_inv_std = torch.ones(f, dtype=torch.float32, device=dev)
        self.fold_bounds = torch.zeros(4, dtype=torch.int64, device=dev)
        self.median_abs_return = torch.zeros((), dtype=torch.float32, device=dev)
        self.median_range = torch.zeros((), dtype=torch.float32, device=dev)
        self.median_volume = torch.ones((), dtype=torch.float32, device=dev)
        self._scratch = torch.empty((min(_CHUNK_ROWS, max(self.n_bars, 1)), f), dtype=torch.float64, device=dev)
        self._sum = torch.zeros(f, dtype=torch.float64, device=dev)
        self._sumsq = torch.zeros(f, dtype=torch.float64, device=dev)
        self.fold: FoldRange | None = None

    pooled: bool = False
    """A pooled universe market (``UniverseMarket`` over several symbols); False for one series."""

    def copy_offset(self, rows: torch.Tensor) -> torch.Tensor | int:
        """[N] int64 the first row of the copy each row ([N] int64) lies in: ``mirror_offset`` for a mirrored
        row, 0 for the data; the int 0 without a mirror. On the device, no host read."""
        m = self.mirror_offset
        return (rows >= self.n_bars).to(torch.int64) * m if m else 0

    def split_uniform(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | int]:
        """(u', shift) for training draws' uniforms u ([N] float64 in [0, 1)): with a mirror, u < ½ gives
        (2u, 0) in the data and u ≥ ½ gives (2u − 1, ``mirror_offset``) in the mirror (2u is exact in
        float64, so each half is as uniform as u); without one, (u, 0)."""
        if not self.mirror_offset:
            return u, 0
        u2 = u * 2.0
        half = (u2 >= 1.0).to(torch.int64)
        return u2 - half, half * self.mirror_offset

    def calendar_host(self) -> np.ndarray:
        """[T] int64 UTC ns: the sorted bar times the annualisation is inferred from (``Backtester``):
        the market's own timestamps; a universe's union calendar (``UniverseMarket``)."""
        return self.timestamps_host

    @property
    def obs_dim(self) -> int:
        """Observation width: market features + portfolio features."""
        return self.n_features + N_PORTFOLIO_FEATURES

    # ------------------------------------------------------------------ fold statistics
    def norm_stats(self, start: int, end: int) -> NormStats:
        """Mean and std of features[start:end], float64 accumulation, on the device.

        Chunked through a preallocated scratch buffer: no allocation proportional to end - start.
        Uses the shifted-data formula (shift = first row) so that large means lose no precision.
        """
        if not 0 <= start < end <= self.n_bars:
            raise ValueError(f"norm_stats: range [{start}, {end}) outside [0, {self.n_bars})")
        self._sum.zero_()
        self._sumsq.zero_()
        raw = self.raw_features
        shift = raw[start].to(torch.float64)
        pos = start
        while pos < end:
            rows = min(self._scratch.shape[0], end - pos)
            buf = self._scratch[:rows]
            buf.copy_(raw[pos : pos + rows])
            buf.sub_(shift)
            self._sum.add_(buf.sum(0))
            self._sumsq.add_(buf.mul_(buf).sum(0))
            pos += rows
        n = float(end - start)
        mean_shifted = self._sum / n
        var = (self._sumsq / n - mean_shifted * mean_shifted).clamp_min_(0.0)
        return NormStats(mean=mean_shifted + shift, std=var.sqrt())

    def set_fold(self, fold: FoldRange) -> None:
        """Make ``fold`` current: normalisation and medians from its training slice, bounds updated.

        Everything is written in place into preallocated device tensors.
        """
        if not (0 <= fold.train_start < fold.train_end <= fold.val_start < fold.val_end <= self.n_bars):
            raise ValueError(f"fold {fold} does not fit in {self.n_bars} bars")
        stats = self.norm_stats(fold.train_start, fold.train_end)
        self.norm_mean.copy_(stats.mean)
        self.norm_inv_std.copy_(inverse_std(stats.std))
        self.fold_bounds.copy_(
            torch.tensor([fold.train_start, fold.train_end, fold.val_start, fold.val_end], dtype=torch.int64),
            non_blocking=True,
        )
        stride = max(1, (fold.train_end - fold.train_start + _MEDIAN_SAMPLES - 1) // _MEDIAN_SAMPLES)
        sl = slice(max(fold.train_start, 1), fold.train_end, stride)
        self.median_abs_return.copy_(self.log_return[sl].abs().median())
        self.median_range.copy_(self.bar_range[sl].median())
        self.median_volume.copy_(self.volume[sl].median().clamp_min(1e-12))
        self.fold = fold

    def medians_at(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(median_range, median_abs_return) that price and route the orders of bars ``rows`` ([N] int64):
        the fold's two 0-d tensors here; a pooled universe's are each row's own symbol's ([N])."""
        return self.median_range, self.median_abs_return

    # ------------------------------------------------------------------ observations
    def gather_features(self, bar_idx: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Normalised features of bars ``bar_idx`` ([N] int64) written into ``out`` ([N, F] float32)."""
        torch.index_select(self.features, 0, bar_idx, out=out)
        out.sub_(self.norm_mean).mul_(self.norm_inv_std)
        return out

    def observe(self, bar_idx: torch.Tensor, portfolio: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Observation rows: normalised features of ``bar_idx`` ++ ``portfolio`` ([N, 3]).

        out: [N, F + 3] float32, written in place (no allocation, CUDA-graph safe).
        """
        f = self.n_features
        self.gather_features(bar_idx, out[:, :f])
        out[:, f:].copy_(portfolio)
        return out
