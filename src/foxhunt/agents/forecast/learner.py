"""The forecast learner's gradient step: training bars → features → forecast → loss → masked Adam.

``step()`` is one fixed-shape device program with no host reads, captured once as a CUDA graph on
CUDA (``ForecastTrainer``, ``accel.graphs.GraphedStep``) and replayed; on a CPU it runs eagerly:

1. ``batch`` bars drawn uniformly from the fold's training bars whose target lies inside the
   training slice (``target.valid_span``: the fold's bounds are read on the device, so a new fold
   needs no new graph; with ``train.mirror`` half of them in the mirrored rows);
2. their normalised features (the fold's statistics; with ``forecast.policy = "attention"`` the spans
   of the L − 1 bars before each too: ``net.gather``) and targets (``target.targets``);
3. the loss (``loss``: Huber, MSE or the pinball loss over the quantiles), its gradient, the shared
   guard, clipping, masked Adam;
4. one record row (loss, gradient norm, guard flags, the median forecast's squared error and the
   target's square), reduced into the epoch summary by ``flush_records``.
"""

from __future__ import annotations

import torch

from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.forecast.config import ForecastConfig
from foxhunt.agents.forecast.net import ForecastNet, gather
from foxhunt.agents.forecast.target import targets, valid_span
from foxhunt.agents.guard import Guard
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.env.pooled import pooled_starts
from foxhunt.market import MarketData

RECORD_FIELDS = ("loss", "grad_norm", "ok", "nonfinite", "over_clip", "sq_error", "target_sq")
"""One row per gradient step (``flush_records`` reduces them into the epoch summary)."""

SUMMARY_FIELDS = ("forecast_mse", "target_ms", "train_r2")
"""The epoch summary's forecast fields (over the epoch's applied steps): the median forecast's mean
squared error and the target's mean square (h-bar variances), and 1 − their ratio (in-sample R²
against a zero forecast)."""


def loss_of(out: torch.Tensor, y: torch.Tensor, cfg: ForecastConfig, levels: torch.Tensor | None = None) -> torch.Tensor:
    """0-d loss of forecasts ``out`` [B, Q] against targets ``y`` [B] (``forecast.loss``); levels: the
    quantile levels [Q] (loss = quantile)."""
    if cfg.loss == "quantile":
        assert levels is not None
        err = y.unsqueeze(-1) - out  # pinball: τ·err above the quantile, (τ − 1)·err below
        return torch.maximum(levels * err, (levels - 1.0) * err).mean()
    f = out[:, 0]
    if cfg.loss == "mse":
        return (f - y).square().mean()
    return torch.nn.functional.huber_loss(f, y, delta=cfg.huber_delta)


