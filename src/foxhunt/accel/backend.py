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

Those are DQN's. The PPO agent (``ppo`` given: ``train.agent = "ppo"``) has the env step's three and
the fused evaluation, and runs acting and its update in torch (inside the captured graphs); it has
no replay (``PPO_IMPLEMENTATIONS``). Any learner can be given as ``learner`` (name, section,
implementations: ``foxhunt.agents.registry``); the direct learner has the fused evaluation only.

``accel.backend`` picks the implementation of every component; a component without that
implementation (replay or eval under "compiled", replay with the uniform or rank sampler, PPO's
acting) runs its torch path, and the plan's ``notes`` say so. ``auto`` is the fastest backend this
device supports and that is tested on it: torch on a CPU, fused on CUDA with Triton (compiled).
Under ``auto`` a component the fused kernels do not cover (a network of other depth or width)
falls back to torch, loudly (a note); under an explicit backend or part override the same is a
contradiction. ``fall_back`` applies that rule when the caller learns more than the config says:
``foxhunt backtest`` resolves ``parts=("eval",)`` with no agent (``dqn=None``) and settles the
model files' networks and policy with ``fall_back``.

The network checked for ``acting`` and ``eval`` is the one that will run: DQN's (``dqn.hidden``,
``dqn.head_hidden``; ``dqn.head = "branching"`` is a network the fused kernels do not cover) or, with ``ppo``, the actor's (``ppo.hidden``, ``ppo.head_hidden``: PPO's greedy
policy is a DuelingQNet of those widths, ``ActorCritic.greedy_net``); ``obs_dim`` / ``n_actions``,
when given, are checked too. ``resolve_config`` picks the agent from ``train.agent``.

Contradictions are a one-line ``ConfigError`` (exit 2): fused anything without usable Triton (a CPU
needs TRITON_INTERPRET=1), compiled anything or ``graphs = "on"`` on a CPU (those paths are tested
on CUDA only), ``replay = "fused"`` with a sampler that has no trees, fused acting or evaluation with
a network the kernels do not cover, a part override the agent has no such implementation of.

Inputs are read by attribute (``accel``: the [accel] section; ``dqn``: needs ``sampler``,
``tree_arity``, ``hidden``, ``head_hidden``; ``ppo``: ``hidden``, ``head_hidden``), so this module
imports no layer above it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from foxhunt.accel import triton as triton_status
from foxhunt.errors import ConfigError

PARTS = ("env_step", "acting", "train_step", "replay", "eval")
NOT_AUTO: dict[str, str] = {}
"""Fused parts ``auto`` does not pick (the rule: auto runs only what is tested on this device), with
why; naming them (``accel.backend = "fused"`` or ``accel.<part> = "fused"``) still runs them. Empty:
every fused part is tested on the H200 (the acting kernel with its blocks padded to ``MIN_WIDTH`` and
``MIN_HEAD``; docs/DESIGN.md, "Fused acting")."""
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "env_step": ("torch", "compiled", "fused"),
    "acting": ("torch", "compiled", "fused"),
    "train_step": ("torch", "compiled", "fused"),
    "replay": ("torch", "fused"),
    "eval": ("torch", "fused"),
}
PPO_IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "env_step": ("torch", "compiled", "fused"),
    "acting": ("torch",),  # the actor's passes run in torch inside the captured rollout graph
    "train_step": ("torch",),  # the clipped-loss update, one captured graph
    "replay": ("torch",),  # no replay: "torch" stands for "nothing to accelerate"
    "eval": ("torch", "fused"),
}
ACTING_MAX_WIDTH = 256
"""Widest trunk layer / pair of heads the compiled fused acting kernel runs (``kernels.acting.kernel.
MAX_COMPILED_WIDTH``, the same number: a test keeps them equal; Triton is not imported here)."""
FUSED_MAX_WIDTH = 512
"""Widest layer the fused dueling-MLP kernels hold on chip ([BLOCK, width] tiles): acting
(``kernels.acting``) and backtest (``kernels.backtest``) alike; the network rules
are ``agents.networks.fused_net_unsupported``."""


@dataclass(frozen=True)
class ExecutionPlan:
    """What runs, per component (see the module docstring). Build it with ``resolve``; tests and
    benchmarks may construct one directly (no checks: the component raises if it cannot run).

    parts: the components this command runs and the resolver decided (``foxhunt backtest``: eval
    only); the others are left out of ``to_dict`` and ``summary``. named: the parts whose
    implementation the user named (an explicit ``accel.backend`` or a part override): for those, an
    implementation that cannot run is an error, not a fallback (``fall_back``). agent: "dqn",
    "ppo", or "none" (a command that trains nothing)."""

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
    agent: str = "dqn"
    parts: tuple[str, ...] = PARTS
    notes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    named: tuple[str, ...] = field(default=(), hash=False, compare=False)

    @property
    def model_eval(self) -> str:
        """How the fold's model (with ``train.ensemble`` > 1 its members merged) is backtested: ``eval``,
        or torch where the fused kernel cannot hold the merged network (``notes["eval_model"]``)."""
        return "torch" if "eval_model" in self.notes else self.eval

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p in PARTS:
            if p not in self.parts:
                del d[p]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def summary(self) -> str:
        """One line for the start of a run: backend, then every component's choice."""
        parts = " ".join(f"{p}={getattr(self, p)}" for p in PARTS if p in self.parts)
        return (f"accel: backend={self.backend} on {self.device} (triton {self.triton}): {parts} "
                f"graphs={'on' if self.graphs else 'off'} matmul={self.matmul_precision} readback={self.readback}"
                + (" check=on" if self.check else ""))


