"""PPOTrainer: one object per process, reused across folds (the walk-forward runner's interface).

It owns the env, the rollout buffer, the actor-critic learner and the monitor; a rollout
(``_round``) and an update (``_train``) are each captured once as a CUDA graph on first use and
replayed for the life of the process: a new fold changes device tensors the graphs read and
resets state in place, never the graphs. An epoch is ``iterations_per_epoch`` × (rollout,
update) graph replays with no host reads, ending with the one readback of the epoch summary.

The runner's interface (shared with DQNTrainer): ``env``, ``reset_for_fold``, ``train_epoch``,
``drain``, ``policy_net`` (a DuelingQNet whose argmax / softmax are the policy's: the greedy
evaluation, the model file), and ``state_dict`` / ``load_state_dict`` (``foxhunt.state``) for checkpoints.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from foxhunt.agents.exec_choice import ExecChoice, apply_matmul_precision, env_step_fn
from foxhunt.agents.fold_trainer import FoldTrainer, load_part
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.learner import SUMMARY_FIELDS, PPOLearner
from foxhunt.agents.ppo.rollout import Rollout, RolloutBuffer
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.folds import FoldRange
from foxhunt.market import N_PORTFOLIO_FEATURES, MarketData
from foxhunt.state import pack, unpack
from foxhunt.accel.graphs import GraphedStep


class PPOTrainer(FoldTrainer):
    """Walk-forward PPO training on device-resident market data."""

    def __init__(self, market: MarketData, env_params: EnvParams, cfg: PPOConfig, seed: int = 0,
                 choice: ExecChoice | None = None) -> None:
        if market.fold is None:
            raise ValueError("PPOTrainer: set a fold on the market first")
        choice = choice or ExecChoice()
        apply_matmul_precision(choice)
        self.market, self.cfg, self.seed, self.choice = market, cfg, seed, choice
        self.device = market.device
        self.env = VecTradingEnv(market, cfg.n_envs, env_params, seed=seed)
        self.monitor = EpochMonitor(self.device, extra_fields=SUMMARY_FIELDS)
        self.buffer = RolloutBuffer(cfg.rollout_len, cfg.n_envs, N_PORTFOLIO_FEATURES, self.device)
        self.learner = PPOLearner(cfg, market, self.env.n_actions, self.buffer, self.monitor, seed=seed)
        self.rollout = Rollout(cfg, self.env, self.learner.net, self.buffer, self.monitor, env_step_fn(self.env, choice),
                               seed=seed)
        if cfg.counter_draws:
            self.env.sampler.use_counter(seed)  # re-seeded per fold (FoldTrainer._reseed)
        gens = [*self.env.sampler.generators().values(), *self.rollout.draws.generators().values()]
        # _round_step / _train_step: the steps themselves, whatever wraps _round / _train (PhaseTimer)
        self._round = self._round_step = GraphedStep(self.rollout.collect, self.device, choice.cuda_graphs, generators=gens)
        self._train = self._train_step = GraphedStep(self.learner.update, self.device, choice.cuda_graphs,
                                                     generators=[self.learner.generator])
        # ppo.epoch_graph: the epoch's iterations as ONE graph (one host launch an epoch instead of two an
        # iteration); the same kernels in the same order (tests/agents/test_ppo_epoch_graph.py).
        self._steady = GraphedStep(self._whole_epoch, self.device, choice.cuda_graphs, generators=[*gens, self.learner.generator])
        # ppo.batched_rollouts: set by the lockstep (train/lockstep.build_rollout_stack) that runs every member's
        # rollout as one program; epoch_steps then yields once after its set-up and runs no rollout itself.
        self.rounds_by: object | None = None
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def _reset_parts(self, warm_start: bool) -> None:
        """Weights re-initialised in place (or kept: warm start), Adam, guard, counters; the rollout."""
        self.learner.reset(reinit=not warm_start)
        self.rollout.reset()

    def _seeders(self) -> list[Callable[[int], None]]:
        return [self.rollout.draws.seed, self.learner.generator.manual_seed]

    # ------------------------------------------------------------------ epochs
    def epoch_steps(self) -> Iterator[None]:
        """One epoch (``FoldTrainer.epoch_steps``): ``iterations_per_epoch`` rounds of (rollout, update), one
        step (one CUDA graph) for all of them with ``ppo.epoch_graph``, else one yield after each."""
        cfg = self.cfg
        self.monitor.reset()
        self.rollout.ev.zero_()
        self.learner.record_idx.zero_()  # the epoch's records start at row 0 (device op)
        if cfg.epoch_graph:
            self._steady()
            self.rounds += cfg.iterations_per_epoch
            yield
        else:
            if self.rounds_by is not None:
                yield  # set-up done; the lockstep runs each iteration's rollout of every member between the yields
            for _ in range(cfg.iterations_per_epoch):
                if self.rounds_by is None:
                    self._round()
                self._train()
                self.rounds += 1
                yield
        self.learner.flush_records(cfg.iterations_per_epoch * cfg.update_epochs * cfg.minibatches, self.rollout.ev)
        self._end_epoch()

    def run_epoch(self) -> None:
        if self.rounds_by is not None:
            raise RuntimeError("PPOTrainer: this member's rollouts run in its lockstep's batched rollouts "
                               "(ppo.batched_rollouts): step it through Lockstep.run_epoch")
        super().run_epoch()

    def _whole_epoch(self) -> None:
        """``iterations_per_epoch`` × (rollout, update): the body of the epoch's graph (``ppo.epoch_graph``)."""
        for _ in range(self.cfg.iterations_per_epoch):
            self._round_step.fn()
            self._train_step.fn()

    # ------------------------------------------------------------------ evaluation / export
    def policy_net(self) -> DuelingQNet:
        """The actor as a DuelingQNet (value head zero): greedy = argmax logits, softmax = the policy."""
        return self.learner.net.greedy_net()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """{component: its state dict} (``foxhunt.state`` convention: live tensors, generator
        states, host counters); checkpoints save exactly these. The rollout buffer's transitions
        are not saved: every iteration refills them before they are read."""
        return {
            "learner": pack(self.learner.state_tensors(), generators={"minibatch_shuffle": self.learner.generator}),
            "env": self.env.state_dict(),
            "rollout": pack(self.rollout.state_tensors(), generators=self.rollout.draws.generators()),
            "trainer": self._host_state(),
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a PPOTrainer built with the same configuration, in place
        (captured graphs stay valid); ComponentStateError naming the component on a mismatch."""
        want = ("learner", "env", "rollout", "trainer")
        if set(state) != set(want):
            raise ValueError(f"PPOTrainer: components {sorted(state)} ≠ this trainer's {sorted(want)}")
        gens = {"minibatch_shuffle": self.learner.generator}
        load_part("learner", lambda st: unpack("PPOLearner", st, self.learner.state_tensors(), generators=gens),
                  state["learner"])
        load_part("env", self.env.load_state_dict, state["env"])
        load_part("rollout", lambda st: unpack("RolloutBuffer", st, self.rollout.state_tensors(),
                                               generators=self.rollout.draws.generators()), state["rollout"])
        self._load_host_state(state["trainer"])
