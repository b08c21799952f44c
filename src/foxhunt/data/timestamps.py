"""A bar file's timestamp column as int64 UTC nanoseconds, and what was inferred to read it.

Every layout is parsed by pandas (``pd.to_datetime`` with a format); this module only decides which
format, which epoch unit and which reading of day and month, from the options (``TimeOptions``:
``data.timestamp_format``, ``data.dayfirst``, ``data.timestamp_unit``) or from the column itself:

* ISO-8601 text, with or without an offset. Text with an offset is converted to UTC; **text without
  an offset is taken to be UTC** (never localised to an exchange's zone; the notes say so). A column
  mixing both is ``mixed-timezones``.
* Other text layouts: the format (``_FORMATS``, plus pandas' own guess from the first value) that
  parses the most of the first 500 values. A layout with the day and month as its first two numeric
  fields (``01.02.2017``, ``1/2/2017``) is read day-first or month-first as ``data.dayfirst`` says;
  without it, as the whole column settles it (a day above 12 in the first field: day-first; in the
  second: month-first); a column where both readings parse the same rows is ``ambiguous-dates``.
* Integer or float epoch numbers (text of digits too): the unit is ``data.timestamp_unit``, or the
  one (s, ms, us, ns) that puts the column's median in 1971..2200; a median no unit puts there is
  ``ambiguous-epoch``. Values outside that range (in the inferred unit) are bad rows. A column of
  integers between 1e7 and 3e7 that all read as YYYYMMDD is dates. Float epochs carry float64
  precision (about 0.25 us today).
* Parquet timestamp columns (naive = UTC, aware converted) and date columns (UTC midnight).

``ParsedTimes.notes`` are the inferences in words (the run's data line and ``data validate`` show
them); ``ParsedTimes.hint`` is appended to a bad-timestamp row's message: the option that reads it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from foxhunt.data.bars import BarDataError

_FORMATS = (
    "ISO8601",
    "%m/%d/%Y", "%d/%m/%Y", "%m/%d/%Y %H:%M", "%m/%d/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y %H:%M:%S",
    "%Y/%m/%d", "%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%d.%m.%Y", "%d.%m.%Y %H:%M", "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y %H:%M:%S.%f", "%Y.%m.%d", "%Y.%m.%d %H:%M", "%Y.%m.%d %H:%M:%S",
    "%Y%m%d", "%Y%m%d %H:%M:%S", "%Y%m%d %H%M%S", "%d-%b-%Y", "%d %b %Y",
)  # fmt: skip
# An explicit offset after a time of day: "...10:00Z", "...10:00:00.5+01:00", "...10:00 -0500".
_TZ_RE = r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"
_NAT = np.iinfo(np.int64).min
_UNIT_NS = {"D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
EPOCH_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
# The years an inferred epoch unit must put the column in: the four units' ranges do not overlap.
_EPOCH_LO = int(np.datetime64("1971-01-01", "ns").astype(np.int64))
_EPOCH_HI = int(np.datetime64("2200-01-01", "ns").astype(np.int64))
_DAY_NS = 86_400 * 10**9
SAMPLE = 500


@dataclass(frozen=True)
class TimeOptions:
    """How to read the timestamp column (the ``[data]`` keys of the same names; None: infer)."""

    format: str | None = None  # data.timestamp_format: a strftime format for pandas
    dayfirst: bool | None = None  # data.dayfirst
    unit: str | None = None  # data.timestamp_unit: s | ms | us | ns


@dataclass
class ParsedTimes:
    """[T] int64 UTC ns (meaningless where not ok), [T] bool ok, the inferences in words, and the
    hint a bad-timestamp row's message ends with."""

    ns: np.ndarray
    ok: np.ndarray
    notes: list[str] = field(default_factory=list)
    hint: str = ""


