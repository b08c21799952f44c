"""Memory budget: will a trainer (or a model) fit the device, checked before anything is allocated.

Size-like config fields have static bounds in their sections (``DQNConfig``); whether a valid
combination fits is a property of the device, so it is checked here: ``dqn_trainer_bytes`` adds up
the allocations a ``DQNTrainer`` makes from its configuration (replay storage and sampler trees,
networks with target, gradients and Adam moments, learner batch buffers and activations, the
collector's rollout buffers, env state, per-epoch records), and ``check_trainer_fits`` compares
the total with the memory the device has free (``torch.cuda.mem_get_info`` on CUDA, the host's
available memory on the CPU). A run that does not fit is one ``ConfigError`` line stating the
estimate, its largest part and the limit, instead of the allocator's failure minutes later.

The estimate is an upper bound: it counts every buffer sized by the config plus the transient
activations of a training step (tests/test_budget.py checks on the CPU that it is at least the
bytes of every tensor a trained trainer holds and at most 4× that), and a fixed 25 % margin is
added for the allocator, kernels' scratch and what the count leaves out.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from foxhunt.errors import ConfigError

MARGIN = 1.25
"""Headroom factor on the estimate (allocator rounding, kernel scratch, small tensors)."""

CUDA_FIXED_BYTES = 128 * 2**20
"""On CUDA, memory no config field sizes: the CUDA libraries' workspaces (cuBLAS / cuBLASLt, one per
stream, the graph-capture stream included) and the captured graphs' private pools. Measured on the
H200 (tests/test_budget.py, GPU): peak minus the count was 138 MiB for configs/h200.toml and 81 MiB
for configs/h200-fast.toml ([64, 64] nets, batch 512: there the fixed part dominates)."""

_STORAGE_BYTES_PER_SLOT = 8 + 12 + 8 + 4 + 1 + 8 + 12 + 4
"""ReplayStorage per slot: bar, portfolio[3], action, reward, done, next_bar, next_portfolio[3], discount."""


def available_bytes(device: torch.device | str) -> int:
    """Free memory of ``device`` in bytes: CUDA's free memory, or the host's available memory."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX hosts
        return 1 << 62


def mlp_params(sizes: list[int]) -> int:
    """Parameters of a chain of Linear layers with biases: sizes = [in, h1, ..., out]."""
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))


def dueling_params(obs_dim: int, hidden: tuple[int, ...] | list[int], head_hidden: int, n_actions: int,
                   head: str = "flat") -> int:
    """Parameters of ``DuelingQNet(obs_dim, n_actions, hidden, head_hidden)``, or with ``head =
    "branching"`` of ``BranchingQNet(obs_dim, hidden, head_hidden)`` (advantage branches 5, 3, 3)."""
    h = list(hidden)
    advs = (5, 3, 3) if head == "branching" else (n_actions,)
    return (mlp_params([obs_dim, *h]) + mlp_params([h[-1], head_hidden, 1])
            + sum(mlp_params([h[-1], head_hidden, n]) for n in advs))


