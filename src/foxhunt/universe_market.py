"""UniverseMarket: a universe's features uploaded once, as one MarketData with per-symbol offsets.

All S symbols' rows sit in MarketData's device tensors back to back (``features`` [R, F],
``ohlc`` [R, 4] …), symbol s at rows ``offsets[s]:offsets[s + 1]``. Everything MarketData derives
row by row stays within a symbol, except one thing this class corrects: ``log_return`` at a
symbol's first row would compare its first close with the previous symbol's last, so it is 0
there (as at row 0 of one series). A window, an episode or a backtest row is (symbol, start,
length) and must stay inside ``[offsets[s], offsets[s + 1])``; ``UniverseFold.bounds`` are such rows.

Per-fold statistics are per symbol (``norm_stats_per_symbol``: each member symbol's mean and std
over its own training rows). MarketData's single-range ``set_fold`` works for a one-symbol universe
(a FoldRange); over several symbols the fold is a ``PooledFold`` (pooled training):

* **Normalisation.** Each symbol's rows are normalised with that symbol's own training statistics
  (mean, 1/std over its rows ``bounds[s, 0]:bounds[s, 1]``), written at the fold switch into
  ``features`` (the raw rows stay in ``raw_features``), and ``norm_mean`` / ``norm_inv_std`` are 0 / 1.
  Every reader of the features (the env's observations, replayed bar indices re-gathered, the fused
  DQN step, the direct learner's windows, the backtester's [W, F] statistics) then sees row r
  normalised with its own symbol's statistics, with no per-row symbol lookup in any hot loop: the
  float32 values are those ``gather_features`` computes from the symbol's mean / inverse std
  ((x − mean) · inv, then (· − 0) · 1, exact). The cost is one more [R, F] float32 buffer and one
  elementwise pass per fold switch.
* **Episode starts.** ``sym_lo`` / ``sym_hi`` / ``sym_cum`` [S] (``foxhunt.env.pooled``): a symbol drawn
  by its weight, then a start inside its training rows; an episode never crosses an offset.
* **Medians** (order routing and costs, the volatility EMA's start): each symbol's own, over its
  training rows (``sym_median_range`` / ``sym_median_abs_return`` / ``sym_median_volume`` [S]), read per
  bar by ``medians_at`` (the env step, its resets, the torch backtester, the direct learner), so no
  symbol's bars reach another's rewards or metrics. The 0-d ``median_*`` hold the members' training
  rows pooled; only the fused kernels read those, and a pooled run does not use them.
* **Mirror** (``train.mirror``): every symbol's mirrored bars (``foxhunt.data.mirror.mirror_universe``)
  sit after all R rows, symbol s's at ``R + offsets[s]`` … (``mirror_offset`` = R, as for one series).
  Half of the training draws land in the mirrored rows of the drawn symbol (``foxhunt.env.pooled``);
  they are normalised with the symbol's own statistics and read its medians, as one series' mirror
  reads the data's. Folds, held-back windows and backtests use rows below R only.
* ``fold_bounds`` holds the rows' envelope (the first member's training start … the last member's
  validation end); nothing samples from it on a pooled market.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from foxhunt.features.universe import UniverseFeatures
from foxhunt.folds import FoldRange
from foxhunt.market import _MEDIAN_SAMPLES, MarketData, NormStats, inverse_std
from foxhunt.universe_folds import UniverseFold

__all__ = ["PooledFold", "UniverseMarket"]


@dataclass(frozen=True)
class PooledFold(FoldRange):
    """A fold of pooled training across a universe of S symbols.

    The FoldRange fields are the fold on the union calendar (indices into it: folds.json and a resumed
    run compare them; ``to_dict`` gives them alone). bounds: [S, 4] int64 global rows (train_start,
    train_end, val_start, val_end) of each symbol: the rows the agent trains on (with inner selection
    the training rows before the held-back window) and the validation window. member: [S] bool, the
    symbol is in the fold. weights: [S] float64 sampling weights (0 outside the fold). times: the
    fold's (train_start, train_end, val_start, val_end) UTC ns (``UniverseFold.times``).
    """

    bounds: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64), compare=False, repr=False)
    member: np.ndarray = field(default_factory=lambda: np.zeros(0, bool), compare=False, repr=False)
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    times: tuple[int, int, int, int] = field(default=(0, 0, 0, 0), compare=False)

    def to_dict(self) -> dict[str, int]:
        return {"fold": self.fold, "train_start": self.train_start, "train_end": self.train_end,
                "val_start": self.val_start, "val_end": self.val_end}

    @property
    def members(self) -> np.ndarray:
        """[M] int64 the member symbols' indices, in the universe's order."""
        return np.flatnonzero(self.member)

    @classmethod
    def of(cls, uf: UniverseFold, weighting: str = "bars", train_end: np.ndarray | None = None) -> "PooledFold":
        """The pooled fold of ``uf``: its training rows end at ``train_end`` ([S] global rows; default the
        fold's own), weights ∝ each member's training rows (``"bars"``) or equal (``"equal"``)."""
        b = uf.bounds.copy()
        if train_end is not None:
            b[:, 1] = np.asarray(train_end, dtype=np.int64)
        if weighting not in ("bars", "equal"):
            raise ValueError(f"symbol weighting {weighting!r}: expected 'bars' or 'equal'")
        w = (b[:, 1] - b[:, 0]).astype(np.float64) if weighting == "bars" else np.ones(b.shape[0])
        w = np.where(uf.member, w, 0.0)
        c = uf.calendar
        return cls(c.fold, c.train_start, c.train_end, c.val_start, c.val_end, bounds=b, member=uf.member.copy(),
                   weights=w, times=uf.times)


class UniverseMarket(MarketData):
    """MarketData over a universe's concatenated rows (``n_bars`` = R, every symbol's bars).

    symbols: S names. offsets: [S + 1] int64 on the device; offsets_host: the same, a numpy array.
    """

    def __init__(self, uf: UniverseFeatures, device: torch.device | str = "cpu",
                 mirror: UniverseFeatures | None = None) -> None:
        """mirror: the universe's mirror (the same symbols and offsets, ``foxhunt.data.mirror.mirror_universe``'s
        features), appended after all R rows for training draws (module docstring)."""
        if mirror is not None and (mirror.symbols != uf.symbols or not np.array_equal(mirror.offsets, uf.offsets)):
            raise ValueError("UniverseMarket: the mirror's symbols or offsets differ from the universe's")
        super().__init__(uf.features, device, mirror=mirror.features if mirror is not None else None)
        self.symbols = uf.symbols
        self._calendar: np.ndarray | None = None
        self.offsets_host = uf.offsets.copy()
        self.offsets = torch.as_tensor(uf.offsets, dtype=torch.int64).to(self.device)
        starts = self.offsets[1:-1]
        if starts.numel():
            # A symbol's first return has no previous bar of its own: 0, never a cross-symbol ratio
            # (in the mirrored rows too; each half's row 0 is 0 already).
            self.log_return.index_fill_(0, starts, 0.0)
            if self.mirror_offset:
                self.log_return.index_fill_(0, starts + self.mirror_offset, 0.0)
        self.pooled = self.n_symbols > 1
        if self.pooled:
            s, dev = self.n_symbols, self.device
            self.features = self.raw_features.clone()  # normalised per symbol at each fold switch
            self.symbol_ends = self.offsets[1:].contiguous()
            self.sym_lo = torch.zeros(s, dtype=torch.int64, device=dev)
            self.sym_hi = torch.zeros(s, dtype=torch.int64, device=dev)
            self.sym_cum = torch.ones(s, dtype=torch.float64, device=dev)
            self.sym_mean = torch.zeros((s, self.n_features), dtype=torch.float32, device=dev)
            """[S, F] float32 each symbol's training mean of the current fold (0 outside the fold)."""
            self.sym_inv_std = torch.ones((s, self.n_features), dtype=torch.float32, device=dev)
            """[S, F] float32 its inverse std (0 for a constant feature; 1 outside the fold)."""
            self.sym_median_range = torch.zeros(s, dtype=torch.float32, device=dev)
            self.sym_median_abs_return = torch.zeros(s, dtype=torch.float32, device=dev)
            self.sym_median_volume = torch.ones(s, dtype=torch.float32, device=dev)
            """[S] float32 each symbol's training medians of the current fold (``MarketData.set_fold``'s, per symbol)."""

    def calendar_host(self) -> np.ndarray:
        """[U] int64 UTC ns: the union of the symbols' bar times, sorted (``foxhunt.universe_folds``' calendar).
        The concatenated rows are not one time axis: annualising on them counted S symbols' bars as one's."""
        if self._calendar is None:
            self._calendar = np.unique(self.timestamps_host)
        return self._calendar

    @property
    def n_symbols(self) -> int:
        return len(self.symbols)

    def set_fold(self, fold: FoldRange) -> None:
        """A ``PooledFold`` (several symbols: the module docstring), or MarketData's one-range fold for a
        universe of one symbol: over several symbols one range would mix their rows in one set of
        statistics."""
        if isinstance(fold, PooledFold) and self.pooled:
            self._set_pooled(fold)
            return
        if self.n_symbols > 1:
            raise ValueError(f"set_fold: one range over {self.n_symbols} symbols would cross their offsets; a universe's "
                             "folds are per-symbol ranges (UniverseFold.bounds, norm_stats_per_symbol)")
        super().set_fold(fold)

    def norm_stats_per_symbol(self, fold: UniverseFold) -> NormStats:
        """Mean and std of each member symbol's training rows: NormStats of [S, F] float64 on the
        device (a non-member's row: mean 0, std 1). One chunked reduction per member symbol, at a
        fold switch (not in a hot loop)."""
        s, f = self.n_symbols, self.n_features
        mean = torch.zeros((s, f), dtype=torch.float64, device=self.device)
        std = torch.ones((s, f), dtype=torch.float64, device=self.device)
        for k in range(s):
            if fold.member[k]:
                st = self.norm_stats(int(fold.bounds[k, 0]), int(fold.bounds[k, 1]))
                mean[k], std[k] = st.mean, st.std
        return NormStats(mean=mean, std=std)

    def _set_pooled(self, fold: PooledFold) -> None:
        """Make a pooled fold current, in place (the module docstring). Host work per symbol (checks,
        one statistics reduction and one normalising pass each): a fold switch, not a hot loop."""
        b, off = fold.bounds, self.offsets_host
        if b.shape != (self.n_symbols, 4) or fold.member.shape != (self.n_symbols,):
            raise ValueError(f"PooledFold: bounds {b.shape} / member {fold.member.shape} do not match {self.n_symbols} symbols")
        members = fold.members
        if members.size == 0 or not (fold.weights[members] > 0).all():
            raise ValueError(f"fold {fold.fold}: no member symbol, or a member without training rows")
        for s in members:
            if not off[s] <= b[s, 0] < b[s, 1] <= b[s, 2] < b[s, 3] <= off[s + 1]:
                raise ValueError(f"fold {fold.fold}: symbol {self.symbols[s]}'s rows {b[s].tolist()} leave its "
                                 f"[{off[s]}, {off[s + 1]})")
        stats = self.norm_stats_per_symbol(fold)  # each member's own training rows (raw features)
        self.sym_mean.copy_(stats.mean)
        self.sym_inv_std.copy_(inverse_std(stats.std))
        for s in range(self.n_symbols):  # the same float32 ops as gather_features: (x − mean) · inv
            for shift in (0, self.mirror_offset) if self.mirror_offset else (0,):  # its mirrored rows: its statistics
                rows = slice(int(off[s]) + shift, int(off[s + 1]) + shift)
                torch.sub(self.raw_features[rows], self.sym_mean[s], out=self.features[rows])
                self.features[rows].mul_(self.sym_inv_std[s])
        self.norm_mean.zero_()
        self.norm_inv_std.fill_(1.0)
        self.sym_lo.copy_(torch.as_tensor(b[:, 0]))
        self.sym_hi.copy_(torch.as_tensor(b[:, 1]))
        cum = np.cumsum(fold.weights) / fold.weights.sum()
        cum[members[-1]:] = 1.0  # exactly 1 from the last member on: every u < 1 finds a member
        self.sym_cum.copy_(torch.as_tensor(cum))
        envelope = [int(b[members, 0].min()), int(b[members, 1].max()), int(b[members, 2].min()), int(b[members, 3].max())]
        self.fold_bounds.copy_(torch.tensor(envelope, dtype=torch.int64), non_blocking=True)
        rows = self._median_rows(fold, fold.members)
        self.median_abs_return.copy_(self.log_return.index_select(0, rows).abs().median())
        self.median_range.copy_(self.bar_range.index_select(0, rows).median())
        self.median_volume.copy_(self.volume.index_select(0, rows).median().clamp_min(1e-12))
        for s in members:  # each symbol's own medians, as MarketData.set_fold takes them on one series
            rows = self._median_rows(fold, [s])
            self.sym_median_abs_return[s] = self.log_return.index_select(0, rows).abs().median()
            self.sym_median_range[s] = self.bar_range.index_select(0, rows).median()
            self.sym_median_volume[s] = self.volume.index_select(0, rows).median().clamp_min(1e-12)
        self.fold = fold

    def medians_at(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(median_range, median_abs_return) [N] of each row's own symbol while a PooledFold is current, else
        the 0-d pair (the fold's, or what a universe backtest set from the model file)."""
        if not (self.pooled and isinstance(self.fold, PooledFold)):
            # no pooled fold (e.g. a saved model's universe backtest, backtest/universe.py): the 0-d pair its
            # caller set, as for one series
            return self.median_range, self.median_abs_return
        from foxhunt.env.pooled import symbol_of_rows

        s = symbol_of_rows(rows, self).clamp_(max=self.n_symbols - 1)
        return self.sym_median_range.index_select(0, s), self.sym_median_abs_return.index_select(0, s)

    def _median_rows(self, fold: PooledFold, symbols: Any) -> torch.Tensor:
        """[≤ _MEDIAN_SAMPLES] int64 evenly spaced rows of ``symbols``' training rows, pooled."""
        rows = np.concatenate([np.arange(fold.bounds[s, 0], fold.bounds[s, 1]) for s in symbols])
        stride = max(1, -(-rows.shape[0] // _MEDIAN_SAMPLES))
        return torch.as_tensor(rows[::stride]).to(self.device)

    def window_symbols(self, starts: Any, lengths: Any) -> np.ndarray:
        """[W] int64 the symbol of each window (bars start … start + length, global rows); ValueError
        naming the first that leaves its symbol's rows (a backtest never crosses an offset)."""
        st, ln = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        sym = np.searchsorted(self.offsets_host, st, side="right") - 1
        bad = (sym < 0) | (sym >= self.n_symbols) | (st + ln >= self.offsets_host[np.clip(sym + 1, 0, self.n_symbols)])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"window {i}: bars {st[i]} … {st[i] + ln[i]} cross a symbol's offset (offsets {self.offsets_host.tolist()})")
        return sym
