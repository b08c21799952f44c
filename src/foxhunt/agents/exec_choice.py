"""How a learner runs on the device: CUDA graphs, the env step's implementation, matmul precision.

Today these are DQN's switches (``[dqn] cuda_graphs, fused_env, compile_env, matmul_precision``);
PPO takes them from there through ``exec_choice(config)``, the one function to re-point when a
single ``backend`` key replaces the per-feature switches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class ExecChoice:
    cuda_graphs: bool = True
    fused_env: bool = False
    compile_env: bool = False
    matmul_precision: str = "tf32"


def exec_choice(config: Any) -> ExecChoice:
    """The execution choice of a run configuration (today: the ``[dqn]`` switches)."""
    d = config.dqn
    return ExecChoice(cuda_graphs=d.cuda_graphs, fused_env=d.fused_env, compile_env=d.compile_env,
                      matmul_precision=d.matmul_precision)


def apply_matmul_precision(choice: ExecChoice) -> None:
    """tf32 (and bf16) lets float32 matmuls use the tensor cores."""
    on = choice.matmul_precision in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def env_step_fn(env: Any, choice: ExecChoice) -> Callable[..., Any]:
    """The training env step: the fused Triton kernel (ValueError naming why it cannot run), the
    torch.compile'd step, or the plain torch step. Called as ``env.step(actions, curiosity=None)``."""
    if choice.fused_env:
        from foxhunt.env.fused import FusedEnvStep

        return FusedEnvStep(env)
    if choice.compile_env:
        return torch.compile(env.step, dynamic=False)
    return env.step