class ForecastLearner:
    """Forecast weights, optimiser, guard and the step, on ``market``'s device; h the target's horizon."""

    def __init__(self, cfg: ForecastConfig, market: MarketData, monitor: EpochMonitor, h: int, seed: int = 0) -> None:
        dev = market.device
        self.cfg, self.market, self.monitor, self.device, self.h = cfg, market, monitor, dev, int(h)
        torch.manual_seed(seed)
        self.net = ForecastNet(market.n_features, cfg.hidden, cfg.n_outputs, cfg.lags, cfg.attention_heads).to(dev)
        self.flat = FlatParams(self.net)
        self._init_weights = self.flat.data.clone()
        self.lr = torch.full((), cfg.lr, dtype=torch.float32, device=dev)
        self.opt = MaskedAdam(self.flat, self.lr, weight_decay=cfg.weight_decay)
        self.guard = Guard(dev, loss_clip=cfg.loss_clip, collapse=cfg.grad_collapse, warmup=cfg.grad_collapse_warmup,
                           patience=cfg.grad_collapse_patience, max_skipped=cfg.max_skipped_steps)
        self.updates = torch.zeros((), dtype=torch.int64, device=dev)
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(seed + 5_000_011)
        self._u = torch.zeros(cfg.batch, dtype=torch.float64, device=dev)
        self._offsets = torch.arange(1, self.h + 1, dtype=torch.int64, device=dev)
        self._lags = torch.arange(max(cfg.lags, 1), dtype=torch.int64, device=dev)
        self._levels = torch.tensor(cfg.quantiles, dtype=torch.float32, device=dev)
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
    def bars(self) -> torch.Tensor:
        """[B] int64 training bars, uniform over ``valid_span`` (its mirror's rows for u ≥ ½ when the
        market holds one; on a pooled universe a symbol by its weight, then a bar of its training rows less
        their last h), from the learner's generator."""
        m = self.market
        torch.rand(self._u.shape, generator=self.generator, out=self._u)
        if m.pooled:
            return pooled_starts(self._u, self.h, m)
        lo, n = valid_span(m, self.h)
        u = self._u
        if m.mirror_offset:
            u, shift = m.split_uniform(u)
            lo = lo + shift
        return torch.minimum((u * n).to(torch.int64), n - 1) + lo

    def forward(self, bars: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(forecasts [B, Q], targets [B]) of training bars ``bars`` ([B] int64)."""
        m = self.market
        return self.net(gather(m, bars, self.cfg.lags, self._lags)), targets(m, bars, self.h, self._offsets)

    def step(self) -> None:
        """One guarded gradient step on fresh bars (the body captured as one CUDA graph)."""
        cfg = self.cfg
        out, y = self.forward(self.bars())
        loss = loss_of(out, y, cfg, self._levels)
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
            f = out[:, cfg.median_output].detach()
            row = torch.stack([loss, gnorm, ok.float(), nonfinite.float(), over_clip.float(), (f - y).square().mean(),
                               y.square().mean()])
            self.records.index_copy_(0, self.record_idx.clamp(max=self.records.shape[0] - 1), row.unsqueeze(0))
            self.record_idx.add_(1)
            self.monitor.buf[self.monitor.idx["transitions"]] += float(cfg.batch)

    def flush_records(self, n_steps: int) -> None:
        """Reduce the epoch's ``n_steps`` (host-known) records into the summary, then rewind them."""
        m = self.monitor
        b, i = m.buf, m.idx
        if n_steps:
            rec = self.records[:n_steps].double()
            col = {name: rec[:, k] for k, name in enumerate(RECORD_FIELDS)}
            ok = col["ok"] > 0.5
            zero = torch.zeros_like(col["loss"])
            n_ok = ok.double().sum().clamp_min(1.0)
            b[i["updates"]] += float(n_steps)
            b[i["loss_sum"]] += torch.where(ok, col["loss"], zero).sum()
            b[i["grad_norm_sum"]] += torch.where(ok, col["grad_norm"], zero).sum()
            b[i["skipped"]] += float(n_steps) - ok.double().sum()
            b[i["skip_nonfinite"]] += col["nonfinite"].sum()
            b[i["skip_loss_clip"]] += col["over_clip"].sum()
            mse = torch.where(ok, col["sq_error"], zero).sum() / n_ok
            ms = torch.where(ok, col["target_sq"], zero).sum() / n_ok
            m.set_scalar("forecast_mse", mse)
            m.set_scalar("target_ms", ms)
            m.set_scalar("train_r2", 1.0 - mse / ms.clamp_min(1e-30))
        m.set_flag("halt", self.guard.halted)
        m.set_flag("halt_collapse", self.guard.collapse_flag)
        m.set_scalar("lr", self.lr)
        self.record_idx.zero_()

    # ------------------------------------------------------------------ checkpoints
    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"weights": self.flat.data, "lr": self.lr, "updates": self.updates,
                **{f"guard.{k}": v for k, v in self.guard.state_tensors().items()}, **self.opt.state_dict()}


__all__ = ["RECORD_FIELDS", "SUMMARY_FIELDS", "ForecastLearner", "loss_of"]
