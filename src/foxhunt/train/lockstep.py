"""A fold's members stepped as one program: round by round, each member's device work on its own CUDA stream.

Why: a member (one seed, discount or decision interval of ``train.ensemble`` / ``train.gamma_grid`` /
``train.decision_grid``) is a small network over 512-4,096 envs, a sliver of a GPU; its captured rounds
are chains of small kernels whose time is launch latency, not arithmetic. Stepped one member's epoch
after another, M members cost M times one. Stepped in lockstep, round r of every member is enqueued
before round r + 1 of any, each member on its own stream, so the GPU runs the members' chains side by
side and M members cost about what the busiest one costs until the card is full. A member whose epoch is
one graph (``dqn.epoch_graph`` and its twins, off by default for now) yields once an epoch: its whole epoch is
one launch on its stream, so the host enqueues M launches an epoch instead of 2·R·M.

What is shared and what is not: every member keeps its own trainer (env, replay, networks, optimiser,
generators, monitor), so a member in the lockstep program does exactly the arithmetic it does alone, in
the same order, on its own stream: its results are bit for bit those of the same member trained alone
(tests/train/test_lockstep.py on the CPU, the GPU tests on a card). Its graphs are captured on its own
stream (``accel.graphs.capture`` takes the current stream), because cuBLAS keys its workspace by
(handle, stream): graphs captured on one shared stream would share a workspace while replayed at once.

Ordering: every member stream first waits for the host stream's work (a fold reset, the epoch
selector's restore of a network), and the host stream waits for every member stream at the end of the
epoch (the selector's held-back backtests read the members' networks there). Each member starts its
epoch summary's readback on its own stream; ``finish`` reads them in member order.

On a CPU there are no streams: the members' rounds interleave on the host in the same order, which
changes nothing in any member's arithmetic (the CPU tests prove the equality with members alone).

Stacked updates (``dqn.stack_members``, off by default; measured on an H100: BENCHMARKS.md): when every member is a
DQNTrainer with the flag on (two or more), their fused train steps become one program
(``agents.dqn.member_stack.StackedTrainSteps``, built here before any member graph is captured) and a
round's updates of all members one ``GraphedStep`` on the stack's own stream. Each member's
``epoch_steps`` then collects and counts its updates (``DQNTrainer.updates_by``) and this loop runs
them: after round r of every member of the stack (once the replays hold a batch, the trainer's own
condition) the stack runs ``train_steps_per_round`` steps; on CUDA its stream waits for every member
stream and every member stream waits for it before round r + 1. A member keeps its alone order (round
r's collection, then its updates), so its results equal the members trained apart within float32
rounding (the stack's batched GEMMs), not bit for bit (tests/train/test_lockstep_stacked.py). The
members' steady-epoch graph (``dqn.epoch_graph``) is off for stacked members: one graph cannot hold
updates shared with other members.

Joint collection rounds (``dqn.joint_rounds``, with the stacked updates; ``agents.dqn.stacked_collection.unsupported``
names what it cannot batch: lagged collection, curiosity, check mode, members that differ in envs, env structure or
plan; a decision grid's members batch, each env at its own k): round r's collection of every member of the stack is ONE batched program (the members' envs one env of
members x envs, ``env.stacked``), one ``GraphedStep`` on the stack's stream. Each member's epoch then yields once
before its first round (its set-up: monitor reset, reset flags), and pass r + 1 of the loop first runs round r of
the stack, then the members' bookkeeping of that round, then the round's updates: the device order of a member
alone. Each member draws from its own generators and writes its own replay, so the arithmetic is that of its
own rounds, bit for bit (tests/train/test_lockstep_stacked.py).

Batched rollouts (``ppo.batched_rollouts``): PPO members' rollouts the same way (``agents.ppo.stacked_rollout``), a
stack whose ``step`` is None (each member runs its own update in its pass).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Container, Iterator, Sequence

import torch

from foxhunt.accel.graphs import GraphedStep
from foxhunt.agents.fold_trainer import TrainingHalted
from foxhunt.errors import ConfigError

STACK_EQUAL = ("rounds_per_epoch", "train_steps_per_round", "warmup_transitions", "batch_size")
"""[dqn] keys stacked members must share (one round of updates for all, at the same rounds)."""


@dataclass(frozen=True)
class MemberStack:
    """Members ``members`` (indices into the lockstep's members) whose updates ``step`` runs (a round's
    ``train_steps_per_round`` stacked steps), on ``stream`` on CUDA."""

    members: tuple[int, ...]
    trainers: tuple[Any, ...]
    step: GraphedStep | None
    """The members' stacked updates (DQN); None: each member runs its own (PPO's batched rollouts)."""
    stream: torch.cuda.Stream | None
    rounds: GraphedStep | None = None
    """The members' collection rounds as one step (joint rounds, module docstring); None: each member runs its own."""

    @property
    def rounds_per_epoch(self) -> int:
        """Collection rounds a member takes an epoch (DQN's rounds, PPO's iterations)."""
        cfg = self.trainers[0].cfg
        return int(getattr(cfg, "rounds_per_epoch", None) or cfg.iterations_per_epoch)

    def ready(self, left: Container[int] = ()) -> bool:
        """The trainer's own condition (``DQNTrainer.epoch_steps``): the replays hold a batch. left:
        members (lockstep indices) that failed this epoch: their replays no longer grow, so they are
        not asked."""
        cfg = self.trainers[0].cfg
        ready_at = max(cfg.warmup_transitions, cfg.batch_size)
        ready = [t.replay.storage.size >= ready_at for m, t in zip(self.members, self.trainers) if m not in left]
        if any(ready) != all(ready):
            raise RuntimeError("Lockstep: stacked members' replays differ in size (they collect equal rounds)")
        return cfg.train_steps_per_round > 0 and all(ready)