def _sampler_bytes(sampler: str, capacity: int, tree_arity: int = 2) -> int:
    leaves = 1 << max(0, math.ceil(math.log2(max(1, capacity))))
    if sampler == "proportional" and tree_arity == 32:  # 32-ary trees: ~C × 32/31 nodes, two of them (float64 bound)
        return 2 * (capacity * 32 // 31 + 64) * 8
    if sampler == "proportional":  # sum tree + min tree (float32; float64 offered), 2 × leaves nodes each
        return 2 * 2 * leaves * 8
    if sampler == "rank":  # priorities + sorted copy (float32) + order (int64)
        return capacity * (4 + 4 + 8)
    return 0


def dqn_trainer_bytes(dqn: Any, n_features: int, n_actions: int) -> dict[str, int]:
    """Bytes a DQNTrainer allocates for this ``[dqn]`` section, by part (see the module docstring).

    n_features: market features F (observation width F + 3); n_actions: 5 (exposure) or 45.
    """
    obs_dim = n_features + 3
    n = dqn.n_envs
    capacity = max(n, (dqn.buffer_capacity // n) * n)
    params = dueling_params(obs_dim, dqn.hidden, dqn.head_hidden, n_actions, getattr(dqn, "head", "flat"))
    widths = sum(dqn.hidden) + 2 * dqn.head_hidden + n_actions
    parts = {
        "replay": capacity * _STORAGE_BYTES_PER_SLOT + _sampler_bytes(dqn.sampler, capacity, dqn.tree_arity),
        # online + target + gradient + Adam m, v + flat copies: 8 float32 copies
        "networks": 8 * 4 * params,
        # gathered obs / next_obs + activations of three forward passes and one backward
        "learner batch": dqn.batch_size * (2 * obs_dim * 4 + 8 * widths * 4 + 64),
        # rollout buffers: int64 bars ×2, actions, portfolios ×2 (3 floats), rewards, flags, TD
        "rollout": dqn.rollout_len * n * (3 * 8 + 6 * 4 + 4 * 4 + 3),
        # acting passes (online on obs, target on next obs), observations, env state and parameters
        "envs": n * (2 * widths * 4 + 2 * obs_dim * 4 + n_actions * 4 + 1024),
        "epoch records": dqn.rounds_per_epoch * max(1, dqn.train_steps_per_round) * 16 * 8,
    }
    if getattr(dqn, "overlap_collection", False):
        parts["acting copy"] = 2 * 4 * params  # online + target, float32 (agents/dqn/overlap.py)
    if dqn.curiosity:
        parts["curiosity"] = dqn.curiosity_batch * (3 * n_features * 4 + 64) + 8 * 4 * mlp_params([35, 64, 32])
    return parts


def with_device_overhead(parts: dict[str, int], device: torch.device | str) -> dict[str, int]:
    """``parts`` plus, on CUDA, the fixed ``"CUDA workspaces"`` part (``CUDA_FIXED_BYTES``)."""
    return {**parts, "CUDA workspaces": CUDA_FIXED_BYTES} if torch.device(device).type == "cuda" else dict(parts)


def check_fits(parts: dict[str, int], device: torch.device | str, what: str, available: int | None = None) -> None:
    """ConfigError when ``MARGIN × sum(parts)`` (plus ``CUDA_FIXED_BYTES`` on CUDA) exceeds the
    device's free memory."""
    parts = with_device_overhead(parts, device)
    need = int(MARGIN * sum(parts.values()))
    have = available_bytes(device) if available is None else available
    if need > have:
        big = max(parts, key=lambda k: parts[k])
        raise ConfigError(
            f"{what} needs ~{_gib(need)} (estimate incl. {int((MARGIN - 1) * 100)} % margin; largest part: {big} "
            f"{_gib(parts[big])}) but {torch.device(device)} has {_gib(have)} free: reduce it"
        )


def check_trainer_fits(dqn: Any, n_features: int, n_actions: int, device: torch.device | str, available: int | None = None,
                       copies: int = 1) -> None:
    """``copies`` DQN trainers of this config (train.ensemble) fit ``device`` (ConfigError naming the
    limit otherwise)."""
    parts = {k: v * copies for k, v in dqn_trainer_bytes(dqn, n_features, n_actions).items()}
    # No square brackets: the CLI prints errors through rich, whose markup would swallow "[dqn]".
    what = (f"the DQN trainer (dqn.buffer_capacity={dqn.buffer_capacity}, dqn.hidden={list(dqn.hidden)}, "
            f"dqn.batch_size={dqn.batch_size}, dqn.n_envs={dqn.n_envs}{f', train.ensemble={copies}' if copies > 1 else ''})")
    check_fits(parts, device, what, available)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**26 else f"{n / 2**20:.1f} MiB"
