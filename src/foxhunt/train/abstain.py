"""Abstention (``train.abstain``): a member whose selected epoch does not beat the noise of its
held-back window votes flat; a fold whose members all abstain gets a flat model.

Why: with ``train.select = "inner"`` each member keeps the best of E epochs by its Sharpe on the
held-back window. Where nothing pays (the scorecard's no-edge market, often real daily data) that
best-of-E is still above zero: the maximum of E noisy scores. On the H200 the 4-agent DQN ensemble
traded S&P 500 at −0.25 (flat: 0) and held one random position a fold on the no-edge market
(docs/LEARNING.md §11-13). A Sharpe measured over n bars has a standard error of about
SE = sqrt(bars_per_year / n) (annualised, for small Sharpe ratios), so a member is kept only when

    best held-back Sharpe > abstain_z · SE

and the fold's model is the mean-Q network of the kept members (``foxhunt.train.team``). None kept:
``flat_net``, whose greedy action is always the flat one, so the fold trades nothing and scores 0.

Units: Sharpe ratios annualised with the run's bars per year; n = the held-back window's steps.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from foxhunt.agents.networks import N_FACTORED_ACTIONS, DuelingQNet, _linear_stack
from foxhunt.env.actions import FLAT_LEVEL, MARKET, NORMAL

FLAT_LOGIT = 30.0
"""The flat network's advantage for the flat action (others 0): its argmax is flat, and so is its
softmax to within e^-30, should a policy sample from it."""


def sharpe_standard_error(steps: int, bars_per_year: float) -> float:
    """SE of an annualised Sharpe ratio measured over ``steps`` bar returns: sqrt(bars_per_year / steps)."""
    return math.sqrt(bars_per_year / max(int(steps), 1))


def noise_bar(z: float, steps: int, bars_per_year: float) -> float:
    """The held-back Sharpe a member must exceed to be kept: z standard errors."""
    return z * sharpe_standard_error(steps, bars_per_year)


def voters(inner_sharpes: Sequence[float | None], bar: float) -> list[int]:
    """Indices of the members kept: those whose selected held-back Sharpe exceeds ``bar``
    (None / NaN: no epoch was selected, the member abstains)."""
    return [k for k, s in enumerate(inner_sharpes) if s is not None and math.isfinite(s) and s > bar]


def flat_action(n_actions: int) -> int:
    """The action whose target exposure is flat: level 2 (exposure mode), or level 2 with a market
    order at normal urgency among the 45 factored actions."""
    if n_actions == N_FACTORED_ACTIONS:
        return 9 * FLAT_LEVEL + 3 * MARKET + NORMAL
    return FLAT_LEVEL


@torch.no_grad()
def flat_net(like: nn.Module) -> DuelingQNet:
    """A DuelingQNet of ``like``'s architecture (so model files, ``foxhunt backtest`` and the fused
    backtest kernel run it unchanged) whose Q-values do not depend on the observation and whose
    argmax is the flat action: every weight and bias zero but the advantage head's output bias,
    FLAT_LOGIT on the flat action. Eval mode, on ``like``'s device."""
    if not isinstance(like, DuelingQNet):
        raise TypeError(f"flat_net needs a DuelingQNet, got {type(like).__name__}")
    trunk, slopes = _linear_stack(like.trunk) or ([], [0.01])
    net = DuelingQNet(like.obs_dim, like.n_actions, [lin.out_features for lin in trunk],
                      like.value[0].out_features, slopes[0] if slopes else 0.01)
    net = net.to(next(like.parameters()).device)
    for p in net.parameters():
        p.zero_()
    net.advantage[-1].bias[flat_action(like.n_actions)] = FLAT_LOGIT
    return net.eval()


def describe(picks: Sequence[dict[str, Any]], kept: Sequence[int], z: float, bars_per_year: float) -> dict[str, Any]:
    """The fold's abstention record (metrics.json ``selection.abstain``): z, the held-back window's
    SE and the bar, each member's selected held-back Sharpe, and who voted (0-based member indices)."""
    steps = int(picks[0]["inner_steps"]) if picks else 0
    se = sharpe_standard_error(steps, bars_per_year)
    sharpes = [p.get("inner_sharpe") for p in picks]
    return {"z": z, "standard_error": se, "bar": z * se, "inner_sharpes": sharpes, "voters": list(kept),
            "abstained": [k for k in range(len(picks)) if k not in kept], "flat": not kept}


def line(record: dict[str, Any]) -> str:
    """A console phrase for a fold where someone abstained ("" when every member voted)."""
    n, gone = len(record["inner_sharpes"]), record["abstained"]
    if not gone:
        return ""
    if record["flat"]:
        return f"flat: no member's held-back Sharpe beat the noise bar {record['bar']:.2f}"
    return f"{len(gone)} of {n} members abstained (held-back Sharpe ≤ {record['bar']:.2f})"


ALTERNATIVE_METRICS = ("sharpe", "total_return", "max_drawdown", "turnover", "trade_count")


def add_alternatives(record: dict[str, Any], members: Sequence[Any], ablation: bool,
                     validate: Callable[[list[Any]], dict[str, float]]) -> None:
    """Add to a fold's abstention ``record`` the validation scores of the ensembles it did not pick:
    ``all_members`` (the model without abstention) when some member abstained, and with
    ``train.abstain_ablation`` ``by_members``: the top 1 … K members by held-back Sharpe, so what any
    abstain_z would have scored is measured on the same networks. validate(members) -> the metrics
    of their mean-Q ensemble's greedy backtest on the fold's validation window. Reporting only:
    nothing is selected on these numbers."""
    def score(chosen: list[Any]) -> dict[str, float]:
        metrics = validate(chosen)
        return {k: metrics[k] for k in ALTERNATIVE_METRICS}

    if record["abstained"]:
        record["all_members"] = score(list(members))
    if ablation:
        sharpes = record["inner_sharpes"]
        order = sorted(range(len(members)), key=lambda k: -(sharpes[k] if sharpes[k] is not None else -math.inf))
        record["by_members"] = [{"members": order[:j], **score([members[k] for k in order[:j]])}
                                for j in range(1, len(order) + 1)]