def wants_stack(members: Sequence[Any]) -> bool:
    """Two or more members, every one a DQNTrainer with ``dqn.stack_members`` on."""
    return len(members) > 1 and all(getattr(getattr(t, "cfg", None), "stack_members", False)
                                    and hasattr(t, "updates_by") for t in members)


def wants_batched_rollouts(members: Sequence[Any]) -> bool:
    """Two or more PPO members, every one with ``ppo.batched_rollouts`` on, that can share one env."""
    if len(members) < 2 or not all(hasattr(t, "rollout") and getattr(t.cfg, "batched_rollouts", False) for t in members):
        return False
    from foxhunt.agents.ppo.stacked_rollout import unsupported

    return unsupported(members) is None


def build_rollout_stack(members: Sequence[Any], device: torch.device) -> MemberStack:
    """The PPO members' rollouts as one step (``agents.ppo.stacked_rollout``; each member's update stays its own),
    run by the lockstep before the pass in which each member updates on it: a member's alone order."""
    from foxhunt.agents.ppo.stacked_rollout import StackedRollout

    collection = StackedRollout(members)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    gens = [g for t in members for g in (*t.env.sampler.generators().values(), *t.rollout.draws.generators().values())]
    rounds = GraphedStep(collection.collect, device, members[0].choice.cuda_graphs, generators=gens, capture_stream=stream)
    rounds.collection = collection  # type: ignore[attr-defined]
    for t in members:
        t.rounds_by = rounds
    return MemberStack(tuple(range(len(members))), tuple(members), None, stream, rounds)


def joint_rounds(members: Sequence[Any], device: torch.device, stream: torch.cuda.Stream | None) -> GraphedStep:
    """One collection round of every member as one step: the members' envs one env of M x N envs and their steps
    one program (``agents.dqn.stacked_collection``). The step registers every member's generators; each member's
    replay counters are saved, restored and advanced as its own round step does them."""
    from foxhunt.agents.dqn.stacked_collection import StackedCollection

    bodies = [t._round_step for t in members]
    collection = StackedCollection(members)

    def save() -> list[object]:
        return [b.host_state[0]() for b in bodies]

    def restore(state: list[object]) -> None:
        for b, x in zip(bodies, state):
            b.host_state[1](x)

    def after() -> None:
        for b in bodies:
            b.after_replay()

    step = GraphedStep(collection.round, device, members[0].plan.graphs,
                       generators=[g for b in bodies for g in b.generators], host_state=(save, restore),
                       after_replay=after, capture_stream=stream)
    step.collection = collection  # type: ignore[attr-defined]  (the batched program, for tests and timing)
    return step


