"""Seed ensembles (``train.ensemble = K``): K agents trained side by side on every fold.

Why: on the scorecard's regime scenario one agent's selected Sharpe varies by ±0.1 with the learner
seed alone (docs/LEARNING.md §5); the mean-Q ensemble of K independently seeded agents removes most
of that spread and trades less (§9-10). Member k is exactly the agent a run with ``run.seed + k``
would train (its own trainer, env generator, replay and epoch selection, on the same bars); the
fold's model is their mean-Q (PPO: mean-logit) ensemble merged into one DuelingQNet that is K times
as wide (``agents.networks.merge_mean``), so the model file, ``foxhunt backtest --model`` and the
fused backtest kernel need nothing new.

``Team`` presents the K checkpointed members to the checkpoint module as one trainer: member 0's
components keep their names (a K = 1 checkpoint is unchanged), member k's are prefixed
``member<k>_``.
"""

from __future__ import annotations

from typing import Any, Sequence

from torch import nn

from foxhunt.agents.networks import merge_mean
from foxhunt.config import Config
from foxhunt.state import ComponentStateError
from foxhunt.train.agent import policy_net
from foxhunt.train.checkpoint import member_prefix
from foxhunt.train.gamma_grid import with_member_gamma


def member_config(cfg: Config, k: int) -> Config:
    """Member k's configuration: the run's with ``run.seed + k`` (and, with ``train.gamma_grid``,
    the agent's discount grid[k mod g]: ``foxhunt.train.gamma_grid``)."""
    cfg = with_member_gamma(cfg, k)
    return cfg if k == 0 else cfg.replace(run={"seed": int(cfg.run.seed) + k})


def member_label(cfg: Config, k: int) -> str:
    """How member k (its config: ``member_config``) is named in messages: ``member k (seed s, γ g, k i)``."""
    agent = getattr(cfg, cfg.train.agent, None)
    parts = [f"seed {int(cfg.run.seed)}"]
    if cfg.train.gamma_grid and agent is not None and hasattr(agent, "gamma"):
        parts.append(f"gamma {agent.gamma:g}")
    if cfg.train.decision_grid:
        parts.append(f"decision interval {cfg.env.decision_interval}")
    return f"member {k} ({', '.join(parts)})"


def ensemble_net(trainers: Sequence[Any]) -> nn.Module:
    """The greedy network of K trainers: member 0's own for K = 1, else their merged mean."""
    if len(trainers) == 1:
        return policy_net(trainers[0])
    return merge_mean([policy_net(t) for t in trainers])


class Team:
    """K checkpointable members (trainers, or trainers wrapped with their epoch selector) as one
    object for ``foxhunt.train.checkpoint``: ``state_dict`` / ``load_state_dict`` over every
    member's components; any other attribute is member 0's."""

    def __init__(self, members: Sequence[Any]) -> None:
        self.members = list(members)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.members[0], name)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, m in enumerate(self.members):
            out.update({member_prefix(k) + name: state for name, state in m.state_dict().items()})
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rest = dict(state)
        parts: list[dict[str, Any]] = [{} for _ in self.members]
        for k in range(len(self.members) - 1, 0, -1):  # prefixed members first: member 0's names have none
            pre = member_prefix(k)
            for name in [n for n in rest if n.startswith(pre)]:
                parts[k][name.removeprefix(pre)] = rest.pop(name)
        parts[0] = rest
        for k, (m, part) in enumerate(zip(self.members, parts)):
            try:
                m.load_state_dict(part)
            except ComponentStateError as exc:
                raise ComponentStateError(member_prefix(k) + exc.component,
                                          str(exc).removeprefix(f"component {exc.component!r}: ")) from None
            except ValueError as exc:
                raise ValueError(f"member {k}: {exc}") from None
