"""Gymnasium front-ends over the device env: numpy in, numpy out (host copies; not a hot path).

* ``TradingEnv``: one env, ``gymnasium.Env``; the episode ends with ``terminated`` (bust, or a barrier
  hit with ``end_on_barrier``) or ``truncated`` (episode_length reached); the caller resets.
* ``TradingVectorEnv``: N envs, ``gymnasium.vector.VectorEnv`` with **same-step** autoreset
  (``metadata["autoreset_mode"] = AutoresetMode.SAME_STEP``), which is what the device env does: the
  step that ends an episode returns the *new* episode's first observation, and the terminal
  observation / info of each finished env under ``info["final_obs"]`` / ``info["final_info"]`` (with
  the usual ``_final_obs`` / ``_final_info`` masks).

Seeding: ``reset(seed=s)`` reseeds the episode-start generator and re-initialises the persistent
statistics (volatility EMA, Kelly, DSR, diversity ring), so that a seeded reset is a full restart and
deterministic; ``reset()`` without a seed starts new episodes and keeps them (ENV_SPEC: they persist
across episodes). ``options={"start": bar}`` (single env) or ``options={"starts": [N]}`` (vector) pins
the start bars; ``options={"reset_stats": True}`` forces the persistent re-initialisation.
"""

from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

try:  # gymnasium >= 1.1
    from gymnasium.vector import AutoresetMode

    _SAME_STEP: Any = AutoresetMode.SAME_STEP
except ImportError:  # pragma: no cover - gymnasium 1.0
    _SAME_STEP = "SameStep"

from foxhunt.env.params import EnvParams
from foxhunt.env.vec_env import VecTradingEnv
from foxhunt.market import MarketData


def _obs_space(dim: int) -> spaces.Box:
    return spaces.Box(low=-np.inf, high=np.inf, shape=(dim,), dtype=np.float32)


