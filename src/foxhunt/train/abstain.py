"""Abstention (``train.abstain``): a fold whose members' selected held-back Sharpes do not, on
average, beat the noise of that window gets a flat model instead of their ensemble.

Why: with ``train.select = "inner"`` each member keeps the best of E epochs by its Sharpe on the
held-back window. Where nothing pays (the scorecard's no-edge market, often real daily data) that
best-of-E is still above zero: the maximum of E noisy scores. On the H200 the 4-agent DQN ensemble
traded S&P 500 at −0.25 (flat: 0) and held one random position a fold on the no-edge market
(docs/LEARNING.md §13-14). A Sharpe measured over n bars has a standard error of about
SE = sqrt(bars_per_year / n) (annualised, for small Sharpe ratios), so the fold trades only when

    mean over members of their selected held-back Sharpe > abstain_z · SE

and is flat otherwise (``flat_net``: its greedy action is always the flat one, so it trades nothing
and scores 0). The decision is the fold's, on the members' pooled evidence, and never drops single
members: on the H200, keeping only the members above the bar left S&P 500 at −0.26 (fewer members,
noisier trading). The default bar, 3 SE, sits in the gap the H200 scorecards showed
(docs/LEARNING.md §13): every fold of the planted-edge, regime, mean-reversion and leak scenarios
scored a mean of ≥ 4.7 SE, every no-edge and real-data fold ≤ 2.3 SE (the best of E epochs is well
above zero by chance); at 2 SE one of two S&P 500 runs still traded a fold at a loss.

Units: Sharpe ratios annualised with the run's bars per year; n = the held-back window's steps.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from foxhunt.agents.networks import N_FACTORED_ACTIONS, action_bias_, merge_mean
from foxhunt.backtest.display import number, sharpe_text
from foxhunt.env.actions import FLAT_LEVEL, MARKET, NORMAL
from foxhunt.train.selection import sharpe_standard_error

FLAT_LOGIT = 30.0
"""The flat network's advantage for the flat action (others 0): its argmax is flat, and so is its
softmax to within e^-30, should a policy sample from it."""


def noise_bar(z: float, steps: int, bars_per_year: float) -> float:
    """The bar the members' mean held-back Sharpe must exceed for the fold to trade: z standard errors."""
    return z * sharpe_standard_error(steps, bars_per_year)


def trades(inner_sharpes: Sequence[float | None], bar: float) -> bool:
    """Whether the fold's ensemble trades: the mean of its members' selected held-back Sharpes
    (None / NaN, no score: 0, a flat member's) is above ``bar``."""
    return mean_sharpe(inner_sharpes) > bar


def mean_sharpe(inner_sharpes: Sequence[float | None]) -> float:
    """Mean of the members' held-back Sharpes, a missing or undefined one counted as 0 (flat)."""
    vals = [s if s is not None and math.isfinite(s) else 0.0 for s in inner_sharpes]
    return sum(vals) / len(vals) if vals else 0.0


def flat_action(n_actions: int) -> int:
    """The action whose target exposure is flat: level 2 (exposure mode), or level 2 with a market
    order at normal urgency among the 45 factored actions."""
    if n_actions == N_FACTORED_ACTIONS:
        return 9 * FLAT_LEVEL + 3 * MARKET + NORMAL
    return FLAT_LEVEL


@torch.no_grad()
def flat_net(like: nn.Module) -> nn.Module:
    """A Q-network of ``like``'s class and architecture (so model files, ``foxhunt backtest`` and, for
    a DuelingQNet, the fused backtest kernel run it unchanged) whose Q-values do not depend on the observation and whose
    argmax is the flat action: every weight and bias zero but the advantage head's output bias,
    FLAT_LOGIT on the flat action. Eval mode, on ``like``'s device (a detached copy of ``like`` made
    by ``merge_mean`` of one network, then overwritten)."""
    net = merge_mean([like])
    for p in net.parameters():
        p.zero_()
    action_bias_(net, flat_action(like.n_actions), FLAT_LOGIT)  # a branching head: on each branch's sub-action
    return net.eval()


def describe(picks: Sequence[dict[str, Any]], z: float, bars_per_year: float) -> dict[str, Any]:
    """The fold's abstention record (metrics.json ``selection.abstain``): z, the held-back window's
    SE and the bar, each member's selected held-back Sharpe, their mean, and whether the fold is flat."""
    steps = int(picks[0]["inner_steps"]) if picks else 0
    bar = noise_bar(z, steps, bars_per_year)
    sharpes = [p.get("inner_sharpe") for p in picks]
    return {"z": z, "standard_error": sharpe_standard_error(steps, bars_per_year), "bar": bar, "inner_sharpes": sharpes,
            "mean_inner_sharpe": mean_sharpe(sharpes), "flat": not trades(sharpes, bar)}


def line(record: dict[str, Any]) -> str:
    """A console phrase for a flat fold ("" when the fold trades)."""
    if not record["flat"]:
        return ""
    many = len(record.get("inner_sharpes") or ()) > 1
    who = "the members' mean" if many else "the agent's"
    text = (f"flat: {who} held-back Sharpe {number(record.get('mean_inner_sharpe'), '{:+.2f}')} is within the noise bar "
            f"{number(record.get('bar'), '{:.2f}')}")
    alt = record.get("all_members")
    if alt:
        text += f"; {'the ensemble' if many else 'the agent'} would have scored {sharpe_text(alt)}"
    return text


ALTERNATIVE_METRICS = ("sharpe", "total_return", "annual_volatility", "max_drawdown", "turnover", "trade_count")


def add_alternative(record: dict[str, Any], validate: Callable[[], dict[str, float]]) -> None:
    """For a flat fold, add to its ``record`` what the ensemble abstention replaced would have scored
    on the validation window (``all_members``; validate() -> its greedy backtest's metrics), so the
    rule's effect is measured on the same networks. Reporting only: nothing is selected on it."""
    if record["flat"]:
        metrics = validate()
        record["all_members"] = {k: metrics[k] for k in ALTERNATIVE_METRICS}