def _net_reason(net: Any, obs_dim: int | None = None, n_actions: int | None = None, copies: int = 1) -> str | None:
    """Why the fused dueling-MLP kernels cannot run a network of these config widths (``hidden``,
    ``head_hidden``; ``agents.networks.fused_net_unsupported`` is the same rule on a built net).
    copies: K > 1 for the merged network of a ``train.ensemble`` (every width K times)."""
    hidden = tuple(net.hidden)
    if len(hidden) != 2:
        return f"the fused kernels need two trunk layers (hidden has {len(hidden)})"
    widths = [copies * int(h) for h in hidden] + [2 * copies * int(net.head_hidden)]
    if obs_dim is not None:
        widths.append(int(obs_dim))
    if n_actions is not None:
        widths.append(int(n_actions) + 1)
    if max(widths) > FUSED_MAX_WIDTH:
        return (f"the fused kernels hold layers of at most {FUSED_MAX_WIDTH} units (hidden / 2 × head_hidden"
                f"{f' × train.ensemble = {copies}' if copies > 1 else ''}"
                f"{' / observation' if obs_dim is not None else ''}{' / n_actions + 1' if n_actions is not None else ''})")
    return None


def _acting_width_reason(net: Any) -> str | None:
    """Why the compiled fused acting kernel cannot run a network of these widths: its trunk layers and
    pair of heads (2 · head_hidden) must be at most ``ACTING_MAX_WIDTH`` units, so that its tiles keep
    the 128 rows the H200 has shown right (``kernels.acting.kernel.MIN_COMPILED_BLOCK_M``)."""
    widest = max([int(h) for h in net.hidden] + [2 * int(net.head_hidden)])
    if widest > ACTING_MAX_WIDTH:
        return (f"the compiled fused acting kernel runs 128-row tiles, which hold layers of at most {ACTING_MAX_WIDTH} "
                f"units (hidden / 2 × head_hidden: {widest})")
    return None


def fall_back(plan: ExecutionPlan, part: str, reason: str | None) -> ExecutionPlan:
    """``plan`` with ``part`` on torch because its fused implementation cannot run what this run
    gives it (``reason``; None, or a part already on torch: ``plan`` unchanged). A ConfigError when
    the user named that implementation (``plan.named``); under ``auto`` the fallback is a note."""
    if reason is None or getattr(plan, part) == "torch":
        return plan
    if part in plan.named:
        raise ConfigError(f"accel.{part} = {getattr(plan, part)!r} on {torch.device(plan.device).type}: {reason} "
                          f"(set accel.{part} = 'torch' to run it in torch)")
    return replace(plan, **{part: "torch"}, notes={**plan.notes, part: f"{reason}: torch"})


