"""Direct-reinforcement hyperparameters: the ``[direct]`` section of the run configuration.

A *step* is one gradient step on ``batch_windows`` windows of ``window`` bars drawn from the fold's
training slice; an *epoch* (of the walk-forward runner) is ``steps_per_epoch`` steps and ends with
the one readback of the epoch summary. Units are in the field descriptions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from foxhunt.config import Section, register_section

Width = Annotated[int, Field(ge=1, le=65_536)]


class DirectConfig(Section):
    """Everything the direct learner (``train.agent = "direct"``) needs."""

    # Data per step
    window: int = Field(256, ge=2, le=65_536, description="bars per training window (T): the objective's P&L runs over T bars "
                        "from a flat portfolio, as a backtest window does")
    batch_windows: int = Field(256, ge=1, le=1 << 20, description="windows per gradient step (B), drawn uniformly from the fold's "
                               "training slice (index ranges, no copies of the market)")
    steps_per_epoch: int = Field(16, ge=1, le=1_000_000, description="gradient steps per epoch")
    epoch_graph: bool = Field(False, description="(off by default: its GPU tests pass on an H100, bitwise equal to per-round graphs, but measured there it saves nothing in a steady epoch and its capture costs ~1 s a member a fold: BENCHMARKS.md) on a GPU an epoch's steps_per_epoch gradient steps are ONE CUDA graph: one host launch "
                              "an epoch instead of one a step; the same kernels in the same order, so the same results")
    # Policy
    hidden: tuple[Width, ...] = Field((64, 64), min_length=1, max_length=6, description="trunk layer widths")
    head_hidden: Width = Field(32, description="hidden width of the policy head")
    position_input: bool = Field(True, description="the policy also sees its current exposure (q·C/E, the observation's first "
                                 "portfolio feature), as Moody & Saffell's recurrent trader: it can hold a position a new "
                                 "signal does not pay to reverse. Off: features only (every bar's exposure in one batched pass)")
    policy: Literal["mlp", "attention"] = Field(
        "mlp", description="mlp: the decision bar's features (and exposure) alone; attention: the mlp plus lag attention "
        "over the last direct.sequence bars' features (agents/sequence_net.py), run by the torch backtester only (the fused "
        "kernels run a per-bar MLP) and not in ensembles. docs/LEARNING.md says whether it trades better")
    sequence: int = Field(32, ge=2, le=1024, description="direct.policy = attention: bars the policy reads (L, the decision "
                          "bar and the L − 1 before it), gathered by index from the market's feature matrix")
    attention_heads: int = Field(4, ge=1, le=64, description="direct.policy = attention: heads of the lag attention (hidden[0] "
                                 "must be a multiple)")
    relaxation: Literal["softmax", "straight_through", "continuous"] = Field(
        "softmax", description="how training meets the env's five exposure levels: softmax (the softmax-expected exposure "
        "over the levels at direct.temperature; the backtest trades the argmax level), straight_through (the argmax "
        "level in the forward pass, the softmax expectation's gradient), or continuous (a tanh exposure in training; "
        "the backtest trades the nearest level). docs/LEARNING.md says which trades better after costs")
    temperature: float = Field(1.0, gt=0.0, le=100.0, description="softmax temperature of the level relaxation")
    # Objective
    objective: Literal["sharpe", "dsr", "mean_variance"] = Field(
        "sharpe", description="what gradient ascent maximises over the windows' net per-bar returns: sharpe (their pooled "
        "mean / std), dsr (the mean differential Sharpe ratio, Moody & Saffell), mean_variance (mean − risk_aversion/2 · "
        "variance, returns in units of the fold's per-bar volatility)")
    dsr_eta: float = Field(0.01, gt=0.0, lt=1.0, description="objective = dsr: adaptation rate of the moving moments")
    risk_aversion: float = Field(0.1, ge=0.0, le=1e6, description="objective = mean_variance: λ, per unit of the fold's per-bar "
                                 "return variance")
    turnover_penalty: float = Field(0.0, ge=0.0, le=10_000.0, description="bps of notional charged per unit of exposure traded "
                                    "in the objective only (on top of the env's costs × train.train_cost_multiplier): a "
                                    "regulariser against trading on noise; the backtests charge the real costs")
    vol_target: bool = Field(False, description="volatility targeting in the objective: each bar's return is weighted by "
                             "σ̄ / σ_t (σ_t the env's volatility estimate at the decision bar, σ̄ the fold's median per-bar "
                             "volatility), so calm and turbulent stretches count alike; the traded position is not rescaled "
                             "(the env has no such sizing)")
    # Optimisation
    lr: float = Field(1e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="L2 weight decay, added to the gradient before Adam")
    grad_clip: float = Field(1.0, gt=0.0, description="max global gradient norm")
    # Guard (agents/guard.py)
    loss_clip: float = Field(1e6, gt=0.0, description="a loss above this is a bad step (skipped)")
    grad_collapse: float = Field(1e-12, ge=0.0, description="grad norm below this counts toward collapse")
    grad_collapse_warmup: int = Field(500, ge=0, description="steps before collapse is checked")
    grad_collapse_patience: int = Field(200, ge=1, description="consecutive collapsed steps that halt")
    max_skipped_steps: int = Field(0, ge=0, description="skipped (masked) steps tolerated per fold before halting")

    @model_validator(mode="after")
    def _check(self) -> "DirectConfig":
        if self.batch_windows * self.window > 1 << 31:
            raise ValueError(f"batch_windows × window = {self.batch_windows * self.window} bars a step is above 2^31")
        if self.policy == "attention" and self.hidden[0] % self.attention_heads:
            raise ValueError(f"direct.policy = 'attention': hidden[0] = {self.hidden[0]} must be a multiple of "
                             f"direct.attention_heads = {self.attention_heads}")
        if self.objective == "dsr" and self.window > 4096:
            raise ValueError(f"objective = 'dsr' holds a window × window matrix of moving-moment weights: window {self.window} "
                             "must be <= 4096")
        return self

    @property
    def bars_per_step(self) -> int:
        """Bars whose P&L one gradient step computes (B · T)."""
        return self.batch_windows * self.window


register_section("direct", DirectConfig)
