"""Epoch selection on a held-back tail of each fold's training window (``train.select = "inner"``).

Why: at GPU scale a fold's training window is visited thousands of times; on small data (daily
bars: ~20 K training bars against millions of sampled transitions) the network goes on fitting the
noise of those bars long after it has learnt the edge, and the last epoch is far worse out of sample
than an early one (docs/LEARNING.md, measured on the H200: daily planted edge, validation Sharpe
+1.35 after epoch 1, −0.12 after epoch 14). Early stopping needs held-out data the validation window
must not be: the last ``inner_fraction`` of the training window is held back from training (after a
purge gap of ``folds.purge`` bars, as between training and validation), the greedy policy is
backtested on it after every epoch (same costs and backtester as the validation), and the network
of the epoch with the best Sharpe there is the fold's network (evaluated, saved as the model file).

Layout of one fold (bar indices)::

    train_start ........ train_end' | purge | inner window ...... train_end | purge | validation
    \\_____ training (train_fold) __/          \\_ held back: scored each epoch _/

Costs one backtest of ``inner`` bars and one host read per epoch. The selector's state (the best
score, its epoch and a device copy of its parameters) is checkpointed with the trainer, so a resumed
run selects exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy, MemberGreedyPolicy
from foxhunt.backtest.timing import sharpe_standard_error, timing_returns  # noqa: F401 - re-exported: the selector's and abstention's
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.state import ComponentStateError, StateDict, host_int, load_into

MIN_INNER_BARS = 20
"""The held-back window must leave at least this many bars to score (a Sharpe of fewer is noise)."""

SUB_WINDOW = 2048
"""The held-back window is backtested as lockstep sub-windows of at most this many steps."""


def sub_windows(start: int, steps: int, longest: int) -> tuple[list[int], list[int]]:
    """Split the window (bars start+1 … start+steps) into contiguous sub-windows of at most ``longest``
    steps, as near equal as possible: (starts, lengths), sub-window w stepping bars starts[w]+1 …
    starts[w]+lengths[w]."""
    n = max(1, -(-steps // longest))
    edges = np.linspace(0, steps, n + 1).round().astype(np.int64)
    return [start + int(a) for a in edges[:-1]], [int(b - a) for a, b in zip(edges[:-1], edges[1:])]


def pooled_sharpe(returns: np.ndarray, bars_per_year: float) -> float:
    """Annualised Sharpe of per-bar returns [n] (mean / sample std × sqrt(bars per year), as the
    backtest metrics); NaN when the returns do not vary (e.g. a policy that never trades)."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < 2:
        return float("nan")
    sd = float(r.std(ddof=1))
    return float(r.mean() / sd * np.sqrt(bars_per_year)) if sd > 0 else float("nan")


def split_fold(fold: FoldRange, fraction: float, purge: int) -> tuple[FoldRange, int, int]:
    """(training part of ``fold``, inner window start, inner window steps) for ``select = "inner"``.

    The inner window is the last ``floor(fraction × train_len)`` bars of the training window; the
    training part ends ``purge`` bars before it. ConfigError when either part would be too short.
    """
    inner = int(fold.train_len * fraction)
    train_end = fold.train_end - inner - purge
    if inner < MIN_INNER_BARS + 1 or train_end - fold.train_start < 2:
        raise ConfigError(f"fold {fold.fold}: train.inner_fraction = {fraction:g} of {fold.train_len} training bars "
                          f"leaves {inner} held-back bars and {max(train_end - fold.train_start, 0)} training bars "
                          f"(need > {MIN_INNER_BARS} and >= 2; purge {purge})")
    part = FoldRange(fold.fold, fold.train_start, train_end, fold.val_start, fold.val_end)
    return part, fold.train_end - inner, inner - 1  # steps: bars start+1 … train_end-1, as validation


