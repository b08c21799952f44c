"""The learners ``train.agent`` can name, each one entry: the one door the runner, the resolver's
caller, ``foxhunt backtest --run``, ``foxhunt tune`` and the scorecard go through instead of
branching on a learner's name.

A learner is a folder under ``agents/`` (its config section, its trainer implementing the runner's
``AgentTrainer`` interface: ``foxhunt.train.agent``) and one ``Learner`` entry here; adding one
costs that folder, the entry and its section module in ``foxhunt.config.SECTION_MODULES``. Entries
import their trainers lazily, so reading the registry (``train.agent``'s validation) loads no
learner.

What an entry says: its config section; how to build its trainer; how many bars (env steps) an
epoch trains on; the execution implementations it has per accelerated part (``foxhunt.accel``:
"torch" stands for "nothing to accelerate" where it has no such part); its discount, if it has one
(``train.gamma_grid`` sets it, the SB3 baselines train with it); the trainer attributes besides
``trainer.cfg`` and ``trainer.learner.cfg`` that read its section (``foxhunt tune`` re-points them
when a trial changes only the learning rate); and checks across sections, run before anything is
allocated; and, for a learner with an evaluation of its own (the forecast's IC), the fold's record
of it (``fold_report``: metrics.json's ``learner_eval``, summary.json), its words on the fold line,
what its model files record besides (``model_extra``) and that evaluation of a saved model on a
backtested window (``window_report``: ``foxhunt backtest``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from foxhunt.accel.backend import IMPLEMENTATIONS, PPO_IMPLEMENTATIONS
from foxhunt.errors import ConfigError


@dataclass(frozen=True)
class Learner:
    name: str
    section: str
    summary: str
    build: Callable[[Any, Any, Any, Any], Any]  # (market with a fold set, Config, ExecutionPlan, training EnvParams) -> trainer
    bars_per_epoch: Callable[[Any], int]  # Config -> env steps (bars) one epoch trains on, per agent
    implementations: Mapping[str, tuple[str, ...]]  # accel part -> implementations (foxhunt.accel.backend)
    gamma: Callable[[Any], float] | None = None  # Config -> its discount; None: it has none
    swap_parts: tuple[str, ...] = ()  # trainer attributes holding its section (foxhunt tune's in-place lr)
    check: Callable[[Any, Sequence[Any]], None] | None = None  # (Config, folds it trains on) -> ConfigError or None
    check_fits: Callable[[Any, Any], None] | None = None  # (Config, market) -> ConfigError when it cannot fit the device
    fold_report: Callable[[Sequence[Any], Any, Any], dict[str, Any]] | None = None  # (fold's member trainers, market, fold) -> metrics.json's learner_eval
    fold_phrase: Callable[[dict[str, Any]], str] | None = None  # learner_eval record -> words for the fold line
    model_extra: Callable[[Any, int], dict[str, Any]] | None = None  # (Config, decision interval) -> model file metadata
    window_report: Callable[[Any, Any, int, int, dict[str, Any]], dict[str, Any] | None] | None = None  # (saved greedy net, market normalised as the model, first bar, end bar, its metadata) -> a learner_eval record of a backtested window

    def plan_learner(self, cfg: Any) -> tuple[str, Any, Mapping[str, tuple[str, ...]]]:
        """What ``accel.backend.resolve`` checks: (name, its section, its implementations)."""
        return self.name, getattr(cfg, self.section), self.implementations


# ------------------------------------------------------------------ DQN
def _build_dqn(market: Any, cfg: Any, plan: Any, env: Any) -> Any:
    from foxhunt.agents.dqn.trainer import DQNTrainer

    return DQNTrainer(market, env, cfg.dqn, seed=cfg.run.seed, plan=plan)


def _dqn_fits(cfg: Any, market: Any) -> None:
    from foxhunt.budget import check_trainer_fits

    check_trainer_fits(cfg.dqn, market.n_features, cfg.env.n_actions, market.device, copies=cfg.train.ensemble)


def _check_dqn(cfg: Any, folds: Sequence[Any]) -> None:
    if cfg.dqn.stack_members and not cfg.train.lockstep and cfg.train.ensemble > 1:
        raise ConfigError("dqn.stack_members = true runs the members' updates between their rounds in lockstep: "
                          "it needs train.lockstep = true")


# ------------------------------------------------------------------ PPO
def _build_ppo(market: Any, cfg: Any, plan: Any, env: Any) -> Any:
    from foxhunt.agents.exec_choice import exec_choice
    from foxhunt.agents.ppo.trainer import PPOTrainer

    return PPOTrainer(market, env, cfg.ppo, seed=cfg.run.seed, choice=exec_choice(plan))


# ------------------------------------------------------------------ direct
def _build_direct(market: Any, cfg: Any, plan: Any, env: Any) -> Any:
    from foxhunt.agents.direct.trainer import DirectTrainer
    from foxhunt.agents.exec_choice import apply_matmul_precision, exec_choice

    apply_matmul_precision(exec_choice(plan))
    return DirectTrainer(market, env, cfg.direct, seed=cfg.run.seed, cuda_graphs=plan.graphs)


def _check_direct(cfg: Any, folds: Sequence[Any]) -> None:
    from foxhunt.agents.direct.checks import check_config

    check_config(cfg, folds)


# ------------------------------------------------------------------ forecast
def _build_forecast(market: Any, cfg: Any, plan: Any, env: Any) -> Any:
    from foxhunt.agents.exec_choice import apply_matmul_precision, exec_choice
    from foxhunt.agents.forecast.trainer import ForecastTrainer

    apply_matmul_precision(exec_choice(plan))
    return ForecastTrainer(market, env, cfg.forecast, seed=cfg.run.seed, cuda_graphs=plan.graphs)


def _check_forecast(cfg: Any, folds: Sequence[Any]) -> None:
    from foxhunt.agents.forecast.checks import check_config

    check_config(cfg, folds)


def _forecast_report(trainers: Sequence[Any], market: Any, fold: Any) -> dict[str, Any]:
    from foxhunt.agents.forecast.evaluate import fold_report

    return fold_report(trainers, market, fold)


def _forecast_phrase(record: dict[str, Any]) -> str:
    from foxhunt.agents.forecast.evaluate import fold_phrase

    return fold_phrase(record)


def _forecast_model_extra(cfg: Any, decision_interval: int) -> dict[str, Any]:
    from foxhunt.agents.forecast.recover import model_extra

    return model_extra(cfg, decision_interval)


def _forecast_window(net: Any, market: Any, first: int, end: int, extra: dict[str, Any]) -> dict[str, Any] | None:
    from foxhunt.agents.forecast.recover import window_report

    return window_report(net, market, first, end, extra)


TORCH_ONLY = ("torch",)
LEARNERS: dict[str, Learner] = {
    "dqn": Learner(
        "dqn", "dqn", "deep Q-learning from replay (dueling double DQN, PER)", _build_dqn,
        lambda c: c.dqn.rounds_per_epoch * c.dqn.rollout_len * c.dqn.n_envs,
        IMPLEMENTATIONS, gamma=lambda c: c.dqn.gamma, swap_parts=("collector",), check=_check_dqn,
        check_fits=_dqn_fits),
    "ppo": Learner(
        "ppo", "ppo", "proximal policy optimisation (actor-critic, GAE)", _build_ppo,
        lambda c: c.ppo.iterations_per_epoch * c.ppo.rollout_len * c.ppo.n_envs,
        PPO_IMPLEMENTATIONS, gamma=lambda c: c.ppo.gamma, swap_parts=("rollout",)),
    "direct": Learner(
        "direct", "direct", "direct reinforcement: gradient ascent on the net P&L objective of its positions", _build_direct,
        lambda c: c.direct.steps_per_epoch * c.direct.bars_per_step,
        {"env_step": TORCH_ONLY, "acting": TORCH_ONLY, "train_step": TORCH_ONLY, "replay": TORCH_ONLY,
         "eval": ("torch", "fused")},
        check=_check_direct),
    "forecast": Learner(
        "forecast", "forecast", "supervised forecast of the next h bars' return, traded through the costs (a no-trade band)",
        _build_forecast, lambda c: c.forecast.steps_per_epoch * c.forecast.batch,
        {"env_step": TORCH_ONLY, "acting": TORCH_ONLY, "train_step": TORCH_ONLY, "replay": TORCH_ONLY,
         "eval": ("torch", "fused")},
        check=_check_forecast, fold_report=_forecast_report, fold_phrase=_forecast_phrase,
        model_extra=_forecast_model_extra, window_report=_forecast_window),
}
"""Every learner, by its ``train.agent`` name."""


def names() -> tuple[str, ...]:
    return tuple(LEARNERS)


def learner(name: str) -> Learner:
    """The entry of ``train.agent = name`` (ConfigError naming the choices otherwise)."""
    try:
        return LEARNERS[name]
    except KeyError:
        raise ConfigError(f"train.agent = {name!r}: no such learner (choices: {', '.join(LEARNERS)})") from None


def of(cfg: Any) -> Learner:
    """The entry of a configuration's ``train.agent``."""
    return learner(cfg.train.agent)


def sections() -> tuple[str, ...]:
    """Every learner's config section (a trial's runner is rebuilt when any of them changes)."""
    return tuple(dict.fromkeys(entry.section for entry in LEARNERS.values()))


__all__ = ["LEARNERS", "Learner", "learner", "names", "of", "sections"]
