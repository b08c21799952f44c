"""Check mode (``accel.check = true``): the DQN trainer's invariants, checked on the device.

Why it exists: a CUDA graph replays its kernels with the addresses of its capture, and a
device-side assert (an index out of bounds in a gather) ends the process without saying which
value was wrong or where it came from. In check mode the trainer

* counts, per epoch and on the device (no host read, so the captured graphs keep it), the
  violations of each invariant in ``CHECKS``, right before the operation each one protects, and
  makes the offending values safe (actions clamped into [0, n_actions), bars into [0, T), sampled
  replay slots into the filled part and what they hold into range), so the epoch reaches its one
  readback;
* at that readback raises ``CheckFailed`` naming every violated invariant with its count, the fold
  and the epoch (before the guard's own halt message: it says where a non-finite loss came from);
* at every ``reset_for_fold`` compares the data pointers of every tensor the captured steps read
  (``captured_tensors``) with those of the previous fold: a tensor re-allocated after capture would
  be read stale by a replayed graph.

Cost: about ten small reductions per env step and three per train step (off by default). The
counters are extra fields of the epoch summary (``EpochMonitor(extra_fields=CHECK_FIELDS)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from foxhunt.errors import FoxhuntError

if TYPE_CHECKING:
    from foxhunt.agents.dqn.collector import Collector
    from foxhunt.agents.dqn.learner import QLearner
    from foxhunt.agents.monitor import EpochMonitor, EpochSummary
    from foxhunt.agents.replay import ReplayBuffer
    from foxhunt.env import VecTradingEnv
    from foxhunt.folds import FoldRange
    from foxhunt.market import MarketData


class CheckedTrainer(Protocol):
    """What check mode reads of the trainer it guards: the DQN trainer (``agents.dqn.trainer``
    builds ``DeviceChecks(self)``). A protocol, so that this module sits below the trainer and
    never imports it."""

    market: MarketData
    env: VecTradingEnv
    monitor: EpochMonitor
    replay: ReplayBuffer
    learner: QLearner
    collector: Collector
    fold: FoldRange | None

CHECKS: dict[str, str] = {
    "chk_weights_nonfinite": "non-finite online / target weights at the start of a collection round",
    "chk_obs_nonfinite": "acting observations (rows) with a non-finite value",
    "chk_q_nonfinite": "acting Q rows with a non-finite value",
    "chk_greedy_range": "greedy actions outside [0, n_actions) (the acting pass's argmax)",
    "chk_bar_range": "env bars (t or t+1) outside the fold's training range [train_start, train_end) (of its copy, with a mirror)",
    "chk_reward_nonfinite": "non-finite rewards from the env step",
    "chk_next_obs_nonfinite": "next observations (rows) with a non-finite value",
    "chk_sample_range": "sampled replay slots outside the filled part [0, size) of the buffer",
    "chk_sample_bar_range": "sampled transitions whose bar or next bar lies outside the data [0, R) (R rows: the bars and, with train.mirror, their mirror)",
    "chk_sample_action_range": "sampled transitions whose action lies outside [0, n_actions)",
}
CHECK_FIELDS = tuple(CHECKS)


class CheckFailed(FoxhuntError):
    """Check mode found a violated invariant; the message names each one, the fold and the epoch."""


def _rows_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """Rows of x [N, ...] holding a non-finite value: 0-d int64 count."""
    return (~torch.isfinite(x)).reshape(x.shape[0], -1).any(1).sum()


class DeviceChecks:
    """The counters and clamps of check mode for one trainer (see the module docstring).

    Each method is device work only (graph-safe); ``report`` reads a host summary."""

    def __init__(self, trainer: CheckedTrainer) -> None:
        self.trainer = trainer
        self.market = trainer.market
        self.monitor = trainer.monitor
        self.n_actions = trainer.env.n_actions
        self.last_bar = self.market.n_rows - 1  # the rows on the device: the data and its mirror, if any
        self._pointers = pointers(trainer)

    def _count(self, name: str, n: torch.Tensor) -> None:
        b = self.monitor.buf
        i = self.monitor.idx[name]
        b[i : i + 1].add_(n.to(b.dtype))

    # ---------------------------------------------------------------- collection (Collector hooks)
    def weights(self, nets: object | None = None) -> None:
        """Online and target weights finite (the fused acting pass packs them at the round start).
        nets: the networks collection acts with (the learner's, or the acting copy of
        ``dqn.overlap_collection``: its ``online_flat`` and ``target_flat``)."""
        ln = self.trainer.learner
        online, target = ((nets.online_flat, nets.target_flat) if hasattr(nets, "online_flat")  # type: ignore[union-attr]
                          else (ln.flat.data, ln.target_flat))
        self._count("chk_weights_nonfinite", (~torch.isfinite(online)).sum() + (~torch.isfinite(target)).sum())

    def acting(self, obs: torch.Tensor, q: torch.Tensor, greedy: torch.Tensor) -> None:
        """obs [N, F + 3], Q [N, A] and greedy [N] of the acting pass; greedy clamped into range."""
        self._count("chk_obs_nonfinite", _rows_nonfinite(obs))
        self._count("chk_q_nonfinite", _rows_nonfinite(q))
        self._count("chk_greedy_range", ((greedy < 0) | (greedy >= self.n_actions)).sum())
        greedy.clamp_(0, self.n_actions - 1)

    def bars(self, bar: torch.Tensor) -> None:
        """bar [N] int64 (an obs bar or a next bar, written into the replay): counted when outside the
        fold's training range, clamped into the data [0, T) in place."""
        fb = self.market.fold_bounds
        b = bar
        if self.market.mirror_offset:  # a bar of the mirrored copy is checked against its training range
            b = bar - self.market.copy_offset(bar)
        self._count("chk_bar_range", ((b < fb[0]) | (b >= fb[1])).sum())
        bar.clamp_(0, self.last_bar)

    def stepped(self, reward: torch.Tensor, next_bar: torch.Tensor) -> None:
        """The env step's outputs: reward [N] finite, next bar [N] in range (clamped in place)."""
        self._count("chk_reward_nonfinite", (~torch.isfinite(reward)).sum())
        self.bars(next_bar)

    def next_obs(self, next_obs: torch.Tensor) -> None:
        self._count("chk_next_obs_nonfinite", _rows_nonfinite(next_obs))

    # ---------------------------------------------------------------- training (learner hook)
    def sample(self, idx: torch.Tensor) -> None:
        """A train step's sampled slots idx [B] int64 and the bars and actions stored there: counted
        when out of range, then idx clamped into the filled part and those stored values into range
        (in place), so the step's gathers cannot fault."""
        st = self.trainer.replay.storage
        self._count("chk_sample_range", ((idx < 0) | (idx >= st.size_t)).sum())
        torch.minimum(idx.clamp_(min=0), (st.size_t - 1).clamp(min=0), out=idx)
        bar, nxt, act = st.bar.index_select(0, idx), st.next_bar.index_select(0, idx), st.action.index_select(0, idx)
        t = self.last_bar
        self._count("chk_sample_bar_range", ((bar < 0) | (bar > t) | (nxt < 0) | (nxt > t)).sum())
        self._count("chk_sample_action_range", ((act < 0) | (act >= self.n_actions)).sum())
        st.bar.index_copy_(0, idx, bar.clamp(0, t))
        st.next_bar.index_copy_(0, idx, nxt.clamp(0, t))
        st.action.index_copy_(0, idx, act.clamp(0, self.n_actions - 1))

    # ---------------------------------------------------------------- host side
    def rebase_addresses(self) -> None:
        """Record the current addresses as the reference: for tensors moved on purpose before any graph
        was captured (``agents.dqn.member_stack`` re-homes a member's state into the stack's rows)."""
        self._pointers = pointers(self.trainer)

    def verify_addresses(self) -> None:
        """CheckFailed if a tensor the captured steps read moved since the last call (or construction)."""
        now = pointers(self.trainer)
        moved = [k for k in self._pointers if k in now and now[k] != self._pointers[k]]
        gone = [k for k in self._pointers if k not in now]
        if moved or gone:
            what = ", ".join([*(f"{k} re-allocated" for k in moved), *(f"{k} gone" for k in gone)][:6])
            raise CheckFailed(f"check mode: tensors read by the captured CUDA graphs changed address: {what}")
        self._pointers = now

    def report(self, s: EpochSummary) -> None:
        """CheckFailed naming every invariant violated in the epoch of summary ``s``."""
        bad = [f"{CHECKS[k]}: {int(s[k])}" for k in CHECK_FIELDS if s[k] > 0]
        if bad:
            fold = self.trainer.fold.fold if self.trainer.fold is not None else "?"
            raise CheckFailed(f"check mode, fold {fold}, epoch {s.epoch}: " + "; ".join(bad))