def parse_timestamps(s: pd.Series, label: str, colname: str, opts: TimeOptions = TimeOptions()) -> ParsedTimes:
    """Parse a timestamp column (see the module docstring). Raises BarDataError for file-level
    problems (mixed-timezones, ambiguous-dates, ambiguous-epoch, bad-timestamp-format)."""
    dt = s.dtype
    if isinstance(dt, pd.DatetimeTZDtype):
        return ParsedTimes(*dt64_to_ns(s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()))
    if pd.api.types.is_datetime64_dtype(dt):
        ns, ok = dt64_to_ns(s.to_numpy())
        return ParsedTimes(ns, ok, [_naive_note(ns, ok)])
    if pd.api.types.is_bool_dtype(dt):
        return ParsedTimes(np.zeros(len(s), dtype=np.int64), np.zeros(len(s), dtype=bool))
    if opts.format is not None:
        return _with_format(_as_text(s), s, label, colname, opts.format)
    if pd.api.types.is_numeric_dtype(dt):
        v = s.to_numpy()
        return epoch_to_ns(v if v.dtype.kind in "iuf" else s.to_numpy(dtype=np.float64, na_value=np.nan), label, colname, opts.unit)
    return _parse_text(s, label, colname, opts)


def _as_text(s: pd.Series) -> pd.Series:
    """The column as stripped text; whole numbers in a float column (an empty cell made it float)
    without a trailing '.0', so that e.g. 20240102.0 reads as '20240102' under a format."""
    if pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        fin = np.isfinite(v)
        if np.all(v[fin] == np.round(v[fin])) and (np.abs(v[fin]) < 2.0**53).all():
            s = s.astype("Int64")
    return s.astype("str").str.strip().where(s.notna())


