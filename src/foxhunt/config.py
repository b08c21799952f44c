"""Typed, frozen run configuration: TOML in, overrides on top, resolved TOML saved with every run.

Each section is a pydantic model that forbids unknown keys and checks ranges, so a typo or an
out-of-range value is a :class:`ConfigError` naming the key, instead of a silent default.
Sections for later layers (env, agent, train, backtest) live beside the layer's code and are
registered here, so this module stays the one place that knows the file layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal, Sequence, Union

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from foxhunt.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

Span = Union[int, str]
"""A span of time: a bar count (int >= 1) or a duration string such as "90D", "12h", "30min"."""


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class DataConfig(Section):
    """Where the bars come from. ``source='file'`` needs ``path``; the others are built in."""

    source: Literal["synthetic", "sp500", "nasdaq", "file"] = "synthetic"
    path: str | None = None
    bars: int = Field(20_000, ge=100, le=100_000_000, description="bars to generate (synthetic) or keep (tail of samples)")
    seed: int = Field(7, ge=0)
    bar_seconds: int = Field(60, ge=1, le=7 * 86_400, description="synthetic bar spacing")
    repair: bool = Field(False, description="sort rows and drop bad rows instead of failing (logged)")
    signal: float = Field(0.0, ge=0.0, le=1.0, description="synthetic: planted edge, drift = signal·σ·sign(previous return)")
    timestamp_format: str | None = Field(None, description="file: the timestamp layout as a strftime format for pandas, e.g. "
                                         "'%d.%m.%Y %H:%M:%S.%f'; default: inferred (foxhunt.data.timestamps)")
    dayfirst: bool | None = Field(None, description="file: dates such as 01.02.2017 are day first (true) or month first "
                                  "(false); default: as the file settles it (a day above 12), else an error")
    timestamp_unit: Literal["s", "ms", "us", "ns"] | None = Field(None, description="file: the unit of epoch-number "
                                                                  "timestamps; default: the one that puts them in 1971..2200")
    adjust: bool = Field(False, description="file: scale open, high, low and close by the 'Adj Close' column / close "
                         "(splits and dividends); off: that column is ignored")
    # A universe of symbols (foxhunt.data.universe). None (the default) is left out of the saved
    # config and its hash, so runs made before these keys existed keep their hash.
    paths: list[str] | None = Field(None, description="universe: bar files, directories or glob patterns, after data.path")
    symbols: list[str] | None = Field(None, description="universe: keep only these symbols (each must be there)")
    symbol_column: str | None = Field(None, description="universe: the symbol column of a long table; default: a column named "
                                      "symbol, ticker, tic or instrument")
    min_train_bars: int | None = Field(None, ge=1, description="universe: a symbol joins a fold with at least this many "
                                       "training bars (default 100; foxhunt.universe_folds)")

    @field_validator("paths", "symbols")
    @classmethod
    def _names(cls, v: list[str] | None, info: Any) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError(f"data.{info.field_name}: an empty list; leave the key out instead")
        for x in v:
            if not x.strip():
                raise ValueError(f"data.{info.field_name}: an empty name")
        dup = [x for i, x in enumerate(v) if x in v[:i]]
        if dup:
            raise ValueError(f"data.{info.field_name}: {dup[0]!r} twice")
        return v

    @field_validator("symbol_column")
    @classmethod
    def _column(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("data.symbol_column: an empty name")
        return v

    @model_validator(mode="after")
    def _file_needs_path(self) -> "DataConfig":
        if self.source == "file" and not self.path and not self.paths:
            raise ValueError("data.source = 'file' needs data.path")
        universe = [k for k in ("paths", "symbols", "symbol_column") if getattr(self, k) is not None]
        if universe and self.source != "file":
            raise ValueError(f"data.{universe[0]} applies to files (data.source = 'file'), not to data.source = {self.source!r}")
        if self.timestamp_format is not None and "%" not in self.timestamp_format:
            raise ValueError(f"data.timestamp_format {self.timestamp_format!r}: expected a strftime format such as '%d.%m.%Y %H:%M'")
        return self


class FeatureConfig(Section):
    cache_dir: str = Field(".foxhunt-cache", description="directory of the content-hashed feature cache")
    long_momentum: list[int] = Field(
        default_factory=list,
        description="extra vol-adjusted momentum columns after the spec's 51, one per horizon in bars "
                    "(e.g. [120, 250] for trends of hundreds of bars; docs/LEARNING.md)")

    ema_horizons: list[int] = Field(
        default_factory=list,
        description="extra multi-scale columns after those, a pair per horizon h in bars: ema_mom_h (EMA trend "
                    "z-score) and ema_vol_h (log RMS return), e.g. [30, 300, 3000] (docs/LEARNING.md)")

    @field_validator("long_momentum")
    @classmethod
    def _horizons(cls, v: list[int]) -> list[int]:
        from foxhunt.features.extra import check_horizons

        return check_horizons(v)

    @field_validator("ema_horizons")
    @classmethod
    def _ema_horizons(cls, v: list[int]) -> list[int]:
        from foxhunt.features.extra import check_ema_horizons

        return check_ema_horizons(v)


class FoldConfig(Section):
    """Walk-forward split. Spans are bar counts or durations ("90D")."""

    train: Span = 4_000
    val: Span = 1_000
    step: Span | None = Field(None, description="distance between fold starts; defaults to val")
    mode: Literal["expanding", "sliding"] = "expanding"
    purge: Span = Field(60, description="gap between train end and val start (>= longest target horizon)")
    embargo: Span = 0
    max_folds: int | None = Field(None, ge=1, description="keep only the last K folds")

    @field_validator("train", "val", "step", "purge", "embargo")
    @classmethod
    def _span_ok(cls, v: Span | None) -> Span | None:
        if v is None:
            return v
        from foxhunt.folds import parse_span

        parse_span(v, allow_zero=True)  # raises ValueError with a clear message
        return v


class RunConfig(Section):
    name: str | None = Field(None, description="run directory name under out_dir; default: timestamp")
    out_dir: str = "runs"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = Field(0, ge=0)


_SECTIONS: dict[str, type[Section]] = {
    "run": RunConfig,
    "data": DataConfig,
    "features": FeatureConfig,
    "folds": FoldConfig,
}


SECTION_ORDER = ("run", "data", "features", "folds", "env", "dqn", "ppo", "direct", "forecast", "train", "backtest", "accel")
"""Canonical order of the sections in a written config.toml (others follow, sorted by name).

