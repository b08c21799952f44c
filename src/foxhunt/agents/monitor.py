"""The epoch summary: a fixed-layout device tensor, accumulated in place, read once per epoch.

Collection and training add to it with device ops only; at the epoch end it is copied
``non_blocking`` into pinned host memory and an event is recorded; the host reads it after the
event (one synchronisation per epoch), or, in lagged mode, reads epoch e's copy during epoch e+1
when the event has long completed (zero blocking waits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from foxhunt.state import load_into

FIELDS = (
    "reward_sum", "reward_sumsq", "reward_min", "reward_max", "transitions",
    "act_short_full", "act_short_half", "act_flat", "act_long_half", "act_long_full",
    "episodes_done", "trades_closed", "trade_return_sum", "curiosity_sum",
    "updates", "loss_sum", "grad_norm_sum", "td_abs_sum",
    "q_sum", "q_min", "q_max", "q_count",
    "skipped", "skip_nonfinite", "skip_loss_clip", "halt", "halt_collapse",
    "epsilon", "lr", "beta",
    # The Q monitor (DQN): max_a Q of the online network over every train batch row, the largest
    # |Q| of any action, and the steps whose |Q| exceeded dqn.q_divergence (add_maxq_records).
    "maxq_count", "maxq_sum", "maxq_m2", "maxq_min", "maxq_max", "q_abs_max", "q_diverged",
    # The curiosity bonus's distribution over the epoch's transitions (add_collection).
    "curiosity_count", "curiosity_sumsq", "curiosity_max",
)
IDX = {name: i for i, name in enumerate(FIELDS)}
_MIN_FIELDS = ("reward_min", "q_min", "maxq_min")
_MAX_FIELDS = ("reward_max", "q_max", "maxq_max", "q_abs_max", "curiosity_max")


@dataclass(frozen=True)
class EpochSummary:
    """Host-side view of one epoch's summary (plain floats)."""

    epoch: int
    values: dict[str, float]

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    @property
    def reward_mean(self) -> float:
        n = self.values["transitions"]
        return self.values["reward_sum"] / n if n else float("nan")

    @property
    def reward_std(self) -> float:
        n = self.values["transitions"]
        if n < 2:
            return float("nan")
        mean = self.reward_mean
        return math.sqrt(max(self.values["reward_sumsq"] / n - mean * mean, 0.0))

    def sharpe_estimate(self, bars_per_year: float) -> float:
        """Annualised Sharpe of per-step rewards (a training-time estimate, not a backtest)."""
        std = self.reward_std
        return self.reward_mean / std * math.sqrt(bars_per_year) if std and std > 0 else float("nan")

    @property
    def loss_mean(self) -> float:
        u = self.values["updates"] - self.values["skipped"]
        return self.values["loss_sum"] / u if u > 0 else float("nan")

    @property
    def grad_norm_mean(self) -> float:
        u = self.values["updates"] - self.values["skipped"]
        return self.values["grad_norm_sum"] / u if u > 0 else float("nan")

    @property
    def q_mean(self) -> float:
        """Mean Q of the taken actions over the epoch's applied (not skipped) steps."""
        c = self.values["q_count"]
        return self.values["q_sum"] / c if c else float("nan")

    @property
    def maxq_mean(self) -> float:
        """Mean of max_a Q over every train batch row of the epoch (the Q monitor)."""
        c = self.values.get("maxq_count", 0.0)
        return self.values["maxq_sum"] / c if c else float("nan")

    @property
    def maxq_std(self) -> float:
        """Population standard deviation of max_a Q over the same rows."""
        c = self.values.get("maxq_count", 0.0)
        return math.sqrt(max(self.values["maxq_m2"] / c, 0.0)) if c else float("nan")

    @property
    def curiosity_mean(self) -> float:
        """Mean curiosity bonus (unclamped forward-model error) over the epoch's transitions."""
        c = self.values.get("curiosity_count", 0.0)
        return self.values["curiosity_sum"] / c if c else float("nan")

    @property
    def curiosity_std(self) -> float:
        c = self.values.get("curiosity_count", 0.0)
        if not c:
            return float("nan")
        mean = self.curiosity_mean
        return math.sqrt(max(self.values["curiosity_sumsq"] / c - mean * mean, 0.0))

    def action_counts(self) -> list[int]:
        return [int(self.values[f]) for f in FIELDS[5:10]]

    def to_dict(self) -> dict[str, float]:
        d = dict(self.values)
        d.update(
            epoch=self.epoch,
            reward_mean=self.reward_mean,
            reward_std=self.reward_std,
            loss_mean=self.loss_mean,
            grad_norm_mean=self.grad_norm_mean,
            q_mean=self.q_mean,
            maxq_mean=self.maxq_mean,
            maxq_std=self.maxq_std,
            curiosity_mean=self.curiosity_mean,
            curiosity_std=self.curiosity_std,
        )
        return d