def resolve(accel: Any, dqn: Any, device: torch.device | str, *, ppo: Any = None, obs_dim: int | None = None,
            n_actions: int | None = None, parts: tuple[str, ...] = PARTS, ensemble: int = 1,
            learner: tuple[str, Any, dict[str, tuple[str, ...]]] | None = None) -> ExecutionPlan:
    """The ``ExecutionPlan`` of these sections on ``device``; ConfigError on a contradiction.

    dqn: the [dqn] section (DQN trains), or None with ``ppo`` None: no agent, no network checked
    (a command that runs given models checks them itself: ``fall_back``). ppo: the [ppo] section
    when the PPO agent trains. obs_dim, n_actions: the network's input and output widths, checked
    against the fused kernels when given. parts: the components this command runs (the others
    are neither checked nor reported). ensemble: ``train.ensemble`` (eval runs the members merged, K
    times as wide: ``agents.networks.merge_mean``). learner: (name, section, implementations per part)
    of the learner that trains (``foxhunt.agents.registry``'s ``Learner.plan_learner``); it replaces
    ``dqn`` / ``ppo`` (its section's ``hidden`` / ``head_hidden`` are the network checked)."""
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

    if learner is None:  # the keyword form: the DQN section, or PPO's
        learner = ("ppo", ppo, PPO_IMPLEMENTATIONS) if ppo is not None else ("dqn", dqn, IMPLEMENTATIONS)
    agent, net, impls = learner
    agent = agent if net is not None else "none"
    trees = agent == "dqn" and net.sampler == "proportional"
    sampler = getattr(net, "sampler", None)
    other = agent not in ("dqn", "none")  # a learner with fewer implementations than DQN's

    def net_reason(part: str) -> str | None:
        # eval runs one member's network here (the held-back selection); the fold's merged model: below
        if net is None:
            return None
        if agent == "dqn" and getattr(net, "head", "flat") != "flat":  # agents.networks.BranchingQNet
            return f"dqn.head = {net.head!r}: the fused acting and backtest kernels run the flat dueling head only"
        if getattr(net, "policy", "mlp") != "mlp":  # a learner's policy over the last bars: agents.sequence_net.SequenceQNet
            return (f"{agent}.policy = {net.policy!r} reads the last {agent}.sequence bars: the fused backtest kernel runs "
                    "a per-bar MLP only")
        if part == "acting" and cuda and (why := _acting_width_reason(net)) is not None:
            return why
        return _net_reason(net, obs_dim, n_actions, 1)

    choice: dict[str, str] = {}
    named: list[str] = []
    for part in parts:
        override = getattr(accel, part)
        if override != "auto":
            c = override
            if c not in impls[part]:
                refuse(part, c, f"{part} has no {c} implementation" + (f" under train.agent = '{agent}'" if other
                                                                      else "") + f" (choices: {', '.join(impls[part])})")
            if c == "compiled" and not cuda:
                refuse(part, c, "torch.compile paths are tested on CUDA only")
            if c == "fused" and not tri.usable:
                refuse(part, c, str(tri.reason))
            if part == "replay" and c == "fused" and not trees:
                refuse(part, c, f"dqn.sampler = {sampler!r} has no trees to fuse (use 'proportional')")
            if part in ("acting", "eval") and c == "fused" and (why := net_reason(part)) is not None:
                refuse(part, c, f"{agent}: {why}")
            choice[part] = c
            named.append(part)
            continue
        c = backend if backend in impls[part] else "torch"
        if c != backend:
            notes[part] = f"no {backend} implementation" + (f" for {agent}" if other else "") + ": torch"
        if not explicit and c == "fused" and part in NOT_AUTO:
            c = "torch"
            notes[part] = f"{NOT_AUTO[part]}: torch"
        if part == "replay" and c == "fused" and not trees:
            c = "torch"
            notes[part] = f"dqn.sampler = {sampler!r} has no trees: torch"
        if part in ("acting", "eval") and c == "fused" and (why := net_reason(part)) is not None:
            if explicit:
                refuse("backend", backend, f"{part}: {agent}: {why} (override accel.{part} = 'torch' to run it in torch)")
            c = "torch"
            notes[part] = f"{agent}: {why}: torch"
        choice[part] = c
        if explicit:
            named.append(part)

    if choice.get("eval") == "fused" and net is not None and ensemble > 1 and \
            (why := _net_reason(net, obs_dim, n_actions, ensemble)) is not None:
        # train.ensemble = K: the fold's model is the members merged K times as wide (agents.networks.merge_mean);
        # where the kernel cannot hold it, that model's validation backtests run in torch (ExecutionPlan.model_eval),
        # while every member's held-back backtests keep the fused kernel
        notes["eval_model"] = f"the fold's model of {ensemble} merged members: {why}: torch"

    if agent == "dqn" and getattr(net, "stack_members", False) and choice.get("train_step", "fused") != "fused":
        # agents.dqn.member_stack stacks the members' fused programs; the torch / compiled steps have none
        refuse("train_step", choice["train_step"], "dqn.stack_members = true stacks the members' fused train steps: "
               "set accel.train_step = 'fused' (on the CPU too: it runs eagerly there)")
    if accel.graphs == "on" and not cuda:
        refuse("graphs", "on", "CUDA graphs need a CUDA device")
    graphs = cuda if accel.graphs == "auto" else accel.graphs == "on"
    return ExecutionPlan(**choice, graphs=graphs, matmul_precision=accel.matmul_precision, readback=accel.readback,
                         check=bool(getattr(accel, "check", False)), backend=backend, device=str(dev), triton=tri.mode,
                         agent=agent, parts=tuple(parts), notes=notes, named=tuple(named))


def resolve_config(cfg: Any, device: torch.device | str, *, obs_dim: int | None = None,
                   parts: tuple[str, ...] = PARTS, learner: tuple[str, Any, dict[str, tuple[str, ...]]] | None = None
                   ) -> ExecutionPlan:
    """``resolve`` for a whole run configuration: ``cfg.accel``, and the agent ``cfg.train.agent``
    names (its network is the one acted and evaluated), with ``cfg.env.n_actions`` outputs. learner:
    that agent's ``Learner.plan_learner(cfg)`` (``foxhunt.agents.registry``; this layer cannot read the
    registry); None: DQN's or PPO's by name."""
    ppo = cfg.ppo if cfg.train.agent == "ppo" else None
    return resolve(cfg.accel, cfg.dqn, device, ppo=ppo, obs_dim=obs_dim, n_actions=cfg.env.n_actions, parts=parts,
                   ensemble=cfg.train.ensemble, learner=learner)


__all__ = ["IMPLEMENTATIONS", "PARTS", "PPO_IMPLEMENTATIONS", "ExecutionPlan", "fall_back", "resolve", "resolve_config"]
