"""The direct learner's gradient step: windows → policy → the env's P&L → objective → masked Adam.

``step()`` is one fixed-shape device program with no host reads, captured once as a CUDA graph on
CUDA (``DirectTrainer``) and replayed:

1. B window starts drawn uniformly from the fold's training bars (device generator; the fold's
   bounds are read on the device, so a new fold needs no new graph; with ``train.mirror`` half of
   them in the mirrored rows, as the env's episode starts);
2. their features [B, T, F] gathered and normalised with the fold's statistics (with
   ``direct.policy = "attention"`` the L − 1 bars before each window too: [B, T + L − 1, F]), their
   bars (``pnl.gather_bars``);
3. the policy's first layer for every bar at once, then bar by bar: a decision every
   ``env.decision_interval`` bars (the policy sees its exposure with ``direct.position_input``), the
   exposure through the relaxation (``DirectPolicy.exposure``) and the env's execution
   (``pnl.bar_step``) at the training env's costs;
4. the objective (``agents.direct.objective``), its gradient, the shared guard, clipping, masked Adam;
5. one record row (loss, gradient norm, guard flags, objective, turnover, …) and the epoch's return
   statistics, accumulated on the device.
"""

from __future__ import annotations

import math

import torch

from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.objective import ema_weights, objective, scaled_returns, vol_weight
from foxhunt.agents.direct.pnl import LEVELS, Execution, bar_step, fresh_book, gather_bars, step_terms
from foxhunt.agents.direct.policy import DirectPolicy
from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.guard import Guard
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.sequence_net import history_index
from foxhunt.env.params import EnvTensors
from foxhunt.market import MarketData

RECORD_FIELDS = ("loss", "grad_norm", "ok", "nonfinite", "over_clip", "objective", "turnover", "exposure_abs", "relax_gap")
"""One row per gradient step (``flush_records`` reduces them into the epoch summary)."""

SUMMARY_FIELDS = ("objective", "turnover", "exposure_abs", "relax_gap")
"""The epoch summary's direct-learner fields (means over the epoch's applied steps): the objective
(per bar, in units of σ_bar), the mean |Δx| per bar, the mean |x|, and the mean distance between the
trained exposure and the level the backtest trades (0 for straight_through; how far the
relaxation is from its greedy policy otherwise)."""


