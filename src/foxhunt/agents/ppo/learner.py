"""The PPO learner: actor-critic in one flat buffer, masked Adam, the shared guard, the update.

``update()`` is one fixed-shape device program over the rollout just collected: for each of
``update_epochs`` passes a fresh permutation (device generator), then ``minibatches`` steps of
gather (observations re-gathered from the bar indices and portfolio features) → forward →
clipped loss → backward → clip → guard → target-KL mask → masked Adam → per-step record. No host
reads anywhere, so the whole update is captured once as a CUDA graph (on CUDA) and replayed.

Target-KL early stop without a host branch: when a minibatch's approximate KL exceeds
1.5 × ``target_kl`` (before its step is applied) a sticky device flag rises, and that step and
every later one of the same update are masked out (parameters and Adam state unchanged), as
Stable-Baselines3 stops its loop.
"""

from __future__ import annotations

import torch

from foxhunt.agents.dqn.learner import linear_schedule
from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.guard import Guard
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.networks import ActorCritic
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.loss import ppo_loss
from foxhunt.agents.ppo.rollout import RolloutBuffer
from foxhunt.market import MarketData

RECORD_FIELDS = ("loss", "grad_norm", "td_abs_mean", "v_sum", "v_min", "v_max", "ok", "nonfinite", "over_clip",
                 "entropy", "approx_kl", "clip_frac", "pg_loss", "v_loss", "kl_masked")
"""One row per minibatch step; the first nine have the DQN record layout (EpochMonitor.add_update_records):
td_abs_mean is mean |R − V| (the critic's error against the GAE return), v_* the critic's values."""

SUMMARY_FIELDS = ("entropy", "approx_kl", "clip_frac", "pg_loss", "v_loss", "kl_stopped", "explained_var")
"""PPO's epoch summary fields beyond the shared ones (means over the epoch's minibatch steps;
kl_stopped: steps masked by the target-KL stop; explained_var: mean over the epoch's rollouts)."""


