"""Run logs: metrics.jsonl (one line per epoch), TensorBoard scalars, rich progress, phase timing.

Everything here is fed by the one epoch readback (an ``EpochSummary`` of host floats) and by host
clocks: logging adds no device synchronisation. ``PhaseTimer`` splits an epoch's device time into
collection / training / curiosity by recording CUDA events around each step call (read after the
epoch's readback, when they have completed), or host clocks on the CPU.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

TB_SCALARS = ("reward_mean", "reward_std", "loss_mean", "q_mean", "grad_norm_mean", "epsilon", "lr", "beta", "skipped",
              "maxq_mean", "maxq_std", "maxq_min", "maxq_max", "q_abs_max",  # the Q monitor (DQN)
              "curiosity_mean", "curiosity_std", "curiosity_max",  # dqn.curiosity
              "entropy", "approx_kl", "clip_frac", "explained_var", "kl_stopped")  # the last five: PPO only


def clean_floats(d: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe copy: non-finite floats become None (strict JSON has no NaN / Infinity), in nested
    dicts and lists too."""
    return {k: _clean(v) for k, v in d.items()}


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return clean_floats(v)
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class MetricsLog:
    """Append-only ``metrics.jsonl``; ``truncate(nbytes)`` rolls it back to a checkpoint's length."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "ab")

    def truncate(self, nbytes: int) -> None:
        """Drop lines written after the checkpoint being resumed (they will be written again)."""
        self._f.flush()
        if self.path.stat().st_size > nbytes:
            os.truncate(self.path, nbytes)
        self._f.seek(0, os.SEEK_END)

    def write(self, row: dict[str, Any]) -> None:
        self._f.write((json.dumps(clean_floats(row), sort_keys=True) + "\n").encode())
        self._f.flush()

    def sync(self) -> int:
        """fsync and return the file length in bytes (recorded in checkpoints)."""
        self._f.flush()
        os.fsync(self._f.fileno())
        return self._f.tell()

    def close(self) -> None:
        self._f.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl (an incomplete last line, from a kill, is ignored)."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


class TensorBoardLog:
    """One scalar point per epoch (global step = epochs completed in the run) and per fold."""

    def __init__(self, log_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def epoch(self, step: int, fold: int, row: dict[str, Any]) -> None:
        for key in TB_SCALARS:
            v = row.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                self.writer.add_scalar(f"train/{key}", v, step)
        self.writer.add_scalar("train/fold", fold, step)
        if isinstance(row.get("epoch_s"), float):
            self.writer.add_scalar("time/epoch_s", row["epoch_s"], step)

    def fold(self, fold: int, agent: dict[str, float], buy_hold: dict[str, float] | None) -> None:
        from foxhunt.backtest.display import sharpe_or_zero, value

        for key in ("sharpe", "total_return", "max_drawdown", "trade_count"):
            for name, row in (("agent", agent), ("buy_hold", buy_hold)):
                v = (sharpe_or_zero if key == "sharpe" else lambda r: value(r, key))(row) if row else math.nan
                if math.isfinite(v):  # a flat window's Sharpe is logged as 0; an undefined one is left out
                    self.writer.add_scalar(f"val/{name}_{key}", v, fold)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class Progress:
    """rich progress bars for folds and epochs, advanced only when a summary has been read back."""

    def __init__(self, n_folds: int, epochs: int, enabled: bool, console: Any = None) -> None:
        self.enabled = enabled
        self.epochs = epochs
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

        self.bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"), console=console, transient=False,
        )
        self.folds = self.bar.add_task("folds ", total=n_folds, info="")
        self.ep = self.bar.add_task("epochs", total=epochs, info="")

    def __enter__(self) -> "Progress":
        if self.enabled:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()

    def start_fold(self, done_folds: int, fold: int, done_epochs: int) -> None:
        if self.enabled:
            self.bar.update(self.folds, completed=done_folds, info=f"fold {fold}")
            self.bar.reset(self.ep, total=self.epochs, completed=done_epochs, info="")

    def epoch(self, row: dict[str, Any]) -> None:
        if self.enabled:
            q = "V" if "entropy" in row else "Q"  # PPO's critic value in place of DQN's Q
            info = f"reward {row.get('reward_mean', math.nan):+.4f}  loss {row.get('loss_mean') or math.nan:.4g}  {q} {row.get('q_mean') or math.nan:+.3f}"
            self.bar.update(self.ep, advance=1, info=info)

    def end_fold(self, done_folds: int, info: str) -> None:
        if self.enabled:
            self.bar.update(self.folds, completed=done_folds, info=info)


class PhaseTimer:
    """Times the step callables of a DQNTrainer (collection round, train step, curiosity step, steady epoch).

    ``install(trainer)`` wraps ``trainer._round`` / ``_train`` / ``_curiosity``; ``install_stacks(lockstep)`` the
    member stacks' steps. On CUDA each call
    is bracketed by two recorded events (no synchronisation); ``take(epoch)`` sums the elapsed
    times of that epoch's calls, to be called after the epoch's summary was read back (its events
    have completed then). On the CPU the host clock brackets each (synchronous) call.
    """

    # dqn.overlap_collection: _collect (on the second stream with two, its events recorded there) and
    # _insert are collection too; collect_s then overlaps train_s.
    # dqn.epoch_graph: a steady epoch's rounds are one graph, collection and updates in it (rounds_s).
    PHASES = {"_round": "collect_s", "_collect": "collect_s", "_insert": "collect_s", "_train": "train_s",
              "_train_round": "train_s", "_curiosity": "curiosity_s", "_steady": "rounds_s"}

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.epoch = 0
        self._spans: dict[int, dict[str, list[Any]]] = {}
        self.calls: dict[str, int] = {}

    def install(self, trainer: Any) -> None:
        for attr, phase in self.PHASES.items():
            fn = getattr(trainer, attr, None)
            if fn is not None:
                setattr(trainer, attr, self._wrap(fn, phase))

    def install_stacks(self, lockstep: Any) -> None:
        """With stacked members (``dqn.stack_members``) the lockstep runs the rounds' updates (and, joint, their
        collection) of every member of a stack, so member 0's own steps are never called: time the stacks'
        steps instead, as ``train_s`` and ``collect_s`` (the whole stack's, not member 0's)."""
        from dataclasses import replace

        lockstep.stacks = [replace(st, step=self._wrap(st.step, "train_s") if st.step is not None else None,
                                   rounds=self._wrap(st.rounds, "collect_s") if st.rounds is not None else None)
                           for st in lockstep.stacks]

    def begin_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._spans[epoch] = {p: [] for p in self.PHASES.values()}

    def _wrap(self, fn: Callable[[], None], phase: str) -> Callable[[], None]:
        def timed() -> None:
            spans = self._spans.setdefault(self.epoch, {p: [] for p in self.PHASES.values()})[phase]
            self.calls[phase] = self.calls.get(phase, 0) + 1
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                spans.append((start, end))
            else:
                t0 = time.perf_counter()
                fn()
                spans.append(time.perf_counter() - t0)

        timed.__wrapped__ = fn  # type: ignore[attr-defined]  # the step itself (its captured graph) for callers
        return timed

    def take(self, epoch: int) -> dict[str, float]:
        """Seconds per phase of ``epoch`` (whose work has completed); forgets that epoch."""
        spans = self._spans.pop(epoch, {})
        out = {}
        for phase, items in spans.items():
            if self.cuda:
                out[phase] = sum(s.elapsed_time(e) for s, e in items) / 1e3
            else:
                out[phase] = float(sum(items))
        return out


def run_banner(plan: Any, cfg: Any, members: int, selection: bool) -> list[str]:
    """The lines a run prints before its first fold: the execution plan, the members of a fold
    (``train.ensemble`` and its grids) and the abstention rule (with epoch selection)."""
    tcfg = cfg.train
    lines = [plan.summary()]
    if members > 1:
        seed = int(cfg.run.seed)
        which = (f"; discounts {', '.join(f'{g:g}' for g in tcfg.gamma_grid)} (train.gamma_grid), the fold's model is the "
                 "mean-Q network of the discount that scores best on the held-back window") if tcfg.gamma_grid else \
            "; the fold's model is their mean-Q network"
        lines.append(f"ensemble: {members} agents a fold (seeds {seed}…{seed + members - 1}), "
                     f"each with its own epoch selection{which}")
    if selection and tcfg.abstain:
        lines.append(f"abstention: a fold trades only if its agents' mean held-back Sharpe beats {tcfg.abstain_z:g} "
                     "standard errors of that window (train.abstain_z); otherwise its model is flat")
    return lines
