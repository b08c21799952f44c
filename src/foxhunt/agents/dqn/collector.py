"""Experience collection: N envs × L lockstep steps per round, straight into the device replay.

Each step gathers observations, runs the online network, picks ε-greedy actions on the device,
(optionally) computes the curiosity bonus, steps the env, gathers the next observation, runs the
target network on it and writes the transitions with |TD| as their initial priority. No host
reads; ε comes from a device schedule over the device step counter, so a captured round replays
with the current ε.

The execution plan (``foxhunt.accel.backend.ExecutionPlan``) picks how the acting passes and the
env step run: torch, compiled (torch.compile), or fused — the acting passes as one fused Triton MLP
kernel each (``fused``: packed copies of the weights refreshed in place at the start of every
round, inside the captured graph), the env step as one Triton kernel (``foxhunt.env.fused``).

``nets`` (default: the learner) holds the ``online`` and ``target`` networks the collector acts with:
with ``dqn.overlap_collection`` it is the trainer's acting copy (``foxhunt.agents.dqn.overlap``), and a
round is split into ``collect`` (the steps, into the round buffers) and ``flush`` (the replay write).
"""

from __future__ import annotations

import torch

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.curiosity import Curiosity
from foxhunt.agents.dqn.learner import QLearner, linear_schedule
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.dqn.fused import FusedActing
from foxhunt.agents.networks import N_FACTORED_ACTIONS
from foxhunt.agents.replay import ReplayBuffer, Transitions
from foxhunt.env import VecTradingEnv
from foxhunt.env.counter_draws import StepDraws
from foxhunt.env.fused import FusedEnvStep
from foxhunt.state import pack, unpack


