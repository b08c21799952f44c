"""A discount grid chosen per fold (``train.gamma_grid``): the ensemble's members are spread over a
few discounts γ, and each fold keeps the γ whose members score best on the held-back window.

Why: the learners' γ sets the horizon of the edge they can see. With γ = 0.5 a Q-value looks about
two bars ahead, so a position that pays its trading cost back over tens or thousands of bars (a
slowly wandering drift) is never worth opening, while a long γ fits more noise on a next-bar edge
(docs/LEARNING.md, "Generalisation"). No single γ suits every market, and a user's market is none of
ours, so the choice is made where the other fold-level choices are: on the inner held-back window,
which lies inside the fold's training data (``train.select = "inner"``).

Member k of a K-agent ensemble trains with γ = grid[k mod g] (and seed run.seed + k, as always), so
each of the g discounts gets K / g members. A return discounted by γ sums ~1 / (1 − γ) rewards, so
with one reward scale a member at γ 0.99 must fit Q-values ~50 times those at γ 0.5, with the same
learning rate, Huber threshold and gradient clip: on the H200 development family its members at 0.99
mostly held one position where those at 0.5 and 0.9 traded the edge or abstained.
``train.gamma_grid_normalise`` multiplies member k's reward scale by (1 − γ_k) / (1 − the grid's
smallest γ), so every member's values have the shortest discount's scale (a positive reward scale
leaves each member's optimal policy unchanged). It is off by default: on the same draws it made the
0.99 members trade thousands of times a fold and lose (docs/LEARNING.md, "Generalisation").

At the fold's end every member has kept its own best epoch (``EpochSelector``); the discount groups are ranked by their members' mean selected held-back
Sharpe, and the fold's model is the mean-Q (PPO: mean-logit) network of the best group alone
(Q-values of different γ have different scales, 1 / (1 − γ), and are never averaged). Abstention
then judges that group, with its bar raised for the choice among g groups: the one-sided tail
probability of ``abstain_z`` is divided by g (Bonferroni), so that picking the best of g noisy
groups does not make a no-edge fold trade more often than one group would.

``train.decision_grid`` does the same for the decision interval k (``env.decision_interval``: the
agent decides every k bars, docs/LEARNING.md "Decisions at the edge's horizon"): member m trains at
k = grid[(m // G) mod len], G = len(gamma_grid) (1 without one), so the two grids cross and every
(γ, k) pair gets members; the groups are the distinct pairs, chosen as above, and the fold's model
records its group's k (the backtesters hold its action k bars).

Units: γ per decision (per bar at k = 1); Sharpe ratios annualised.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Callable, Sequence

from foxhunt.agents import registry
from foxhunt.config import Config
from foxhunt.train.abstain import mean_sharpe


def member_gamma(cfg: Config, k: int) -> float | None:
    """The discount member k trains with under ``train.gamma_grid`` (None: the agent section's own)."""
    grid = list(cfg.train.gamma_grid)
    return float(grid[k % len(grid)]) if grid else None


def member_interval(cfg: Config, m: int) -> int | None:
    """The decision interval member m trains at under ``train.decision_grid`` (None: env's own)."""
    grid = list(cfg.train.decision_grid)
    if not grid:
        return None
    return int(grid[(m // max(1, len(cfg.train.gamma_grid))) % len(grid)])


def member_label(cfg: Config, m: int) -> dict[str, Any]:
    """Member m's group under the grids: {"gamma": γ} and / or {"decision_interval": k} ({} without grids)."""
    label: dict[str, Any] = {}
    if cfg.train.gamma_grid:
        label["gamma"] = member_gamma(cfg, m)
    if cfg.train.decision_grid:
        label["decision_interval"] = member_interval(cfg, m)
    return label


def reward_factor(cfg: Config, k: int) -> float:
    """Member k's reward-scale factor under ``train.gamma_grid_normalise``: (1 − γ_k) / (1 − min(grid))
    (1.0 without a grid, without normalisation, or for the grid's shortest discount)."""
    gamma = member_gamma(cfg, k)
    if gamma is None or not cfg.train.gamma_grid_normalise:
        return 1.0
    return (1.0 - gamma) / (1.0 - min(float(g) for g in cfg.train.gamma_grid))


def with_member_gamma(cfg: Config, k: int) -> Config:
    """``cfg`` with member k's discount in its agent's section (``dqn.gamma`` or ``ppo.gamma``) and,
    with ``train.gamma_grid_normalise``, its reward scale times ``reward_factor``; with
    ``train.decision_grid``, its ``env.decision_interval``."""
    gamma, interval = member_gamma(cfg, k), member_interval(cfg, k)
    changes: dict[str, Any] = {}
    env: dict[str, Any] = {}
    if gamma is not None:
        changes[registry.of(cfg).section] = {"gamma": gamma}
        factor = reward_factor(cfg, k)
        if factor != 1.0:
            env["reward_scale"] = float(cfg.env.reward_scale) * factor
    if interval is not None:
        env["decision_interval"] = interval
    if env:
        changes["env"] = env
    return cfg.replace(**changes) if changes else cfg


def adjusted_z(z: float, groups: int) -> float:
    """The abstention bar, in standard errors, for the best of ``groups`` groups: the z whose
    one-sided normal tail is the tail of ``z`` divided by ``groups`` (``z`` itself for one group)."""
    if groups <= 1 or z <= 0.0:
        return z
    tail = (1.0 - NormalDist().cdf(z)) / groups
    return NormalDist().inv_cdf(1.0 - tail)


def choose(picks: Sequence[dict[str, Any]], labels: Sequence[Any]) -> tuple[Any, list[int], list[dict[str, Any]]]:
    """The fold's group: (its label, the indices of its members, one row per group).

    picks: each member's epoch selection (``inner_sharpe`` the selected held-back Sharpe; None or
    NaN counts as 0, a flat member's); labels: each member's group, in member order: a discount γ
    (float) or a ``member_label`` dict (γ and / or decision interval). Ties go to the group whose
    first member comes first. A row holds the label (``gamma`` for a float label, else the dict's
    keys), ``members`` and ``mean_inner_sharpe``."""
    order: list[Any] = []
    for g in labels:
        if g not in order:
            order.append(g)
    rows = []
    for g in order:
        idx = [i for i, gi in enumerate(labels) if gi == g]
        key = dict(g) if isinstance(g, dict) else {"gamma": g}
        rows.append({**key, "members": idx, "mean_inner_sharpe": mean_sharpe([picks[i].get("inner_sharpe") for i in idx])})
    best = max(range(len(rows)), key=lambda j: (rows[j]["mean_inner_sharpe"], -j))
    label = order[best]
    return (float(label) if not isinstance(label, dict) else dict(label)), list(rows[best]["members"]), rows


def label_text(row: dict[str, Any]) -> str:
    """"γ 0.9 k 8" for a group row or label (what of γ / decision_interval it has)."""
    parts = []
    if row.get("gamma") is not None:
        parts.append(f"γ {row['gamma']:g}")
    if row.get("decision_interval") is not None:
        parts.append(f"k {row['decision_interval']}")
    return " ".join(parts)


def describe_choice(gamma: Any, rows: Sequence[dict[str, Any]]) -> str:
    """A console phrase: "γ 0.9 (held-back 0.5: +1.20, 0.9: +3.40, 0.98: +2.10)" (a label dict: "γ 0.9 k 8 (…)")."""
    label = gamma if isinstance(gamma, dict) else {"gamma": gamma}
    parts = ", ".join(f"{label_text(r).removeprefix('γ ')}: {r['mean_inner_sharpe']:+.2f}" if math.isfinite(r["mean_inner_sharpe"])
                      else f"{label_text(r).removeprefix('γ ')}: –" for r in rows)
    return f"{label_text(label)} (held-back {parts})"


def add_group_validations(rows: Sequence[dict[str, Any]], validate: Callable[[list[int]], dict[str, float]],
                          keys: Sequence[str]) -> None:
    """Add to every discount group's row what that group's ensemble alone scores on the validation
    window (``validation``: the metrics ``keys`` of ``validate(member indices)``, its greedy
    backtest). Reporting only, as abstention's ``all_members``: nothing is chosen on it. It lets one
    grid run say what each single discount would have scored on the same folds and seeds."""
    for row in rows:
        metrics = validate(list(row["members"]))
        row["validation"] = {k: metrics[k] for k in keys}
