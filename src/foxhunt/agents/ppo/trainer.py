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

import time

import torch


from foxhunt.agents.dqn.trainer import TrainingHalted
from foxhunt.agents.exec_choice import ExecChoice, apply_matmul_precision, env_step_fn
from foxhunt.agents.guard import halt_message
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.networks import DuelingQNet
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.learner import SUMMARY_FIELDS, PPOLearner
from foxhunt.agents.ppo.rollout import Rollout, RolloutBuffer
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.folds import FoldRange
from foxhunt.market import N_PORTFOLIO_FEATURES, MarketData
from foxhunt.state import ComponentStateError, pack, unpack
from foxhunt.accel.graphs import GraphedStep


class PPOTrainer:
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
        self._round = GraphedStep(self.rollout.collect, self.device, choice.cuda_graphs,
                                  generators=[self.env.sampler.generator, self.rollout.generator])
        self._train = GraphedStep(self.learner.update, self.device, choice.cuda_graphs,
                                  generators=[self.learner.generator])
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.last_summary: EpochSummary | None = None

    # ------------------------------------------------------------------ folds
    def reset_for_fold(self, fold: FoldRange, warm_start: bool = False) -> float:
        """Make ``fold`` current without re-creating anything (as DQNTrainer); returns seconds."""
        t0 = time.perf_counter()
        self.env.set_fold(fold)
        self.learner.reset(reinit=not warm_start)
        self.rollout.reset()
        self.monitor.reset()
        self._reseed(fold.fold)
        self.env.reset(persistent=True)
        self.epoch = 0
        self.rounds = 0
        self.fold = fold
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def _reseed(self, fold_index: int) -> None:
        """Every generator restarts from (seed, fold): a fold never depends on earlier folds."""
        base = (self.seed + 1) * 1_000_003 + fold_index * 7_919
        self.env.sampler.seed(base + 1)
        self.rollout.generator.manual_seed(base + 2)
        self.learner.generator.manual_seed(base + 3)

    # ------------------------------------------------------------------ epochs
    def run_epoch(self) -> None:
        """Enqueue one epoch of device work and start its summary readback (no host reads)."""
        cfg = self.cfg
        self.monitor.reset()
        self.rollout.ev.zero_()
        self.learner.record_idx.zero_()  # the epoch's records start at row 0 (device op)
        for _ in range(cfg.iterations_per_epoch):
            self._round()
            self._train()
            self.rounds += 1
        self.learner.flush_records(cfg.iterations_per_epoch * cfg.update_epochs * cfg.minibatches, self.rollout.ev)
        self.monitor.start_readback(self.epoch)
        self.epoch += 1

    def train_epoch(self) -> EpochSummary:
        """One epoch; returns its summary (the epoch's one synchronisation)."""
        self.run_epoch()
        return self._collect_summary()

    def drain(self) -> list[EpochSummary]:
        out = []
        while self.monitor.pending:
            out.append(self._collect_summary())
        return out

    def _collect_summary(self) -> EpochSummary:
        s = self.monitor.finish_readback()
        self.last_summary = s
        if s["halt"] > 0:
            cfg = self.cfg
            raise TrainingHalted(halt_message(s.values, fold=self.fold.fold if self.fold else "?", epoch=s.epoch,
                                              loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse,
                                              patience=cfg.grad_collapse_patience))
        return s

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
            "rollout": pack({"env_steps": self.rollout.env_steps}, generators={"generator": self.rollout.generator}),
            "trainer": pack({}, {"epoch": self.epoch, "rounds": self.rounds}),
        }

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a PPOTrainer built with the same configuration, in place
        (captured graphs stay valid); ComponentStateError naming the component on a mismatch."""
        want = ("learner", "env", "rollout", "trainer")
        if set(state) != set(want):
            raise ValueError(f"PPOTrainer: components {sorted(state)} ≠ this trainer's {sorted(want)}")
        try:
            unpack("PPOLearner", state["learner"], self.learner.state_tensors(), generators={"minibatch_shuffle": self.learner.generator})
        except ValueError as exc:
            raise ComponentStateError("learner", str(exc)) from None
        try:
            self.env.load_state_dict(state["env"])
        except ValueError as exc:
            raise ComponentStateError("env", str(exc)) from None
        try:
            unpack("RolloutBuffer", state["rollout"], {"env_steps": self.rollout.env_steps}, generators={"generator": self.rollout.generator})
        except ValueError as exc:
            raise ComponentStateError("rollout", str(exc)) from None
        try:
            host = unpack("PPOTrainer", state["trainer"], {}, ("epoch", "rounds"))
        except ValueError as exc:
            raise ComponentStateError("trainer", str(exc)) from None
        self.epoch, self.rounds = host["epoch"], host["rounds"]