# --------------------------------------------------------------------------- numbers
def dt64_to_ns(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy datetime64[any unit] -> ([T] int64 ns, [T] ok); NaT and out-of-range values not ok."""
    unit, count = np.datetime_data(arr.dtype)
    iv = arr.view(np.int64)
    ok = iv != _NAT
    mult = _UNIT_NS[unit] * count
    if mult == 1:
        return iv.copy(), ok
    lim = np.iinfo(np.int64).max // mult  # beyond this the value does not fit int64 ns (1677..2262)
    ok &= (iv <= lim) & (iv >= -lim)
    return np.where(ok, iv, 0) * mult, ok


def infer_epoch_unit(magnitude: float) -> str | None:
    """The unit (s, ms, us, ns) that puts an epoch number of this magnitude in 1971..2200, or None."""
    for unit, scale in EPOCH_UNITS.items():
        if _EPOCH_LO <= magnitude * scale < _EPOCH_HI:
            return unit
    return None


def epoch_to_ns(v: np.ndarray, label: str, colname: str, unit: str | None = None) -> ParsedTimes:
    """Epoch numbers -> int64 ns, in ``unit`` or the unit inferred from the column's median magnitude."""
    v = np.asarray(v)
    n = v.shape[0]
    ok = np.isfinite(v) if v.dtype.kind == "f" else np.ones(n, dtype=bool)
    if not ok.any():
        return ParsedTimes(np.zeros(n, dtype=np.int64), ok)
    good = v[ok]
    integral = v.dtype.kind in "iu" or bool(np.all(good == np.round(good)))
    if v.dtype.kind == "f" and integral and np.abs(good).max() < 2.0**53:
        # Whole numbers in a float column (an empty cell made it float): scale them as integers,
        # since e.g. epoch ms * 1e6 is not exact in float64.
        v = np.where(ok, v, 0.0).astype(np.int64)
        good = v[ok]
    if unit is None and integral and good.min() >= 1e7 and good.max() < 3e7:
        as_text = pd.Series(np.where(ok, v, 0).astype(np.int64).astype(str))
        dates = pd.to_datetime(as_text, format="%Y%m%d", errors="coerce")
        if bool(dates[ok].notna().all()):
            ns, ok2 = dt64_to_ns(dates.to_numpy(dtype="datetime64[ns]"))
            return ParsedTimes(ns, ok & ok2, ["timestamps: YYYYMMDD dates, read as UTC midnight"])
    hint = f" (the column reads as epoch {_UNIT_WORDS.get(unit or '', '')}; data.timestamp_unit sets the unit)"
    if unit is None:
        med = float(np.median(np.abs(good.astype(np.float64))))
        unit = infer_epoch_unit(med)
        if unit is None:
            lo, hi = (np.format_float_positional(x, trim="-") if v.dtype.kind == "f" else str(int(x)) for x in (good.min(), good.max()))
            raise BarDataError(
                "ambiguous-epoch",
                f"epoch numbers {lo} .. {hi} fall in 1971..2200 in no unit (s, ms, us, ns); set data.timestamp_unit "
                "to read them in one, e.g. --set data.timestamp_unit=s",
                path=label, column=colname,
            )
        note = f"timestamps: epoch {_UNIT_WORDS[unit]} (by magnitude)"
        hint = f" (the column reads as epoch {_UNIT_WORDS[unit]} in 1971..2200 by magnitude; data.timestamp_unit sets the unit)"
        inferred = True
    else:
        note, inferred = f"timestamps: epoch {_UNIT_WORDS[unit]} (data.timestamp_unit)", False
    scale = EPOCH_UNITS[unit]
    if v.dtype.kind in "iu":
        iv = v.astype(np.int64)
        lim = np.iinfo(np.int64).max // scale
        ok &= (iv <= lim) & (iv >= -lim)
        ns = np.where(ok, iv, 0) * scale
    else:
        f = np.where(ok, v, 0.0) * float(scale)
        ok &= np.abs(f) < 9.2e18
        ns = np.round(np.where(ok, f, 0.0)).astype(np.int64)
    if inferred:  # a value the inferred unit puts outside 1971..2200 is a bad cell, not a time
        ok &= (ns >= _EPOCH_LO) & (ns < _EPOCH_HI)
    return ParsedTimes(ns, ok, [note], hint)


# --------------------------------------------------------------------------- text
def _to_datetime(text: pd.Series, fmt: str) -> pd.Series:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pd.to_datetime(text, format=fmt, errors="coerce", utc=True)


def _guesses(first: str) -> list[str]:
    """pandas' guesses of the first value's format, month-first and day-first (None dropped)."""
    from pandas.tseries.api import guess_datetime_format

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for dayfirst in (False, True):
            try:
                g = guess_datetime_format(first, dayfirst=dayfirst)
            except (ValueError, TypeError, OverflowError):
                g = None
            if g is not None and g not in out:
                out.append(g)
    return out


def day_month_twin(fmt: str) -> str | None:
    """The same layout with %d and %m swapped, when they are its first two fields ("%d.%m.%Y" ->
    "%m.%d.%Y"): the layouts a date such as 01.02.2017 reads in both ways; None otherwise."""
    head = fmt[:2]
    if head not in ("%d", "%m") or "%d" not in fmt or "%m" not in fmt:
        return None
    return fmt.replace("%d", "\0").replace("%m", "%d").replace("\0", "%m")


def _parse_text(s: pd.Series, label: str, colname: str, opts: TimeOptions) -> ParsedTimes:
    n = len(s)
    notnull = s.notna().to_numpy()
    text = s.astype("str").str.strip()
    idx = np.flatnonzero(notnull)
    if idx.shape[0] == 0:
        return ParsedTimes(np.zeros(n, dtype=np.int64), notnull)
    sample = text.iloc[idx[:SAMPLE]]
    # Digits only: epoch numbers (pandas keeps such a column as text when one cell is bad);
    # a layout below replaces this only when it parses strictly more of the sample.
    best, best_count = "epoch", int(sample.str.fullmatch(r"[+-]?\d+(?:\.\d*)?").sum())
    if best_count < len(sample):
        for fmt in (*_FORMATS, *_guesses(str(sample.iloc[0]))):
            count = int(_to_datetime(sample, fmt).notna().sum())
            if count > best_count:
                best, best_count = fmt, count
            if count == len(sample):
                break  # earlier formats win ties, so a full score ends the search
    if best_count == 0:  # no layout reads any of it: the option that would
        return ParsedTimes(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), [],
                           " (no known layout reads this column; set data.timestamp_format, a strftime format such as "
                           "'%d.%m.%Y %H:%M:%S')")
    if best == "epoch":
        num = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        out = epoch_to_ns(num, label, colname, opts.unit)
        out.ok &= notnull
        return out
    notes: list[str] = []
    parsed = None
    twin = day_month_twin(best)
    if twin is not None:
        best, notes, parsed = _day_or_month_first(text, best, twin, opts.dayfirst, label, colname)
    if parsed is None:
        parsed = _to_datetime(text, best)
    ns, ok = dt64_to_ns(parsed.dt.tz_localize(None).to_numpy())
    ok &= notnull
    if best == "ISO8601" and ok.any():
        aware = _check_one_timezone_style(text, s, ok, label, colname)
    else:
        aware = "%z" in best or "%Z" in best
        if best != "ISO8601":
            notes.insert(0, f"timestamps: layout '{best}'")
    if not aware:
        notes.append(_naive_note(ns, ok))
    return ParsedTimes(ns, ok, notes, f" (the column reads as '{best}'; data.timestamp_format sets the layout, "
                                      "data.repair = true drops such rows)")


