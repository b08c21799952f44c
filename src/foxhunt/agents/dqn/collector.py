"""Experience collection: N envs × L lockstep steps per round, straight into the device replay.

Each step gathers observations, runs the online network, picks ε-greedy actions on the device,
(optionally) computes the curiosity bonus, steps the env, gathers the next observation, runs the
target network on it and writes the transitions with |TD| as their initial priority. No host
reads; ε comes from a device schedule over the device step counter, so a captured round replays
with the current ε.

``DQNConfig.fused_acting`` runs both forward passes as one fused Triton MLP kernel each
(``foxhunt.kernels.dueling_mlp_fused``: activations stay on chip; the online pass also writes the
greedy action, the target pass only the row max). The kernel reads packed copies of the weights,
refreshed in place at the start of every round (inside the captured graph).
"""

from __future__ import annotations

import torch
from torch import nn

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.curiosity import Curiosity
from foxhunt.agents.dqn.learner import QLearner, linear_schedule
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.agents.networks import N_FACTORED_ACTIONS, DuelingQNet
from foxhunt.agents.replay import ReplayBuffer, Transitions
from foxhunt.env import VecTradingEnv
from foxhunt.env.fused import FusedEnvStep


FUSED_MAX_WIDTH = 512
FUSED_PRECISION = {"fp32": "ieee", "tf32": "tf32", "bf16": "bf16"}  # matmul_precision → kernel precision


def fused_acting_unsupported(net: nn.Module, device: torch.device) -> str | None:
    """Why the fused acting kernel cannot run ``net`` on ``device`` (None when it can). The network
    rules are ``foxhunt.backtest.fused.net_unsupported``'s (agents do not import the backtest)."""
    try:
        from foxhunt.kernels import dueling_mlp_fused
    except ImportError as exc:  # triton missing (or broken)
        return f"triton is not available ({exc})"
    if device.type != "cuda" and not dueling_mlp_fused.is_interpreted():
        return "no CUDA device (and the Triton interpreter is off: set TRITON_INTERPRET=1 for CPU runs)"
    if not isinstance(net, DuelingQNet) or type(net).forward is not DuelingQNet.forward:
        return f"the network is a {type(net).__name__}, not a DuelingQNet"
    lin, act = nn.Linear, nn.LeakyReLU
    kinds = [[type(m) for m in seq.children()] for seq in (net.trunk, net.value, net.advantage)]
    if kinds != [[lin, act, lin, act], [lin, act, lin], [lin, act, lin]]:
        return "the kernel needs two trunk layers (dqn.hidden of length 2) and Linear-LeakyReLU-Linear heads"
    mods = [m for seq in (net.trunk, net.value, net.advantage) for m in seq.children()]
    if len({m.negative_slope for m in mods if isinstance(m, act)}) != 1:
        return "the kernel needs one LeakyReLU slope for every layer"
    t1, t2, v1 = net.trunk[0], net.trunk[2], net.value[0]
    if max(t1.in_features, t1.out_features, t2.out_features, 2 * v1.out_features, net.n_actions + 1) > FUSED_MAX_WIDTH:
        return f"layers wider than {FUSED_MAX_WIDTH} units"  # the kernel holds [BLOCK_M, width] tiles on chip
    if any(p.dtype != torch.float32 or p.device.type != device.type for p in net.parameters()):
        return "the network's parameters are not float32 on the env's device"
    return None