The order never depends on which module happened to be imported first: a section registry filled
at import time is ordered by import order, and that order differs between ``foxhunt train`` and
``foxhunt train --resume`` (the bug of issue 11, where the config hash differed between them)."""


def register_section(name: str, model: type[Section]) -> None:
    """Add a config section (called by later layers at import time).

    The owning module must also be listed in ``_registered_sections`` so that every process sees
    the same section set whatever it imported first (tests/test_config.py checks this).
    """
    _SECTIONS[name] = model


SECTION_MODULES = ("foxhunt.env.params", "foxhunt.agents.dqn.config", "foxhunt.agents.ppo.config",
                   "foxhunt.agents.direct.config", "foxhunt.agents.forecast.config", "foxhunt.train.config",
                   "foxhunt.backtest.config", "foxhunt.accel.config", "foxhunt.tune.config")
"""The modules that own the later layers' sections (each calls ``register_section`` on import):
the explicit registry. A new section's module is added here; a missing module is an ImportError."""


def _registered_sections() -> dict[str, type[Section]]:
    """Every config section, in the canonical order (``SECTION_ORDER``, then by name)."""
    import importlib

    for mod in SECTION_MODULES:
        importlib.import_module(mod)
    return {name: _SECTIONS[name] for name in sorted(_SECTIONS, key=_section_rank)}


def _section_rank(name: str) -> tuple[int, str]:
    return (SECTION_ORDER.index(name), "") if name in SECTION_ORDER else (len(SECTION_ORDER), name)


