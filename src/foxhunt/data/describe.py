"""Bars described for people: the bar interval in words, its class, and the data line of a run.

``interval_class`` sorts a series by its median bar spacing into ``daily`` (20 h or more: daily,
weekly), ``hourly`` (30 min up to 20 h) and ``intraday`` (below 30 min: minute bars and the like);
the built-in training settings follow that class (``foxhunt.train.interval_presets``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from foxhunt.data.bars import Bars

INTERVAL_CLASSES = ("daily", "hourly", "intraday")
_HOUR = 3_600.0


def interval_class(seconds: float) -> str:
    """``daily`` (>= 20 h), ``hourly`` (>= 30 min) or ``intraday`` for a median bar spacing in seconds."""
    if seconds >= 20 * _HOUR:
        return "daily"
    if seconds >= 0.5 * _HOUR:
        return "hourly"
    return "intraday"


def interval_text(seconds: float) -> str:
    """A bar spacing in words: "1 day", "4 h", "5 min", "30 s" (rounded to the unit)."""
    for unit, size in (("day", 86_400.0), ("h", _HOUR), ("min", 60.0)):
        if seconds >= size:
            n = seconds / size
            text = f"{n:.0f}" if abs(n - round(n)) < 0.05 else f"{n:.1f}"
            return f"{text} {unit}{'s' if unit == 'day' and text != '1' else ''}"
    return f"{seconds:g} s"


def iso_day_or_time(ns: int, daily: bool) -> str:
    """An int64 UTC-ns time as "2024-01-02" (daily bars at midnight) or "2024-01-02 09:30Z"."""
    t = np.datetime64(int(ns), "ns")
    if daily and int(ns) % (86_400 * 10**9) == 0:
        return str(t.astype("datetime64[D]"))
    return str(t.astype("datetime64[m]")).replace("T", " ") + "Z"


def data_summary(bars: Bars) -> dict[str, Any]:
    """What a run's data line and report show: source, bars, interval (words and class), first and
    last bar, whether volume is present, and what the loader inferred (``Bars.notes``)."""
    sec = bars.median_bar_seconds()
    cls = interval_class(sec)
    n = len(bars)
    return {
        "source": bars.source,
        "bars": n,
        "interval_s": sec,
        "interval": f"every {interval_text(sec)} ({cls})" if n > 1 else "one bar",
        "interval_class": cls,
        "first": iso_day_or_time(int(bars.timestamps[0]), cls == "daily") if n else None,
        "last": iso_day_or_time(int(bars.timestamps[-1]), cls == "daily") if n else None,
        "has_volume": bool(bars.has_volume),
        "notes": list(bars.notes),
    }


def data_line(summary: dict[str, Any]) -> str:
    """One line: "FILE: 2,335 bars every 1 day (daily), 2009-01-02 → 2018-04-13; read: …"."""
    s = summary
    text = f"{s['source']}: {s['bars']:,} bars {s['interval']}, {s['first']} → {s['last']}"
    if not s["has_volume"]:
        text += ", no volume"
    return text + (f"; read: {'; '.join(s['notes'])}" if s.get("notes") else "")
