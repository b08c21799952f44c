"""The DQN learner: double-DQN Huber loss with IS weights, n-step targets, guard, masked Adam.

``train_step()`` is one fixed-shape device program (sample → gather → loss → backward → clip →
guard (incl. the Q-divergence check) → masked Adam → target update → priority write-back → monitor), with no host reads, so that
it can be captured once in a CUDA graph and replayed. Schedules (learning rate, PER beta) are
computed on the device from the device step counter, so replays see their current values.

This eager step (autograd) is the reference. The plan's ``train_step = "fused"`` replaces it by the same
step as one torch.compile'd program with a hand-written backward (``fused_step``, ``manual_grad``):
~220 small kernels become a few dozen around the GEMMs.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.targets import Q_RECORD_FIELDS, linear_schedule, nstep_targets, q_record
from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.guard import Guard
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.networks import q_network
from foxhunt.agents.replay import ReplayBuffer
from foxhunt.errors import ConfigError
from foxhunt.market import MarketData
from foxhunt.state import load_into


RECORD_FIELDS = ("loss", "grad_norm", "td_abs_mean", "q_sum", "q_min", "q_max", "ok", "nonfinite", "over_clip",
                 *Q_RECORD_FIELDS, "q_diverged")
"""One row per gradient step: the shared layout (``EpochMonitor.add_update_records``; q_* are the
taken actions' Q), then the Q monitor's max-Q statistics of the batch (``q_record``,
``EpochMonitor.add_maxq_records``) and whether its largest |Q| exceeded ``dqn.q_divergence``."""


class QLearner:
    """Online and target networks (flat buffers), masked Adam, guard, and the train step.

    market: MarketData (observations are re-gathered from it); replay: ReplayBuffer on the same
    device; n_envs: rows written per env step (the replay's row stride, for n-step targets).
    """

    def __init__(self, cfg: DQNConfig, market: MarketData, replay: ReplayBuffer, n_actions: int, n_envs: int,
                 monitor: EpochMonitor, seed: int = 0) -> None:
        dev = market.device
        self.cfg = cfg
        self.market = market
        self.replay = replay
        self.monitor = monitor
        self.n_envs = n_envs
        self.device = dev
        torch.manual_seed(seed)
        try:  # dqn.head: the flat dueling head or the branching one (45 factored actions only)
            self.online = q_network(cfg.head, market.obs_dim, n_actions, cfg.hidden, cfg.head_hidden).to(dev)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.target = copy.deepcopy(self.online)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.flat = FlatParams(self.online)
        self.target_flat = torch.cat([p.detach().reshape(-1) for p in self.target.parameters()])
        _rehome(self.target, self.target_flat)
        self._init_weights = self.flat.data.clone()
        self.lr = torch.full((), cfg.lr, dtype=torch.float32, device=dev)
        self.opt = MaskedAdam(self.flat, self.lr)
        # Device counters and guard state (all in place; reset per fold). The guard's tensors are
        # also attributes of the learner (the fused step and the checkpoint keys name them so).
        self.updates = torch.zeros((), dtype=torch.int64, device=dev)
        self.guard = Guard(dev, loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse, warmup=cfg.grad_collapse_warmup,
                           patience=cfg.grad_collapse_patience, max_skipped=cfg.max_skipped_steps,
                           q_divergence=cfg.q_divergence)
        self.collapse_run, self.skipped_total = self.guard.collapse_run, self.guard.skipped_total
        self.halted, self.collapse_flag = self.guard.halted, self.guard.collapse_flag
        b, w = cfg.batch_size, market.obs_dim
        self.obs = torch.zeros((b, w), dtype=torch.float32, device=dev)
        self.next_obs = torch.zeros((b, w), dtype=torch.float32, device=dev)
        # Per-update monitoring goes into a fixed record table (one small write per step) that is
        # reduced into the epoch summary once per epoch (``flush_records``).
        self.records = torch.zeros((max(1, cfg.rounds_per_epoch * cfg.train_steps_per_round), len(RECORD_FIELDS)),
                                   dtype=torch.float32, device=dev)
        self.record_idx = torch.zeros(1, dtype=torch.int64, device=dev)
        self._gamma_pow = torch.tensor([cfg.gamma ** k for k in range(1, cfg.n_step + 1)], dtype=torch.float32, device=dev)
        # The fused train step (foxhunt.agents.dqn.fused_step: one compiled program with a
        # hand-written backward), installed by the trainer when the plan says so; None runs the
        # eager reference below.
        self.fused: Callable[[], None] | None = None
        self.checks = None  # check mode: a DeviceChecks set by the trainer (sampled slots checked)

    # ------------------------------------------------------------------ per fold
    def reset(self, reinit: bool = True) -> None:
        """New fold: re-initialise weights in place (or keep them: warm start), zero optimiser
        moments, counters and guard state; the target copies the online weights."""
        if reinit:
            self.flat.data.copy_(self._init_weights)
        self.target_flat.copy_(self.flat.data)
        self.opt.reset()
        self.lr.fill_(self.cfg.lr)
        self.replay.sampler.set_beta(self.cfg.per_beta_start)  # the schedule at 0 updates (the first sample reads it)
        for t in (self.updates, self.record_idx):
            t.zero_()
        self.guard.reset()

    # ------------------------------------------------------------------ the train step
    def _batch(self):
        """Sample and gather a minibatch; n-step targets are assembled from consecutive rows."""
        cfg = self.cfg
        storage = self.replay.storage
        idx, weights = self.replay.sampler.sample(cfg.batch_size)
        if self.checks is not None:
            self.checks.sample(idx)
        if cfg.n_step == 1:
            batch = storage.gather(idx, self.market, self.obs, self.next_obs)
            return batch.obs, batch.action, batch.reward, batch.done, batch.next_obs, batch.discount, idx, weights
        return self._nstep_batch(idx) + (idx, weights)

    def _nstep_batch(self, idx: torch.Tensor):
        """n-step return from the rows idx, idx+N, … of the same env (the storage writes N rows per
        env step), cut at a terminal transition, at an episode boundary (the next row's bar is not
        this row's next bar) and at the write head. [B] tensors; discount = gamma^k of the cut."""
        st = self.replay.storage
        ret, done, discount, last = nstep_targets(st.reward, st.done, st.bar, st.next_bar, st.pos_t, idx,
                                                  self.n_envs, self.cfg.gamma, self.cfg.n_step, self._gamma_pow)
        bar = st.bar.index_select(0, idx)
        port = st.portfolio.index_select(0, idx)
        self.market.observe(bar, port, self.obs)
        self.market.observe(st.next_bar.index_select(0, last), st.next_portfolio.index_select(0, last), self.next_obs)
        action = st.action.index_select(0, idx)
        return self.obs, action, ret, done, self.next_obs, discount

    def _loss(self, obs, action, reward, done, next_obs, discount, weights):
        """Double-DQN Huber loss with IS weights; online passes on obs and next_obs batched as one.

        Returns (loss, td = q_taken − y [B], q_taken [B], q [B, A]: the online Q of obs, every action)."""
        b = obs.shape[0]
        q_both = self.online(torch.cat([obs, next_obs]))
        q_taken = q_both[:b].gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            best_next = q_both[b:].argmax(dim=1, keepdim=True)
            q_next = self.target(next_obs).gather(1, best_next).squeeze(1)
            y = reward + discount * (~done).float() * q_next
        loss = (weights * F.huber_loss(q_taken, y, reduction="none", delta=self.cfg.huber_delta)).mean()
        return loss, (q_taken - y).detach(), q_taken.detach(), q_both[:b].detach()

    def _apply(self, loss: torch.Tensor, td: torch.Tensor, q_taken: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Guard (with the Q-divergence check on q [B, A]), clip, masked Adam, target update,
        schedules, per-update record. Returns ok (0-d)."""
        cfg = self.cfg
        loss = loss.detach()
        g = self.flat.grad
        gnorm = torch.linalg.vector_norm(g)
        qrec = q_record(q)
        ok, nonfinite, over_clip = self.guard.check(loss, gnorm, self.updates, q_abs_max=qrec[4])
        coef = (cfg.grad_clip / (gnorm + 1e-6)).clamp(max=1.0)
        if cfg.lr_end is not None:
            self.lr.copy_(linear_schedule(cfg.lr, cfg.lr_end, cfg.lr_decay_steps, self.updates))
        self.opt.step(g * coef, ok)
        self._update_target(ok)
        self.updates.add_(1)
        self.replay.sampler.beta.copy_(linear_schedule(cfg.per_beta_start, cfg.per_beta_end, cfg.per_beta_steps, self.updates))
        row = torch.cat([torch.stack([loss, gnorm, td.abs().mean(), q_taken.sum(), q_taken.min(), q_taken.max(),
                                      ok.float(), nonfinite.float(), over_clip.float()]),
                         qrec, (qrec[4:] > cfg.q_divergence).float()])
        self.records.index_copy_(0, self.record_idx.clamp(max=self.records.shape[0] - 1), row.unsqueeze(0))
        self.record_idx.add_(1)
        return ok

    def compile(self) -> None:
        """torch.compile the loss (forward + AOT backward) and the update (fuses ~100 small kernels)."""
        self._loss = torch.compile(self._loss, dynamic=False)  # type: ignore[method-assign]
        self._apply = torch.compile(self._apply, dynamic=False)  # type: ignore[method-assign]

    def train_step(self) -> None:
        """One gradient step, entirely on the device (see the module docstring)."""
        if self.fused is not None:
            self.fused()
            return
        obs, action, reward, done, next_obs, discount, idx, weights = self._batch()
        loss, td, q_taken, q = self._loss(obs, action, reward, done, next_obs, discount, weights)
        self.flat.zero_grad()
        loss.backward()
        ok = self._apply(loss, td, q_taken, q)
        # A skipped step writes no information into the priorities: |δ| = 0 there (floor priority).
        self.replay.update_priorities(idx, torch.where(ok, td, torch.zeros_like(td)))

    def flush_records(self, n_updates: int) -> None:
        """Reduce this epoch's ``n_updates`` (host-known) records into the epoch summary."""
        m = self.monitor
        if n_updates:
            rec = self.records[:n_updates]
            m.add_update_records(rec[:, :9], self.cfg.batch_size)
            m.add_maxq_records(rec[:, 9:], self.cfg.batch_size)
        m.set_flag("halt", self.halted)
        m.set_flag("halt_collapse", self.collapse_flag)
        m.set_scalar("lr", self.lr)
        m.set_scalar("beta", self.replay.sampler.beta)
        self.record_idx.zero_()

    def _update_target(self, ok: torch.Tensor) -> None:
        cfg = self.cfg
        if cfg.target_update == "polyak":
            new = self.target_flat + cfg.target_tau * (self.flat.data - self.target_flat)
            self.target_flat.copy_(torch.where(ok, new, self.target_flat))
        else:
            due = ok & (torch.remainder(self.updates + 1, cfg.target_hard_every) == 0)
            self.target_flat.copy_(torch.where(due, self.flat.data, self.target_flat))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor a resumed run needs (flat weights, target, Adam, counters, guard): live
        tensors (``foxhunt.state`` convention)."""
        return {
            "online": self.flat.data,
            "target": self.target_flat,
            "lr": self.lr,
            "updates": self.updates,
            **self.guard.state_tensors(),
            **self.opt.state_dict(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy a ``state_dict`` of a learner of the same shape into this one (in place)."""
        load_into("QLearner", self.state_dict(), state)


def _rehome(module: nn.Module, flat: torch.Tensor) -> None:
    """Make every parameter of ``module`` a view into ``flat`` (same order as .parameters())."""
    offset = 0
    for p in module.parameters():
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