class Config:
    """The resolved configuration: one frozen section object per registered section."""

    def __init__(self, sections: dict[str, Section]) -> None:
        self._sections = dict(sections)

    def __getattr__(self, name: str) -> Section:
        try:
            return self.__dict__["_sections"][name]
        except KeyError:
            raise AttributeError(name) from None

    def sections(self) -> dict[str, Section]:
        return dict(self._sections)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The resolved values, sections in the canonical order (None values left out)."""
        names = sorted(self._sections, key=_section_rank)
        return {name: _drop_none(self._sections[name].model_dump(mode="json")) for name in names}

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def hash(self) -> str:
        """sha256 of the resolved values only: canonical JSON with every key sorted.

        Independent of section registration / import order, of key order in the TOML file and of
        whether a value was written out or left at its default.
        """
        return hashlib.sha256(canonical_json(self.to_dict()).encode()).hexdigest()

    def write(self, directory: str | os.PathLike[str], filename: str = "config.toml") -> Path:
        """Write the resolved TOML into ``directory`` (temporary name, then rename)."""
        path = Path(directory) / filename
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_toml())
        os.replace(tmp, path)
        return path

    def replace(self, **section_updates: dict[str, Any]) -> "Config":
        """A new Config with some keys of some sections changed (validated)."""
        data = self.to_dict()
        for name, upd in section_updates.items():
            data.setdefault(name, {}).update(upd)
        return build_config(data, source="<replace>")


def canonical_json(obj: Any) -> str:
    """One canonical text per value: keys sorted at every level, no whitespace, UTF-8 kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    # TOML has no null: a None value means "default", so it is simply left out.
    return {k: (_drop_none(v) if isinstance(v, dict) else v) for k, v in d.items() if v is not None}


def build_config(data: dict[str, Any], source: str = "<config>") -> Config:
    """Validate a nested dict into a Config; errors name the source, key and rule."""
    sections = _registered_sections()
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(
            f"{source}: unknown section [{unknown[0]}] (known: {', '.join(sorted(sections))})"
        )
    built: dict[str, Section] = {}
    for name, model in sections.items():
        raw = data.get(name, {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: [{name}] must be a table, got {type(raw).__name__}")
        try:
            built[name] = model(**raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            key = f"{name}.{loc}" if loc else name
            msg = err["msg"].removeprefix("Value error, ")  # a model validator's own sentence
            if err["type"] == "extra_forbidden":
                msg = f"unknown key (known: {', '.join(sorted(model.model_fields))})"
            got = f" (got {err['input']!r})" if "input" in err and err["type"] != "extra_forbidden" and not isinstance(err["input"], dict) else ""
            raise ConfigError(f"{source}: {key}: {msg}{got}") from None
    return Config(built)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``section.key=value``; the value is read as a TOML value, else taken as a string."""
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected section.key=value")
    key, raw = text.split("=", 1)
    parts = [p.strip() for p in key.strip().split(".") if p.strip()]
    if len(parts) < 2:
        raise ConfigError(f"override '{text}': key must be section.key")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return parts, value


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML tables of a ``--config`` file, or a one-line ConfigError naming the file and what is
    wrong with it (missing, not a file, not UTF-8 text, not TOML, unreadable)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} {'is not a regular file' if p.exists() else 'does not exist'}")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a TOML text file (byte {exc.start} is not UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot be read ({exc.strerror or exc})") from None


def load_config(path: str | os.PathLike[str] | None = None, overrides: list[str] | tuple[str, ...] = (),
                values: dict[str, dict[str, Any]] | None = None) -> Config:
    """Read a TOML file (or start from defaults) and apply ``section.key=value`` overrides, then
    ``values`` ({section: {key: value}}, e.g. CLI options such as a --data path: applied as values,
    never pasted into TOML text)."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(Path(path))
        data = read_config_file(path)
    if overrides:
        apply_overrides(data, overrides)
        source = f"{source} + overrides"
    if values:
        apply_values(data, values)
    return build_config(data, source=source)


def apply_values(data: dict[str, Any], values: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Set ``data[section][key] = value`` for each entry of ``values`` in place (and return it)."""
    for section, entries in values.items():
        node = data.setdefault(section, {})
        if not isinstance(node, dict):
            raise ConfigError(f"[{section}] must be a table, got {type(node).__name__}")
        node.update(entries)
    return data


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides to a nested dict in place (and return it)."""
    for ov in overrides:
        parts, value = parse_override(ov)
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{ov}': {part} is not a table")
        node[parts[-1]] = value
    return data
