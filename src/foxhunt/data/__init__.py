"""Bar data: loading and validation, the synthetic market, and the real sample series."""

from __future__ import annotations

from typing import TYPE_CHECKING

from foxhunt.data.bars import Bars, BarDataError
from foxhunt.data.options import file_options

if TYPE_CHECKING:
    from foxhunt.config import DataConfig

__all__ = ["Bars", "BarDataError", "file_options", "load_source"]


def load_source(cfg: "DataConfig", *, limit_samples: bool = False) -> Bars:
    """The bars a data config names: generated, a shipped sample, or a validated file (or a universe
    of one symbol: ``foxhunt.data.universe.one_symbol``).

    limit_samples: keep only the last ``cfg.bars`` bars of a real sample series.
    """
    if cfg.source == "synthetic":
        from foxhunt.data.synthetic import generate_bars

        return generate_bars(cfg.bars, seed=cfg.seed, bar_seconds=cfg.bar_seconds, signal=cfg.signal)
    if cfg.source in ("sp500", "nasdaq"):
        from foxhunt.data.samples import load_sample

        bars = load_sample(cfg.source)
        if limit_samples and len(bars) > cfg.bars:
            bars = bars.slice(len(bars) - cfg.bars, len(bars))
        return bars
    from foxhunt.data.universe import one_symbol

    # A directory, several files, a pattern or a long table is a universe: of one symbol it is that
    # symbol's bars; of several, a one-line refusal (pooled training does not exist yet).
    return one_symbol(cfg)

