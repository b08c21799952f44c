"""DQN hyperparameters: the ``[dqn]`` section of the run configuration."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from foxhunt.accel.config import reject_removed_keys
from foxhunt.config import Section, register_section


MAX_WIDTH = 65_536
"""Largest layer width (also the bound of a model file's architecture)."""
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]


class DQNConfig(Section):
    """Everything the DQN learner needs; units in the field descriptions.

    A *round* is ``rollout_len`` lockstep env steps of all ``n_envs`` envs followed by
    ``train_steps_per_round`` gradient steps; an *epoch* is ``rounds_per_epoch`` rounds and ends
    with the one readback of the epoch summary.
    """

    # Collection
    n_envs: int = Field(256, ge=1, le=1 << 20, description="environments stepped in lockstep")
    rollout_len: int = Field(16, ge=1, le=4096, description="env steps per collection round")
    rounds_per_epoch: int = Field(24, ge=1, le=1_000_000)
    train_steps_per_round: int = Field(8, ge=0, le=100_000)
    overlap_collection: bool = Field(False, description="a one-round policy lag: round r+1 is collected (with a "
                                     "copy of the networks taken after round r-1's updates, into the round buffers) "
                                     "while round r's updates run, on a second CUDA stream on a GPU; false: "
                                     "collection and updates take turns (foxhunt.agents.dqn.overlap)")
    epoch_graph: bool = Field(False, description="(off by default: its GPU tests pass on an H100, bitwise equal to per-round graphs, but measured there it saves nothing in a steady epoch and its capture costs ~1 s a member a fold: BENCHMARKS.md) on a GPU, an epoch whose every round trains (the replay already holds a "
                              "batch) is ONE CUDA graph: one host launch an epoch instead of two a round (with many members in "
                              "lockstep the host's launches were half the epoch); the same kernels in the same order, so the same "
                              "results. Not with overlap_collection or curiosity (they keep their own rounds)")
    stack_members: bool = Field(False, description="(off by default; GPU tests pass on an H100; measured: BENCHMARKS.md, Epoch graphs and the stacked train step) a fold's K >= 2 members "
                                "(train.ensemble, train.gamma_grid) take their gradient steps as ONE program: "
                                "their fused train steps stacked over a member axis (torch.vmap, "
                                "agents.dqn.member_stack), one captured graph of a round's updates for all members "
                                "on a GPU, run by the lockstep (train.lockstep) after round r of every member. Each "
                                "member keeps its collection, replay and order; results equal the members trained "
                                "apart within float32 rounding (batched GEMMs). Needs accel.train_step = 'fused' "
                                "(name it on the CPU) and train.lockstep; not with overlap_collection; the members' "
                                "steady-epoch graph (epoch_graph) is off with it")
    joint_rounds: bool = Field(False, description="(off by default: slower at 27 members on an H100, BENCHMARKS.md) with "
                               "stack_members, a round's collection of the stack's members is ONE "
                               "program (agents.dqn.stacked_collection): their envs one env of members x envs (one fused "
                               "env step), the epsilon-greedy choice, TD priorities and round buffers batched; each member "
                               "keeps its random draws (its own generators, or with counter_draws one launch for all members) and "
                               "its replay write (the fused acting passes are one "
                               "launch for all members, each tile its member's weights), so its "
                               "transitions are bit for bit those it collects alone; a decision grid's members too (each env "
                               "stops after its member's own k). Members that differ in n_envs, "
                               "rollout_len, env structure or the execution plan, or that collect lagged, train curiosity "
                               "or run check mode, launch their own rounds (as false does)")
    counter_draws: bool = Field(False, description="exploration and episode-start draws as a hash of (seed, step, env) "
                                "(env.counter_draws) instead of generator streams: with joint_rounds every member's "
                                "draws of a step are one launch (each member's the draws it makes alone); other draws "
                                "than the generators', so other runs than with false")
    # Replay
    buffer_capacity: int = Field(200_000, ge=64, le=1 << 34, description="transitions (rounded down to a multiple of n_envs)")
    warmup_transitions: int = Field(4_096, ge=0, le=1 << 34, description="transitions collected before training starts")
    sampler: Literal["uniform", "proportional", "rank"] = Field("proportional", description="replay sampler")
    tree_arity: Literal[2, 32] = Field(2, description="proportional PER: children per sum/min tree node (2: SegmentTree, 20 levels for 1 M slots; 32: WideTree, 4 levels)")
    per_alpha: float = Field(0.6, ge=0.0, le=1.0)
    per_beta_start: float = Field(0.4, ge=0.0, le=1.0)
    per_beta_end: float = Field(1.0, ge=0.0, le=1.0)
    per_beta_steps: int = Field(20_000, ge=1, description="gradient steps over which beta anneals")
    per_eps: float = Field(1e-3, gt=0.0)
    rank_refresh: int = Field(64, ge=1, description="rank PER: re-sort priorities every this many updates")
    # Learning
    batch_size: int = Field(256, ge=1, le=1 << 24)
    gamma: float = Field(0.9, ge=0.0, lt=1.0)
    n_step: int = Field(1, ge=1, le=16)
    lr: float = Field(5e-4, gt=0.0, le=1.0)
    lr_end: float | None = Field(None, gt=0.0, description="linear decay target (None: constant)")
    lr_decay_steps: int = Field(50_000, ge=1)
    huber_delta: float = Field(1.0, gt=0.0)
    grad_clip: float = Field(10.0, gt=0.0, description="max global gradient norm")
    eps_start: float = Field(1.0, ge=0.0, le=1.0)
    eps_end: float = Field(0.05, ge=0.0, le=1.0)
    eps_decay_steps: int = Field(200, ge=1, description="env steps (per env) over which epsilon decays")
    target_update: Literal["polyak", "hard"] = "polyak"
    target_tau: float = Field(0.01, gt=0.0, le=1.0)
    target_hard_every: int = Field(500, ge=1, description="gradient steps between hard target copies")
    hidden: tuple[Width, ...] = Field((256, 256), min_length=1, max_length=6, description=f"trunk layer widths (1…{MAX_WIDTH} each)")
    head_hidden: int = Field(128, ge=1, le=MAX_WIDTH)
    head: Literal["flat", "branching"] = Field("flat", description="Q head: flat (one dueling advantage head over "
                                               "every action) or branching (env.action_mode = 'factored' only: one "
                                               "value and three advantage branches, exposure × order type × urgency; "
                                               "foxhunt.agents.networks.BranchingQNet)")
    # Guard
    loss_clip: float = Field(1e6, gt=0.0, description="a loss above this is a bad step (skipped)")
    grad_collapse: float = Field(1e-10, ge=0.0, description="grad norm below this counts toward collapse")
    grad_collapse_warmup: int = Field(500, ge=0, description="gradient steps before collapse is checked")
    grad_collapse_patience: int = Field(200, ge=1, description="consecutive collapsed steps that halt")
    max_skipped_steps: int = Field(0, ge=0, description="skipped (masked) steps tolerated per fold before halting")
    q_divergence: float = Field(1e4, gt=0.0, description="any |Q| of the online network on a train batch above this "
                                                          "halts training (the Q-divergence check)")
    # Curiosity
    curiosity: bool = False
    curiosity_every: int = Field(4, ge=1, description="rounds between forward-model training steps")
    curiosity_lr: float = Field(1e-3, gt=0.0)
    curiosity_batch: int = Field(1024, ge=1, le=1 << 24)
    # Persistent epoch state: reset flags applied on the device at each epoch start
    reset_portfolio_each_epoch: bool = False
    reset_dsr_each_epoch: bool = False
    reset_vol_each_epoch: bool = False

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: object) -> object:
        reject_removed_keys("dqn", data)
        return data

    @model_validator(mode="after")
    def _check(self) -> "DQNConfig":
        if self.tree_arity != 2 and self.sampler != "proportional":
            raise ValueError(f"tree_arity = {self.tree_arity} applies to sampler = 'proportional' only (got {self.sampler!r})")
        if self.buffer_capacity < self.n_envs * self.rollout_len:
            raise ValueError(
                f"buffer_capacity {self.buffer_capacity} must hold one round: n_envs × rollout_len = "
                f"{self.n_envs * self.rollout_len}"
            )
        if self.rounds_per_epoch * max(1, self.train_steps_per_round) > 1 << 26:
            raise ValueError(
                f"rounds_per_epoch × train_steps_per_round = {self.rounds_per_epoch * self.train_steps_per_round} "
                f"exceeds {1 << 26} gradient steps per epoch (one record row each)"
            )
        if self.overlap_collection and self.curiosity:
            raise ValueError("overlap_collection = true cannot combine with curiosity = true (the bonus of a collection "
                             "on the second stream would read the forward model while its train step writes it)")
        if self.stack_members and self.overlap_collection:
            raise ValueError("stack_members = true cannot combine with overlap_collection = true (the stacked updates "
                             "run between the members' rounds; the lagged collection runs beside its member's updates)")
        if self.eps_end > self.eps_start:
            raise ValueError("eps_end must be <= eps_start")
        return self


register_section("dqn", DQNConfig)
