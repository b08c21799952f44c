"""DQNTrainer: one object per process, reused across folds.

It owns the env, replay, learner, collector and monitor, captures a collection round and a train
step in CUDA graphs on first use, and replays them for the life of the process: a new fold
changes device tensors the graphs read (fold bounds, normalisation, medians) and resets state in
place, never the graphs. An epoch is a host loop of graph replays with no host reads, ending with
the one readback of the epoch summary.

With ``dqn.overlap_collection`` a round's collection runs one round ahead of its updates, on a
second CUDA stream on a GPU (``foxhunt.agents.dqn.overlap``: the order, the streams, the staging).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.accel.graphs import GraphedStep
from foxhunt.agents.dqn.checks import CHECK_FIELDS, DeviceChecks
from foxhunt.agents.dqn.collector import Collector
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.curiosity import Curiosity
from foxhunt.agents.dqn.fused_step import FusedTrainStep
from foxhunt.agents.dqn.learner import QLearner
from foxhunt.agents.dqn.overlap import ActingCopy, LaggedCollection
from foxhunt.agents.fold_trainer import FoldTrainer, TrainingHalted, load_part  # noqa: F401 (TrainingHalted: re-exported)
from foxhunt.agents.monitor import EpochMonitor, EpochSummary
from foxhunt.agents.replay import ProportionalPER, RankPER, ReplayBuffer, ReplayStorage, UniformSampler, WidePER
from foxhunt.env import RESET_DSR, RESET_PORTFOLIO, RESET_VOL, EnvParams, VecTradingEnv
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData


@dataclass
class EpochTiming:
    collect_s: float = 0.0
    train_s: float = 0.0
    readback_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def _matmul_precision(precision: str) -> None:
    # tf32 (and bf16, whose training passes stay float32) lets float32 matmuls use the tensor cores.
    torch.backends.cuda.matmul.allow_tf32 = precision in ("tf32", "bf16")
    torch.backends.cudnn.allow_tf32 = precision in ("tf32", "bf16")


class DQNTrainer(FoldTrainer):
    """Walk-forward DQN training on device-resident market data.

    plan: how each component runs (``foxhunt.accel.backend.resolve`` of the run's [accel] section);
    None: the torch backend (every component in plain torch, captured in CUDA graphs on CUDA)."""

    def __init__(self, market: MarketData, env_params: EnvParams, cfg: DQNConfig, seed: int = 0,
                 plan: ExecutionPlan | None = None) -> None:
        if market.fold is None:
            raise ValueError("DQNTrainer: set a fold on the market first")
        plan = plan or ExecutionPlan(device=str(market.device), graphs=market.device.type == "cuda")
        self.plan = plan
        _matmul_precision(plan.matmul_precision)
        self.market = market
        self.cfg = cfg
        self.seed = seed
        self.device = market.device
        self.env = VecTradingEnv(market, cfg.n_envs, env_params, seed=seed)
        n = cfg.n_envs
        capacity = max(n, (cfg.buffer_capacity // n) * n)  # whole env steps: row stride N for n-step
        storage = ReplayStorage(capacity, 3, self.device, gamma=cfg.gamma)
        if cfg.sampler == "uniform":
            sampler = UniformSampler(storage, seed=seed)
        elif cfg.sampler == "proportional" and cfg.tree_arity == 2:
            # Fused trees descend all levels in one kernel: the searchsorted top (a cumsum, not
            # deterministic on CUDA) saves nothing there, so they start at the root (measured faster).
            fused = plan.replay == "fused"
            sampler = ProportionalPER(storage, alpha=cfg.per_alpha, beta=cfg.per_beta_start, eps=cfg.per_eps, seed=seed,
                                      backend=plan.replay, search_level=0 if fused else 16)
        elif cfg.sampler == "proportional":
            sampler = WidePER(storage, alpha=cfg.per_alpha, beta=cfg.per_beta_start, eps=cfg.per_eps, seed=seed,
                              branch=cfg.tree_arity, backend=plan.replay)
        else:
            sampler = RankPER(storage, alpha=cfg.per_alpha, beta=cfg.per_beta_start, refresh_every=cfg.rank_refresh, seed=seed)
        self.replay = ReplayBuffer(storage, sampler)
        self.monitor = EpochMonitor(self.device, extra_fields=CHECK_FIELDS if plan.check else ())
        self.learner = QLearner(cfg, market, self.replay, self.env.n_actions, n, self.monitor, seed=seed)
        if plan.train_step == "compiled":
            self.learner.compile()
        elif plan.train_step == "fused":
            # torch.compile is a CUDA path here (as for "compiled"): on a CPU the same hand-written-
            # backward program runs eagerly (tests/agents/test_dqn_fused_step.py compiles it on the CPU).
            self.learner.fused = FusedTrainStep(self.learner, compile=self.device.type == "cuda")
        self.curiosity = (
            Curiosity(market, storage, self.env.n_actions, cfg.curiosity_lr, cfg.curiosity_batch, seed) if cfg.curiosity else None
        )
        # dqn.overlap_collection: collection acts with a copy of the networks taken one round earlier.
        acting = ActingCopy(self.learner) if cfg.overlap_collection else None
        self.collector = Collector(cfg, self.env, self.learner, self.replay, self.monitor, self.curiosity, seed, plan,
                                   nets=acting)
        # Check mode (plan.check): invariants counted on the device, named at the readback.
        self.checks = DeviceChecks(self) if plan.check else None
        self.collector.checks = self.learner.checks = self.checks
        if cfg.counter_draws:
            self.env.sampler.use_counter(seed)  # re-seeded per fold (FoldTrainer._reseed)
        gens = [*self.env.sampler.generators().values(), *self.collector.draws.generators().values()]
        rows = n * cfg.rollout_len
        self._round = self._round_step = GraphedStep(  # _round_step: the step itself, whatever wraps _round (PhaseTimer)
            self.collector.round, self.device, plan.graphs,
            generators=gens,
            host_state=(lambda: (storage.pos, storage.size), lambda s: self._set_pos(*s)),
            after_replay=lambda: storage.advance(rows),
        )
        self._train = self._train_step = GraphedStep(self.learner.train_step, self.device, plan.graphs,
                                                     generators=[sampler.generator])
        # A round's train steps as ONE graph: one replay (one host launch) per round instead of one per
        # update; the same kernels in the same order, so the same results (bench_dqn measures updates/s).
        self._train_round = GraphedStep(self._round_of_updates, self.device, plan.graphs, generators=[sampler.generator])
        # A steady epoch (every round trains: the replay holds a batch when it starts) as ONE graph: one host
        # launch an epoch instead of two a round. With M members in lockstep the host's launches were half
        # the epoch at M = 27 (BENCHMARKS.md, "Where a steady epoch goes"); the same kernels run in the
        # same order, so the results are those of the per-round graphs (tests/agents/test_dqn_epoch_graph.py).
        self._steady = GraphedStep(
            self._steady_epoch, self.device, plan.graphs,
            generators=[*gens, sampler.generator],
            host_state=(lambda: (storage.pos, storage.size), lambda s: self._set_pos(*s)),
            after_replay=lambda: storage.advance(rows * cfg.rounds_per_epoch),
        )
        self._curiosity = (
            GraphedStep(self.curiosity.train_step, self.device, plan.graphs, generators=[self.curiosity.generator])
            if self.curiosity is not None else None
        )
        # The lagged order's two halves of a round (overlap.py): the steps into the round buffers,
        # and the snapshot + the replay write. Check mode keeps one stream.
        self.lag: LaggedCollection | None = None
        if acting is not None:
            self.lag = LaggedCollection(self.collector, acting, two_streams=self.device.type == "cuda" and not plan.check)
            # Its own capture stream: replayed beside the update graphs, it must not share their cuBLAS workspace.
            self._collect = GraphedStep(self.collector.collect, self.device, plan.graphs, generators=gens,
                                        capture_stream=torch.cuda.Stream(self.device) if self.device.type == "cuda" else None)
            self._insert = GraphedStep(
                self._snapshot_and_flush, self.device, plan.graphs,
                host_state=(lambda: (storage.pos, storage.size), lambda s: self._set_pos(*s)),
                after_replay=lambda: storage.advance(rows),
            )
        # dqn.stack_members: set by the lockstep (foxhunt.train.lockstep) that runs this member's updates
        # in its members' stack; epoch_steps then collects and counts the updates, the lockstep runs them.
        self.updates_by: object | None = None
        # Set by the same lockstep when it also runs the stack's collection rounds as one graph (``joint_rounds``):
        # epoch_steps then yields once before its first round and runs no round itself.
        self.rounds_by: object | None = None
        self.epoch = 0
        self.rounds = 0
        self.fold: FoldRange | None = market.fold
        self.timing = EpochTiming()
        self.last_summary: EpochSummary | None = None

    def _snapshot_and_flush(self) -> None:
        """The lagged order's insert (overlap.py): the acting copy takes the current weights, the
        staged round goes into the replay and the monitor."""
        assert self.lag is not None
        self.lag.acting.snapshot()
        self.collector.flush()

    def _lagged_round(self) -> None:
        assert self.lag is not None
        self.lag.round(lambda: self._collect(), lambda: self._insert())  # looked up at call time (PhaseTimer wraps them)

    def _set_pos(self, pos: int, size: int) -> None:
        self.replay.storage.pos, self.replay.storage.size = pos, size

    # ------------------------------------------------------------------ folds (FoldTrainer.reset_for_fold)
    def _reset_parts(self, warm_start: bool) -> None:
        """Clear the replay; re-initialise the network in place (or keep it: warm start), zero the
        optimiser moments and counters; reset the collector and curiosity."""
        self.replay.clear()
        self.learner.reset(reinit=not warm_start)
        self.collector.reset()
        if self.lag is not None:
            self.lag.reset()
        if self.curiosity is not None:
            self.curiosity.reset()

    def _seeders(self) -> list[Callable[[int], None]]:
        out = [self.collector.draws.seed, self.replay.sampler.reseed]
        if self.curiosity is not None:
            out.append(self.curiosity.generator.manual_seed)
        return out

    # ------------------------------------------------------------------ epochs
    def _reset_flags(self) -> int:
        cfg = self.cfg
        return (RESET_PORTFOLIO if cfg.reset_portfolio_each_epoch else 0) | (
            RESET_DSR if cfg.reset_dsr_each_epoch else 0) | (RESET_VOL if cfg.reset_vol_each_epoch else 0)

    def _steady_epoch(self) -> None:
        """``rounds_per_epoch`` rounds of collection and updates (the body of the steady epoch's graph)."""
        for _ in range(self.cfg.rounds_per_epoch):
            self._round_step.fn()  # the round's own body (collector.round, or what a test hooked in)
            self._round_of_updates()

    def _epoch_is_steady(self) -> bool:
        """Whether this epoch runs as the one steady-epoch graph (``dqn.epoch_graph``): every round of it
        trains, and no round has its own host work (the lagged collection, curiosity's every-k step)."""
        cfg = self.cfg
        return (cfg.epoch_graph and self.lag is None and self._curiosity is None and cfg.train_steps_per_round > 0
                and self.updates_by is None  # stacked updates run between the members' rounds: no one-graph epoch
                and self.replay.storage.size >= max(cfg.warmup_transitions, cfg.batch_size))

    def _round_of_updates(self) -> None:
        """``dqn.train_steps_per_round`` train steps (the body of the round's captured update graph)."""
        for _ in range(self.cfg.train_steps_per_round):
            self._train_step.fn()

    def epoch_steps(self) -> Iterator[None]:
        """One epoch (``FoldTrainer.epoch_steps``): ``rounds_per_epoch`` rounds, each a collection round
        and (once the replay holds enough) its ``train_steps_per_round`` updates; yields after each round,
        or once after the whole epoch when it is steady (``_epoch_is_steady``: one graph for all rounds).
        With ``updates_by`` set (dqn.stack_members) a round's updates are counted here and run by the
        lockstep's stack after the yield, before the next round: the order of a member alone. With ``rounds_by``
        set as well, the epoch yields once first (its set-up enqueued), and the lockstep runs round r's collection
        of every member of the stack (one graph) before the pass that counts it: the same device order."""
        cfg = self.cfg
        self.monitor.reset()
        flags = self._reset_flags()
        if flags and self.epoch > 0:
            self.env.reset_flags.fill_(flags)
            self.env.apply_reset_flags()
        storage = self.replay.storage
        ready_at = max(cfg.warmup_transitions, cfg.batch_size)
        updates = 0
        if self._epoch_is_steady():  # dqn.epoch_graph: every round trains, one launch for all of them
            self._steady()
            self.rounds += cfg.rounds_per_epoch
            updates = cfg.rounds_per_epoch * cfg.train_steps_per_round
            yield
        else:
            if self.rounds_by is not None:
                yield  # set-up done; the lockstep runs each round's collection of the whole stack between the yields
            for _ in range(cfg.rounds_per_epoch):
                if self.rounds_by is not None:
                    pass  # this round's collection ran in the stack's joint round (its host counters advanced there)
                elif self.lag is None:
                    self._round()
                else:
                    self._lagged_round()
                self.rounds += 1
                if self._curiosity is not None and self.rounds % cfg.curiosity_every == 0:
                    self._curiosity()
                if storage.size >= ready_at and cfg.train_steps_per_round:
                    if self.updates_by is None:  # else the lockstep's stack runs them after this yield
                        self._train_round()
                    updates += cfg.train_steps_per_round
                yield
        if self.lag is not None:
            self.lag.join()  # the epoch's last collection lands before its readback
        self.learner.flush_records(updates)
        self.monitor.set_scalar("epsilon", self.collector.epsilon)
        self._end_epoch()

    def run_epoch(self) -> None:
        if self.updates_by is not None:
            raise RuntimeError("DQNTrainer: this member's updates run in its lockstep's member stack "
                               "(dqn.stack_members): step it through Lockstep.run_epoch")
        super().run_epoch()

    def finish_epoch(self) -> EpochSummary | None:
        """After ``run_epoch``: its summary (one synchronisation), or, in lagged mode, the oldest
        earlier epoch's summary that has already landed (no blocking wait), else None; only when the
        ring of in-flight summaries is full does the host wait for the oldest (back-pressure)."""
        if self.plan.readback != "lagged":
            return self._collect_summary()
        m = self.monitor
        if m.pending >= m.RING or (m.pending > 1 and m.ready()):
            return self._collect_summary()
        return None

    def flush(self) -> EpochSummary | None:
        """Read the oldest summary still pending (lagged mode), waiting for it; None if none."""
        return self._collect_summary() if self.monitor.pending else None

    # ------------------------------------------------------------------ state
    def components(self) -> dict[str, object]:
        """Every stateful component by a stable name (each has state_dict / load_state_dict)."""
        comps: dict[str, object] = {"learner": self.learner, "replay": self.replay, "env": self.env,
                                    "collector": self.collector, "monitor": self.monitor}
        if self.curiosity is not None:
            comps["curiosity"] = self.curiosity
        if self.lag is not None:
            comps["staging"] = self.lag
        return comps

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """{component: its state dict} (live tensors, ``foxhunt.state`` convention), plus the
        trainer's own host counters under ``trainer``."""
        out = {name: c.state_dict() for name, c in self.components().items()}  # type: ignore[attr-defined]
        out["trainer"] = self._host_state()
        return out

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Restore a ``state_dict`` of a trainer built with the same configuration, in place (the
        captured graphs stay valid). ValueError naming the component and the first mismatch."""
        comps = self.components()
        if set(state) != set(comps) | {"trainer"}:
            raise ValueError(f"DQNTrainer: components {sorted(state)} ≠ this trainer's {sorted([*comps, 'trainer'])}")
        for name, comp in comps.items():
            load_part(name, comp.load_state_dict, state[name])  # type: ignore[attr-defined]
        self._load_host_state(state["trainer"])
