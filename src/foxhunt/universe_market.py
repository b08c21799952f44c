"""UniverseMarket: a universe's features uploaded once, as one MarketData with per-symbol offsets.

All S symbols' rows sit in MarketData's device tensors back to back (``features`` [R, F],
``ohlc`` [R, 4] …), symbol s at rows ``offsets[s]:offsets[s + 1]``. Everything MarketData derives
row by row stays within a symbol, except one thing this class corrects: ``log_return`` at a
symbol's first row would compare its first close with the previous symbol's last, so it is 0
there (as at row 0 of one series). A window, an episode or a backtest row is (symbol, start,
length) and must stay inside ``[offsets[s], offsets[s + 1])``; ``UniverseFold.bounds`` are such rows.

Per-fold statistics are per symbol (``norm_stats_per_symbol``: each member symbol's mean and std
over its own training rows). MarketData's single-range ``set_fold`` works for a one-symbol universe
and refuses several symbols (one range would mix them); pooled training over several symbols (envs that draw a symbol, then a start) is the
next layer's and is not here.
"""

from __future__ import annotations

import torch

from foxhunt.features.universe import UniverseFeatures
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData, NormStats
from foxhunt.universe_folds import UniverseFold

__all__ = ["UniverseMarket"]


class UniverseMarket(MarketData):
    """MarketData over a universe's concatenated rows (``n_bars`` = R, every symbol's bars).

    symbols: S names. offsets: [S + 1] int64 on the device; offsets_host: the same, a numpy array.
    """

    def __init__(self, uf: UniverseFeatures, device: torch.device | str = "cpu") -> None:
        super().__init__(uf.features, device)
        self.symbols = uf.symbols
        self.offsets_host = uf.offsets.copy()
        self.offsets = torch.as_tensor(uf.offsets, dtype=torch.int64).to(self.device)
        starts = self.offsets[1:-1]
        if starts.numel():
            # A symbol's first return has no previous bar of its own: 0, never a cross-symbol ratio.
            self.log_return.index_fill_(0, starts, 0.0)

    @property
    def n_symbols(self) -> int:
        return len(self.symbols)

    def set_fold(self, fold: FoldRange) -> None:
        """MarketData's one-range fold, for a universe of one symbol only: over several symbols one
        range would mix their rows in one set of statistics (use ``norm_stats_per_symbol``)."""
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