def build_stack(members: Sequence[Any], device: torch.device) -> MemberStack:
    """Stack the members' fused train steps (before any of their graphs is captured: they read the
    stacked rows) and hand their updates to it. ConfigError (one line) when they cannot share one program."""
    from foxhunt.agents.dqn.member_stack import StackedTrainSteps

    c0 = members[0].cfg
    for k, t in enumerate(members[1:], start=1):
        for key in STACK_EQUAL:
            if getattr(t.cfg, key) != getattr(c0, key):
                raise ConfigError(f"dqn.stack_members: member {k} differs from member 0 in dqn.{key}")
    cuda = device.type == "cuda"
    sides = [torch.cuda.Stream(device) for _ in members] if cuda else None
    try:
        stack = StackedTrainSteps.from_trainers(members, compile=cuda, side_streams=sides)
    except ValueError as exc:
        raise ConfigError(f"dqn.stack_members: {exc}") from None
    for t in members:
        t.updates_by = stack
        if t.checks is not None:  # check mode: the captured tensors moved into the stack's rows
            t.checks.rebase_addresses()

    def round_of_updates() -> None:
        for _ in range(c0.train_steps_per_round):
            stack()

    stream = torch.cuda.Stream(device) if cuda else None
    step = GraphedStep(round_of_updates, device, members[0].plan.graphs,
                       generators=[t.replay.sampler.generator for t in members], capture_stream=stream)
    rounds = None
    if c0.joint_rounds:
        from foxhunt.agents.dqn.stacked_collection import unsupported

        if unsupported(members) is None:  # members it cannot batch launch their own rounds
            rounds = joint_rounds(members, device, stream)
        for t in members:
            t.rounds_by = rounds
    return MemberStack(tuple(range(len(members))), tuple(members), step, stream, rounds)


