"""The train steps of a fold's M same-shaped DQN members as ONE program over a member axis (issue 44).

Why: a member's fused train step (``fused_step.FusedTrainStep``) is a few dozen small kernels around
tiny GEMMs; on a GPU its time is launch latency, so M members stepped one program each cost ~M times
one (``train/lockstep.py`` overlaps them on streams, but still launches M programs).
``StackedTrainSteps`` runs the same arithmetic once for all members: every tensor the program reads or
writes per member is re-homed into one stacked tensor [M, ...], and ``torch.vmap`` of
``FusedTrainStep._program`` over that leading axis turns the M programs into one (batched GEMMs, one
kernel per fused elementwise group for all members). ``bench/bench_stacked_step.py`` times the two.

Layout after construction (M members, P flat parameters, C replay slots, R record rows, F record
fields, B batch):

    online, grad, target, adam_m, adam_v   [M, P]  float32   member k's flat weights etc. are row k
    adam_t, lr                             [M]     float32   Adam's step count, learning rate
    updates, collapse_run, skipped_total   [M]     int64     device counters
    halted, collapse_flag                  [M]     bool      guard flags
    records [M, R, F] float32, record_idx [M, 1] int64, beta [M] float32 (PER's IS exponent)
    gamma_pow [M, n_step] float32          gamma^1..gamma^n of each member (its own discount)
    st_bar, st_action, st_next_bar [M, C] int64; st_portfolio, st_next_portfolio [M, C, 3] and
    st_reward, st_discount [M, C] float32; st_done [M, C] bool; st_pos [M] int64 (the write head)

and each member's own attributes (``learner.flat.data``, its ``online`` / ``target`` modules'
parameters and grads, ``opt.m``, ``guard.halted``, ``replay.storage.reward``, ``sampler.beta``, …)
are VIEWS of row k. So a member acting, being selected, checkpointed or stepped alone still works
on the same storage. What must hold for that (true today, checked by ``check_views``):

- every writer of these tensors writes in place: ``load_into`` (checkpoints, ``copy_``),
  ``QLearner.reset`` / ``MaskedAdam.reset`` / ``Guard.reset`` (``copy_`` / ``zero_``), the replay's
  ``add`` (``index_copy_``) and ``clear`` (``zero_``), ``set_beta`` (``fill_``). Code that rebinds
  one of these attributes to a new tensor detaches that member from the stack silently for the
  stacked step; call ``check_views()`` after anything suspect (tests do).
- stack before anything captures or records addresses: CUDA graphs (``GraphedStep``), the fused
  acting pass's packed sources (``FusedActing._sources``: re-read by ``from_trainers``), check mode's
  pointer registry. A graph captured earlier would keep reading the freed old tensors.
- the members share one MarketData: ``features``, ``norm_mean``, ``norm_inv_std`` go into the program
  unbatched (vmap ``in_dims`` None), so they must be the same tensors (checked).

What stays per member, outside the program: the replay sampler's ``sample`` (its own generator and
sum tree) and ``update_priorities``. The call does no host reads (graph-capturable).
Arithmetic: the members' own, op for op (``FusedTrainStep._program``); batched GEMMs may sum in
another order than M single ones, so results equal the members stepped alone up to float32
rounding, not bitwise in general (tests/agents/test_dqn_member_stack.py states the tolerances).
``compile=True`` (one fullgraph torch.compile of the vmapped program) was traced and run on the CPU
by hand (~28 s to compile; equal to the eager stack within 1e-5); on a GPU (compiled) its tests pass on
an H100 and BENCHMARKS.md has its walk-forward times. ``train/lockstep.py`` uses it behind ``dqn.stack_members`` (off by default).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from foxhunt.agents.dqn.fused_step import FusedTrainStep, _check_flat, _compile
from foxhunt.agents.dqn.learner import _rehome

SHARED = ("features", "norm_mean", "norm_inv_std")
"""Tensors of the fold's market: one tensor for all members (unbatched in the program)."""
CONSTANT = ("beta1", "beta2")
"""Adam's betas as 0-d tensors: read only, equal when the Adam constants are (member 0's are used)."""
GUARD = ("collapse_run", "skipped_total", "halted", "collapse_flag")
STORAGE = {"st_bar": "bar", "st_portfolio": "portfolio", "st_action": "action", "st_reward": "reward",
           "st_done": "done", "st_next_bar": "next_bar", "st_next_portfolio": "next_portfolio",
           "st_discount": "discount", "st_pos": "pos_t"}
