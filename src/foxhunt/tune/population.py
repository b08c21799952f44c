"""Tune trials as a population (``tune.population = K``): K trials of a study run as one walk-forward.

Why: a trial's trainer is a small network over a few thousand envs, a sliver of a GPU, and a worker
runs one trial's folds after another's. A population runs K trials on the one prepared market, fold
by fold together, and steps every trial's members (all of their ``train.ensemble`` × grid trainers)
in one ``Lockstep`` (``foxhunt.train.lockstep``): round r of every member before round r + 1 of any,
each member on its own CUDA stream, so K trials cost about what the busiest one costs until the card
is full.

What is shared and what is not: the market (bars, features, device tensors), the folds and the
fold loop are shared; each trial keeps its own ``WalkForwardRunner`` (its trainers, epoch selectors,
backtester, abstention and grid choice), built from its own config, and the population drives the
runners' own fold steps (``_begin_fold``, ``_epoch_costs``, ``_observe``, ``_drain``, ``_end_fold``,
``evaluate``) in the order ``WalkForwardRunner.score_folds`` runs them for one trial; the fold's validation
backtests of trials whose models share a shape run as one backtest (``foxhunt.tune.joint_validation``). A trial's
arithmetic is therefore exactly its own: its fold scores, pruning decisions and recorded values
are bit for bit those of the same trial run alone (tests/tune/test_population.py, on the CPU).

Which trials share a population (``population_key``): those whose ``[data]``, ``[features]``,
``[folds]`` and ``[accel]`` sections, ``run.device``, ``tune.holdout`` and the runner's fold loop
keys (``train.select``, ``train.inner_fraction``, ``train.epochs``, ``train.mirror``,
``train.lockstep``, ``train.threads``) are equal: the market and the folds are then one, the epoch
loop has one length, and the process-wide settings (threads, matmul precision) agree. Everything a
trainer owns may differ (learning rates, discounts, cost multipliers, entropy, exploration, network
widths, seeds, the learner itself): the members are stepped side by side, not stacked, so their
shapes need not match. Trials that cannot share run one at a time, as with ``tune.population = 1``.

Stacked across trials (``dqn.stack_members = true`` in the study's configuration): when every trial is one
DQN member (``train.ensemble = 1``, no grid) and their fused train steps can be stacked (equal network
shapes, batch, rounds and warm-up; learning rates and discounts may differ: ``agents.dqn.member_stack``),
the population's updates run as ONE stacked program (``train.lockstep.build_stack``), each trial a row;
their values then equal the trials alone within float32 rounding (batched GEMMs), not bit for bit. Where
they cannot be stacked the population runs side by side (``stack_note`` says why); trials of several
members keep their own stacks. A trial that leaves keeps its row in the program, updated and read by no
one (``Lockstep.subset``).

A trial leaves the population when its ``on_fold`` raises (``optuna.TrialPruned``) or its config,
runner or training raises (it fails alone: the exception is its outcome); the others go on and the
trial that left is stepped no more.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch

from foxhunt.config import Config
from foxhunt.errors import ConfigError
from foxhunt.train.lockstep import Lockstep, build_stack, wants_stack
from foxhunt.tune.joint_validation import validate_together
from foxhunt.tune.objective import FoldScores

LOOP_TRAIN_KEYS = ("select", "inner_fraction", "epochs", "mirror", "lockstep", "threads")
"""[train] keys of the fold loop a population shares (the rest of [train] is each runner's own)."""


def population_key(cfg: Config) -> str:
    """The key on which trials share a population (module docstring): equal keys, one walk-forward."""
    d = cfg.to_dict()
    train = d.get("train", {})
    return json.dumps({"data": d.get("data"), "features": d.get("features"), "folds": d.get("folds"),
                       "accel": d.get("accel"), "device": d.get("run", {}).get("device"),
                       "holdout": d.get("tune", {}).get("holdout"), "train": {k: train.get(k) for k in LOOP_TRAIN_KEYS}},
                      sort_keys=True, default=str)


def share_groups(keys: Sequence[str | None]) -> list[list[int]]:
    """Indices of ``keys`` grouped by equal key, groups in order of first appearance; None (a trial
    without a config) is never grouped."""
    groups: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for i, key in enumerate(keys):
        if key is None:
            continue
        if key not in groups:
            groups[key] = []
            out.append(groups[key])
        groups[key].append(i)
    return out


class PopulationRunner:
    """Drives ``runners`` (``WalkForwardRunner``s on one prepared market, equal ``population_key``)
    fold by fold together, every trial's members in one lockstep.

    labels: how each runner's trial is named when its guard halts (default ``trial i``)."""

    def __init__(self, runners: Sequence[Any], labels: Sequence[str] | None = None) -> None:
        self.runners = list(runners)
        if not self.runners:
            raise ValueError("PopulationRunner: no runners")
        first = self.runners[0]
        for r in self.runners[1:]:  # the population_key rule, checked where it matters
            if r.folds != first.folds or r.tcfg.epochs != first.tcfg.epochs or r.market is not first.market:
                raise ValueError("PopulationRunner: runners must share one market, its folds and train.epochs")
        self.folds = first.folds
        self.epochs = int(first.tcfg.epochs)
        names = list(labels) if labels is not None else [f"trial {i}" for i in range(len(self.runners))]
        members, self.owner, tags, stacks = [], [], [], []
        for i, r in enumerate(self.runners):
            # a trial's member stack (dqn.stack_members) stays its own: its members, renumbered
            own = getattr(getattr(r, "lockstep", None), "stacks", ())
            stacks += [replace(st, members=tuple(len(members) + m for m in st.members)) for st in own]
            for k, t in enumerate(r.members):
                members.append(t)
                self.owner.append(i)  # member m's trial
                tags.append(names[i] if len(r.members) == 1 else f"{names[i]} member {k}")
        self.device = first.market.device
        lockstep = all(r.tcfg.lockstep for r in self.runners)
        self.stack_note: str | None = None  # why trials that asked for one stack were not stacked
        if lockstep and not stacks and wants_stack(members):
            # every trial one member with dqn.stack_members on: the population's updates as one program
            try:
                stacks = [build_stack(members, self.device)]
            except ConfigError as exc:  # shapes or loop keys differ: side by side, as without the flag
                self.stack_note = str(exc)
        self.lockstep = Lockstep(members, self.device, lockstep, labels=tags, stacks=stacks)

    def score_folds(self, on_fold: Sequence[Callable[[int, Any, Any], None] | None],
                    times: Sequence[dict[str, float]] | None = None) -> list[Exception | None]:
        """Train and evaluate every fold of every trial (``WalkForwardRunner.score_folds``, per trial):
        per fold each live runner's reset, E epochs of all live members in lockstep, each runner's
        drain and fold end, the live trials' greedy validation backtests (one backtest for the trials
        that can share it, ``joint_validation``), then ``on_fold[i](k, fold, agent result)``.
        Returns, per trial, what stopped it (an exception from its on_fold or its own work), or None
        when it ran every fold. times[i]: "train_s" (the population's reset + epochs, shared by its
        live trials) and "eval_s" (the live trials' validation backtests, also shared) are added, in seconds."""
        n = len(self.runners)
        stops: list[Exception | None] = [None] * n

        def alive() -> list[int]:
            return [i for i in range(n) if stops[i] is None]

        def stop(i: int, exc: Exception) -> None:
            if stops[i] is None:  # the first exception is what stopped the trial
                stops[i] = exc

        def guarded(i: int, fn: Callable[[], Any]) -> None:
            try:
                fn()
            except Exception as exc:  # the trial fails (or is pruned) alone; the population goes on
                stop(i, exc)

        for k, fold in enumerate(self.folds):
            if not alive():
                break
            t0 = time.perf_counter()
            for i in alive():
                r = self.runners[i]
                guarded(i, lambda r=r: r._begin_fold(fold, warm_start=r.tcfg.warm_start and k > 0))
            for e in range(self.epochs):
                for i in alive():
                    guarded(i, lambda r=self.runners[i]: r._epoch_costs(e))
                idx = [m for m, i in enumerate(self.owner) if stops[i] is None]
                if not idx:
                    break
                step = self.lockstep.subset(idx)  # a trial that left is stepped no more

                def member_failed(j: int, exc: Exception, idx: list[int] = idx) -> None:
                    stop(self.owner[idx[j]], exc)  # its trial's other members finish this epoch, then leave

                step.run_epoch(member_failed)
                step.finish(member_failed)
                for i in alive():
                    guarded(i, lambda r=self.runners[i]: r._observe(e))
            for i in alive():
                guarded(i, lambda r=self.runners[i]: (r._drain(), r._end_fold()))
            if times is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # training's last kernels count as training
            t1 = time.perf_counter()
            live = alive()
            results = validate_together([self.runners[i] for i in live], fold)  # one backtest where they can share it
            t2 = time.perf_counter()
            for i, agent in zip(live, results):
                if times is not None:
                    times[i]["train_s"] = times[i].get("train_s", 0.0) + t1 - t0
                    times[i]["eval_s"] = times[i].get("eval_s", 0.0) + t2 - t1
                if isinstance(agent, Exception):
                    stop(i, agent)
                elif on_fold[i] is not None:
                    guarded(i, lambda cb=on_fold[i], agent=agent: cb(k, fold, agent))
        return stops


@dataclass
class Outcome:
    """One trial's result from ``evaluate_population``: its fold scores so far, its set-up seconds
    outside the folds (config, its runner; the market for the trial that loaded it), its training
    and backtest seconds (``PopulationRunner.score_folds``' times), and what stopped it (None: every
    fold ran)."""

    scores: FoldScores = field(default_factory=FoldScores)
    overhead_s: float = 0.0
    times: dict[str, float] = field(default_factory=lambda: {"train_s": 0.0, "eval_s": 0.0})
    error: Exception | None = None


def evaluate_population(ev: Any, values: Sequence[dict[str, Any]],
                        on_fold: Sequence[Callable[[int, FoldScores, bool], None] | None],
                        labels: Sequence[str] | None = None) -> list[Outcome]:
    """Every trial of ``values`` (config values, ``foxhunt.tune.space.decode``) on the evaluator
    ``ev`` (``foxhunt.tune.worker.TrialEvaluator``): trials that share a ``population_key`` as one
    ``PopulationRunner``, each group after the other, a trial alone in its group through
    ``ev.evaluate`` (as with ``tune.population = 1``, reusing the evaluator's cached runner).
    on_fold[i](k, scores so far, last fold?) runs after trial i's fold k and may raise
    ``optuna.TrialPruned``. No exception escapes: each is the outcome of the trial that raised it."""
    from foxhunt.train.runner import WalkForwardRunner

    names = list(labels) if labels is not None else [f"trial {i}" for i in range(len(values))]
    out = [Outcome() for _ in values]
    cfgs: list[Config | None] = [None] * len(values)
    keys: list[str | None] = [None] * len(values)
    for i, v in enumerate(values):
        t0 = time.perf_counter()
        try:
            cfgs[i] = ev.trial_config(v)
            keys[i] = population_key(cfgs[i])
        except Exception as exc:
            out[i].error = exc
        out[i].overhead_s += time.perf_counter() - t0
    for group in share_groups(keys):
        if len(group) == 1:  # as tune.population = 1
            i = group[0]
            try:
                out[i].scores, overhead = ev.evaluate(values[i], on_fold[i])
                out[i].overhead_s += overhead
            except Exception as exc:
                out[i].error = exc
            out[i].times = dict(ev.times)
            continue
        ev.release_runner()  # free the cached trainer's device memory before K are built
        runners: list[Any] = []
        members: list[int] = []
        for i in group:
            t0 = time.perf_counter()
            try:
                prepared = ev.prepared_for(cfgs[i])  # one market for the group (equal keys: loaded once)
                prepared.market.set_fold(prepared.folds[0])
                runners.append(WalkForwardRunner(prepared, None))
                members.append(i)
                ev.stats["runner_builds"] += 1
            except Exception as exc:
                out[i].error = exc
            out[i].overhead_s += time.perf_counter() - t0
        if not runners:
            continue
        pop = PopulationRunner(runners, [names[i] for i in members])
        n_folds = len(pop.folds)

        def fold_done(i: int) -> Callable[[int, Any, Any], None]:
            def done(k: int, fold: Any, agent: Any) -> None:
                n = fold.val_len - 1
                out[i].scores.add(agent.metrics[0], None if agent.returns is None else agent.returns[0, :n])
                if on_fold[i] is not None:
                    on_fold[i](k, out[i].scores, k == n_folds - 1)
            return done

        stops = pop.score_folds([fold_done(i) for i in members], [out[i].times for i in members])
        for i, stop in zip(members, stops):
            out[i].error = stop
        del pop, runners
    return out


__all__ = ["LOOP_TRAIN_KEYS", "Outcome", "PopulationRunner", "evaluate_population", "population_key", "share_groups"]