class Collector:
    """Runs collection rounds of ``env`` with ``learner``'s networks into ``replay``.

    Per step, the transition fields land in round buffers [L, N]; the round ends with ONE replay
    write of L·N rows (step-major, so row r + N is the same env's next step) and ONE monitor
    update: the per-step work is the networks, the env step and a few copies.
    """

    def __init__(self, cfg: DQNConfig, env: VecTradingEnv, learner: QLearner, replay: ReplayBuffer,
                 monitor: EpochMonitor, curiosity: Curiosity | None = None, seed: int = 0,
                 plan: ExecutionPlan | None = None, nets: object | None = None) -> None:
        plan = plan or ExecutionPlan(device=str(env.device))
        nets = nets if nets is not None else learner  # .online, .target, .device: the networks acted with
        dev = env.device
        n, steps = env.n_envs, cfg.rollout_len
        self.cfg = cfg
        self.env = env
        self.learner = learner
        self.nets = nets
        self.replay = replay
        self.monitor = monitor
        self.curiosity = curiosity
        self.n_actions = env.n_actions
        # dqn.counter_draws: the exploration draws hash (draw seed, env_steps, env) instead of the generator's stream
        # (env.counter_draws), so a stack of members draws in one launch what each draws alone.
        self.draws = StepDraws(dev, seed + 1_000_003, cfg.counter_draws)
        self.env_steps = torch.zeros((), dtype=torch.int64, device=dev)
        self.epsilon = torch.full((), cfg.eps_start, dtype=torch.float32, device=dev)
        self._u = torch.zeros(n, dtype=torch.float32, device=dev)
        self._rand_action = torch.zeros(n, dtype=torch.int64, device=dev)
        self._next_obs = torch.zeros((n, env.obs_dim), dtype=torch.float32, device=dev)
        self._n_market = env.market.n_features
        self.checks = None  # check mode: a DeviceChecks set by the trainer (counts and clamps; see checks.py)

        def buf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros((steps, n, *shape), dtype=dtype, device=dev)

        self.r_bar, self.r_portfolio, self.r_action = buf(dtype=torch.int64), buf(3), buf(dtype=torch.int64)
        self.r_reward, self.r_terminal, self.r_done = buf(), buf(dtype=torch.bool), buf(dtype=torch.bool)
        self.r_next_bar, self.r_next_portfolio, self.r_td = buf(dtype=torch.int64), buf(3), buf()
        self.r_trade_closed, self.r_trade_return = buf(dtype=torch.bool), buf()
        self.r_curiosity = buf() if curiosity is not None else None
        self.autocast = dev.type == "cuda" and plan.matmul_precision == "bf16"
        # The env step is ~450 elementwise kernels: "fused" runs it as ONE Triton kernel
        # (foxhunt.env.fused, same results to float32 rounding); "compiled" lets inductor fuse them.
        # Acting passes: bias + LeakyReLU chains over [N, 256] activations are memory-bound at large N;
        # "compiled" lets inductor fuse the elementwise work, "fused" keeps activations on chip.
        compile_nets = plan.acting == "compiled"
        online, target = nets.online, nets.target  # type: ignore[attr-defined]
        self._online = torch.compile(online, dynamic=False) if compile_nets else online
        self._target = torch.compile(target, dynamic=False) if compile_nets else target
        self._fused = FusedActing(nets, n, env.n_actions, plan.matmul_precision) if plan.acting == "fused" else None
        if self._fused is not None:
            self._fused.refresh()  # step() may run before the first round()
        if plan.env_step == "fused":
            self._env_step = FusedEnvStep(env)  # ValueError naming the reason when it cannot run
        elif plan.env_step == "compiled":
            self._env_step = torch.compile(env.step, dynamic=False)
        else:
            self._env_step = env.step

    def _live(self) -> dict[str, torch.Tensor]:
        return {"env_steps": self.env_steps, "epsilon": self.epsilon, **self.draws.state_tensors()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """ε schedule position, ε, and the exploration generator or draw seed (``foxhunt.state`` convention)."""
        return pack(self._live(), generators=self.draws.generators())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        unpack("Collector", state, self._live(), generators=self.draws.generators())

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
    def step(self, k: int) -> None:
        """Step k of the round: one lockstep env step of all N envs (device work only)."""
        cfg, env, learner = self.cfg, self.env, self.learner
        obs = env.observe()
        if self._fused is not None:
            q, greedy = self._fused.act(obs)
        else:
            q = self._q(self._online, obs)
            greedy = q.argmax(dim=1)
        self.epsilon.copy_(linear_schedule(cfg.eps_start, cfg.eps_end, cfg.eps_decay_steps, self.env_steps))
        self.explore_draws()
        if self.checks is not None:
            self.checks.acting(obs, q, greedy)
        actions = self.r_action[k]
        torch.where(self._u < self.epsilon, self._rand_action, greedy, out=actions)
        self.r_bar[k].copy_(env.state.bar)
        if self.checks is not None:
            self.checks.bars(self.r_bar[k])
        self.r_portfolio[k].copy_(obs[:, self._n_market:])
        bonus = None
        if self.curiosity is not None:
            assert self.r_curiosity is not None
            bonus = self.r_curiosity[k]
            bonus.copy_(self.curiosity.bonus(obs, actions, self.r_bar[k]))
        out = self._env_step(actions, curiosity=bonus)
        if self.checks is not None:
            self.checks.stepped(out.reward, out.next_bar)
        next_obs = env.market.observe(out.next_bar, out.next_portfolio, self._next_obs)
        if self.checks is not None:
            self.checks.next_obs(next_obs)
        if self._fused is not None:
            q_next = self._fused.next_max(next_obs)
        else:
            q_next = self._q(self._target, next_obs).amax(dim=1)
        # A time-limit end (truncation) is not terminal: its value is bootstrapped.
        terminal = self.r_terminal[k]
        torch.logical_and(out.done, ~out.truncated, out=terminal)
        q_taken = q.gather(1, actions.unsqueeze(1)).squeeze(1)
        torch.abs(out.reward + cfg.gamma * (~terminal).float() * q_next - q_taken, out=self.r_td[k])
        for dst, src in ((self.r_reward, out.reward), (self.r_done, out.done), (self.r_next_bar, out.next_bar),
                         (self.r_next_portfolio, out.next_portfolio), (self.r_trade_closed, out.trade_closed),
                         (self.r_trade_return, out.trade_return)):
            dst[k].copy_(src)
        self.env_steps.add_(1)

    def explore_draws(self) -> None:
        """``_u`` [N] float32 in [0, 1) and ``_rand_action`` [N] int64 in [0, A): this step's exploration draws."""
        self.draws.uniform(self._u, self.env_steps)
        self.draws.integers(self._rand_action, self.n_actions, self.env_steps)

    @torch.no_grad()
    def flush(self) -> None:
        """End of round: one replay write of L·N transitions (|TD| priorities), one monitor update."""
        flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731  [L, N, ...] → [L·N, ...]
        self.replay.add(
            Transitions(flat(self.r_bar), flat(self.r_portfolio), flat(self.r_action), flat(self.r_reward),
                        flat(self.r_terminal), flat(self.r_next_bar), flat(self.r_next_portfolio)),
            flat(self.r_td),
        )
        action = flat(self.r_action)
        exposure = action // 9 if self.n_actions == N_FACTORED_ACTIONS else action
        cur = flat(self.r_curiosity) if self.r_curiosity is not None else None
        self.monitor.add_collection(flat(self.r_reward), exposure, flat(self.r_done), flat(self.r_trade_closed),
                                    flat(self.r_trade_return), cur)

    def round_buffers(self) -> dict[str, torch.Tensor]:
        """The round buffers [L, N, ...] by name (what ``collect`` writes and ``flush`` reads)."""
        return {k: v for k, v in vars(self).items() if k.startswith("r_") and isinstance(v, torch.Tensor)}

    def collect(self) -> None:
        """``rollout_len`` steps into the round buffers (no replay write)."""
        if self._fused is not None:
            self._fused.refresh()  # weights changed in the train steps since the last round
        if self.checks is not None:
            self.checks.weights(self.nets)
        for k in range(self.cfg.rollout_len):
            self.step(k)

    def round(self) -> None:
        """``collect`` and the flush (the body that is captured as one CUDA graph)."""
        self.collect()
        self.flush()
