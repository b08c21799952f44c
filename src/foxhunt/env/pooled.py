"""Episode starts on a pooled universe: a symbol, then a start inside that symbol's training rows.

A pooled market (``UniverseMarket`` over S > 1 symbols, ``market.pooled``) holds, per fold, three
[S] device tables written in place by its ``set_fold`` (so captured graphs that read them stay valid):

    sym_lo  [S] int64    first training row of each symbol (global row, offsets included)
    sym_hi  [S] int64    its training end (exclusive)
    sym_cum [S] float64  cumulative sampling weights, normalised, last = 1 (a symbol outside the
                         fold has weight 0: it is never drawn)

One uniform u per draw decides both (the random stream advances exactly as for one series): the
symbol s is the first with ``sym_cum[s] > u``; the position of u inside s's weight interval,
v = (u − cum[s − 1]) / w[s] ∈ [0, 1), places the start uniformly in s's valid starts
``[sym_lo[s], sym_hi[s] − length)``, so that the bars an episode (or a window) of ``length`` steps
reads, start … start + length, lie inside ``[sym_lo[s], sym_hi[s])``: never across a symbol's offset.
Everything is on the device, branch-free and of fixed shape (no host read).

With the universe's mirror (``market.mirror_offset`` M > 0, ``train.mirror``) the uniform first picks the
copy, as for one series (``foxhunt.env.state.starts_from_uniform``): u < ½ draws 2u in the data, u ≥ ½
draws 2u − 1 and lands M rows later, in the same symbol's mirrored rows (same training range, same
weights). A mirrored row r ≥ M is symbol ``symbol_of_rows(r − M)``'s, and wraps inside that symbol's
mirrored training rows.
"""

from __future__ import annotations

import torch

__all__ = ["pooled_starts", "pooled_wrap", "symbol_of_rows"]


def pooled_starts(u: torch.Tensor, length: torch.Tensor | int, market: object,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """[N] int64 starts for uniforms u ([N] float64 in [0, 1)) and ``length`` ([N] or 0-d int64, or an
    int: the steps read after the start); see the module docstring."""
    cum: torch.Tensor = market.sym_cum  # type: ignore[attr-defined]
    mirror = bool(market.mirror_offset)  # type: ignore[attr-defined]
    if mirror:
        u, shift = market.split_uniform(u)  # type: ignore[attr-defined]
    s = torch.searchsorted(cum, u, right=True).clamp_(max=cum.shape[0] - 1)
    hi_c = cum.index_select(0, s)
    lo_c = torch.where(s > 0, cum.index_select(0, (s - 1).clamp_min(0)), torch.zeros_like(u))
    v = ((u - lo_c) / (hi_c - lo_c).clamp_min(1e-300)).clamp(0.0, 1.0)
    lo = market.sym_lo.index_select(0, s)  # type: ignore[attr-defined]
    span = (market.sym_hi.index_select(0, s) - length - lo).clamp_min(1)  # type: ignore[attr-defined]
    off = torch.minimum((v * span).to(torch.int64), span - 1)
    if mirror:
        lo = lo + shift
    return torch.add(off, lo, out=out) if out is not None else off + lo


def symbol_of_rows(rows: torch.Tensor, market: object) -> torch.Tensor:
    """[N] int64 symbol of each global row ([N] int64; a mirrored row: its symbol's) from the market's
    offsets, on the device."""
    if market.mirror_offset:  # type: ignore[attr-defined]
        rows = rows - market.copy_offset(rows)  # type: ignore[attr-defined]
    return torch.searchsorted(market.symbol_ends, rows, right=True)  # type: ignore[attr-defined]


def pooled_wrap(bar: torch.Tensor, length: torch.Tensor, market: object) -> torch.Tensor:
    """``state.epoch_reset_starts`` on a pooled market: an env at ``bar`` ([N] int64, inside one symbol's
    training rows) restarts at the bar where a full episode of ``length`` fits in that symbol's training
    rows, else at the bar wrapped back into its valid starts: lo + (bar − lo) mod span. Deterministic."""
    s = symbol_of_rows(bar, market).clamp_(max=market.sym_lo.shape[0] - 1)  # type: ignore[attr-defined]
    lo = market.sym_lo.index_select(0, s)  # type: ignore[attr-defined]
    span = (market.sym_hi.index_select(0, s) - length - lo).clamp_min(1)  # type: ignore[attr-defined]
    if market.mirror_offset:  # an env in the mirrored rows stays in them  # type: ignore[attr-defined]
        lo = lo + market.copy_offset(bar)  # type: ignore[attr-defined]
    return lo + torch.remainder(bar - lo, span)