"""The program's names of the replay storage's columns -> ``ReplayStorage`` attributes."""


class StackedTrainSteps:
    """The train steps of ``steps`` (one ``FusedTrainStep`` per member, same shapes) as one vmapped program.

    steps: the members' fused steps, not yet captured in any graph (see the module docstring).
    compile: torch.compile the vmapped program (fullgraph, static shapes; the CUDA path); False runs
    it eagerly (CPU tests). ValueError (one line, naming the first difference) when the members
    cannot share one program. After construction the members' state lives in ``self.state``
    ({name: [M, ...]}), each member's attributes views of its row; a member's own step
    (``learner.train_step``) still works and updates its row.
    """

    def __init__(self, steps: Sequence[FusedTrainStep], compile: bool = False,
                 side_streams: Sequence[torch.cuda.Stream] | None = None) -> None:
        self.steps = list(steps)
        if side_streams is not None and len(side_streams) != len(self.steps):
            raise ValueError("StackedTrainSteps: one side stream per member")
        # CUDA: each member's sampling and priority write-back on its own stream (forked from and joined
        # to the calling stream, so a captured graph holds M parallel branches): one after another on one
        # stream they are M x a few small kernels a step, which cost more than the stacked step saves.
        self.side_streams = list(side_streams) if side_streams is not None else None
        if not self.steps:
            raise ValueError("StackedTrainSteps: no members")
        gammas = _check_stackable(self.steps)
        s0 = self.steps[0]
        self.batch_size = s0.batch_size
        # gamma only enters the program through n-step returns (n_step = 1 reads the stored discount).
        self.carry_gamma = s0.n_step > 1 and len(set(gammas)) > 1
        per_member = [k for k in s0._tensors if k not in SHARED and k not in CONSTANT]
        with torch.no_grad():
            # One copy of every member's current values into fresh [M, ...] tensors; the old ones
            # are released once the members' attributes point at the rows.
            self.state = {k: torch.stack([s._tensors[k] for s in self.steps]) for k in per_member}
        for i, s in enumerate(self.steps):
            _rehome_member(s, {k: v[i] for k, v in self.state.items()})
        self.check_views()
        t = {**{k: s0._tensors[k] for k in SHARED + CONSTANT}, **self.state}
        dims = {k: (0 if k in self.state else None) for k in t}
        self._tensors = t
        core = _StackedProgram.__new__(_StackedProgram)
        core.__dict__.update(s0.__dict__)  # the (equal) constants of member 0; no tensors of its own
        core.learner, core._tensors, core.program = None, None, None
        core.carry_gamma = self.carry_gamma
        self.core = core
        vmapped = torch.vmap(core._program, in_dims=(0, 0, dims))
        self.program = _compile(vmapped) if compile else vmapped
        dev = s0._tensors["online"].device
        m = len(self.steps)
        # Preallocated stacks of the members' draws (torch.stack(out=) writes in place: graph-safe).
        self._idx = torch.zeros((m, self.batch_size), dtype=torch.int64, device=dev)
        self._weights = torch.ones((m, self.batch_size), dtype=torch.float32, device=dev)

    @classmethod
    def from_trainers(cls, trainers: Sequence[Any], compile: bool = False,
                      side_streams: Sequence[torch.cuda.Stream] | None = None) -> "StackedTrainSteps":
        """The stack of DQNTrainers' fused steps (``plan.train_step = "fused"``). Also re-reads the
        addresses the fused acting pass checks (``FusedActing._sources``): its packed copies read the
        networks' parameters, which moved into the stack (nothing is captured yet)."""
        steps = []
        for k, tr in enumerate(trainers):
            if not isinstance(tr.learner.fused, FusedTrainStep):
                raise ValueError(f"StackedTrainSteps: member {k} has no fused train step (plan.train_step = 'fused')")
            steps.append(tr.learner.fused)
        out = cls(steps, compile=compile, side_streams=side_streams)
        for tr in trainers:
            acting = getattr(tr.collector, "_fused", None)
            if acting is not None:
                acting._sources = acting._source_ptrs()
        return out

    def __call__(self) -> None:
        """One gradient step of every member, entirely on the device (no host reads; graph-capturable)."""
        draws = self._per_member(self._draw)
        torch.stack([d[0] for d in draws], out=self._idx)
        torch.stack([d[1] for d in draws], out=self._weights)
        td = self.program(self._idx, self._weights, self._tensors)  # [M, B]; 0 where a member's step was skipped
        rows = td.unbind(0)
        self._per_member(lambda k, s: s.learner.replay.update_priorities(draws[k][0], rows[k]))

    def _draw(self, k: int, s: FusedTrainStep) -> tuple[torch.Tensor, torch.Tensor]:
        ln = s.learner
        idx, w = ln.replay.sampler.sample(self.batch_size)  # each member's own generator and priorities
        if ln.checks is not None:
            ln.checks.sample(idx)  # check mode clamps idx in place: before it is stacked
        return idx, w

    def _per_member(self, fn: Callable[[int, FusedTrainStep], Any]) -> list[Any]:
        """``fn(k, step_k)`` for every member: in order on the CPU; on CUDA each on its own side stream,
        forked from the current stream and joined back before returning (a graph capture records the
        branches as parallel nodes)."""
        if self.side_streams is None:
            return [fn(k, s) for k, s in enumerate(self.steps)]
        here = torch.cuda.current_stream()
        out = []
        for k, (s, side) in enumerate(zip(self.steps, self.side_streams)):
            side.wait_stream(here)
            with torch.cuda.stream(side):
                out.append(fn(k, s))
        for side in self.side_streams:
            here.wait_stream(side)
        return out

    def check_views(self) -> None:
        """Host-side: every member's tensors are still row k of the stack (ValueError naming the first
        one that is not) and its online / target modules' parameters are views of its flat rows."""
        for i, s in enumerate(self.steps):
            live = s._collect()  # the member's attributes now
            for k, stacked in self.state.items():
                row, x = stacked[i], live[k]
                if x.data_ptr() != row.data_ptr() or x.shape != row.shape or x.dtype != row.dtype:
                    raise ValueError(f"StackedTrainSteps: member {i}'s {k!r} is no longer row {i} of the stack "
                                     "(rebound to a new tensor instead of written in place?)")
            ln = s.learner
            _check_flat(ln, s.layout)
            base, off = ln.target_flat.data_ptr(), 0
            for p in ln.target.parameters():
                if p.data_ptr() != base + off * ln.target_flat.element_size():
                    raise ValueError(f"StackedTrainSteps: member {i}'s target parameters are not views of "
                                     "its target row")
                off += p.numel()