class PPOLearner:
    """Actor-critic weights, optimiser, guard and the update over ``buffer`` (same device as market)."""

    def __init__(self, cfg: PPOConfig, market: MarketData, n_actions: int, buffer: RolloutBuffer,
                 monitor: EpochMonitor, seed: int = 0) -> None:
        dev = market.device
        self.cfg, self.market, self.buffer, self.monitor, self.device = cfg, market, buffer, monitor, dev
        torch.manual_seed(seed)
        self.net = ActorCritic(market.obs_dim, n_actions, cfg.hidden, cfg.head_hidden, cfg.shared_trunk).to(dev)
        self.flat = FlatParams(self.net)
        self._init_weights = self.flat.data.clone()
        self.lr = torch.full((), cfg.lr, dtype=torch.float32, device=dev)
        self.opt = MaskedAdam(self.flat, self.lr, eps=1e-5)
        self.guard = Guard(dev, loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse, warmup=cfg.grad_collapse_warmup,
                           patience=cfg.grad_collapse_patience, max_skipped=cfg.max_skipped_steps)
        self.updates = torch.zeros((), dtype=torch.int64, device=dev)
        self.kl_stop = torch.zeros((), dtype=torch.bool, device=dev)
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(seed + 3_000_017)
        rows, mb = cfg.batch_rows, cfg.minibatch_size
        self._keys = torch.zeros(rows, dtype=torch.float32, device=dev)
        self.obs = torch.zeros((mb, market.obs_dim), dtype=torch.float32, device=dev)
        per_epoch = cfg.iterations_per_epoch * cfg.update_epochs * cfg.minibatches
        self.records = torch.zeros((per_epoch, len(RECORD_FIELDS)), dtype=torch.float32, device=dev)
        self.record_idx = torch.zeros(1, dtype=torch.int64, device=dev)

    # ------------------------------------------------------------------ per fold
    def reset(self, reinit: bool = True) -> None:
        """New fold: weights re-initialised in place (or kept: warm start), Adam, guard and counters zeroed."""
        if reinit:
            self.flat.data.copy_(self._init_weights)
        self.opt.reset()
        self.lr.fill_(self.cfg.lr)
        self.guard.reset()
        for t in (self.updates, self.kl_stop, self.record_idx):
            t.zero_()

    # ------------------------------------------------------------------ the update
    def _minibatch(self, idx: torch.Tensor) -> None:
        """One guarded step on the rollout rows ``idx`` ([B] int64 into the flattened [T·N])."""
        cfg, b = self.cfg, self.buffer
        pick = lambda t: t.reshape(-1, *t.shape[2:]).index_select(0, idx)  # noqa: E731
        obs = self.market.observe(pick(b.bar), pick(b.portfolio), self.obs)
        ret, old_value = pick(b.ret), pick(b.value)
        logits, value = self.net(obs)
        out = ppo_loss(logits, value, pick(b.action), pick(b.logp), old_value, pick(b.advantage), ret,
                       clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                       norm_adv=cfg.norm_adv, decided=pick(b.decided) if cfg.explore_hold > 0.0 else None)
        self.flat.zero_grad()
        out.loss.backward()
        self._apply(out, value.detach(), ret)

    def _apply(self, out, value: torch.Tensor, ret: torch.Tensor) -> None:
        cfg = self.cfg
        loss = out.loss.detach()
        g = self.flat.grad
        gnorm = torch.linalg.vector_norm(g)
        ok, nonfinite, over_clip = self.guard.check(loss, gnorm, self.updates)
        if cfg.target_kl is not None:
            self.kl_stop.logical_or_(ok & (out.approx_kl > 1.5 * cfg.target_kl))
        kl_masked = ok & self.kl_stop
        coef = (cfg.grad_clip / (gnorm + 1e-6)).clamp(max=1.0)
        if cfg.lr_end is not None:
            self.lr.copy_(linear_schedule(cfg.lr, cfg.lr_end, cfg.lr_decay_steps, self.updates))
        self.opt.step(g * coef, ok & ~self.kl_stop)
        self.updates.add_(1)
        row = torch.stack([loss, gnorm, (ret - value).abs().mean(), value.sum(), value.min(), value.max(),
                           ok.float(), nonfinite.float(), over_clip.float(), out.entropy, out.approx_kl,
                           out.clip_frac, out.pg_loss, out.v_loss, kl_masked.float()])
        self.records.index_copy_(0, self.record_idx.clamp(max=self.records.shape[0] - 1), row.unsqueeze(0))
        self.record_idx.add_(1)

    def update(self) -> None:
        """All passes over the current rollout (the body captured as one CUDA graph)."""
        cfg = self.cfg
        mb = cfg.minibatch_size
        self.kl_stop.zero_()
        for _ in range(cfg.update_epochs):
            torch.rand(self._keys.shape, generator=self.generator, device=self.device, out=self._keys)
            perm = torch.argsort(self._keys)
            for m in range(cfg.minibatches):
                self._minibatch(perm[m * mb:(m + 1) * mb])

    def flush_records(self, n_updates: int, ev: torch.Tensor) -> None:
        """Reduce the epoch's ``n_updates`` (host-known) records into the summary; ev: [sum, count]."""
        m = self.monitor
        if n_updates:
            rec = self.records[:n_updates]
            m.add_update_records(rec[:, :9], self.cfg.minibatch_size)
            ok = rec[:, 6] > 0.5
            n_ok = ok.sum().clamp_min(1).double()
            for i, name in ((9, "entropy"), (10, "approx_kl"), (11, "clip_frac"), (12, "pg_loss"), (13, "v_loss")):
                m.set_scalar(name, torch.where(ok, rec[:, i], torch.zeros_like(rec[:, i])).double().sum() / n_ok)
            m.set_scalar("kl_stopped", rec[:, 14].double().sum())
        m.set_scalar("explained_var", ev[0] / ev[1].clamp_min(1.0))
        m.set_flag("halt", self.guard.halted)
        m.set_flag("halt_collapse", self.guard.collapse_flag)
        m.set_scalar("lr", self.lr)
        self.record_idx.zero_()

    # ------------------------------------------------------------------ checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"weights": self.flat.data, "lr": self.lr, "updates": self.updates,
                **{f"guard.{k}": v for k, v in self.guard.state_tensors().items()}, **self.opt.state_dict()}
