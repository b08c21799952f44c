"""Experience collection: N envs × L lockstep steps per round, straight into the device replay.

Each step gathers observations, runs the online network, picks ε-greedy actions on the device,
(optionally) computes the curiosity bonus, steps the env, gathers the next observation, runs the
target network on it and writes the transitions with |TD| as their initial priority. No host
reads; ε comes from a device schedule over the device step counter, so a captured round replays
with the current ε.
"""

from __future__ import annotations

import torch

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.curiosity import Curiosity
from foxhunt.agents.dqn.learner import QLearner, linear_schedule
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.networks import N_FACTORED_ACTIONS
from foxhunt.agents.replay import ReplayBuffer, Transitions
from foxhunt.env import VecTradingEnv


class Collector:
    """Runs collection steps of ``env`` with ``learner``'s networks into ``replay``."""

    def __init__(self, cfg: DQNConfig, env: VecTradingEnv, learner: QLearner, replay: ReplayBuffer,
                 monitor: EpochMonitor, curiosity: Curiosity | None = None, seed: int = 0) -> None:
        dev = env.device
        n = env.n_envs
        self.cfg = cfg
        self.env = env
        self.learner = learner
        self.replay = replay
        self.monitor = monitor
        self.curiosity = curiosity
        self.n_actions = env.n_actions
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(seed + 1_000_003)
        self.env_steps = torch.zeros((), dtype=torch.int64, device=dev)
        self.epsilon = torch.full((), cfg.eps_start, dtype=torch.float32, device=dev)
        self._u = torch.zeros(n, dtype=torch.float32, device=dev)
        self._rand_action = torch.zeros(n, dtype=torch.int64, device=dev)
        self._bar = torch.zeros(n, dtype=torch.int64, device=dev)
        self._portfolio = torch.zeros((n, 3), dtype=torch.float32, device=dev)
        self._next_obs = torch.zeros((n, env.obs_dim), dtype=torch.float32, device=dev)
        self._n_market = env.market.n_features
        self.autocast = dev.type == "cuda" and cfg.matmul_precision == "bf16"
        # The env step is ~450 elementwise kernels; inductor fuses them (same function, same results
        # up to float rounding of fused arithmetic).
        self._env_step = torch.compile(env.step, dynamic=False) if cfg.compile_env else env.step

    def reset(self) -> None:
        """New fold: ε schedule restarts."""
        self.env_steps.zero_()
        self.epsilon.fill_(self.cfg.eps_start)

    def _q(self, net: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
        if self.autocast:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return net(obs).float()
        return net(obs)

    @torch.no_grad()
    def step(self) -> None:
        """One lockstep env step of all N envs (device work only)."""
        cfg, env, learner = self.cfg, self.env, self.learner
        obs = env.observe()
        q = self._q(learner.online, obs)
        greedy = q.argmax(dim=1)
        self.epsilon.copy_(linear_schedule(cfg.eps_start, cfg.eps_end, cfg.eps_decay_steps, self.env_steps))
        torch.rand(self._u.shape, generator=self.generator, device=self._u.device, out=self._u)
        torch.randint(0, self.n_actions, self._rand_action.shape, generator=self.generator,
                      device=self._rand_action.device, out=self._rand_action)
        actions = torch.where(self._u < self.epsilon, self._rand_action, greedy)
        self._bar.copy_(env.state.bar)
        self._portfolio.copy_(obs[:, self._n_market:])
        bonus = self.curiosity.bonus(obs, actions, self._bar) if self.curiosity is not None else None
        out = self._env_step(actions, curiosity=bonus)
        next_obs = env.market.observe(out.next_bar, out.next_portfolio, self._next_obs)
        q_next = self._q(learner.target, next_obs).amax(dim=1)
        # A time-limit end (truncation) is not terminal: its value is bootstrapped.
        terminal = out.done & ~out.truncated
        q_taken = q.gather(1, actions.unsqueeze(1)).squeeze(1)
        td = out.reward + cfg.gamma * (~terminal).float() * q_next - q_taken
        self.replay.add(
            Transitions(self._bar, self._portfolio, actions, out.reward, terminal, out.next_bar, out.next_portfolio),
            td.abs(),
        )
        exposure = actions // 9 if self.n_actions == N_FACTORED_ACTIONS else actions
        self.monitor.add_collection(out.reward, exposure, out.done, out.trade_closed, out.trade_return, bonus)
        self.env_steps.add_(1)

    def round(self) -> None:
        """``rollout_len`` steps (the body that is captured as one CUDA graph)."""
        for _ in range(self.cfg.rollout_len):
            self.step()