class HeldBackScore:
    """The epoch selector's score of a greedy policy on a held-back window: ``(start, steps, policy) ->``
    the Sharpe of its returns (``score = "sharpe"``), or of their part that holding one exposure cannot
    earn (``"timing"``: ``timing_returns`` against buy-and-hold on the same bars, backtested once per
    window). One backtest and one host read per call.

    The window is stepped as lockstep sub-windows of at most ``SUB_WINDOW`` bars (each from a flat
    portfolio), so its serial length, hence its time, stays short on minute data (80 K held-back bars:
    40 windows of 2 K); the score is the Sharpe of their pooled bar returns."""

    def __init__(self, backtester: Any, backend: str, bars_per_year: float, score: str = "sharpe") -> None:
        if score not in ("sharpe", "timing"):
            raise ValueError(f"HeldBackScore: score {score!r}, expected 'sharpe' or 'timing'")
        self.backtester, self.backend, self.bars_per_year, self.score = backtester, backend, float(bars_per_year), score
        self._market: tuple[tuple[int, int], np.ndarray] | None = None  # (window, buy-and-hold returns)

    def _returns(self, starts: list[int], lengths: list[int], policy: Any) -> np.ndarray:
        res = self.backtester.run(starts, lengths, policy, backend=self.backend, keep_curves=True)
        assert res.returns is not None
        return np.concatenate([res.returns[i, :n] for i, n in enumerate(lengths)])

    def market_returns(self, start: int, steps: int) -> np.ndarray:
        """Buy-and-hold's pooled returns on the window (cached for the window last asked for: within
        a fold, with that fold's statistics on the market)."""
        if self._market is None or self._market[0] != (start, steps):
            starts, lengths = sub_windows(start, steps, SUB_WINDOW)
            ones = torch.ones((len(starts), max(lengths)), dtype=torch.float32, device=self.backtester.market.device)
            self._market = ((start, steps), self._returns(starts, lengths, ExposurePolicy(ones)))
        return self._market[1]

    def __call__(self, start: int, steps: int, policy: Any) -> float:
        starts, lengths = sub_windows(start, steps, SUB_WINDOW)
        return self._score(self._returns(starts, lengths, policy), start, steps)

    def _score(self, r: np.ndarray, start: int, steps: int) -> float:
        if self.score == "timing":
            r = timing_returns(r, self.market_returns(start, steps))
        return pooled_sharpe(r, self.bars_per_year)

    def score_members(self, start: int, steps: int, nets: list[nn.Module], decision_interval: int) -> list[float]:
        """``self(start, steps, GreedyPolicy(net, k))`` for every net, from ONE backtest (``member_returns``)."""
        starts, lengths = sub_windows(start, steps, SUB_WINDOW)
        return [self._score(r, start, steps) for r in self.member_returns(starts, lengths, nets, decision_interval)]

    def member_returns(self, starts: list[int], lengths: list[int], nets: list[nn.Module],
                       decision_interval: int) -> list[np.ndarray]:
        """Each net's pooled bar returns over the windows (starts, lengths), from ONE backtest of
        len(nets) × len(starts) windows (``MemberGreedyPolicy``: net m greedy on its own block of the
        windows): the env is stepped once for every member. Each member's windows and actions are those
        of its own backtest, so its returns, hence its score, are the same."""
        n = len(starts)
        policy = MemberGreedyPolicy(nets, [(m * n, (m + 1) * n) for m in range(len(nets))], decision_interval)
        res = self.backtester.run(list(starts) * len(nets), list(lengths) * len(nets), policy, backend=self.backend,
                                  keep_curves=True)
        assert res.returns is not None
        return [np.concatenate([res.returns[m * n + i, :k] for i, k in enumerate(lengths)]) for m in range(len(nets))]


