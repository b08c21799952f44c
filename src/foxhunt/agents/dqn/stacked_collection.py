"""One collection round of a stack's M DQN members as ONE batched program (issue 44).

Why: a member's collection step is ~25 small kernels (observe, acting, ε, exploration draws, env step,
next observation, target pass, TD, copies into the round buffers); M members stepped one program each
launch 25·M of them a step, and on a GPU each costs its launch latency, not its arithmetic. One member
with M·N envs costs far less than M members with N envs each (BENCHMARKS.md: the "floor" rows). Here
the members' envs are ONE env of M·N envs (``VecTradingEnv`` of M·N rows; member m's rows are
m·N … (m+1)·N − 1), so observing, stepping the env (one fused kernel), the next observation, the
ε-greedy choice, the TD priorities and the round-buffer copies run once for all members; with the fused acting
kernel the members' online and target passes are one launch each too (``stacked_packs``: their packed weights
stacked [M, ...], each tile of rows reading its own member's, the tile a launch on one member's rows takes, so
every row is bit for bit its own launch's), and with ``dqn.counter_draws`` the members' exploration draws and
episode-start draws are one launch each (a hash of each member's seed, step counter and env row:
``foxhunt.env.counter_draws``). What stays per member: its acting passes in torch, its generator draws
without counter_draws (its own generators, so its random streams are those it has alone), and the round's
acting-weight refresh, replay write and monitor update (``Collector.flush``), which on CUDA run on a side stream a
member, forked from the round's stream and joined back, so the members' small kernels overlap.

Layout after construction (M members, N envs each, L = rollout_len, D = obs_dim, A = n_actions):

    env (``env.stacked.stack_envs``)       every EnvState / StepOutput / EnvTensors field [M·N, ...]
    env.sampler (StackedSampler)           uniform [M·N] float64, starts [M·N] int64
    u [M·N] f32, rand_action [M·N] i64, actions [M·N] i64, q [M·N, A], greedy [M·N], q_next [M·N]
    env_steps [M] i64, epsilon [M] f32, gamma [M, 1] f32, draw_seed [M] i64 (counter_draws)
    r_bar, r_action, ... (every round buffer)  [M, L, N, ...]

and each member's own tensors (``env.state.*``, ``env.out.*``, ``env.params.*``, its sampler's
``uniform`` / ``starts``, its collector's ``_u``, ``_rand_action``, ``env_steps``, ``epsilon``, ``r_*``,
its fused acting's ``q`` / ``greedy`` / ``q_next_max``) are VIEWS of its rows, so resets, set_fold,
checkpoints, the epoch's reset flags and the replay write work on the member as before. Build it before
anything is captured (a graph would keep reading the old tensors); ``round`` checks, host side, that the
views still hold (it runs only eagerly and at capture).

Arithmetic: the members' own, op for op and element for element (every batched op is elementwise over
envs, or a gather within an env's row), so a member's transitions are bit for bit those it collects
alone (tests/train/test_lockstep_stacked.py: the CPU, and the fused kernels under the
interpreter).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from foxhunt.agents.dqn.targets import linear_schedule
from foxhunt.agents.exec_choice import env_step_fn
from foxhunt.env.counter_draws import counter_draws
from foxhunt.env.stacked import concat_rows, stack_envs, stack_leading, unstackable, view_ptrs

EPSILON_KEYS = ("eps_start", "eps_end", "eps_decay_steps")


def stacked_packs(fused: Sequence[Any], n: int) -> tuple[Any, Any] | None:
    """The members' packed online and target weights as two stacks of M packs (``DuelingWeights`` whose tensors are
    [M, ...]; each member's own pack becomes views of its row, so its ``refresh`` writes there), when one launch over
    the M·N rows can act for all of them: the same layout, dtype and precision, and the tile a launch on one member's
    N rows takes dividing N. None otherwise (each member launches its own passes)."""
    from foxhunt.kernels.rules.packing import WEIGHT_FIELDS, DuelingWeights

    f0 = fused[0]
    for f in fused:
        for a, b in ((f.online, f0.online), (f.target, f0.target)):
            if (a.dims, a.w1.dtype, a.obs_dim, a.n_actions, a.slope) != (b.dims, b.w1.dtype, b.obs_dim, b.n_actions, b.slope):
                return None
        if f.precision != f0.precision:
            return None
    if n % f0.k.default_block_m(n, f0.online.dims, f0.precision):
        return None  # a tile would span two members' rows
    packs = []
    for which in ("online", "target"):
        smalls = [getattr(f, which) for f in fused]
        whole = stack_leading(smalls, WEIGHT_FIELDS)
        s0 = smalls[0]
        packs.append(DuelingWeights(*(whole[k] for k in WEIGHT_FIELDS), obs_dim=s0.obs_dim, n_actions=s0.n_actions,
                                    slope=s0.slope))
    return packs[0], packs[1]


def unsupported(trainers: Sequence[Any]) -> str | None:
    """Why these trainers' collection rounds cannot be one batched program (None when they can)."""
    if len(trainers) < 2:
        return "one member"
    t0 = trainers[0]
    for k, t in enumerate(trainers):
        if getattr(t, "lag", None) is not None or getattr(t, "_curiosity", None) is not None or t.checks is not None:
            return f"member {k} collects lagged, trains curiosity or runs check mode"
        if t.cfg.rollout_len != t0.cfg.rollout_len:
            return f"member {k} differs in dqn.rollout_len"
        if (t.plan.env_step, t.plan.acting) != (t0.plan.env_step, t0.plan.acting):
            return f"member {k} differs in accel.env_step or accel.acting"
    return unstackable([t.env for t in trainers])


