"""The shared front half of every job: config → bars → feature cache → folds → MarketData."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from foxhunt.config import Config, load_config
from foxhunt.data import Bars, load_source
from foxhunt.device import resolve_device
from foxhunt.errors import CacheError
from foxhunt.features.featureset import FeatureSet
from foxhunt.fold_layout import fit_folds
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData


@dataclass
class Prepared:
    config: Config
    bars: Bars
    features: FeatureSet
    cache_path: Path
    cache_built: bool
    folds: list[FoldRange]
    market: MarketData
    timings: dict[str, float]
    fold_note: str | None = None  # the folds were laid out by the data (foxhunt.fold_layout)


def prepare_market(
    config: str | Path | Config | None = None,
    overrides: Sequence[str] = (),
    console: Any = None,
    values: dict[str, dict[str, Any]] | None = None,
    *,
    fold_layout: str = "config",
    bars: Bars | None = None,
) -> Prepared:
    """Load (or generate) bars, build or reuse the feature cache, lay out folds, upload once.

    overrides: ``section.key=value`` texts (TOML values); values: {section: {key: value}} set as
    they are (CLI options such as paths). Both apply only when ``config`` is not a Config.
    fold_layout: "config" | "fit" | "data", whether the folds are laid out by the data
    (``foxhunt.fold_layout.fit_folds``; ``Prepared.config`` then holds that layout). bars: the
    config's bars, already loaded (not loaded again).
    """
    import time

    cfg = config if isinstance(config, Config) else load_config(config, list(overrides), values=values)
    from foxhunt.features import spec
    from foxhunt.features.cache import require_formed_rows
    from foxhunt.paths import check_output_dir

    check_output_dir(cfg.features.cache_dir, "features.cache_dir")
    device = resolve_device(cfg.run.device)
    t0 = time.perf_counter()
    bars = load_source(cfg.data, limit_samples=True) if bars is None else bars
    t1 = time.perf_counter()
    # Every check on the bars comes before the cache is written: too few bars, a fold layout
    # that does not fit (the folds start after the spec's warm-up, known before building).
    require_formed_rows(bars)
    cfg, folds, fold_note = fit_folds(cfg, bars.timestamps, spec.WARMUP, layout=fold_layout)
    return _upload(cfg, bars, folds, device, t1 - t0, fold_note)


def prepare_symbol(cfg: Config, bars: Bars, folds: Sequence[FoldRange], load_s: float = 0.0) -> Prepared:
    """``prepare_market``'s result for ``bars`` already loaded and ``folds`` already laid out (indices
    into ``bars``): one symbol of a universe trained alone (``foxhunt.train.per_symbol``). The features,
    cache and upload are ``prepare_market``'s own."""
    from foxhunt.features.cache import require_formed_rows
    from foxhunt.paths import check_output_dir

    check_output_dir(cfg.features.cache_dir, "features.cache_dir")
    require_formed_rows(bars)
    return _upload(cfg, bars, list(folds), resolve_device(cfg.run.device), load_s, None)


def _upload(cfg: Config, bars: Bars, folds: list[FoldRange], device: Any, load_s: float, fold_note: str | None) -> Prepared:
    """Features from the cache (or built), the market uploaded, the first fold set."""
    import time

    from foxhunt.features import spec
    from foxhunt.features.cache import load_or_build
    from foxhunt.features.extra import with_extras

    t1 = time.perf_counter()
    res = load_or_build(bars, cfg.features.cache_dir, device=device)
    t2 = time.perf_counter()
    if res.features.warmup != spec.WARMUP:  # the folds above were laid out after spec.WARMUP
        raise CacheError(f"feature cache {res.path}: warm-up {res.features.warmup} recorded, the spec's is {spec.WARMUP}")
    features = with_extras(res.features, cfg.features.long_momentum, cfg.features.ema_horizons)
    market = MarketData(features, device, mirror=mirrored_features(cfg, bars, device) if cfg.train.mirror else None)
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    t3 = time.perf_counter()
    market.set_fold(folds[0])
    timings = {"load_s": load_s, "features_s": t2 - t1, "upload_s": t3 - t2}
    return Prepared(cfg, bars, features, res.path, res.built, folds, market, timings, fold_note)


