"""Reading a metrics row for people and for comparisons: flat windows and undefined values.

A metrics row (``compute_metrics`` → ``metrics_to_dicts``, or a run directory's JSON, where NaN is
stored as null) follows empyrical: a window whose every bar return is 0 has volatility exactly 0 and
a Sharpe of 0 / 0 = NaN. Such a window is **flat**: no risk taken, no return — the normal result of
a policy that stays out (``train.abstain``'s flat model, a rule that never fires). Every consumer
that prints, ranks or compares rows reads them through this module, so that a flat window

* prints as ``flat`` (never ``+nan``), an undefined value as ``–``;
* ranks as Sharpe 0 (``sharpe_or_zero``: flat beats a loser and loses to a winner);
* never raises in a comparison (``None`` / NaN against a number).

Rows may be dicts of floats, of ``None`` (JSON null) or be missing keys; nothing here assumes a key.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

DASH = "–"
FLAT = "flat"


def value(row: Mapping[str, Any] | None, key: str) -> float:
    """row[key] as a float; missing, None (JSON null) or non-numeric → NaN."""
    if not row:
        return math.nan
    v = row.get(key)
    if v is None or isinstance(v, bool):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def is_flat(row: Mapping[str, Any] | None) -> bool:
    """Whether the window took no risk and made nothing: total return exactly 0 and volatility exactly
    0 (every bar's return 0), or — rows without a volatility column (e.g. a tune trial's fold) — total
    return 0, no round trip and an undefined Sharpe."""
    if not row:
        return False
    tr, vol = value(row, "total_return"), value(row, "annual_volatility")
    if tr != 0.0:
        return False
    if "annual_volatility" in row:
        return vol == 0.0
    return value(row, "trade_count") == 0.0 and not math.isfinite(value(row, "sharpe"))


def sharpe_or_zero(row: Mapping[str, Any] | None) -> float:
    """The Sharpe a ranking uses: 0 for a flat window, else the row's (NaN when undefined)."""
    return 0.0 if is_flat(row) else value(row, "sharpe")


def beats(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether row ``a``'s Sharpe is above row ``b``'s (flat counts as 0; an undefined one never
    beats and is never beaten)."""
    x, y = sharpe_or_zero(a), sharpe_or_zero(b)
    return math.isfinite(x) and math.isfinite(y) and x > y


def number(v: Any, fmt: str) -> str:
    """``fmt.format(v)`` for a finite number, ``–`` for None / NaN / ±inf / non-numbers."""
    if v is None or isinstance(v, bool):
        return DASH
    try:
        f = float(v)
    except (TypeError, ValueError):
        return DASH
    return fmt.format(f) if math.isfinite(f) else DASH


def cell(row: Mapping[str, Any] | None, key: str, fmt: str) -> str:
    """One table cell: ``flat`` for the Sharpe / Sortino / Calmar of a flat window (ratios of zero
    risk), else ``number``."""
    if key in ("sharpe", "sortino", "calmar") and is_flat(row):
        return FLAT
    return number((row or {}).get(key), fmt)


def sharpe_text(row: Mapping[str, Any] | None) -> str:
    """A Sharpe in prose: ``Sharpe +1.23``, ``flat (no trades, Sharpe –)`` or ``Sharpe –``."""
    if is_flat(row):
        return "flat (no position, Sharpe –)"
    return f"Sharpe {number(value(row, 'sharpe'), '{:+.2f}')}"


__all__ = ["DASH", "FLAT", "beats", "cell", "is_flat", "number", "sharpe_or_zero", "sharpe_text", "value"]