class DirectLearner:
    """Policy weights, optimiser, guard and the step, on ``market``'s device."""

    def __init__(self, cfg: DirectConfig, market: MarketData, params: EnvTensors, monitor: EpochMonitor,
                 seed: int = 0) -> None:
        dev = market.device
        self.cfg, self.market, self.params, self.monitor, self.device = cfg, market, params, monitor, dev
        self.k = int(params.decision_interval)
        torch.manual_seed(seed)
        seq = cfg.sequence if cfg.policy == "attention" else 0
        self.net = DirectPolicy(market.n_features, cfg.hidden, cfg.head_hidden, cfg.relaxation, cfg.position_input,
                                cfg.temperature, sequence=seq, heads=cfg.attention_heads).to(dev)
        self.flat = FlatParams(self.net)
        self._init_weights = self.flat.data.clone()
        self.lr = torch.full((), cfg.lr, dtype=torch.float32, device=dev)
        self.opt = MaskedAdam(self.flat, self.lr, weight_decay=cfg.weight_decay)
        self.guard = Guard(dev, loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse, warmup=cfg.grad_collapse_warmup,
                           patience=cfg.grad_collapse_patience, max_skipped=cfg.max_skipped_steps)
        self.updates = torch.zeros((), dtype=torch.int64, device=dev)
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(seed + 5_000_011)
        b, t = cfg.batch_windows, cfg.window
        self._u = torch.zeros(b, dtype=torch.float64, device=dev)
        self._offsets = torch.arange(t, dtype=torch.int64, device=dev)
        self._span = torch.arange(t + max(seq, 1) - 1, dtype=torch.int64, device=dev)  # a window's bars and the L − 1 before
        self._levels = torch.tensor(LEVELS, dtype=torch.float32, device=dev)
        self._ema = ema_weights(t, cfg.dsr_eta, torch.float32, dev) if cfg.objective == "dsr" else None
        self.records = torch.zeros((cfg.steps_per_epoch, len(RECORD_FIELDS)), dtype=torch.float32, device=dev)
        self.record_idx = torch.zeros(1, dtype=torch.int64, device=dev)

    # ------------------------------------------------------------------ per fold
    def reset(self, reinit: bool = True) -> None:
        """New fold: weights re-initialised in place (or kept: warm start), Adam, guard and counters zeroed."""
        if reinit:
            self.flat.data.copy_(self._init_weights)
        self.opt.reset()
        self.lr.fill_(self.cfg.lr)
        self.guard.reset()
        self.updates.zero_()
        self.record_idx.zero_()

    # ------------------------------------------------------------------ the step
    def starts(self) -> torch.Tensor:
        """[B] int64 window starts, uniform in [train_start, train_end − T − 1] of the market's fold (its
        mirror's rows for u ≥ ½ when the market holds one), from the learner's generator."""
        m, t = self.market, self.cfg.window
        torch.rand(self._u.shape, generator=self.generator, out=self._u)
        if m.pooled:  # a pooled universe: a symbol, then a window inside its training rows
            from foxhunt.env.pooled import pooled_starts

            return pooled_starts(self._u, t, m)
        u, lo = self._u, m.fold_bounds[0]
        span = (m.fold_bounds[1] - t - lo).clamp_min(1)
        if m.mirror_offset:
            u, shift = m.split_uniform(u)
            lo = lo + shift
        return torch.minimum((u * span).to(torch.int64), span - 1) + lo

    def forward(self, starts: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy's training P&L on the windows starting at ``starts`` ([B] int64): per-bar returns,
        exposure changes, exposures, levels and volatility, each [B, T] (differentiable where it matters)."""
        m, net, t = self.market, self.net, self.cfg.window
        b = starts.shape[0]
        idx = starts[:, None] + self._offsets  # [B, T] decision bars
        big_l = max(net.sequence, 1)
        # the decision bars and the L − 1 before the first (a sequence policy's), clamped to the start of the
        # window's rows (the market's first row, or its mirror's)
        base = m.copy_offset(starts)
        span_idx = history_index(starts, big_l, self._span, base, m.n_rows - 1)
        feats = m.features.index_select(0, span_idx.reshape(-1)).view(b, span_idx.shape[1], -1)
        feats = (feats - m.norm_mean) * m.norm_inv_std
        ex = Execution.of(self.params)
        med = m.medians_at(starts)[1] if m.pooled else m.median_abs_return  # a pooled universe: each window's symbol's
        terms = step_terms(gather_bars(m, idx), ex, med)
        book = fresh_book(b, ex)
        pre = net.first_layer_span(feats, t)  # [B, T, hidden[0]]
        out_all = None if net.position_input else net.rest(pre, None).unbind(1)
        pre_j = pre.unbind(1)  # one backward of T slices (indexing pre[:, j] would zero-fill [B, T, H] per bar)
        exposure = torch.zeros(b, dtype=torch.float32, device=self.device)
        rets, turns, xs, levels = [], [], [], []
        x = level = torch.zeros(b, dtype=torch.float32, device=self.device)
        hard = self.cfg.relaxation == "straight_through"
        for j in range(t):
            if j % self.k == 0:  # a decision (host-known: the interval is static); held in between
                out = net.rest(pre_j[j], exposure) if out_all is None else out_all[j]
                x, level = net.exposure(out), net.level(out)
            turns.append((x - book.x_prev).abs())
            res = bar_step(book, x, terms.at(j), ex, hard_gate=hard)
            book, exposure = res.book, res.exposure
            rets.append(res.ret)
            xs.append(x)
            levels.append(level)
        stack = lambda v: torch.stack(v, dim=1)  # noqa: E731
        path = {"ret": stack(rets), "turnover": stack(turns), "x": stack(xs), "level": stack(levels), "vol": terms.vol}
        if m.pooled:  # each window's own symbol's median |log return| scales its returns (``loss``)
            path["median_abs_return"] = med
        return path

    def loss(self, path: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss = −objective, objective) of a ``forward`` path."""
        cfg = self.cfg
        med = path["median_abs_return"][:, None] if "median_abs_return" in path else self.market.median_abs_return
        sigma_bar = (med * math.sqrt(math.pi / 2.0)).clamp_min(1e-12)
        weight = vol_weight(path["vol"], sigma_bar) if cfg.vol_target else None
        z = scaled_returns(path["ret"], path["turnover"], sigma_bar, penalty_bps=cfg.turnover_penalty, weight=weight)
        obj = objective(z, cfg.objective, risk_aversion=cfg.risk_aversion, ema=self._ema)
        return -obj, obj

    def step(self) -> None:
        """One guarded gradient step on fresh windows (the body captured as one CUDA graph)."""
        cfg = self.cfg
        path = self.forward(self.starts())
        loss, obj = self.loss(path)
        self.flat.zero_grad()
        loss.backward()
        g = self.flat.grad
        gnorm = torch.linalg.vector_norm(g)
        loss = loss.detach()
        ok, nonfinite, over_clip = self.guard.check(loss, gnorm, self.updates)
        coef = (cfg.grad_clip / (gnorm + 1e-6)).clamp(max=1.0)
        self.opt.step(g * coef, ok)
        self.updates.add_(1)
        with torch.no_grad():
            x, level = path["x"], path["level"]
            gap = (x - self._levels[level]).abs().mean()
            row = torch.stack([loss, gnorm, ok.float(), nonfinite.float(), over_clip.float(), obj.detach(),
                               path["turnover"].mean(), x.abs().mean(), gap])
            self.records.index_copy_(0, self.record_idx.clamp(max=self.records.shape[0] - 1), row.unsqueeze(0))
            self.record_idx.add_(1)
            self._accumulate(path["ret"].detach(), level)

    def _accumulate(self, r: torch.Tensor, level: torch.Tensor) -> None:
        """The epoch's net training returns (reward_* fields: the summary's Sharpe estimate) and the
        levels the greedy policy would hold (act_* fields), on the device."""
        b, i = self.monitor.buf, self.monitor.idx
        r64 = r.double()
        b[i["reward_sum"]] += r64.sum()
        b[i["reward_sumsq"]] += r64.square().sum()
        b[i["reward_min"]] = torch.minimum(b[i["reward_min"]], r64.min())
        b[i["reward_max"]] = torch.maximum(b[i["reward_max"]], r64.max())
        b[i["transitions"]] += r.numel()
        b[i["act_short_full"]:i["act_long_full"] + 1].index_add_(0, level.reshape(-1), torch.ones(level.numel(), dtype=torch.float64,
                                                                                                    device=r.device))

    def flush_records(self, n_steps: int) -> None:
        """Reduce the epoch's ``n_steps`` (host-known) records into the summary, then rewind them."""
        m = self.monitor
        b, i = m.buf, m.idx
        if n_steps:
            rec = self.records[:n_steps].double()
            col = {name: rec[:, k] for k, name in enumerate(RECORD_FIELDS)}
            ok = col["ok"] > 0.5
            zero = torch.zeros_like(col["loss"])
            n_ok = ok.double().sum()
            b[i["updates"]] += float(n_steps)
            b[i["loss_sum"]] += torch.where(ok, col["loss"], zero).sum()
            b[i["grad_norm_sum"]] += torch.where(ok, col["grad_norm"], zero).sum()
            b[i["skipped"]] += float(n_steps) - n_ok
            b[i["skip_nonfinite"]] += col["nonfinite"].sum()
            b[i["skip_loss_clip"]] += col["over_clip"].sum()
            for name in SUMMARY_FIELDS:
                m.set_scalar(name, torch.where(ok, col[name], zero).sum() / n_ok.clamp_min(1.0))
        m.set_flag("halt", self.guard.halted)
        m.set_flag("halt_collapse", self.guard.collapse_flag)
        m.set_scalar("lr", self.lr)
        self.record_idx.zero_()

    # ------------------------------------------------------------------ checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"weights": self.flat.data, "lr": self.lr, "updates": self.updates,
                **{f"guard.{k}": v for k, v in self.guard.state_tensors().items()}, **self.opt.state_dict()}


__all__ = ["RECORD_FIELDS", "SUMMARY_FIELDS", "DirectLearner"]