def mirrored_features(cfg: Config, bars: Bars, device: Any, extra: dict[str, Any] | None = None) -> FeatureSet:
    """The features of ``bars``' mirror (``foxhunt.data.mirror``), through the same cache and extra
    columns as the data's; ``extra``: a scenario's own columns, negated (they carry a direction)."""
    from foxhunt.data.mirror import mirror_bars, mirror_extra
    from foxhunt.features.cache import load_or_build
    from foxhunt.features.extra import append_columns, with_extras

    res = load_or_build(mirror_bars(bars), cfg.features.cache_dir, device=device)
    fs = with_extras(res.features, cfg.features.long_momentum, cfg.features.ema_horizons)
    return append_columns(fs, mirror_extra(extra)) if extra else fs


@dataclass
class PreparedUniverse:
    """A universe prepared (``prepare_universe``): its bars, features, folds and device upload.

    calendar: [U] int64 UTC ns, the union calendar the folds are laid out on (``foxhunt.universe_folds``).
    timings: load_s (files read and checked, folds laid out), features_s (built or read from the
    cache), upload_s (to the device), in seconds.
    """

    config: Config
    universe: Any  # foxhunt.data.universe.Universe
    features: Any  # foxhunt.features.universe.UniverseFeatures
    folds: list[Any]  # [foxhunt.universe_folds.UniverseFold]
    calendar: Any
    market: Any  # foxhunt.universe_market.UniverseMarket
    timings: dict[str, float]
    fold_note: str | None = None


def prepare_universe(cfg: Config, sources: Sequence[str | Path] | None = None, *, fold_layout: str = "config",
                     universe: Any = None, cut: int | None = None, mirror: bool | None = None) -> PreparedUniverse:
    """Load the universe (``foxhunt.data.universe``), lay out its folds, build or reuse each symbol's
    features, upload once. sources: default ``data.path`` + ``data.paths``; universe: already loaded;
    cut: the folds end at this union-calendar date (``foxhunt tune``'s hold-out; the bars after it are
    loaded and uploaded all the same). mirror: upload every symbol's mirrored bars too (their features
    through the same per-symbol cache; ``foxhunt.universe_market``); default ``train.mirror`` (a
    backtest, which never visits them, passes False).

    Every check comes before the cache is written: each file's rules, the universe's (duplicate
    symbols, mixed intervals, data.symbols), each symbol's bar count, the folds and their members.
    """
    import time

    from foxhunt.data.universe import config_sources, load_universe
    from foxhunt.features import spec
    from foxhunt.features.cache import require_formed_rows
    from foxhunt.features.universe import universe_features
    from foxhunt.paths import check_output_dir
    from foxhunt.universe_folds import universe_folds
    from foxhunt.universe_market import UniverseMarket

    check_output_dir(cfg.features.cache_dir, "features.cache_dir")
    device = resolve_device(cfg.run.device)
    t0 = time.perf_counter()
    if universe is None:
        universe = load_universe(list(sources) if sources is not None else config_sources(cfg.data), cfg.data)
    for bars in universe.bars:
        require_formed_rows(bars)
    cfg, folds, note, calendar = universe_folds(cfg, universe, spec.WARMUP, layout=fold_layout, cut=cut)
    t1 = time.perf_counter()
    extras = {"long_momentum": cfg.features.long_momentum, "ema_horizons": cfg.features.ema_horizons}
    uf = universe_features(universe, cfg.features.cache_dir, device, **extras)
    mirrored = None
    if cfg.train.mirror if mirror is None else mirror:
        from foxhunt.data.mirror import mirror_universe

        mirrored = universe_features(mirror_universe(universe), cfg.features.cache_dir, device, **extras)
    t2 = time.perf_counter()
    market = UniverseMarket(uf, device, mirror=mirrored)
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    t3 = time.perf_counter()
    timings = {"load_s": t1 - t0, "features_s": t2 - t1, "upload_s": t3 - t2}
    return PreparedUniverse(cfg, universe, uf, folds, calendar, market, timings, note)