class TradingEnv(gym.Env):
    """A single trading env (Gymnasium API) over ``VecTradingEnv(n_envs=1, auto_reset=False)``.

    Observation: Box float32 [F + 3]; action: Discrete(45) (factored) or Discrete(5) (exposure).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, market: MarketData, params: EnvParams | None = None, seed: int | None = None) -> None:
        super().__init__()
        self.market = market
        self.params = params if params is not None else EnvParams()
        self._env = VecTradingEnv(market, 1, self.params, seed=0 if seed is None else seed, auto_reset=False)
        self.observation_space = _obs_space(market.obs_dim)
        self.action_space = spaces.Discrete(self._env.n_actions)
        self._action = torch.zeros(1, dtype=torch.int64, device=market.device)
        self._needs_reset = True
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)

    @property
    def vec_env(self) -> VecTradingEnv:
        return self._env

    def _draw_start(self) -> int:
        fold = self.market.fold
        assert fold is not None
        self._env.check_fold()
        hi = fold.train_end - self.params.episode_length - 1
        return int(self.np_random.integers(fold.train_start, hi + 1))

    def _obs(self) -> np.ndarray:
        return self._env.observe()[0].detach().cpu().numpy().astype(np.float32, copy=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        start = options.get("start")
        start = self._draw_start() if start is None else int(start)
        full = seed is not None or bool(options.get("reset_stats", False))
        self._env.reset([start], persistent=full)
        self._needs_reset = False
        return self._obs(), {"bar": start}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("TradingEnv.step: the episode has ended (or never started); call reset() first")
        a = int(np.asarray(action).reshape(()))
        if not 0 <= a < self.action_space.n:
            raise ValueError(f"TradingEnv.step: action {a} outside [0, {self.action_space.n})")
        self._action.fill_(a)
        out = self._env.step(self._action)
        st = self._env.state
        done = bool(out.done[0])
        truncated = bool(out.truncated[0])
        terminated = done and not truncated
        self._needs_reset = done
        info = {
            "bar": int(out.next_bar[0]),
            "equity": float(st.equity[0]),
            "position": float(st.position[0]),
            "cash": float(st.cash[0]),
            "fill_status": int(out.fill_status[0]),
            "barrier_hit": bool(out.barrier_hit[0]),
            "barrier_label": int(out.barrier_label[0]),
            "trade_closed": bool(out.trade_closed[0]),
            "trade_return": float(out.trade_return[0]),
            "trade_side": int(out.trade_side[0]),
            "trade_size": float(out.trade_size[0]),
            "trade_costs": float(out.trade_costs[0]),
            "trade_entry_bar": int(out.trade_entry_bar[0]),
            "trade_exit_bar": int(out.trade_exit_bar[0]),
        }
        return self._obs(), float(out.reward[0]), terminated, truncated, info


class TradingVectorEnv(VectorEnv):
    """N trading envs (Gymnasium vector API, same-step autoreset) over one ``VecTradingEnv``."""

    metadata: dict[str, Any] = {"autoreset_mode": _SAME_STEP, "render_modes": []}

    def __init__(
        self,
        market: MarketData,
        num_envs: int,
        params: EnvParams | None = None,
        seed: int = 0,
        per_env: Mapping[str, Any] | None = None,
    ) -> None:
        self.market = market
        self.params = params if params is not None else EnvParams()
        self._env = VecTradingEnv(market, num_envs, self.params, seed=seed, per_env=per_env, auto_reset=True)
        self.num_envs = int(num_envs)
        self.single_observation_space = _obs_space(market.obs_dim)
        self.single_action_space = spaces.Discrete(self._env.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._final = torch.zeros((self.num_envs, market.obs_dim), dtype=torch.float32, device=market.device)

    @property
    def vec_env(self) -> VecTradingEnv:
        return self._env

    def _obs(self) -> np.ndarray:
        return self._env.observe().detach().cpu().numpy().astype(np.float32, copy=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if seed is not None:
            self._env.sampler.seed(seed)
        full = seed is not None or bool(options.get("reset_stats", False))
        self._env.reset(options.get("starts"), persistent=full)
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        a = np.asarray(actions)
        if a.shape != (self.num_envs,) or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"TradingVectorEnv.step: actions must be integers of shape ({self.num_envs},), got {a.dtype} {a.shape}")
        n_act = self.single_action_space.n
        if ((a < 0) | (a >= n_act)).any():
            raise ValueError(f"TradingVectorEnv.step: actions outside [0, {n_act})")
        out = self._env.step(torch.as_tensor(a.astype(np.int64), device=self._env.device))
        self.market.observe(out.next_bar, out.next_portfolio, self._final)
        done = out.done.cpu().numpy().copy()
        truncations = out.truncated.cpu().numpy().copy()
        terminations = done & ~truncations
        rewards = out.reward.cpu().numpy().astype(np.float64)
        infos: dict[str, Any] = {
            name: getattr(out, name).cpu().numpy().copy()
            for name in ("fill_status", "barrier_hit", "barrier_label", "trade_closed", "trade_return", "trade_side", "trade_size", "trade_costs")
        }
        if done.any():
            final = self._final.cpu().numpy()
            step_keys = list(infos)
            for i in np.flatnonzero(done):
                final_info = {key: infos[key][i].item() for key in step_keys}
                infos = self._add_info(infos, {"final_obs": final[i].copy(), "final_info": final_info}, int(i))
        return self._obs(), rewards, terminations, truncations, infos


def make_gym_env(
    market: MarketData,
    params: EnvParams | None = None,
    num_envs: int | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> TradingEnv | TradingVectorEnv:
    """A ``TradingEnv`` (num_envs None) or a ``TradingVectorEnv`` of ``num_envs`` envs on ``market``."""
    if num_envs is None:
        return TradingEnv(market, params, seed=seed)
    return TradingVectorEnv(market, num_envs, params, seed=0 if seed is None else seed, **kwargs)
