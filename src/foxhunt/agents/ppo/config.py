"""PPO hyperparameters: the ``[ppo]`` section of the run configuration.

Execution choices (CUDA graphs, the fused env step, matmul precision) are not PPO keys: PPO takes
them from where DQN keeps them today (``foxhunt.agents.ppo.trainer.exec_choice``), so that one
``backend`` key can replace them for both learners.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from foxhunt.config import Section, register_section


class PPOConfig(Section):
    """Everything the PPO learner needs; units in the field descriptions.

    An *iteration* is one rollout (``rollout_len`` lockstep steps of all ``n_envs`` envs), GAE over
    it, then ``update_epochs`` passes over the rollout in ``minibatches`` shuffled minibatches; an
    *epoch* (of the walk-forward runner) is ``iterations_per_epoch`` iterations and ends with the
    one readback of the epoch summary.
    """

    # Collection
    n_envs: int = Field(256, ge=1, le=1 << 20, description="environments stepped in lockstep")
    rollout_len: int = Field(32, ge=1, le=4096, description="env steps per rollout (T)")
    iterations_per_epoch: int = Field(8, ge=1, le=100_000, description="rollout + update iterations per epoch")
    epoch_graph: bool = Field(False, description="(off by default: its GPU tests pass on an H100, bitwise equal to per-round graphs, but measured there it saves nothing in a steady epoch and its capture costs ~1 s a member a fold: BENCHMARKS.md) on a GPU an epoch's iterations (rollout + update each) are ONE CUDA graph: "
                              "one host launch an epoch instead of two an iteration (with many members in lockstep "
                              "the host's launches were half the epoch); the same kernels in the same order, so the same results")
    batched_rollouts: bool = Field(False, description="(off by default: no faster on an H100, BENCHMARKS.md) a fold's K >= 2 PPO "
                                   "members in lockstep (train.ensemble, train.gamma_grid, train.decision_grid: each env at its "
                                   "member's own k) collect each iteration's "
                                   "rollout as ONE program (agents.ppo.stacked_rollout): their envs one env of members x "
                                   "envs (one fused env step), the sampling, log-probabilities and buffer copies batched; "
                                   "each member keeps its actor-critic pass, its random draws (its own generator, or with "
                                   "counter_draws one launch for all members) and its "
                                   "update, so its rollouts are bit for bit its own. Members that differ in n_envs, "
                                   "rollout_len, explore_hold, the env's structure or accel.env_step, or run epoch_graph, "
                                   "roll out alone")
    counter_draws: bool = Field(False, description="the action-sampling, hold and episode-start draws as a hash of "
                                "(seed, step, env) (env.counter_draws) instead of generator streams: with "
                                "batched_rollouts every member's draws of a step are one launch (each member's the "
                                "draws it makes alone); other draws than the generators', so other runs than with false")
    # Learning
    gamma: float = Field(0.9, ge=0.0, lt=1.0)
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    update_epochs: int = Field(4, ge=1, le=64, description="passes over each rollout")
    minibatches: int = Field(4, ge=1, le=4096, description="minibatches per pass (must divide n_envs × rollout_len)")
    clip_coef: float = Field(0.2, gt=0.0, le=10.0, description="clipped surrogate: ratio kept in [1 - c, 1 + c]")
    clip_vloss: bool = Field(True, description="clip the value prediction around the rollout's value (PPO2 style)")
    vf_coef: float = Field(0.5, ge=0.0, le=100.0)
    ent_coef: float = Field(0.01, ge=0.0, le=10.0)
    explore_hold: float = Field(0.0, ge=0.0, le=0.99, description="at each rollout step, the probability that an env keeps its "
                                "previous action instead of sampling a new one (exploration that holds positions, as a "
                                "decision taken for a random stretch of bars); the policy gradient and entropy count only the "
                                "steps where the policy chose, the value every step. 0: sample every step")
    norm_adv: bool = Field(True, description="normalise advantages per minibatch (mean 0, std 1)")
    target_kl: float | None = Field(None, gt=0.0, description="stop the rollout's update (mask the remaining minibatches) once a minibatch's approximate KL exceeds 1.5 × this")
    lr: float = Field(3e-4, gt=0.0, le=1.0)
    lr_end: float | None = Field(None, gt=0.0, description="linear decay target over lr_decay_steps minibatch steps (None: constant)")
    lr_decay_steps: int = Field(10_000, ge=1)
    grad_clip: float = Field(0.5, gt=0.0, description="max global gradient norm")
    hidden: tuple[int, ...] = Field((256, 256), min_length=1, max_length=6, description="trunk layer widths")
    head_hidden: int = Field(128, ge=1, description="hidden width of the policy and value heads")
    shared_trunk: bool = Field(True, description="actor and critic share the trunk (else the critic has its own)")
    # Guard
    loss_clip: float = Field(1e6, gt=0.0, description="a loss above this is a bad step (skipped)")
    grad_collapse: float = Field(1e-10, ge=0.0, description="grad norm below this counts toward collapse")
    grad_collapse_warmup: int = Field(500, ge=0, description="minibatch steps before collapse is checked")
    grad_collapse_patience: int = Field(200, ge=1, description="consecutive collapsed steps that halt")
    max_skipped_steps: int = Field(0, ge=0, description="skipped (masked) steps tolerated per fold before halting")

    @model_validator(mode="after")
    def _check(self) -> "PPOConfig":
        rows = self.n_envs * self.rollout_len
        if rows % self.minibatches:
            raise ValueError(f"minibatches {self.minibatches} must divide n_envs × rollout_len = {rows}")
        return self

    @property
    def batch_rows(self) -> int:
        """Transitions per rollout (T · N)."""
        return self.n_envs * self.rollout_len

    @property
    def minibatch_size(self) -> int:
        return self.batch_rows // self.minibatches


register_section("ppo", PPOConfig)
