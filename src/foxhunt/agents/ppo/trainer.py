"""PPOTrainer: one object per process, reused across folds (the walk-forward runner's interface).

It owns the env, the rollout buffer, the actor-critic learner and the monitor; a rollout
(``_round``) and an update (``_train``) are each captured once as a CUDA graph on first use and
replayed for the life of the process: a new fold changes device tensors the graphs read and
resets state in place, never the graphs. An epoch is ``iterations_per_epoch`` × (rollout,
update) graph replays with no host reads, ending with the one readback of the epoch summary.

The runner's interface (shared with DQNTrainer): ``env``, ``reset_for_fold``, ``train_epoch``,
``drain``, ``policy_net`` (a DuelingQNet whose argmax / softmax are the policy's: the greedy
evaluation, the model file), and the checkpoint hooks ``checkpoint_tensors``,
``checkpoint_generators``, ``host_counters``, ``set_host_counters``.
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
from foxhunt.train.graphs import GraphedStep


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
    def checkpoint_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """Live device tensors by checkpoint file (restored in place: graphs stay valid). The
        rollout buffer is not saved: every iteration refills it before it is read."""
        main = {f"learner.{k}": v for k, v in self.learner.state_tensors().items()}
        main.update({f"env.{k}": v for k, v in self.env.state.tensors().items()})
        main["rollout.env_steps"] = self.rollout.env_steps
        return {"trainer.safetensors": main, "replay.safetensors": {}}

    def checkpoint_generators(self) -> dict[str, torch.Generator]:
        return {"env_start_sampler": self.env.sampler.generator, "rollout": self.rollout.generator,
                "minibatch_shuffle": self.learner.generator}

    def host_counters(self) -> dict[str, int]:
        return {"trainer_epoch": int(self.epoch), "trainer_rounds": int(self.rounds)}

    def set_host_counters(self, host: dict[str, int]) -> None:
        self.epoch = int(host["trainer_epoch"])
        self.rounds = int(host["trainer_rounds"])
