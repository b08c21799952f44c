"""Plain float64 numpy references of the replay samplers' distributions (the test oracle).

Written from the formulas, independently of the device code: no trees, no sorting tricks.
"""

from __future__ import annotations

import numpy as np


def dedupe_max(indices: np.ndarray, values: np.ndarray) -> dict[int, float]:
    """{index: max of the values given for it} — how a batch with duplicate indices is applied."""
    out: dict[int, float] = {}
    for i, v in zip(np.asarray(indices).tolist(), np.asarray(values, dtype=np.float64).tolist()):
        out[i] = max(out.get(i, -np.inf), v)
    return out


def clean_abs(td: np.ndarray) -> np.ndarray:
    """|td| in float64 with non-finite values mapped to 0."""
    a = np.abs(np.asarray(td, dtype=np.float64))
    return np.where(np.isfinite(a), a, 0.0)


def uniform_probs(size: int) -> np.ndarray:
    """P(i) = 1/size over the filled slots [0, size)."""
    return np.full(size, 1.0 / size)


def proportional_priorities(td_abs: np.ndarray, alpha: float, eps: float) -> np.ndarray:
    """p_i = (|δ_i| + eps)^alpha."""
    return (clean_abs(td_abs) + eps) ** alpha


def proportional_probs(priorities: np.ndarray) -> np.ndarray:
    """P(i) = p_i / Σ p."""
    p = np.asarray(priorities, dtype=np.float64)
    return p / p.sum()


def ranks_descending(td_abs: np.ndarray) -> np.ndarray:
    """rank(i) in 1..N, 1 = largest |δ|; ties broken by slot index (a stable sort)."""
    a = np.asarray(td_abs, dtype=np.float64)
    order = np.argsort(-a, kind="stable")
    ranks = np.empty(len(a), dtype=np.int64)
    ranks[order] = np.arange(1, len(a) + 1)
    return ranks


def rank_probs(td_abs: np.ndarray, alpha: float) -> np.ndarray:
    """P(i) = rank(i)^-alpha / Σ_{r=1..N} r^-alpha."""
    w = ranks_descending(td_abs).astype(np.float64) ** (-alpha)
    return w / w.sum()


def is_weights(probs: np.ndarray, sampled: np.ndarray, beta: float, norm: str = "buffer") -> np.ndarray:
    """w_j = (N·P(i_j))^-β / max w, for the sampled slots ``sampled``.

    norm "buffer": max over every filled slot (the PER paper); "batch": max over ``sampled``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    n = len(probs)
    w_all = (n * probs) ** (-beta)
    w = w_all[np.asarray(sampled)]
    return w / (w_all.max() if norm == "buffer" else w.max())


def sum_tree_levels(leaves: np.ndarray) -> list[np.ndarray]:
    """Levels of a float64 sum tree over ``leaves`` (power-of-two length): [root] .. leaves."""
    levels = [np.asarray(leaves, dtype=np.float64)]
    while len(levels[0]) > 1:
        levels.insert(0, levels[0].reshape(-1, 2).sum(1))
    return levels


def prefix_to_leaf(leaves: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Leaf i with cumsum[i-1] <= prefix < cumsum[i] (float64 cumulative sums)."""
    c = np.cumsum(np.asarray(leaves, dtype=np.float64))
    return np.searchsorted(c, np.asarray(prefix, dtype=np.float64), side="right")
