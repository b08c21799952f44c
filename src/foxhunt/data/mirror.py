"""The mirrored market: the same bars with every log return negated (``train.mirror``).

Reflecting log prices about the first close, p' = c0² / p, turns every up-move into the same
down-move: a bar's log return r becomes −r, its range and volume stay, high and low swap
(high' = c0² / low). A policy trained on a market and its mirror cannot profit from a fixed
direction (being long through a training window whose drift was up loses as much in the mirror);
it must read the direction from the features, the way a momentum or reversal rule does. Features
built from the mirrored bars are exact: direction-odd columns (returns, momentum, EMA trend z-scores)
change sign, volatility and volume columns do not.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from foxhunt.data.bars import Bars

if TYPE_CHECKING:
    from foxhunt.data.universe import Universe


def mirror_bars(bars: Bars) -> Bars:
    """``bars`` reflected in log price about the first close: [T] float64 each, c0²/p; high and low
    swap; timestamps and volume unchanged. The first close stays c0, so prices keep their scale."""
    if len(bars) == 0:
        return bars
    c0 = float(bars.close[0])
    k = c0 * c0
    return dataclasses.replace(
        bars,
        open=k / np.asarray(bars.open, dtype=np.float64),
        high=k / np.asarray(bars.low, dtype=np.float64),
        low=k / np.asarray(bars.high, dtype=np.float64),
        close=k / np.asarray(bars.close, dtype=np.float64),
        source=f"mirror of {bars.source}",
    )


def mirror_extra(extra: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A scenario's extra feature columns for the mirrored market: negated. They carry a direction
    (a planted signal, a leaked next return), which the mirror reverses."""
    return {name: -np.asarray(col, dtype=np.float64) for name, col in extra.items()}


def mirror_universe(universe: "Universe") -> "Universe":
    """Every symbol of ``universe`` mirrored on its own (``mirror_bars``, about its own first close): the
    same symbols, files and offsets, so row r of the mirror is row r of the universe reflected."""
    return dataclasses.replace(universe, bars=tuple(mirror_bars(b) for b in universe.bars), _cat={})
