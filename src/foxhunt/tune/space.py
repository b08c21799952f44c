"""The search space as Optuna distributions, and a trial's parameters applied to a config.

Optuna's categorical distributions hold only None/bool/int/float/str, so a categorical entry whose
choices include lists or tables (e.g. ``dqn.hidden = [[64, 64], [128]]``) is searched over the
choices' JSON texts and decoded when applied; scalar choices are searched as themselves.
"""

from __future__ import annotations

import json
from typing import Any

import optuna.distributions as od

from foxhunt.tune.config import SpaceEntry, apply_params  # noqa: F401 (apply_params: re-exported)

_SCALAR = (type(None), bool, int, float, str)


def _encoded(e: SpaceEntry) -> bool:
    return any(not isinstance(c, _SCALAR) for c in e.choices)


def distribution(e: SpaceEntry) -> od.BaseDistribution:
    """The Optuna distribution of one entry."""
    if e.kind == "categorical":
        choices = tuple(json.dumps(c) for c in e.choices) if _encoded(e) else e.choices
        return od.CategoricalDistribution(choices)
    if e.kind == "int":
        return od.IntDistribution(int(e.low), int(e.high), log=e.log, step=int(e.step or 1))  # type: ignore[arg-type]
    return od.FloatDistribution(float(e.low), float(e.high), log=e.log, step=None if e.step is None else float(e.step))  # type: ignore[arg-type]


def distributions(entries: dict[str, SpaceEntry]) -> dict[str, od.BaseDistribution]:
    return {k: distribution(e) for k, e in entries.items()}


def decode(entries: dict[str, SpaceEntry], params: dict[str, Any]) -> dict[str, Any]:
    """Optuna parameter values → config values (JSON-encoded categorical choices decoded)."""
    out = {}
    for k, v in params.items():
        e = entries.get(k)
        out[k] = json.loads(v) if e is not None and e.kind == "categorical" and _encoded(e) else v
    return out
