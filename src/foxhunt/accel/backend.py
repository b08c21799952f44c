"""The resolver: configuration + device → one ``ExecutionPlan`` (a choice per component).

Components and the implementations each has:

    env_step    torch | compiled | fused   (vec_env.step; torch.compile of it; one Triton kernel)
    acting      torch | compiled | fused   (online/target passes; torch.compile'd nets; fused MLP kernel)
    train_step  torch | compiled | fused   (autograd step; torch.compile'd loss/update; hand-written
                                            backward as one compiled program)
    replay      torch | fused              (proportional PER trees; Triton trees, same bits)
    eval        torch | fused              (validation backtests; one Triton kernel)
    graphs      on | off                   (CUDA-graph capture of every step; CUDA only)
    check       on | off                   (check mode: ``foxhunt.agents.dqn.checks``; off by default)

``accel.backend`` picks the implementation of every component; a component without that
implementation (replay or eval under "compiled", replay with the uniform or rank sampler) runs its
torch path, and the plan's ``notes`` say so. ``auto`` is the fastest backend this device supports
and that is tested on it: torch on a CPU, fused on CUDA with Triton (compiled). Under ``auto`` a
component the fused kernels do not cover (a network of other depth or width) falls back to torch,
loudly (a note); under an explicit backend or part override the same is a contradiction.

Contradictions are a one-line ``ConfigError`` (exit 2): fused anything without usable Triton (a CPU
needs TRITON_INTERPRET=1), compiled anything or ``graphs = "on"`` on a CPU (those paths are tested
on CUDA only), ``replay = "fused"`` with a sampler that has no trees, fused acting or evaluation with
a network the kernels do not cover.

Inputs are read by attribute (``accel``: the [accel] section; ``dqn``: needs ``sampler``,
``tree_arity``, ``hidden``, ``head_hidden``), so this module imports no layer above it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from foxhunt.accel import triton as triton_status
from foxhunt.errors import ConfigError

PARTS = ("env_step", "acting", "train_step", "replay", "eval")
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "env_step": ("torch", "compiled", "fused"),
    "acting": ("torch", "compiled", "fused"),
    "train_step": ("torch", "compiled", "fused"),
    "replay": ("torch", "fused"),
    "eval": ("torch", "fused"),
}
FUSED_MAX_WIDTH = 512
"""Widest layer the fused dueling-MLP kernels hold on chip ([BLOCK, width] tiles): acting
(``kernels.dueling_mlp_fused``) and backtest (``kernels.backtest_fused``) alike; the network rules
are ``agents.networks.fused_net_unsupported``."""


@dataclass(frozen=True)
class ExecutionPlan:
    """What runs, per component (see the module docstring). Build it with ``resolve``; tests and
    benchmarks may construct one directly (no checks: the component raises if it cannot run)."""

    env_step: str = "torch"
    acting: str = "torch"
    train_step: str = "torch"
    replay: str = "torch"
    eval: str = "torch"
    graphs: bool = False
    matmul_precision: str = "tf32"
    readback: str = "sync"
    check: bool = False
    backend: str = "torch"
    device: str = "cpu"
    triton: str = "unavailable"
    notes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def summary(self) -> str:
        """One line for the start of a run: backend, then every component's choice."""
        parts = " ".join(f"{p}={getattr(self, p)}" for p in PARTS)
        return (f"accel: backend={self.backend} on {self.device} (triton {self.triton}): {parts} "
                f"graphs={'on' if self.graphs else 'off'} matmul={self.matmul_precision} readback={self.readback}"
                + (" check=on" if self.check else ""))


def _net_reason(dqn: Any) -> str | None:
    """Why the fused dueling-MLP kernels cannot run dqn's network (config-level rules)."""
    hidden = tuple(dqn.hidden)
    if len(hidden) != 2:
        return f"the fused kernels need two trunk layers (dqn.hidden has {len(hidden)})"
    if max(*hidden, 2 * int(dqn.head_hidden)) > FUSED_MAX_WIDTH:
        return f"the fused kernels hold layers of at most {FUSED_MAX_WIDTH} units (dqn.hidden / 2 × dqn.head_hidden)"
    return None


def resolve(accel: Any, dqn: Any, device: torch.device | str) -> ExecutionPlan:
    """The ``ExecutionPlan`` of these sections on ``device``; ConfigError on a contradiction."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    tri = triton_status.status(dev)
    notes: dict[str, str] = {}
    explicit = accel.backend != "auto"
    if explicit:
        backend = accel.backend
    elif cuda and tri.usable:
        backend = "fused"
        notes["backend"] = "auto: fused (CUDA with Triton)"
    else:
        backend = "torch"
        notes["backend"] = "auto: torch (" + ("CUDA without Triton: " + str(tri.reason) if cuda else "CPU") + ")"

    def refuse(key: str, value: str, why: str) -> None:
        raise ConfigError(f"accel.{key} = {value!r} on {dev.type}: {why}")

    if backend == "compiled" and not cuda:
        refuse("backend", backend, "torch.compile paths are tested on CUDA only; use 'torch' on the CPU")
    if backend == "fused" and not tri.usable:
        refuse("backend", backend, str(tri.reason))

    proportional = dqn.sampler == "proportional"
    choice: dict[str, str] = {}
    for part in PARTS:
        override = getattr(accel, part)
        if override != "auto":
            c = override
            if c not in IMPLEMENTATIONS[part]:
                refuse(part, c, f"{part} has no {c} implementation (choices: {', '.join(IMPLEMENTATIONS[part])})")
            if c == "compiled" and not cuda:
                refuse(part, c, "torch.compile paths are tested on CUDA only")
            if c == "fused" and not tri.usable:
                refuse(part, c, str(tri.reason))
            if part == "replay" and c == "fused" and not proportional:
                refuse(part, c, f"dqn.sampler = {dqn.sampler!r} has no trees to fuse (use 'proportional')")
            if part in ("acting", "eval") and c == "fused" and (why := _net_reason(dqn)) is not None:
                refuse(part, c, why)
            choice[part] = c
            continue
        c = backend if backend in IMPLEMENTATIONS[part] else "torch"
        if c != backend:
            notes[part] = f"no {backend} implementation: torch"
        if part == "replay" and c == "fused" and not proportional:
            c = "torch"
            notes[part] = f"dqn.sampler = {dqn.sampler!r} has no trees: torch"
        if part in ("acting", "eval") and c == "fused" and (why := _net_reason(dqn)) is not None:
            if explicit:
                refuse("backend", backend, f"{part}: {why} (override accel.{part} = 'torch' to run it in torch)")
            c = "torch"
            notes[part] = f"{why}: torch"
        choice[part] = c

    if accel.graphs == "on" and not cuda:
        refuse("graphs", "on", "CUDA graphs need a CUDA device")
    graphs = cuda if accel.graphs == "auto" else accel.graphs == "on"
    return ExecutionPlan(**choice, graphs=graphs, matmul_precision=accel.matmul_precision, readback=accel.readback,
                         check=bool(getattr(accel, "check", False)), backend=backend, device=str(dev), triton=tri.mode,
                         notes=notes)


__all__ = ["IMPLEMENTATIONS", "PARTS", "ExecutionPlan", "resolve"]