class EpochMonitor:
    """Accumulates the epoch summary on the device; one pinned-memory readback per epoch."""

    RING = 8

    def __init__(self, device: torch.device, extra_fields: tuple[str, ...] = ()) -> None:
        """extra_fields: a learner's own summary fields, appended after FIELDS (set_scalar/set_flag)."""
        self.device = device
        self.fields = FIELDS + tuple(extra_fields)
        self.idx = {name: i for i, name in enumerate(self.fields)}
        self.buf = torch.zeros(len(self.fields), dtype=torch.float64, device=device)
        self._init = self.buf.clone()
        for f in _MIN_FIELDS:
            self._init[IDX[f]] = math.inf
        for f in _MAX_FIELDS:
            self._init[IDX[f]] = -math.inf
        pin = device.type == "cuda"
        # A ring of pinned slots: in lagged mode up to RING epochs can be in flight before the host
        # has to wait for the oldest (back-pressure, not a per-epoch synchronisation).
        self._host = [torch.zeros(len(self.fields), dtype=torch.float64, pin_memory=pin) for _ in range(self.RING)]
        self._events = [torch.cuda.Event() if pin else None for _ in range(self.RING)]
        self._pending: list[tuple[int, int]] = []  # (epoch, slot)
        self._slot = 0
        self.reset()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The epoch accumulator (live; ``foxhunt.state`` convention). Summaries already started
        on their way to the host are not state: a checkpoint is taken after they are read."""
        return {"buf": self.buf}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        load_into("EpochMonitor", self.state_dict(), state)

    def reset(self) -> None:
        """Start a new epoch's accumulation (device op, no host read)."""
        self.buf.copy_(self._init)

    # ---------------------------------------------------------------- accumulation (device only)
    def add_collection(self, reward: torch.Tensor, exposure: torch.Tensor, done: torch.Tensor,
                       trade_closed: torch.Tensor, trade_return: torch.Tensor, curiosity: torch.Tensor | None) -> None:
        """One env step of N envs: rewards [N], exposure levels [N] in 0..4, done/trade flags [N]."""
        b = self.buf
        r = reward.double()
        b[IDX["reward_sum"]] += r.sum()
        b[IDX["reward_sumsq"]] += (r * r).sum()
        b[IDX["reward_min"]] = torch.minimum(b[IDX["reward_min"]], r.min())
        b[IDX["reward_max"]] = torch.maximum(b[IDX["reward_max"]], r.max())
        b[IDX["transitions"]] += reward.shape[0]
        # index_add into the fixed 5 slots (bincount would size its output from the data: a sync).
        b[5:10].index_add_(0, exposure, torch.ones_like(exposure, dtype=torch.float64))
        b[IDX["episodes_done"]] += done.sum()
        b[IDX["trades_closed"]] += trade_closed.sum()
        b[IDX["trade_return_sum"]] += torch.where(trade_closed, trade_return, torch.zeros_like(trade_return)).double().sum()
        if curiosity is not None:
            c = curiosity.double()
            b[IDX["curiosity_count"]] += c.shape[0]
            b[IDX["curiosity_sum"]] += c.sum()
            b[IDX["curiosity_sumsq"]] += (c * c).sum()
            b[IDX["curiosity_max"]] = torch.maximum(b[IDX["curiosity_max"]], c.max())

    def add_update_records(self, rec: torch.Tensor, batch: int) -> None:
        """The epoch's gradient steps at once: rec [U, 9] rows (loss, grad norm, mean |TD|, Q sum,
        Q min, Q max, ok, non-finite, over clip) as written by the learner."""
        b = self.buf
        r = rec.double()
        ok = r[:, 6] > 0.5
        okd = ok.double()
        zero = torch.zeros_like(r[:, 0])
        b[IDX["updates"]] += r.shape[0]
        b[IDX["loss_sum"]] += torch.where(ok, r[:, 0], zero).sum()
        b[IDX["grad_norm_sum"]] += torch.where(ok, r[:, 1], zero).sum()
        b[IDX["td_abs_sum"]] += torch.where(ok, r[:, 2], zero).sum()
        b[IDX["q_sum"]] += torch.where(ok, r[:, 3], zero).sum()
        b[IDX["q_count"]] += okd.sum() * batch
        b[IDX["q_min"]] = torch.minimum(b[IDX["q_min"]], torch.where(ok, r[:, 4], zero + math.inf).min())
        b[IDX["q_max"]] = torch.maximum(b[IDX["q_max"]], torch.where(ok, r[:, 5], zero - math.inf).max())
        b[IDX["skipped"]] += (1.0 - okd).sum()
        b[IDX["skip_nonfinite"]] += r[:, 7].sum()
        b[IDX["skip_loss_clip"]] += r[:, 8].sum()

    def add_maxq_records(self, rec: torch.Tensor, batch: int) -> None:
        """The Q monitor: rec [U, 6] rows (mean, M2, min, max of max_a Q over the step's ``batch``
        rows, the largest |Q|, diverged flag: ``targets.q_record`` and the learner's divergence
        column), one per gradient step, skipped steps included (a diverging batch is what the
        monitor must show). Means and M2 combine exactly (Chan et al.'s pairwise update) with what
        the epoch holds already, in float64, on the device."""
        b = self.buf
        r = rec.double()
        n_b = float(r.shape[0] * batch)
        mean_b = r[:, 0].mean()
        m2_b = r[:, 1].sum() + batch * (r[:, 0] - mean_b).square().sum()
        n_a = b[IDX["maxq_count"]]
        n = n_a + n_b
        delta = mean_b - b[IDX["maxq_sum"]] / n_a.clamp_min(1.0)
        b[IDX["maxq_m2"]] += m2_b + delta * delta * n_a * n_b / n
        b[IDX["maxq_sum"]] += mean_b * n_b
        b[IDX["maxq_count"]] += n_b
        b[IDX["maxq_min"]] = torch.minimum(b[IDX["maxq_min"]], r[:, 2].min())
        b[IDX["maxq_max"]] = torch.maximum(b[IDX["maxq_max"]], r[:, 3].max())
        b[IDX["q_abs_max"]] = torch.maximum(b[IDX["q_abs_max"]], r[:, 4].max())
        b[IDX["q_diverged"]] += r[:, 5].sum()

    def set_scalar(self, name: str, value: torch.Tensor) -> None:
        self.buf[self.idx[name]] = value.double()

    def set_flag(self, name: str, flag: torch.Tensor) -> None:
        """Sticky flag: once set during the epoch it stays set."""
        i = self.idx[name]
        self.buf[i] = torch.maximum(self.buf[i], flag.double())

    # ---------------------------------------------------------------- readback
    def start_readback(self, epoch: int) -> None:
        """Copy the summary into pinned host memory (non_blocking) and record an event."""
        slot = self._slot
        self._host[slot].copy_(self.buf, non_blocking=True)
        ev = self._events[slot]
        if ev is not None:
            ev.record()
        self._pending.append((epoch, slot))
        self._slot = (self._slot + 1) % self.RING

    def finish_readback(self) -> EpochSummary:
        """Wait for the oldest pending copy (an event wait: the epoch's one synchronisation)."""
        epoch, slot = self._pending.pop(0)
        ev = self._events[slot]
        if ev is not None:
            ev.synchronize()
        values = dict(zip(self.fields, self._host[slot].tolist()))
        return EpochSummary(epoch, values)

    def ready(self) -> bool:
        """True when the oldest pending copy has landed (never blocks)."""
        if not self._pending:
            return False
        ev = self._events[self._pending[0][1]]
        return True if ev is None else bool(ev.query())

    @property
    def pending(self) -> int:
        return len(self._pending)
