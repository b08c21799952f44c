"""PPO's rollout: N envs × T lockstep steps into a [T, N] buffer on the device, then GAE.

The buffer stores what the replay stores (bar index and portfolio features, not observations:
they are re-gathered from ``MarketData`` when minibatches are formed), plus what PPO needs:
the action, its log-probability and the critic's value under the acting policy, rewards, done /
terminal flags, and the value of the state each step reached before any auto-reset (for the
time-limit bootstrap). One ``collect()`` is fixed-shape device work with no host reads, so it is
captured once as a CUDA graph and replayed.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.networks import N_FACTORED_ACTIONS, ActorCritic
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.loss import explained_variance, gae
from foxhunt.env import VecTradingEnv
from foxhunt.env.counter_draws import STREAM_U32_B, StepDraws


class RolloutBuffer:
    """[T, N] device arrays of one rollout (see the module docstring); units as in StepOutput."""

    def __init__(self, steps: int, n: int, n_portfolio: int, device: torch.device) -> None:
        def buf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros((steps, n, *shape), dtype=dtype, device=device)

        self.bar, self.portfolio, self.action = buf(dtype=torch.int64), buf(n_portfolio), buf(dtype=torch.int64)
        self.logp, self.value, self.reward = buf(), buf(), buf()
        self.done, self.terminal = buf(dtype=torch.bool), buf(dtype=torch.bool)
        self.next_bar, self.next_portfolio, self.next_value = buf(dtype=torch.int64), buf(n_portfolio), buf()
        self.trade_closed, self.trade_return = buf(dtype=torch.bool), buf()
        self.advantage, self.ret = buf(), buf()
        self.decided = buf().fill_(1.0)  # 1.0 where the policy chose the action, 0.0 where the env kept its previous one

    @property
    def rows(self) -> int:
        return self.bar.numel()


def sample_actions(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Categorical samples of softmax(logits) ([N, A] → [N] int64) by the Gumbel-max trick from ``u`` [N, A], one
    uniform a logit (drawn into it before; graph-safe, no host reads)."""
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-20)))
    return (logits + gumbel).argmax(dim=1)


class Rollout:
    """Collects rollouts of ``env`` with ``net`` into ``buffer`` and computes their advantages."""

    def __init__(self, cfg: PPOConfig, env: VecTradingEnv, net: ActorCritic, buffer: RolloutBuffer,
                 monitor: EpochMonitor, env_step: Callable[..., Any], seed: int = 0) -> None:
        dev = env.device
        self.cfg, self.env, self.net, self.buffer, self.monitor = cfg, env, net, buffer, monitor
        self.env_step = env_step
        self.n_actions = env.n_actions
        self.n_market = env.market.n_features
        # ppo.counter_draws: the sampling and hold draws hash (draw seed, env_steps, env) instead (env.counter_draws)
        self.draws = StepDraws(dev, seed + 2_000_003, cfg.counter_draws)
        n, rows = env.n_envs, buffer.rows
        self._u = torch.zeros((n, self.n_actions), dtype=torch.float32, device=dev)
        # ppo.explore_hold: each env's previous action, and whether it has one (not after an episode's end)
        self._u_hold = torch.zeros(n, dtype=torch.float32, device=dev)
        self._prev = torch.zeros(n, dtype=torch.int64, device=dev)
        self._has_prev = torch.zeros(n, dtype=torch.bool, device=dev)
        self._next_obs = torch.zeros((rows, env.obs_dim), dtype=torch.float32, device=dev)
        self.env_steps = torch.zeros((), dtype=torch.int64, device=dev)
        # Explained variance of each rollout's values vs returns (sum, count of finite ones).
        self.ev = torch.zeros(2, dtype=torch.float64, device=dev)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The live tensors a checkpoint carries (``ppo.explore_hold``'s previous actions included, so that
        a resumed run continues bit for bit; the draw seed with counter draws)."""
        return {"env_steps": self.env_steps, "prev_action": self._prev, "has_prev": self._has_prev,
                **self.draws.state_tensors()}

    def reset(self) -> None:
        self.env_steps.zero_()
        self.ev.zero_()
        self._has_prev.zero_()

    @torch.no_grad()
    def step(self, k: int) -> None:
        """Step k: act on every env from the current policy, step the env, record (device only)."""
        env, b = self.env, self.buffer
        obs = env.observe()
        logits, value = self.net(obs)
        action = b.action[k]
        self.draws.uniform(self._u, self.env_steps)
        action.copy_(sample_actions(logits, self._u))
        if self.cfg.explore_hold > 0.0:  # keep the previous action with probability explore_hold
            self.draws.uniform(self._u_hold, self.env_steps, STREAM_U32_B)
            hold = (self._u_hold < self.cfg.explore_hold) & self._has_prev
            action.copy_(torch.where(hold, self._prev, action))
            b.decided[k].copy_((~hold).float())
        b.logp[k].copy_(torch.log_softmax(logits, dim=-1).gather(1, action.unsqueeze(1)).squeeze(1))
        b.value[k].copy_(value)
        b.bar[k].copy_(env.state.bar)
        b.portfolio[k].copy_(obs[:, self.n_market:])
        out = self.env_step(action)
        torch.logical_and(out.done, ~out.truncated, out=b.terminal[k])
        for dst, src in ((b.reward, out.reward), (b.done, out.done), (b.next_bar, out.next_bar),
                         (b.next_portfolio, out.next_portfolio), (b.trade_closed, out.trade_closed),
                         (b.trade_return, out.trade_return)):
            dst[k].copy_(src)
        if self.cfg.explore_hold > 0.0:
            self._prev.copy_(action)
            torch.logical_not(out.done, out=self._has_prev)  # a new episode starts with a choice
        self.env_steps.add_(1)

    @torch.no_grad()
    def finish(self) -> None:
        """Values of the reached states in one batched pass, GAE, returns, monitoring."""
        cfg, b = self.cfg, self.buffer
        flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731  [T, N, ...] → [T·N, ...]
        obs = self.env.market.observe(flat(b.next_bar), flat(b.next_portfolio), self._next_obs)
        b.next_value.view(-1).copy_(self.net(obs)[1])
        gae(b.reward, b.value, b.next_value, b.done, b.terminal, cfg.gamma, cfg.gae_lambda, b.advantage)
        torch.add(b.advantage, b.value, out=b.ret)
        ev = explained_variance(b.value, b.ret).double()
        fin = torch.isfinite(ev)
        self.ev.add_(torch.stack([torch.where(fin, ev, torch.zeros_like(ev)), fin.double()]))
        action = flat(b.action)
        exposure = action // 9 if self.n_actions == N_FACTORED_ACTIONS else action
        self.monitor.add_collection(flat(b.reward), exposure, flat(b.done), flat(b.trade_closed), flat(b.trade_return), None)

    def collect(self) -> None:
        """One rollout: T steps and ``finish`` (the body captured as one CUDA graph)."""
        for k in range(self.cfg.rollout_len):
            self.step(k)
        self.finish()