class StackedCollection:
    """``round()``: one collection round (``rollout_len`` steps, then each member's replay write) of every
    member of ``trainers`` (DQNTrainers; ``unsupported`` is None), as one program. See the module docstring."""

    def __init__(self, trainers: Sequence[Any]) -> None:
        reason = unsupported(trainers)
        if reason is not None:
            raise ValueError(f"stacked collection: {reason}")
        t0 = trainers[0]
        self.trainers = list(trainers)
        self.cols = [t.collector for t in trainers]
        m, n, steps = len(trainers), t0.cfg.n_envs, t0.cfg.rollout_len
        self.m, self.n, self.steps = m, n, steps
        dev, market = t0.device, t0.market
        self.market = market
        self.n_market = market.n_features
        self.n_actions = t0.env.n_actions
        self.env = stack_envs([t.env for t in trainers])  # member m's env tensors: views of its rows
        self._env_step = env_step_fn(self.env, t0.plan)  # the members' plan's env step (fused, compiled, torch)

        rows = concat_rows(self.cols, ("_u", "_rand_action"))  # [M·N]: each member's exploration draws, its rows
        self.u, self.rand_action = rows["_u"], rows["_rand_action"]
        counters = stack_leading(self.cols, ("env_steps", "epsilon"))  # [M] from each member's 0-d counter
        self.env_steps, self.epsilon = counters["env_steps"], counters["epsilon"]
        # dqn.counter_draws on every member: their exploration draws are one launch (draw_seed [M], each member's own)
        counted = all(c.draws.seed_t is not None for c in self.cols)
        self.draw_seed = stack_leading([c.draws for c in self.cols], ("seed_t",))["seed_t"] if counted else None
        self.actions = torch.zeros(m * n, dtype=torch.int64, device=dev)
        self.next_obs = torch.zeros((m * n, market.obs_dim), dtype=torch.float32, device=dev)
        self.gamma = torch.tensor([[float(t.cfg.gamma)] for t in trainers], dtype=torch.float32, device=dev)
        fused = [c._fused for c in self.cols]
        self.fused = all(f is not None for f in fused)
        self.packs: tuple[Any, Any] | None = None  # the members' packed online / target weights, [M, ...] each
        if self.fused:  # each member's fused acting outputs: its rows of q [M·N, A], greedy and q_next [M·N]
            outs = concat_rows(fused, ("q", "greedy", "q_next_max"))
            self.q, self.greedy, self.q_next = outs["q"], outs["greedy"], outs["q_next_max"]
            self.packs = stacked_packs(fused, n)
        else:
            self.q = torch.zeros((m * n, self.n_actions), dtype=torch.float32, device=dev)
            self.greedy = torch.zeros(m * n, dtype=torch.int64, device=dev)
            self.q_next = torch.zeros(m * n, dtype=torch.float32, device=dev)
        self.buffers = stack_leading(self.cols, list(self.cols[0].round_buffers()))  # [M, L, N, ...]
        cfgs = [t.cfg for t in trainers]
        self.one_epsilon = all(tuple(getattr(c, k) for k in EPSILON_KEYS) == tuple(getattr(cfgs[0], k) for k in EPSILON_KEYS)
                               for c in cfgs)
        # CUDA: a side stream a member for the per-member work of a round (``_per_member``)
        self.side_streams = [torch.cuda.Stream(dev) for _ in trainers] if dev.type == "cuda" else None
        self._views = self._view_ptrs()

    # ------------------------------------------------------------------ host checks
    def _view_ptrs(self) -> list[int]:
        cols = [p for c in self.cols for p in (c._u.data_ptr(), c.env_steps.data_ptr(), c.r_action.data_ptr())]
        return view_ptrs([t.env for t in self.trainers]) + cols

    def _check_views(self) -> None:
        """Host side (eager and capture only): every member's tensors are still its rows of the stack's."""
        if self._view_ptrs() != self._views:
            raise RuntimeError("stacked collection: a member's env or collector tensors moved since the stack was "
                               "built (they must be written in place)")

    # ------------------------------------------------------------------ the round
    def _epsilon(self) -> None:
        if self.one_epsilon:
            cfg = self.trainers[0].cfg
            self.epsilon.copy_(linear_schedule(cfg.eps_start, cfg.eps_end, cfg.eps_decay_steps, self.env_steps))
            return
        for t, c in zip(self.trainers, self.cols):
            c.epsilon.copy_(linear_schedule(t.cfg.eps_start, t.cfg.eps_end, t.cfg.eps_decay_steps, c.env_steps))

    def _rows(self, x: torch.Tensor, c: int) -> torch.Tensor:
        return x[c * self.n:(c + 1) * self.n]

    @torch.no_grad()
    def step(self, k: int) -> None:
        """Step k of the round for every member (``Collector.step``'s arithmetic, the members batched)."""
        m, n, b = self.m, self.n, self.buffers
        obs = self.env.observe()
        if self.packs is not None:  # every member's online pass in one launch, each tile its member's weights
            f0 = self.cols[0]._fused
            f0.k.fused_dueling_q(self.packs[0], obs, precision=f0.precision, q=self.q, argmax=self.greedy,
                                 rows_per_member=n)
        else:
            for c, col in enumerate(self.cols):
                if self.fused:
                    col._fused.act(self._rows(obs, c))  # writes its rows of q and greedy
                else:
                    q = col._q(col._online, self._rows(obs, c))
                    self._rows(self.q, c).copy_(q)
                    torch.argmax(q, dim=1, out=self._rows(self.greedy, c))
        self._epsilon()
        if self.draw_seed is not None:  # every member's counter-based draws, one launch (each its alone draws)
            counter_draws(self.draw_seed, self.env_steps, n, u32=self.u, ints=self.rand_action, n_int=self.n_actions)
        else:
            for col in self.cols:  # each member's exploration draws, from its own generator (its alone stream)
                col.explore_draws()
        mn = (m, n)
        torch.where(self.u.view(mn) < self.epsilon.view(m, 1), self.rand_action.view(mn), self.greedy.view(mn),
                    out=self.actions.view(mn))
        b["r_action"][:, k].copy_(self.actions.view(mn))
        b["r_bar"][:, k].copy_(self.env.state.bar.view(mn))
        b["r_portfolio"][:, k].copy_(obs.view(m, n, -1)[:, :, self.n_market:])
        out = self._env_step(self.actions)
        next_obs = self.market.observe(out.next_bar, out.next_portfolio, self.next_obs)
        if self.packs is not None:  # every member's target pass in one launch
            f0 = self.cols[0]._fused
            f0.k.fused_dueling_q(self.packs[1], next_obs, precision=f0.precision, q=False, q_max=self.q_next,
                                 rows_per_member=n)
        else:
            for c, col in enumerate(self.cols):
                if self.fused:
                    col._fused.next_max(self._rows(next_obs, c))  # writes its rows of q_next
                else:
                    torch.amax(col._q(col._target, self._rows(next_obs, c)), dim=1, out=self._rows(self.q_next, c))
        terminal = b["r_terminal"][:, k]
        torch.logical_and(out.done.view(mn), ~out.truncated.view(mn), out=terminal)
        q_taken = self.q.view(m, n, -1).gather(2, self.actions.view(m, n, 1)).squeeze(2)
        torch.abs(out.reward.view(mn) + self.gamma * (~terminal).float() * self.q_next.view(mn) - q_taken,
                  out=b["r_td"][:, k])
        for name, src in (("r_reward", out.reward), ("r_done", out.done), ("r_next_bar", out.next_bar),
                          ("r_next_portfolio", out.next_portfolio), ("r_trade_closed", out.trade_closed),
                          ("r_trade_return", out.trade_return)):
            b[name][:, k].copy_(src.view(m, n, *src.shape[1:]))
        self.env_steps.add_(1)

    def _per_member(self, work: Any) -> None:
        """``work(col)`` for every member: on CUDA each member's on its own side stream (forked from and joined
        back into the current stream, which a graph capture follows), so the members' small per-member kernels
        (weight packing, replay write, monitor update) overlap instead of queueing on one stream; the same ops
        in each member's own order, so the same bits."""
        if self.side_streams is None:
            for col in self.cols:
                work(col)
            return
        main = torch.cuda.current_stream(self.trainers[0].device)
        for s, col in zip(self.side_streams, self.cols):
            s.wait_stream(main)
            with torch.cuda.stream(s):
                work(col)
        for s in self.side_streams:
            main.wait_stream(s)

    def round(self) -> None:
        """Every member's round: its acting weights refreshed, ``rollout_len`` batched steps, then its
        replay write and monitor update (``Collector.flush``)."""
        self._check_views()
        self._per_member(lambda col: col._fused.refresh() if col._fused is not None else None)
        for k in range(self.steps):
            self.step(k)
        self._per_member(lambda col: col.flush())


__all__ = ["StackedCollection", "unsupported"]
