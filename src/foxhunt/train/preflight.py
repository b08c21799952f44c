"""Does a prepared market fit its training configuration? Checked before anything is allocated."""

from __future__ import annotations

from typing import Sequence

from foxhunt.config import Config
from foxhunt.env.params import check_episode_length
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.pipeline import Prepared
from foxhunt.train.selection import split_fold


def check_folds(cfg: Config, folds: Sequence[FoldRange]) -> None:
    """ConfigError naming the rule: every fold's validation window has ≥ 2 bars; an episode fits the
    bars each fold trains on (its training window less the held-back tail with ``select = "inner"``).
    Needs no market: a universe trained one agent per symbol checks every symbol's folds before its
    first symbol's features are built (``foxhunt.train.per_symbol``)."""
    for f in folds:
        if f.val_len < 2:
            raise ConfigError(f"fold {f.fold}: the validation window has {f.val_len} bar(s); it needs >= 2")
        part = split_fold(f, cfg.train.inner_fraction, cfg.folds.purge)[0] if cfg.train.select == "inner" else f
        check_episode_length(cfg.env.episode_length, part.train_start, part.train_end)


def check_prepared(prepared: Prepared) -> None:
    """``check_folds`` on the prepared folds, and ``train.mirror`` matches whether the market holds its mirror."""
    cfg, market = prepared.config, prepared.market
    check_folds(cfg, prepared.folds)
    if cfg.train.mirror != bool(market.mirror_offset):
        raise ConfigError(f"train.mirror = {str(cfg.train.mirror).lower()}, but the market was prepared "
                          f"{'without' if cfg.train.mirror else 'with'} its mirror (prepare it from this configuration)")