class EpochSelector:
    """Keeps the network of the epoch with the best greedy Sharpe on the held-back window.

    params: the live module that holds the trained parameters (DQN's online network, PPO's
    actor-critic); they are copied in place, so captured graphs that read them stay valid.
    policy: () -> the network whose argmax is the greedy action. backtest: ``(start, steps, policy)
    -> Sharpe`` of that greedy policy on the window. decision_interval: the trainer's k.
    """

    def __init__(self, params: nn.Module, policy: Callable[[], nn.Module], backtest: Any,
                 decision_interval: int = 1) -> None:
        self.net = params
        self.decision_interval = int(decision_interval)  # the trainer's k: the greedy policy decides every k bars
        self.policy = policy
        self.backtest = backtest
        self.live = {k: v for k, v in params.state_dict().items()}  # views of the live parameters / buffers
        self.snapshot = {k: v.detach().clone() for k, v in self.live.items()}
        self.window = (0, 0)
        self.best_sharpe = -math.inf
        self.best_epoch = 0

    def begin_fold(self, start: int, steps: int) -> None:
        """A new fold: its held-back window (first bar, steps) and no epoch selected yet."""
        self.window = (start, steps)
        self.best_sharpe = -math.inf
        self.best_epoch = 0

    @torch.no_grad()
    def observe(self, epoch: int) -> float:
        """Score the current network after ``epoch`` (1-based) epochs; keep it if it is the best so far
        (ties: the earlier epoch). Returns its held-back Sharpe (NaN when undefined, e.g. no trade)."""
        policy = GreedyPolicy(self.policy(), self.decision_interval)
        return self.take(epoch, float(self.backtest(self.window[0], self.window[1], policy)))

    @torch.no_grad()
    def take(self, epoch: int, sharpe: float) -> float:
        """``observe`` with the current network's held-back Sharpe already measured (``observe_members``)."""
        score = sharpe if math.isfinite(sharpe) else 0.0  # a policy that never trades: flat, Sharpe 0
        if score > self.best_sharpe:
            self.best_sharpe, self.best_epoch = score, epoch
            for k, v in self.live.items():
                self.snapshot[k].copy_(v)
        return sharpe

    @torch.no_grad()
    def finish(self) -> dict[str, Any]:
        """Load the selected epoch's parameters into the live network; returns what was selected."""
        if self.best_epoch > 0:
            for k, v in self.live.items():
                v.copy_(self.snapshot[k])
        return {"epoch": self.best_epoch, "inner_sharpe": self.best_sharpe if self.best_epoch else None,
                "inner_start": self.window[0], "inner_steps": self.window[1]}

    # ------------------------------------------------------------------ state (checkpoints)
    def state_dict(self) -> StateDict:
        out: StateDict = {f"net.{k}": v for k, v in self.snapshot.items()}
        out["best_sharpe"] = torch.tensor(self.best_sharpe, dtype=torch.float64)
        out["best_epoch"] = host_int(self.best_epoch)
        out["window"] = torch.tensor(self.window, dtype=torch.int64)
        return out

    def load_state_dict(self, state: StateDict) -> None:
        load_into("EpochSelector", self.state_dict(), state)
        self.best_sharpe = float(state["best_sharpe"])
        self.best_epoch = int(state["best_epoch"])
        self.window = (int(state["window"][0]), int(state["window"][1]))
        if self.best_epoch < 0 or math.isnan(self.best_sharpe):
            raise ValueError(f"EpochSelector: best_epoch {self.best_epoch}, best_sharpe {self.best_sharpe} out of range")


def observe_members(selectors: list[EpochSelector], epoch: int,
                    score_members: Callable[[int, int, list[nn.Module], int], list[float]]) -> list[float]:
    """Every selector's ``observe(epoch)``, the members of one decision interval scored by one backtest
    (``score_members(start, steps, nets, k)``, e.g. ``HeldBackScore.score_members``) when they share the
    held-back window and their networks a
    shape; a network that reads the last bars (a sequence network) is scored alone. Returns each
    selector's held-back Sharpe, in order."""
    out: list[float | None] = [None] * len(selectors)
    groups: dict[tuple[Any, ...], list[tuple[int, nn.Module]]] = {}
    for i, sel in enumerate(selectors):
        net = sel.policy()
        if hasattr(net, "bind_history") or len(selectors) == 1:
            out[i] = sel.observe(epoch)
            continue
        shape = tuple((k, tuple(v.shape)) for k, v in net.state_dict().items())
        groups.setdefault((sel.window, sel.decision_interval, type(net), shape), []).append((i, net))
    for (window, k, _, _), members in groups.items():
        if len(members) == 1:
            i = members[0][0]
            out[i] = selectors[i].observe(epoch)
            continue
        scores = score_members(window[0], window[1], [net for _, net in members], k)
        for (i, _), sharpe in zip(members, scores):
            out[i] = selectors[i].take(epoch, float(sharpe))
    return [float(v) for v in out]  # type: ignore[arg-type]


class WithSelection:
    """A trainer seen by the checkpoint module with the selector as one more component
    (``selection.safetensors``); every other attribute is the trainer's."""

    def __init__(self, trainer: Any, selector: EpochSelector) -> None:
        self._trainer = trainer
        self._selector = selector

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def state_dict(self) -> dict[str, StateDict]:
        out = self._trainer.state_dict()
        out["selection"] = self._selector.state_dict()
        return out

    def load_state_dict(self, state: dict[str, StateDict]) -> None:
        rest = dict(state)
        sel = rest.pop("selection", None)
        if sel is None:
            raise ValueError("the checkpoint has no selection component (train.select = 'inner' saves one)")
        try:
            self._selector.load_state_dict(sel)
        except ValueError as exc:
            raise ComponentStateError("selection", str(exc)) from None
        self._trainer.load_state_dict(rest)
