"""A universe's features (issue 47): each symbol's rows are bitwise its single-file features, nothing
crosses a symbol's boundary (a poison bar in one symbol reaches no other), the cache is per symbol
(adding a symbol builds only that one), and the device upload keeps symbols apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt.config import build_config
from foxhunt.data.loader import load_bars
from foxhunt.data.universe import load_universe
from foxhunt.features import spec
from foxhunt.features.cache import load_or_build
from foxhunt.features.extra import with_extras
from foxhunt.features.universe import universe_features
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.universe_folds import universe_folds
from foxhunt.universe_market import UniverseMarket
from tests.data.universe_files import frames, universe_dir, write

FIELDS = ("features", "targets", "ohlc", "volume", "timestamps")


def data_cfg(**keys: object):
    return build_config({"data": {"source": "file", "path": "unused", **keys}}).data


def bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN targets included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()


def test_each_symbols_features_are_bitwise_its_single_file_features(tmp_path: Path) -> None:
    d = universe_dir(tmp_path / "u")
    u = load_universe([d], data_cfg())
    uf = universe_features(u, tmp_path / "cache", long_momentum=[120], ema_horizons=[30])
    for s, name in enumerate(("AAA.csv", "BBB.parquet", "CCC.csv.gz")):
        alone = with_extras(load_or_build(load_bars(d / name), tmp_path / "single").features, [120], [30])
        for field in FIELDS:
            assert bitwise(getattr(uf.features, field)[uf.rows(s)], getattr(alone, field)), (name, field)
        assert uf.sha256[s] == alone.source_sha256
    assert uf.features.names == alone.names and len(uf.features) == int(u.offsets[-1])
    # Each symbol's targets end in NaN at its own last bars: no forward return reads the next symbol.
    for s in range(len(u)):
        assert torch.isnan(uf.features.targets[uf.rows(s)][-1]).all()


def _poisoned(tmp_path: Path, poison: bool) -> Path:
    """AAA, BBB, CCC in a folder; with ``poison``, BBB's bar 350 jumps ×1000 (a valid bar, absurd price)."""
    d = tmp_path / ("poison" if poison else "clean")
    f = frames()
    if poison:
        for col in ("open", "high", "low", "close"):
            f["BBB"].loc[350, col] *= 1000.0
    for name, df in f.items():
        write(d / f"{name}.csv", df)
    return d


def test_a_poison_bar_in_one_symbol_reaches_no_other_symbols_features(tmp_path: Path) -> None:
    cfg = data_cfg()
    clean = universe_features(load_universe([_poisoned(tmp_path, False)], cfg), tmp_path / "cache")
    dirty = universe_features(load_universe([_poisoned(tmp_path, True)], cfg), tmp_path / "cache")
    for s in (0, 2):  # AAA (before BBB's rows) and CCC (after them)
        for field in FIELDS:
            assert bitwise(getattr(dirty.features, field)[dirty.rows(s)], getattr(clean.features, field)[clean.rows(s)])
    b = dirty.rows(1)
    changed = (dirty.features.features[b] != clean.features.features[b]).any(dim=1).nonzero().flatten()
    assert int(changed[0]) == 350  # causal: BBB's features change from the poisoned bar on, none before


def test_adding_a_symbol_builds_only_that_symbols_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = universe_dir(tmp_path / "u")
    calls: list[int] = []
    real = spec.build_features

    def counting(bars, *args, **kwargs):
        calls.append(len(bars))
        return real(bars, *args, **kwargs)

    monkeypatch.setattr(spec, "build_features", counting)
    two = universe_features(load_universe([d], data_cfg(symbols=["AAA", "BBB"])), tmp_path / "cache")
    assert two.built == (True, True) and calls == [520, 480]
    three = universe_features(load_universe([d], data_cfg()), tmp_path / "cache")
    assert three.built == (False, False, True) and calls == [520, 480, 430]  # only CCC computed
    assert three.cache_paths[:2] == two.cache_paths
    assert bitwise(three.features.features[:1000], two.features.features)


def test_the_upload_keeps_symbols_apart_and_per_symbol_stats_are_each_symbols_own(tmp_path: Path) -> None:
    d = universe_dir(tmp_path / "u")
    u = load_universe([d], data_cfg())
    uf = universe_features(u, tmp_path / "cache")
    m = UniverseMarket(uf, "cpu")
    assert m.offsets.tolist() == u.offsets.tolist() and m.symbols == u.symbols and m.n_bars == u.n_bars
    with pytest.raises(ValueError, match="one range over 3 symbols would cross their offsets"):
        m.set_fold(FoldRange(0, 400, 600, 610, 700))  # AAA's rows into BBB's: refused, never mixed
    cfg = build_config({"data": {"source": "file", "path": str(d), "min_train_bars": 20}, "folds": {"purge": 5}})
    _, folds, _, _ = universe_folds(cfg, u, spec.WARMUP, layout="fit")
    stats = m.norm_stats_per_symbol(folds[-1])
    for s, name in enumerate(("AAA.csv", "BBB.parquet", "CCC.csv.gz")):
        alone = MarketData(load_or_build(load_bars(d / name), tmp_path / "cache").features, "cpu")
        rows = uf.rows(s)
        # log_return: each symbol's first bar is 0 (no return across symbols), the rest its own.
        assert bitwise(m.log_return[rows], alone.log_return) and float(m.log_return[rows.start]) == 0.0
        assert bitwise(m.features[rows], alone.features) and bitwise(m.bar_range[rows], alone.bar_range)
        if folds[-1].member[s]:
            r = folds[-1].symbol_range(s, u.offsets)
            own = alone.norm_stats(r.train_start, r.train_end)
            assert torch.allclose(stats.mean[s], own.mean, rtol=1e-12, atol=1e-12)
            assert torch.allclose(stats.std[s], own.std, rtol=1e-12, atol=1e-12)
