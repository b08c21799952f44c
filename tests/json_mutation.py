"""Hypothesis helper: one random edit of a JSON document (a key deleted or a value replaced)."""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.lists(st.integers(-3, 70_000), max_size=4), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, prefix + (i,))
    return out


def mutate(obj: Any, data: st.DataObject) -> Any:
    """obj with one key path deleted or replaced by an arbitrary JSON value (or replaced wholesale)."""
    obj = json.loads(json.dumps(obj))
    paths = _paths(obj)
    if not paths or data.draw(st.integers(0, 19)) == 0:
        return data.draw(_VALUES)
    path = data.draw(st.sampled_from(paths))
    node = obj
    for p in path[:-1]:
        node = node[p]
    if isinstance(node, dict) and data.draw(st.booleans()):
        del node[path[-1]]
    else:
        node[path[-1]] = data.draw(_VALUES)
    return obj
