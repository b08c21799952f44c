"""Built-in training settings that follow a file's bar interval (``foxhunt train --data FILE``).

Without ``--config``, ``foxhunt train`` runs its built-in configuration (``DEFAULT_TRAIN_TOML``,
sized for daily bars). With ``--data FILE`` the file's median bar spacing picks one row of
``PRESETS`` (``foxhunt.data.describe.interval_class``: ``daily`` >= 20 h, ``hourly`` >= 30 min,
``intraday`` below), whose keys are set over the built-in configuration, and ``env.reward_scale``
is set from the data:

    env.reward_scale = REWARD_STD / (sigma sqrt(k)), to two significant figures

where sigma is the standard deviation of the close's per-bar log returns over the first half of the
file (about what the first fold trains on; the validation bars of later folds do not set it) and k
the preset's ``env.decision_interval`` (1 unless the row sets it): a decision's reward (the k bars'
returns summed, at full exposure) then has a standard deviation of about REWARD_STD whatever the
bar interval, as the built-in daily value 100 gives on its synthetic market (sigma 1.3 %).

``--set`` goes on top of the preset (the user's keys win); ``--config FILE`` replaces the built-in
configuration and no preset applies. The plan's ``settings:`` line names the row and the values.
A key added to a row (``"env.decision_interval": 15,`` or ``"dqn.gamma": 0.9,``) is one line; its
value should come from a measurement (docs/LEARNING.md). The intraday row's decision grid rests on the CPU
probes of that file (k = 16 against k = 1 on intraday drifts), not yet on the GPU family's gates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from foxhunt.config import parse_override
from foxhunt.data.bars import Bars
from foxhunt.data.describe import interval_class, interval_text

REWARD_STD = 1.0

PRESETS: dict[str, dict[str, Any]] = {
    "daily": {
        "env.episode_length": 256,  # about a year of trading days (the built-in daily value)
    },
    "hourly": {
        "env.episode_length": 512,  # about a month of 24-hour hourly bars, three of a 7-hour session
    },
    "intraday": {
        "env.episode_length": 1024,  # 17 hours of minute bars: a session and more, within one fold's training
        # Deciding every bar, the learners leave intraday edges untraded (PPO flat, DQN a constant
        # exposure); deciding every 16 bars both trade them (docs/LEARNING.md, "Decisions at the edge's
        # horizon"). Which k suits a user's market is the fold's held-back choice between the two.
        "train.decision_grid": [1, 16],
        "train.ensemble": 2,
        "train.select": "inner",
    },
}


@dataclass(frozen=True)
class IntervalPreset:
    """The settings picked for one file: its interval class, the keys set ("section.key" -> value)
    and the per-bar volatility the reward scale came from."""

    name: str
    interval_s: float
    sigma: float
    values: dict[str, Any]
    symbols: int = 1  # > 1: sigma is the median of this many symbols' per-bar sigmas (universe_preset)

    def as_sections(self) -> dict[str, dict[str, Any]]:
        """{section: {key: value}} for ``load_config``-style values."""
        out: dict[str, dict[str, Any]] = {}
        for dotted, value in self.values.items():
            section, key = dotted.split(".", 1)
            out.setdefault(section, {})[key] = value
        return out

    def line(self, overrides: Sequence[str] = ()) -> str:
        """The plan's settings line; keys the user set with --set are named as theirs."""
        theirs = {".".join(parse_override(o)[0]) for o in overrides}
        shown = [f"{k} = {_fmt(v)}" + (" (--set wins)" if k in theirs else "") for k, v in self.values.items()]
        of = f" (the median over {self.symbols} symbols)" if self.symbols > 1 else ""
        why = f"; reward scale = {REWARD_STD:g} / per-bar σ {self.sigma:.3%} of the first half{of}" if self.sigma > 0 else ""
        return (f"settings: built-in for {self.name} bars (every {interval_text(self.interval_s)}; "
                f"foxhunt.train.interval_presets): {', '.join(shown)}{why}")


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def per_bar_sigma(bars: Bars) -> float:
    """Standard deviation of the per-bar log returns of ``bars.close`` over its first half (0 when
    there are fewer than 3 bars there or the prices do not move)."""
    half = np.asarray(bars.close[: len(bars) // 2 + 1], dtype=np.float64)
    if half.shape[0] < 3:
        return 0.0
    return float(np.std(np.diff(np.log(half))))


def round_sig(x: float, digits: int = 2) -> float:
    """x rounded to ``digits`` significant figures (x > 0)."""
    return float(round(x, digits - 1 - int(math.floor(math.log10(abs(x))))))


def interval_preset(bars: Bars, sigma: float | None = None, symbols: int = 1) -> IntervalPreset:
    """The preset row for ``bars``' interval, with env.reward_scale from its volatility (``sigma``: a
    per-bar sigma given instead, e.g. a universe's, ``universe_preset``)."""
    seconds = bars.median_bar_seconds()
    name = interval_class(seconds)
    values = dict(PRESETS[name])
    sigma = per_bar_sigma(bars) if sigma is None else sigma
    if sigma > 0:
        k = int(values.get("env.decision_interval", 1))
        values["env.reward_scale"] = round_sig(REWARD_STD / (sigma * math.sqrt(k)))
    return IntervalPreset(name, seconds, sigma, values, symbols)


def universe_preset(bars: Sequence[Bars]) -> IntervalPreset:
    """The preset of a pooled universe (one bar interval, checked by the loader): the first symbol's row,
    env.reward_scale from the median of the symbols' per-bar sigmas (those that move).

    Why the median and not the first symbol's sigma: one agent learns from every symbol's rewards, so
    one scale must suit the typical symbol; a first symbol with a tenth of its peers' volatility gave
    the rest rewards of ten times the intended size (PPO's loss guard halted on such a universe)."""
    sigmas = [s for s in (per_bar_sigma(b) for b in bars) if s > 0]
    return interval_preset(bars[0], float(np.median(sigmas)) if sigmas else 0.0, len(bars))


def sets_reward_scale(overrides: Sequence[str]) -> bool:
    """Whether ``--set`` overrides give env.reward_scale (the user's value then wins over every preset)."""
    return any(parse_override(o)[0] == ["env", "reward_scale"] for o in overrides)


def symbol_reward_scales(symbols: Sequence[str], bars: Sequence[Bars]) -> dict[str, float] | None:
    """{symbol: the preset env.reward_scale of its own bars} (one agent per symbol, train.pool = false), or None
    where a symbol's prices do not move (the configured scale then serves every symbol)."""
    scales = {sym: interval_preset(b).values.get("env.reward_scale") for sym, b in zip(symbols, bars)}
    return None if any(v is None for v in scales.values()) else {k: float(v) for k, v in scales.items()}


def data_preset(data_cfg: Any) -> IntervalPreset:
    """The preset of a file-backed ``[data]`` section's bars: ``interval_preset`` of one symbol,
    ``universe_preset`` of several (each file read and checked by the loader, its errors as ever)."""
    from foxhunt.data.universe import config_sources, load_universe

    universe = load_universe(config_sources(data_cfg), data_cfg)
    return universe_preset(list(universe.bars)) if len(universe) > 1 else interval_preset(universe.bars[0])