def _day_or_month_first(text: pd.Series, fmt: str, twin: str, dayfirst: bool | None, label: str,
                        colname: str) -> tuple[str, list[str], pd.Series | None]:
    """Which of a day/month layout and its twin reads the column: data.dayfirst, or the one that
    parses more rows; both the same: ``ambiguous-dates`` (no day above 12 settles it). Returns the
    layout, its note and the column parsed with it (None: not parsed yet)."""
    day, month = (fmt, twin) if fmt.startswith("%d") else (twin, fmt)
    if dayfirst is not None:
        return (day if dayfirst else month), [f"timestamps: {'day' if dayfirst else 'month'} first (data.dayfirst = {str(dayfirst).lower()})"], None
    by_day, by_month = _to_datetime(text, day), _to_datetime(text, month)
    d_ok, m_ok = by_day.notna().to_numpy(), by_month.notna().to_numpy()
    nd, nm = int(d_ok.sum()), int(m_ok.sum())
    if nd == nm:
        first = text[d_ok | m_ok]
        example = f"{first.iloc[0]!r} .. {first.iloc[-1]!r}" if len(first) else "the dates"
        raise BarDataError(
            "ambiguous-dates",
            f"{example} read as day/month and as month/day, and no day above 12 settles which; set data.dayfirst = true "
            "(day first) or false (month first), e.g. --set data.dayfirst=true",
            path=label, column=colname,
        )
    chosen, only, parsed = (day, d_ok & ~m_ok, by_day) if nd > nm else (month, m_ok & ~d_ok, by_month)
    row = int(np.argmax(only))
    where = "first" if nd > nm else "second"
    return chosen, [f"timestamps: {'day' if nd > nm else 'month'} first (row {row + 1}, {text.iloc[row]!r}, has a day "
                    f"above 12 in the {where} field)"], parsed


def _with_format(text: pd.Series, s: pd.Series, label: str, colname: str, fmt: str) -> ParsedTimes:
    """The whole column under ``data.timestamp_format``; a format pandas refuses is a file-level error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
    except (ValueError, TypeError) as exc:
        raise BarDataError("bad-timestamp-format", f"data.timestamp_format {fmt!r}: {str(exc).splitlines()[0]}",
                           path=label, column=colname) from None
    ns, ok = dt64_to_ns(parsed.dt.tz_localize(None).to_numpy())
    ok &= s.notna().to_numpy()
    notes = [f"timestamps: layout '{fmt}' (data.timestamp_format)"]
    if "%z" not in fmt and "%Z" not in fmt:
        notes.append(_naive_note(ns, ok))
    return ParsedTimes(ns, ok, notes, f" (data.timestamp_format is '{fmt}')")


def _naive_note(ns: np.ndarray, ok: np.ndarray) -> str:
    if ok.any() and bool(np.all(ns[ok] % _DAY_NS == 0)):
        return "dates without a UTC offset read as UTC midnight"
    return "times without a UTC offset taken as UTC"


def _check_one_timezone_style(text: pd.Series, s: pd.Series, ok: np.ndarray, label: str, colname: str) -> bool:
    """Whether the parsed ISO timestamps carry an offset; mixed-timezones when some do and others not."""
    if bool(text[ok].str.endswith("Z").all()):  # the common all-UTC case, without a regex pass
        return True
    aware = text.str.contains(_TZ_RE, regex=True).to_numpy(dtype=bool, na_value=False)
    kinds = aware[ok]
    if kinds.all() or not kinds.any():
        return bool(kinds.all())
    rows = np.flatnonzero(ok)
    first = int(rows[0])
    row = int(rows[np.argmax(kinds != kinds[0])])
    has, hasnt = ("has", "has no") if aware[first] else ("has no", "has")
    raise BarDataError(
        "mixed-timezones",
        f"row {first + 1} ({s.iloc[first]}) {has} UTC offset but this row {hasnt}; "
        "use offsets everywhere or nowhere (no offset = UTC)",
        path=label,
        row=row + 1,
        timestamp=str(s.iloc[row]),
        column=colname,
    )