class _StackedProgram(FusedTrainStep):
    """``FusedTrainStep._program`` with the two hooks vmap needs: the record write as ``index_put_``
    (``index_copy_`` has no batching rule: vmap would fall back to a per-member loop) and, when the
    members' discounts differ, each member's gamma^k read from its own ``gamma_pow`` row."""

    carry_gamma: bool

    def _gamma(self, t: dict[str, torch.Tensor]):
        return _Powers(t["gamma_pow"]) if self.carry_gamma else self.gamma

    def _write_record(self, records: torch.Tensor, record_idx: torch.Tensor, row: torch.Tensor) -> None:
        records.index_put_((record_idx.clamp(max=records.shape[0] - 1),), row.unsqueeze(0))
        record_idx.add_(1)


class _Powers:
    """Stands in for the Python float gamma in ``nstep_targets``' ``gamma ** k``: 1.0 for k = 0, else
    the member's float32 gamma^k (``gamma_pow[k - 1]``, computed in float64 and rounded once, as a
    float32 kernel rounds the Python scalar gamma ** k: the same multiplier, bit for bit)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # [n_step] float32 (one member's row inside vmap)

    def __pow__(self, k: int):
        return 1.0 if k == 0 else self.table[k - 1]


def _constants(s: FusedTrainStep) -> dict[str, Any]:
    """What must be equal for members to share one program (Python constants the program bakes in)."""
    return {"network layout": s.layout, "batch_size": s.batch_size, "n_step": s.n_step, "n_envs": s.n_envs,
            "huber_delta": s.huber_delta, "grad_clip": s.grad_clip, "guard limits": s.guard_limits,
            "lr schedule": s.lr_sched, "PER beta schedule": s.beta_sched, "Adam constants": s.adam,
            "target update": ("polyak", s.tau) if s.polyak else ("hard", s.hard_every)}


def _check_stackable(steps: list[FusedTrainStep]) -> list[float]:
    """ValueError (one line) naming the first difference from member 0; returns the members' gammas."""
    s0 = steps[0]
    c0 = _constants(s0)
    if len({id(s.learner) for s in steps}) != len(steps):
        raise ValueError("StackedTrainSteps: a learner appears twice among the members")
    for i, s in enumerate(steps[1:], start=1):
        c = _constants(s)
        for k, v in c0.items():
            if c[k] != v:
                raise ValueError(f"StackedTrainSteps: member {i} differs from member 0 in {k}: {c[k]!r} vs {v!r}")
        for k, x0 in s0._tensors.items():
            x = s._tensors[k]
            if k in SHARED:
                if x is not x0:
                    raise ValueError(f"StackedTrainSteps: member {i}'s market tensor {k!r} is not member 0's "
                                     "(the members must share one MarketData)")
            elif (x.shape, x.dtype, x.device) != (x0.shape, x0.dtype, x0.device):
                what = "replay capacity" if k.startswith("st_") else k
                raise ValueError(f"StackedTrainSteps: member {i} differs from member 0 in {what}: {x.dtype} "
                                 f"{list(x.shape)} on {x.device} vs {x0.dtype} {list(x0.shape)} on {x0.device}")
    return [s.gamma for s in steps]


