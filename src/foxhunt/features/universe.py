"""A universe's features: each symbol's computed alone, cached alone, laid out with the bars' offsets.

Every symbol's bars go through the single-series path (``cache.load_or_build``: the 51 spec
features and the targets, keyed by that symbol's content hash; then ``extra.with_extras``), so no
rolling window, EMA or forward target ever spans two symbols: row t of symbol s depends on bars of
symbol s up to t only, and its targets are NaN where t + h passes that symbol's last bar. The cache
is per symbol: adding a symbol to a universe builds that symbol's entry and reuses the others'.

The result is concatenated in the universe's order with the universe's offsets, as one FeatureSet
(``UniverseFeatures.features``) that ``foxhunt.universe_market.UniverseMarket`` uploads once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from foxhunt.data.universe import Universe
from foxhunt.errors import CacheError
from foxhunt.features import spec
from foxhunt.features.cache import load_or_build, require_formed_rows
from foxhunt.features.extra import with_extras
from foxhunt.features.featureset import FeatureSet

__all__ = ["UniverseFeatures", "universe_features", "universe_sha256"]


@dataclass(frozen=True)
class UniverseFeatures:
    """The features of S symbols, concatenated.

    symbols: S names (the universe's order). offsets: [S + 1] int64 (the universe's).
    features: one FeatureSet of R = offsets[-1] rows: features [R, F] float32 (each symbol's first
        ``warmup`` rows exactly 0), targets [R, 4] float32 (NaN past each symbol's own end), ohlc
        [R, 4] float64, volume [R] float64, timestamps [R] int64 (increasing within a symbol);
        ``has_volume`` is True only when every symbol has volume; ``source_sha256`` is
        ``universe_sha256`` of the symbols' content hashes.
    cache_paths: S cache files (one entry per symbol). built: S flags, computed now (True) or
        reused from the cache (False). sha256: S content hashes of the symbols' bars.
    """

    symbols: tuple[str, ...]
    offsets: np.ndarray
    features: FeatureSet
    cache_paths: tuple[Path, ...]
    built: tuple[bool, ...]
    sha256: tuple[str, ...]

    def rows(self, s: int) -> slice:
        """The rows of symbol s."""
        return slice(int(self.offsets[s]), int(self.offsets[s + 1]))

    def symbol_features(self, s: int) -> torch.Tensor:
        """[T_s, F] float32 symbol s's features (a view)."""
        return self.features.features[self.rows(s)]


def universe_sha256(symbols: Sequence[str], hashes: Sequence[str]) -> str:
    """sha256 naming a universe's content: its symbols and each one's bar content hash, in order."""
    text = "\n".join(f"{s}\t{h}" for s, h in zip(symbols, hashes))
    return hashlib.sha256(f"foxhunt-universe/1\n{text}".encode()).hexdigest()


def universe_features(universe: Universe, cache_dir: str | os.PathLike[str], device: torch.device | str | None = None, *,
                      long_momentum: Sequence[int] = (), ema_horizons: Sequence[int] = ()) -> UniverseFeatures:
    """Each symbol's features from its cache entry or built now, then concatenated.

    Every symbol is checked for enough bars (``too-few-bars``, naming its file) before any entry is
    written. long_momentum, ema_horizons: ``features.long_momentum`` / ``features.ema_horizons``
    columns, computed per symbol after the cache (as for one series).
    """
    for bars in universe.bars:
        require_formed_rows(bars)
    parts: list[FeatureSet] = []
    paths: list[Path] = []
    built: list[bool] = []
    for bars in universe.bars:
        res = load_or_build(bars, cache_dir, device=device)
        if res.features.warmup != spec.WARMUP:
            raise CacheError(f"feature cache {res.path}: warm-up {res.features.warmup} recorded, the spec's is {spec.WARMUP}")
        parts.append(with_extras(res.features, list(long_momentum), list(ema_horizons)))
        paths.append(res.path)
        built.append(res.built)
    hashes = tuple(p.source_sha256 for p in parts)
    first = parts[0]

    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(p, name) for p in parts]) if len(parts) > 1 else getattr(first, name)

    fs = FeatureSet(
        features=cat("features"), targets=cat("targets"), ohlc=cat("ohlc"), volume=cat("volume"), timestamps=cat("timestamps"),
        names=first.names, warmup=first.warmup, has_volume=all(p.has_volume for p in parts),
        spec_version=first.spec_version, source_sha256=universe_sha256(universe.symbols, hashes),
    )
    return UniverseFeatures(universe.symbols, universe.offsets.copy(), fs, tuple(paths), tuple(built), hashes)