class FusedActing:
    """The collector's two forward passes through the fused kernel: packed online and target
    weights (refreshed in place by ``refresh``) and preallocated outputs (graph-safe).

    q [N, n_actions] f32 and greedy [N] i64 of the online net; q_next_max [N] f32 of the target."""

    def __init__(self, learner: QLearner, n: int, n_actions: int, precision: str) -> None:
        reason = fused_acting_unsupported(learner.online, learner.device)
        if reason is None and learner.online.n_actions != n_actions:
            reason = f"the network has {learner.online.n_actions} actions, the env {n_actions}"
        if reason is not None:
            raise ValueError(f"fused acting unavailable: {reason}")
        from foxhunt.kernels import dueling_mlp_fused as k

        self.k = k
        self.learner = learner
        self.precision = FUSED_PRECISION[precision]
        self.online = k.pack_net(learner.online, self.precision)
        self.target = k.pack_net(learner.target, self.precision)
        dev = learner.device
        self.q = torch.zeros((n, n_actions), dtype=torch.float32, device=dev)
        self.greedy = torch.zeros(n, dtype=torch.int64, device=dev)
        self.q_next_max = torch.zeros(n, dtype=torch.float32, device=dev)

    def refresh(self) -> None:
        """Copy the current online and target weights into the packed buffers (in place)."""
        for net, packed in ((self.learner.online, self.online), (self.learner.target, self.target)):
            trunk, value, adv, _ = self.k.dueling_pairs(net)
            self.k.pack_dueling_into(trunk, value, adv, packed)

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q [N, n_actions], greedy action [N]) of the online net on obs [N, obs_dim]."""
        self.k.fused_dueling_q(self.online, obs, precision=self.precision, q=self.q, argmax=self.greedy)
        return self.q, self.greedy

    def next_max(self, next_obs: torch.Tensor) -> torch.Tensor:
        """max_a Q_target(next_obs, a): [N]."""
        self.k.fused_dueling_q(self.target, next_obs, precision=self.precision, q=False, q_max=self.q_next_max)
        return self.q_next_max


class Collector:
    """Runs collection rounds of ``env`` with ``learner``'s networks into ``replay``.

    Per step, the transition fields land in round buffers [L, N]; the round ends with ONE replay
    write of L·N rows (step-major, so row r + N is the same env's next step) and ONE monitor
    update: the per-step work is the networks, the env step and a few copies.
    """

    def __init__(self, cfg: DQNConfig, env: VecTradingEnv, learner: QLearner, replay: ReplayBuffer,
                 monitor: EpochMonitor, curiosity: Curiosity | None = None, seed: int = 0) -> None:
        dev = env.device
        n, steps = env.n_envs, cfg.rollout_len
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
        self._next_obs = torch.zeros((n, env.obs_dim), dtype=torch.float32, device=dev)
        self._n_market = env.market.n_features

        def buf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros((steps, n, *shape), dtype=dtype, device=dev)

        self.r_bar, self.r_portfolio, self.r_action = buf(dtype=torch.int64), buf(3), buf(dtype=torch.int64)
        self.r_reward, self.r_terminal, self.r_done = buf(), buf(dtype=torch.bool), buf(dtype=torch.bool)
        self.r_next_bar, self.r_next_portfolio, self.r_td = buf(dtype=torch.int64), buf(3), buf()
        self.r_trade_closed, self.r_trade_return = buf(dtype=torch.bool), buf()
        self.r_curiosity = buf() if curiosity is not None else None
        self.autocast = dev.type == "cuda" and cfg.matmul_precision == "bf16"
        # The env step is ~450 elementwise kernels: fused_env runs it as ONE Triton kernel
        # (foxhunt.env.fused, same results to float32 rounding); compile_env lets inductor fuse them.
        # Acting passes: bias + LeakyReLU chains over [N, 256] activations are memory-bound at large N;
        # compiling them (compile_learner) lets inductor fuse the elementwise work into fewer passes.
        compile_nets = cfg.compile_learner and not cfg.fused_acting  # fused acting replaces the nets' passes
        self._online = torch.compile(learner.online, dynamic=False) if compile_nets else learner.online
        self._target = torch.compile(learner.target, dynamic=False) if compile_nets else learner.target
        # fused_acting: both forward passes as one Triton kernel each (ValueError when it cannot run).
        self._fused = FusedActing(learner, n, env.n_actions, cfg.matmul_precision) if cfg.fused_acting else None
        if self._fused is not None:
            self._fused.refresh()  # step() may run before the first round()
        if cfg.fused_env:
            self._env_step = FusedEnvStep(env)  # ValueError naming the reason when it cannot run
        elif cfg.compile_env:
            self._env_step = torch.compile(env.step, dynamic=False)
        else:
            self._env_step = env.step

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
        torch.rand(self._u.shape, generator=self.generator, device=self._u.device, out=self._u)
        torch.randint(0, self.n_actions, self._rand_action.shape, generator=self.generator,
                      device=self._rand_action.device, out=self._rand_action)
        actions = self.r_action[k]
        torch.where(self._u < self.epsilon, self._rand_action, greedy, out=actions)
        self.r_bar[k].copy_(env.state.bar)
        self.r_portfolio[k].copy_(obs[:, self._n_market:])
        bonus = None
        if self.curiosity is not None:
            assert self.r_curiosity is not None
            bonus = self.r_curiosity[k]
            bonus.copy_(self.curiosity.bonus(obs, actions, self.r_bar[k]))
        out = self._env_step(actions, curiosity=bonus)
        next_obs = env.market.observe(out.next_bar, out.next_portfolio, self._next_obs)
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

    def round(self) -> None:
        """``rollout_len`` steps and the flush (the body that is captured as one CUDA graph)."""
        if self._fused is not None:
            self._fused.refresh()  # weights changed in the train steps since the last round
        for k in range(self.cfg.rollout_len):
            self.step(k)
        self.flush()
