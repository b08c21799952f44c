"""The fused train step's adapter: the DQN train step as one compiled program, without autograd.

``QLearner.train_step`` (the eager reference) is sample → gather → forward → autograd backward →
guard → clip → masked Adam → target update → schedules → record → priority write-back. On a GPU it
is launch-bound: ~220 kernels of ~2.5 µs each around ~10 µs of GEMMs. ``FusedTrainStep`` computes
the same step with the network's backward written by hand (``manual_grad``), so everything
between the replay sample and the priority write-back is one pure function of device tensors that
``torch.compile(fullgraph=True)`` turns into one Inductor graph: the GEMMs go to cuBLAS and all
elementwise work (observation gather and normalisation, n-step returns, bias + LeakyReLU and
their derivatives, double-DQN target, Huber, guard checks, grad norm, clipping, masked Adam,
target update, schedules, the record row) fuses into a few dozen Triton kernels.

What stays outside the compiled region, unchanged: the replay sampler's ``sample`` (it draws from
its own device generator, registered with the CUDA graph) and ``update_priorities`` (sum-tree
work owned by the sampler). The step still does no host reads and only in-place writes into the
learner's preallocated tensors (weights, Adam moments, target, counters, records, PER beta: the
compiled graph writes its results back into these input buffers), so ``GraphedStep`` captures it
like the eager step: the first call compiles and runs on a side stream, the capture replays the
compiled kernels. Compile mode is the default one: the caller's CUDA graph captures the whole step.

Semantics are those of ``QLearner._loss`` / ``_apply`` / ``_update_target`` / ``MaskedAdam.step``
line by line (guard = non-finite loss or grad norm, loss above ``loss_clip``, any |Q| of the batch
above ``q_divergence``, halted; the record row carries the same Q-monitor statistics; a skipped step
leaves weights, moments, Adam step and target bitwise unchanged and writes |δ| = 0 priorities).
tests/agents/test_dqn_fused_step.py checks the gradient against autograd and N steps against the
eager step.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch

from foxhunt.agents.dqn.targets import linear_schedule, nstep_targets, q_record
from foxhunt.agents.dqn.manual_grad import DuelingLayout, dqn_loss_and_grad
from foxhunt.agents.guard import guard_check

if TYPE_CHECKING:
    from foxhunt.agents.dqn.learner import QLearner


def gather_obs(features: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor, bar: torch.Tensor,
               portfolio: torch.Tensor) -> torch.Tensor:
    """``MarketData.observe`` as a pure function: [B, F + P] = ((features[bar] − mean) · inv_std) ++ portfolio.

    features [T, F] float32; mean, inv_std [F]; bar [B] int64; portfolio [B, P] float32.
    """
    return torch.cat([(features.index_select(0, bar) - mean) * inv_std, portfolio], dim=1)


def unsupported(net: torch.nn.Module) -> str | None:
    """Why the fused train step cannot differentiate ``net`` (None when it can): the hand-written
    backward covers DuelingQNet and BranchingQNet Linear / LeakyReLU stacks with biases and one slope."""
    try:
        DuelingLayout.from_module(net)
    except ValueError as exc:
        return str(exc)
    return None


class FusedTrainStep:
    """``learner.train_step`` as sample → ONE compiled program → priority write-back.

    learner: the QLearner whose tensors the step reads and updates in place.
    compile: torch.compile the program (``dynamic=False, fullgraph=True``, default mode); False runs
    the same function eagerly (tests; still no autograd).

    Differences from the eager step that no caller sees: the learner's scratch buffers ``obs`` /
    ``next_obs`` are not written (the gathered batch stays inside the program). Compiled code is
    cached per code object and shared by instances with equal constants (config, layout, shapes);
    each distinct config is one more entry. With fullgraph=True, going past dynamo's recompile
    limit is an error, so the limit of this region is raised to ``RECOMPILE_LIMIT`` (torch >= 2.13
    takes it per call; older versions use the global ``torch._dynamo.config.recompile_limit``, 8).
    """

    def __init__(self, learner: QLearner, compile: bool = True) -> None:
        cfg = learner.cfg
        self.learner = learner
        self.layout = DuelingLayout.from_module(learner.online)
        _check_flat(learner, self.layout)
        # Plain Python constants (dynamo guards on them; a pydantic model is not traced).
        self.batch_size = cfg.batch_size
        self.n_step = cfg.n_step
        self.gamma = cfg.gamma
        self.n_envs = learner.n_envs
        self.huber_delta = cfg.huber_delta
        self.grad_clip = cfg.grad_clip
        self.guard_limits = dict(learner.guard.limits)  # incl. q_divergence (the Q-divergence check)
        self.lr_sched = None if cfg.lr_end is None else (cfg.lr, cfg.lr_end, cfg.lr_decay_steps)
        self.beta_sched = (cfg.per_beta_start, cfg.per_beta_end, cfg.per_beta_steps)
        self.polyak = cfg.target_update == "polyak"
        self.tau = cfg.target_tau
        self.hard_every = cfg.target_hard_every
        opt = learner.opt
        self.adam = (opt.beta1, opt.beta2, opt.eps, opt.weight_decay)
        self._tensors = self._collect()
        self.program = _compile(self._program) if compile else self._program

    def _collect(self) -> dict[str, torch.Tensor]:
        """Every tensor the program reads or writes (held once: they are updated in place, never replaced)."""
        ln = self.learner
        st, m, opt = ln.replay.storage, ln.market, ln.opt
        return {
            # learner state (written)
            "online": ln.flat.data, "grad": ln.flat.grad, "target": ln.target_flat,
            "adam_m": opt.m, "adam_v": opt.v, "adam_t": opt.step_count, "lr": ln.lr, "updates": ln.updates,
            **ln.guard.state_tensors(), "records": ln.records, "record_idx": ln.record_idx,
            "beta": ln.replay.sampler.beta,
            # read only
            "beta1": opt._beta1, "beta2": opt._beta2, "gamma_pow": ln._gamma_pow,
            "features": m.features, "norm_mean": m.norm_mean, "norm_inv_std": m.norm_inv_std,
            "st_bar": st.bar, "st_portfolio": st.portfolio, "st_action": st.action, "st_reward": st.reward,
            "st_done": st.done, "st_next_bar": st.next_bar, "st_next_portfolio": st.next_portfolio,
            "st_discount": st.discount, "st_pos": st.pos_t,
        }

    def __call__(self) -> None:
        """One gradient step, entirely on the device (no host reads; graph-capturable)."""
        ln = self.learner
        idx, weights = ln.replay.sampler.sample(self.batch_size)
        if ln.checks is not None:
            ln.checks.sample(idx)  # check mode: outside the compiled program, inside the graph
        td = self.program(idx, weights, self._tensors)
        ln.replay.update_priorities(idx, td)

    # ------------------------------------------------------------------ the compiled program
    def _batch(self, idx: torch.Tensor, t: dict[str, torch.Tensor]):
        """``QLearner._batch`` after sampling: (obs, action, reward, done, next_obs, discount)."""
        feats, mean, inv = t["features"], t["norm_mean"], t["norm_inv_std"]
        action = t["st_action"].index_select(0, idx)
        obs = gather_obs(feats, mean, inv, t["st_bar"].index_select(0, idx), t["st_portfolio"].index_select(0, idx))
        if self.n_step == 1:
            reward = t["st_reward"].index_select(0, idx)
            done = t["st_done"].index_select(0, idx)
            discount = t["st_discount"].index_select(0, idx)
            last = idx
        else:
            reward, done, discount, last = nstep_targets(
                t["st_reward"], t["st_done"], t["st_bar"], t["st_next_bar"], t["st_pos"], idx,
                self.n_envs, self._gamma(t), self.n_step, t["gamma_pow"])
        next_obs = gather_obs(feats, mean, inv, t["st_next_bar"].index_select(0, last),
                              t["st_next_portfolio"].index_select(0, last))
        return obs, action, reward, done, next_obs, discount

    def _program(self, idx: torch.Tensor, weights: torch.Tensor, t: dict[str, torch.Tensor]) -> torch.Tensor:
        """Gather, loss + gradient, guard, clip, masked Adam, target, schedules, record.

        idx [B] int64, weights [B] float32: the sampler's draw. Writes the learner's tensors in
        place; returns the TD errors for the priority write-back [B] (0 where the step is skipped).
        """
        obs, action, reward, done, next_obs, discount = self._batch(idx, t)
        loss, g, td, q_taken, q = dqn_loss_and_grad(t["online"], t["target"], self.layout, obs, action, reward,
                                                    done, next_obs, discount, weights, self.huber_delta)
        t["grad"].copy_(g)  # the flat grad buffer holds this step's (unclipped) gradient, as eagerly
        ok = self._guarded_update(loss, g, td, q_taken, q, t)
        return torch.where(ok, td, torch.zeros_like(td))

    def _guarded_update(self, loss: torch.Tensor, g: torch.Tensor, td: torch.Tensor, q_taken: torch.Tensor,
                        q: torch.Tensor, t: dict[str, torch.Tensor]) -> torch.Tensor:
        """``QLearner._apply`` (same order of operations; q [B, A]: the Q monitor's batch); returns ok (0-d bool)."""
        updates = t["updates"]
        gnorm = torch.linalg.vector_norm(g)
        qrec = q_record(q)
        ok, nonfinite, over_clip = guard_check(loss, gnorm, updates, t, q_abs_max=qrec[4], **self.guard_limits)
        coef = (self.grad_clip / (gnorm + 1e-6)).clamp(max=1.0)
        if self.lr_sched is not None:
            t["lr"].copy_(linear_schedule(*self.lr_sched, updates))
        self._adam(g * coef, ok, t)
        self._update_target(ok, t)
        updates.add_(1)
        t["beta"].copy_(linear_schedule(*self.beta_sched, updates))
        row = torch.cat([torch.stack([loss, gnorm, td.abs().mean(), q_taken.sum(), q_taken.min(), q_taken.max(),
                                      ok.float(), nonfinite.float(), over_clip.float()]),
                         qrec, (qrec[4:] > self.guard_limits["q_divergence"]).float()])
        self._write_record(t["records"], t["record_idx"], row)
        return ok

    # Hooks the member stack (``member_stack.StackedTrainSteps``) overrides: the same values, in a
    # form ``torch.vmap`` batches over a member axis.
    def _gamma(self, t: dict[str, torch.Tensor]):
        """The discount ``nstep_targets`` raises to the k-th power (a Python float here)."""
        return self.gamma

    def _write_record(self, records: torch.Tensor, record_idx: torch.Tensor, row: torch.Tensor) -> None:
        """records[record_idx] := row (clamped to the table's last row), then record_idx += 1."""
        records.index_copy_(0, record_idx.clamp(max=records.shape[0] - 1), row.unsqueeze(0))
        record_idx.add_(1)

    def _adam(self, grad: torch.Tensor, ok: torch.Tensor, t: dict[str, torch.Tensor]) -> None:
        """``MaskedAdam.step``: nothing changes, bitwise, where ``ok`` is False."""
        beta1, beta2, eps, weight_decay = self.adam
        data, m, v, step = t["online"], t["adam_m"], t["adam_v"], t["adam_t"]
        g = torch.where(ok, grad, torch.zeros_like(grad))
        if weight_decay:
            g = g + weight_decay * data
        n = step + ok.float()
        m_new = m * beta1 + g * (1.0 - beta1)
        v_new = v * beta2 + g * g * (1.0 - beta2)
        bc1 = 1.0 - torch.pow(t["beta1"], n.clamp_min(1.0))
        bc2 = 1.0 - torch.pow(t["beta2"], n.clamp_min(1.0))
        update = (m_new / bc1) / ((v_new / bc2).sqrt() + eps) * t["lr"]
        data.copy_(torch.where(ok, data - update, data))
        m.copy_(torch.where(ok, m_new, m))
        v.copy_(torch.where(ok, v_new, v))
        step.copy_(n)

    def _update_target(self, ok: torch.Tensor, t: dict[str, torch.Tensor]) -> None:
        """``QLearner._update_target`` (reads the updated online weights; ``updates`` not yet advanced)."""
        online, target = t["online"], t["target"]
        if self.polyak:
            new = target + self.tau * (online - target)
            target.copy_(torch.where(ok, new, target))
        else:
            due = ok & (torch.remainder(t["updates"] + 1, self.hard_every) == 0)
            target.copy_(torch.where(due, online, target))


RECOMPILE_LIMIT = 64
"""Distinct configs (or shapes) per process that get a compiled program (see FusedTrainStep)."""


def _compile(fn):
    """torch.compile, one graph, static shapes, default mode (the caller's CUDA graph captures it)."""
    kw = {"recompile_limit": RECOMPILE_LIMIT} if "recompile_limit" in inspect.signature(torch.compile).parameters else {}
    return torch.compile(fn, dynamic=False, fullgraph=True, **kw)


def _check_flat(learner: QLearner, lay: DuelingLayout) -> None:
    """The layout read from the module must be where FlatParams put the parameters (views of it)."""
    flat = learner.flat.data
    if lay.numel != flat.numel() or learner.target_flat.numel() != flat.numel():
        raise ValueError("FusedTrainStep: flat buffer size does not match the network")
    if learner.opt.lr is not learner.lr or learner.opt.flat is not learner.flat:
        raise ValueError("FusedTrainStep: the optimiser must step the learner's flat buffer with its lr tensor")
    base, size = flat.data_ptr(), flat.element_size()
    off = 0
    for p in learner.online.parameters():
        if p.data_ptr() != base + off * size:
            raise ValueError("FusedTrainStep: online parameters are not views of the flat buffer in order")
        off += p.numel()
