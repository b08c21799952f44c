"""How a learner runs on the device: CUDA graphs, the env step's implementation, matmul precision.

PPO's view of the run's ``ExecutionPlan`` (``foxhunt.accel.backend.resolve``: the ``[accel]``
section on this device): graphs, the env step's implementation and the matmul precision. PPO has
no replay, and its acting and update run as torch code inside the captured graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class ExecChoice:
    """cuda_graphs: capture the rollout and update; env_step: "torch" | "compiled" | "fused" (the
    plan's vocabulary); matmul_precision: "fp32" | "tf32" | "bf16"."""

    cuda_graphs: bool = True
    env_step: str = "torch"
    matmul_precision: str = "tf32"


def exec_choice(plan: Any) -> ExecChoice:
    """PPO's execution choice from an ``ExecutionPlan``."""
    return ExecChoice(cuda_graphs=plan.graphs, env_step=plan.env_step, matmul_precision=plan.matmul_precision)


def apply_matmul_precision(choice: ExecChoice) -> None:
    """tf32 (and bf16) lets float32 matmuls use the tensor cores."""
    on = choice.matmul_precision in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def env_step_fn(env: Any, choice: ExecChoice) -> Callable[..., Any]:
    """The training env step: the fused Triton kernel (ValueError naming why it cannot run), the
    torch.compile'd step, or the plain torch step. Called as ``env.step(actions, curiosity=None)``."""
    if choice.env_step == "fused":
        from foxhunt.env.fused import FusedEnvStep

        return FusedEnvStep(env)
    if choice.env_step == "compiled":
        return torch.compile(env.step, dynamic=False)
    if choice.env_step != "torch":
        raise ValueError(f"env_step = {choice.env_step!r}: expected 'torch', 'compiled' or 'fused'")
    return env.step
