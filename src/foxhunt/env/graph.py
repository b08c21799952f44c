"""CUDA-graph capture of K consecutive env steps (CUDA only; on a CPU the steps run eagerly).

The env's state, fold bounds, medians, parameters and the start generator are device tensors read at
replay time, so one capture serves every fold and every parameter change made in place.
"""

from __future__ import annotations

import torch

from foxhunt.accel.graphs import capture
from foxhunt.env.vec_env import VecTradingEnv


class StepGraph:
    """K steps of a VecTradingEnv captured in one CUDA graph (CUDA only).

    Before each ``replay()`` fill ``actions`` ([K, N] int64) and optionally ``curiosity`` ([K, N]);
    rewards and dones of the K steps land in ``rewards`` / ``dones`` ([K, N]); with ``observe`` each
    step also writes the observation buffer ``env.obs``. The env's state, fold
    bounds, medians and parameters are read from their device tensors at replay time.
    """

    def __init__(
        self, env: VecTradingEnv, k: int, with_curiosity: bool = False, observe: bool = False, warmup: int = 2
    ) -> None:
        if env.device.type != "cuda":
            raise RuntimeError("StepGraph needs a CUDA device (run the steps eagerly on the CPU)")
        self.env = env
        self.k = int(k)
        self.observe = bool(observe)
        n, dev = env.n_envs, env.device
        self.actions = torch.zeros((self.k, n), dtype=torch.int64, device=dev)
        self.curiosity = torch.zeros((self.k, n), dtype=torch.float32, device=dev) if with_curiosity else None
        self.rewards = torch.zeros((self.k, n), dtype=torch.float32, device=dev)
        self.dones = torch.zeros((self.k, n), dtype=torch.bool, device=dev)
        self.graph = capture(self._body, dev, warmup=warmup, generators=list(env.sampler.generators().values()),
                             save=env.snapshot, restore=env.restore, restore_after_warmup=True)

    def _body(self) -> None:
        for i in range(self.k):
            cur = None if self.curiosity is None else self.curiosity[i]
            out = self.env.step(self.actions[i], cur)
            self.rewards[i].copy_(out.reward)
            self.dones[i].copy_(out.done)
            if self.observe:
                self.env.observe()

    def replay(self) -> None:
        self.graph.replay()