class Lockstep:
    """Runs the epochs of ``members`` (trainers with ``epoch_steps`` / ``finish_epoch``) in lockstep.

    device: the members' device (streams on CUDA only); enabled: False steps one member's whole epoch
    after another's (``train.lockstep = false``: the comparison the benchmark times); labels: how a
    halted member is named (default ``member k``); stacks: the member stacks to run (a tune population
    passes its runners'); None: one stack of all members when they ask for it (``wants_stack``)."""

    def __init__(self, members: Sequence[Any], device: torch.device, enabled: bool = True,
                 labels: Sequence[str] | None = None, stacks: Sequence[MemberStack] | None = None) -> None:
        self.members = list(members)
        self.device = device
        self.enabled = enabled and len(self.members) > 1
        self.labels = list(labels) if labels is not None else [f"member {k}" for k in range(len(self.members))]
        if stacks is None:
            stacks = []
            if wants_stack(self.members):
                if not self.enabled:
                    raise ConfigError("dqn.stack_members = true needs train.lockstep = true (the stacked updates run "
                                      "between the members' rounds)")
                stacks = [build_stack(self.members, device)]
            elif self.enabled and wants_batched_rollouts(self.members):
                stacks = [build_rollout_stack(self.members, device)]
        self.stacks = list(stacks)
        self.streams: list[torch.cuda.Stream] | None = None
        if self.enabled and device.type == "cuda":
            self.streams = [torch.cuda.Stream(device) for _ in self.members]

    def _on(self, k: int) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.streams[k]) if self.streams is not None else contextlib.nullcontext()

    def subset(self, keep: Sequence[int]) -> "Lockstep":
        """The lockstep of members ``keep`` (indices into ``members``), each still on its own stream
        (the one its graphs were captured on): a tune population whose pruned trials left
        (``foxhunt.tune.population``)."""
        sub = Lockstep.__new__(Lockstep)
        sub.members = [self.members[k] for k in keep]
        sub.device, sub.enabled = self.device, self.enabled
        sub.labels = [self.labels[k] for k in keep]
        sub.streams = [self.streams[k] for k in keep] if self.streams is not None else None
        pos = {m: j for j, m in enumerate(keep)}
        sub.stacks = []
        for st in self.stacks:
            # a member that left (a pruned or failed trial of a population stacked across trials) keeps its row in
            # the stack's program, which goes on updating it from its own replay: wasted work, read by no one, and
            # no change to any other row (each row's arithmetic is its own). It is no longer waited for.
            kept = [(pos[m], t) for m, t in zip(st.members, st.trainers) if m in pos]
            if kept:
                sub.stacks.append(replace(st, members=tuple(j for j, _ in kept), trainers=tuple(t for _, t in kept)))
        return sub

    def run_epoch(self, on_error: Callable[[int, Exception], None] | None = None) -> None:
        """Enqueue one epoch of every member (no host reads): round r of each member before round r + 1
        of any; every member's summary readback is started at its epoch's end.

        on_error(k, exc): given, an exception raised by member k's round is handed to it and member k
        takes no more rounds this epoch while the others go on (a tune population's trials fail
        alone); None: it propagates."""
        if not self.enabled:
            for k, t in enumerate(self.members):
                try:
                    t.run_epoch()
                except Exception as exc:
                    if on_error is None:
                        raise
                    on_error(k, exc)
            return
        host = torch.cuda.current_stream(self.device) if self.streams is not None else None
        if self.streams is not None:
            for s in self.streams:
                s.wait_stream(host)
        steps: list[Iterator[None] | None] = [t.epoch_steps() for t in self.members]
        failed: set[int] = set()  # members whose round raised this epoch (they take no more rounds)
        passes = 0  # a joint stack's members: pass 0 their set-up, pass r + 1 round r, then their epoch's end

        def fail(members: Sequence[int], exc: Exception) -> None:
            if on_error is None:
                raise exc
            for m in members:
                steps[m] = None
                failed.add(m)
                on_error(m, exc)

        while any(g is not None for g in steps):
            for st in self.stacks:  # round r's collection of a joint stack's members that are still in, before their pass
                live = [m for m in st.members if m not in failed and steps[m] is not None]
                if st.rounds is not None and live and 1 <= passes <= st.rounds_per_epoch:
                    try:
                        self._run_joint_rounds(st)
                    except Exception as exc:
                        fail(live, exc)
            stepped = [False] * len(steps)  # which members took a round in this pass
            for k, gen in enumerate(steps):
                if gen is None:
                    continue
                with self._on(k):
                    try:
                        next(gen)
                        stepped[k] = True
                    except StopIteration:
                        steps[k] = None
                    except Exception as exc:
                        if on_error is None:
                            raise
                        steps[k] = None
                        failed.add(k)
                        on_error(k, exc)
            for st in self.stacks:  # round r's updates of a stack's members, after round r of each that is still in
                live = [m for m in st.members if m not in failed]
                if st.rounds is not None and passes == 0:
                    continue  # a joint stack's set-up pass: no round yet
                if live and all(stepped[m] for m in live):
                    try:
                        self._run_stack(st, failed)
                    except Exception as exc:
                        fail(live, exc)
            passes += 1
        if self.streams is not None:
            for s in self.streams:
                host.wait_stream(s)

    def _run_stack(self, st: MemberStack, failed: Container[int] = ()) -> None:
        """One round of a stack's updates, if its members' replays are ready (``failed``: members that
        left this epoch, not asked)."""
        if st.step is not None and st.ready(failed):
            self._on_stack_stream(st, st.step)

    def _run_joint_rounds(self, st: MemberStack) -> None:
        """One collection round of every member of a joint stack."""
        assert st.rounds is not None
        self._on_stack_stream(st, st.rounds)

    def _on_stack_stream(self, st: MemberStack, step: Callable[[], None]) -> None:
        """``step()``; on CUDA on the stack's stream, ordered after every member stream's work and before any
        member's next."""
        if self.streams is None or st.stream is None:
            step()
            return
        for m in st.members:
            st.stream.wait_stream(self.streams[m])
        with torch.cuda.stream(st.stream):
            step()
        for m in st.members:
            self.streams[m].wait_stream(st.stream)

    def finish(self, on_error: Callable[[int, Exception], None] | None = None) -> list[Any]:
        """Every member's ``finish_epoch`` (its summary, or None in lagged readback), in member order.
        A member whose guard halted raises TrainingHalted naming it (with more than one member).
        on_error(k, exc): as in ``run_epoch``; member k's summary is then None and the others are read."""
        out = []
        for k, t in enumerate(self.members):
            try:
                out.append(t.finish_epoch())
            except Exception as exc:
                named = TrainingHalted(f"{self.labels[k]}: {exc}") if isinstance(exc, TrainingHalted) and len(self.members) > 1 else None
                if on_error is None:
                    if named is not None:
                        raise named from None
                    raise
                out.append(None)
                on_error(k, named or exc)
        return out

    def train_epoch(self) -> list[Any]:
        """``run_epoch`` then ``finish``."""
        self.run_epoch()
        return self.finish()


__all__ = ["Lockstep", "MemberStack", "build_rollout_stack", "build_stack", "joint_rounds", "wants_batched_rollouts",
           "wants_stack"]