def captured_tensors(trainer: CheckedTrainer) -> dict[str, torch.Tensor]:
    """Every tensor the trainer's captured round and train step read or write, by a stable name
    (lazily created per-size buffers included once they exist)."""
    m, env, st, sp, ln, col = (trainer.market, trainer.env, trainer.replay.storage, trainer.replay.sampler,
                               trainer.learner, trainer.collector)
    out: dict[str, torch.Tensor] = {}

    def add(prefix: str, items: dict[str, object]) -> None:
        for k, v in items.items():
            if isinstance(v, torch.Tensor):
                out[f"{prefix}.{k}"] = v

    add("market", vars(m))
    add("env.state", env.state.tensors())
    add("env.out", env.out.tensors())
    add("env.params", {k: getattr(env.params, k) for k in env.params.tensor_names()})
    add("env", {"obs": env.obs, "portfolio": env._portfolio, "reset_flags": env.reset_flags,
                "uniform": env.sampler.uniform, "starts": env.sampler.starts})
    add("storage", vars(st))
    for name in ("_offsets", "_slots"):
        add(f"storage.{name}", {str(n): t for n, t in getattr(st, name).items()})
    add("sampler", vars(sp))
    for name in ("_strata", "_values"):
        add(f"sampler.{name}", {str(n): t for n, t in getattr(sp, name, {}).items()})
    for n, (i, w) in sp._out.items():
        add(f"sampler._out.{n}", {"idx": i, "w": w})
    for tree in ("sum_tree", "min_tree"):
        if hasattr(sp, tree):
            out[f"sampler.{tree}"] = getattr(sp, tree).tree
    add("learner", vars(ln))
    add("learner.flat", {"data": ln.flat.data, "grad": ln.flat.grad})
    add("learner.opt", vars(ln.opt))
    if ln.fused is not None and hasattr(ln.fused, "_tensors"):
        add("learner.fused", ln.fused._tensors)
    add("collector", vars(col))
    if col._fused is not None:
        add("collector.fused", vars(col._fused))
        for which in ("online", "target"):
            add(f"collector.fused.{which}", vars(getattr(col._fused, which)))
    out["monitor.buf"] = trainer.monitor.buf
    return out


def pointers(trainer: CheckedTrainer) -> dict[str, int]:
    """{name: data_ptr} of ``captured_tensors``."""
    return {k: t.data_ptr() for k, t in captured_tensors(trainer).items()}


__all__ = ["CHECKS", "CHECK_FIELDS", "CheckFailed", "CheckedTrainer", "DeviceChecks", "captured_tensors", "pointers"]