def _rehome_member(s: FusedTrainStep, rows: dict[str, torch.Tensor]) -> None:
    """Point every attribute of member ``s`` that holds a program tensor at its row of the stack
    (all aliases: the learner's and the guard's, the optimiser's lr, module parameters and grads)."""
    ln = s.learner
    flat, opt, st = ln.flat, ln.opt, ln.replay.storage
    flat.data, flat.grad = rows["online"], rows["grad"]
    _rehome(ln.online, flat.data)  # parameters: views of the flat row, in .parameters() order
    flat.reattach_grads()
    ln.target_flat = rows["target"]
    _rehome(ln.target, ln.target_flat)
    opt.m, opt.v, opt.step_count = rows["adam_m"], rows["adam_v"], rows["adam_t"]
    ln.lr = opt.lr = rows["lr"]
    ln.updates = rows["updates"]
    for k in GUARD:
        setattr(ln.guard, k, rows[k])
        setattr(ln, k, rows[k])
    ln.records, ln.record_idx = rows["records"], rows["record_idx"]
    ln.replay.sampler.beta = rows["beta"]
    ln._gamma_pow = rows["gamma_pow"]
    for k, attr in STORAGE.items():
        setattr(st, attr, rows[k])
    s._tensors = s._collect()  # the member's own (alone) step reads the rows too


__all__ = ["StackedTrainSteps"]
