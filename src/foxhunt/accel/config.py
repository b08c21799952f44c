"""The ``[accel]`` config section: *how* the run executes (the other sections say *what* it computes).

    [accel]
    backend = "auto"            # "auto" | "torch" | "compiled" | "fused"
    matmul_precision = "tf32"   # "fp32" | "tf32" | "bf16"

``backend`` picks one implementation for every component (env step, acting passes, train step,
replay trees, validation backtest); ``auto`` is the fastest one this device supports and that is
tested on it (CPU: torch; CUDA with Triton: fused). The per-part keys below override one component
and exist for benchmarks and bisecting ("auto" = follow ``backend``). ``foxhunt.accel.backend``
turns this section into an ``ExecutionPlan`` and rejects contradictory sets.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_core import PydanticCustomError

from foxhunt.config import Section, register_section

Backend = Literal["auto", "torch", "compiled", "fused"]
Precision = Literal["fp32", "tf32", "bf16"]


class AccelConfig(Section):
    """Execution backend; see the module docstring. Units and choices in the field descriptions."""

    backend: Backend = Field("auto", description="implementation of every component: torch (eager), compiled (torch.compile, CUDA), fused (Triton kernels + the hand-written-backward train step); auto: fastest tested on this device")
    matmul_precision: Precision = Field("tf32", description="float32 matmuls: fp32 exact, tf32 tensor cores; bf16: acting passes in bf16 (training stays float32/tf32)")
    # Per-part overrides (benchmarks, bisecting): "auto" follows `backend`.
    env_step: Backend = Field("auto", description="override: the env step (torch | compiled | fused)")
    acting: Backend = Field("auto", description="override: the collector's online/target forward passes (torch | compiled | fused)")
    train_step: Backend = Field("auto", description="override: the DQN train step (torch | compiled | fused)")
    replay: Literal["auto", "torch", "fused"] = Field("auto", description="override: proportional PER trees (torch | fused Triton trees)")
    eval: Literal["auto", "torch", "fused"] = Field("auto", description="override: the validation backtests (torch | fused kernel)")
    graphs: Literal["auto", "on", "off"] = Field("auto", description="CUDA-graph capture of rounds, train steps, backtest chunks (auto: on with CUDA)")
    readback: Literal["sync", "lagged"] = Field("sync", description="epoch summary read at the epoch's end (sync) or during the next epoch (lagged)")
    check: bool = Field(False, description="check mode (DQN): device-side invariants of every round and train step (indices in range, values finite) counted each epoch and named at the readback, bad indices clamped so no device assert ends the run; graph-read tensor addresses compared at every fold (foxhunt.agents.dqn.checks)")


register_section("accel", AccelConfig)

# Keys removed from other sections by the move to [accel]: old key -> what to write instead.
REMOVED_KEYS: dict[str, dict[str, str]] = {
    "dqn": {
        "cuda_graphs": 'accel.graphs = "auto" | "on" | "off"',
        "matmul_precision": "accel.matmul_precision",
        "compile_learner": 'accel.backend = "compiled" (or accel.train_step / accel.acting = "compiled")',
        "compile_env": 'accel.backend = "compiled" (or accel.env_step = "compiled")',
        "fused_env": 'accel.backend = "fused" (or accel.env_step = "fused")',
        "fused_acting": 'accel.backend = "fused" (or accel.acting = "fused")',
        "fused_train_step": 'accel.backend = "fused" (or accel.train_step = "fused")',
        "fused_replay": 'accel.backend = "fused" (or accel.replay = "fused")',
        "lagged_readback": 'accel.readback = "lagged"',
    },
    "train": {"eval_fused": 'accel.backend (the validation backtests follow it), or accel.eval = "fused" | "torch"'},
}


def reject_removed_keys(section: str, data: object) -> None:
    """A one-line validation error naming the replacement when ``data`` (a section's raw dict) uses a
    removed key (pydantic reports it under the section; ``build_config`` makes it a ConfigError)."""
    if not isinstance(data, dict):
        return
    for key, instead in REMOVED_KEYS.get(section, {}).items():
        if key in data:
            raise PydanticCustomError(
                "removed_key", "{key} was removed; use {instead} (see docs/DESIGN.md, Execution backends)",
                {"key": f"{section}.{key}", "instead": instead})
    if section == "dqn" and data.get("sampler") == "proportional_wide":
        raise PydanticCustomError(
            "removed_key", "dqn.sampler = 'proportional_wide' was removed; use dqn.sampler = 'proportional' with "
            "dqn.tree_arity = 32 (and accel.backend = 'fused' for the Triton trees)")


__all__ = ["AccelConfig", "Backend", "Precision", "REMOVED_KEYS", "reject_removed_keys"]
