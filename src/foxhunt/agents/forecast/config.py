"""Forecast-learner hyperparameters: the ``[forecast]`` section of the run configuration.

A *step* is one gradient step on ``batch`` training bars drawn uniformly from the fold's training
slice (those whose target lies inside it); an *epoch* (of the walk-forward runner) is
``steps_per_epoch`` steps and ends with the one readback of the epoch summary. Units are in the
field descriptions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from foxhunt.config import Section, register_section

PACKED_EXTRA = 2
"""Units the packed greedy network adds to each trunk layer (the current exposure carried as ±x)."""
PACKED_HEAD = 12
"""The packed greedy network's head width: ±forecast and ±(level − exposure) for the five levels."""

Width = Annotated[int, Field(ge=1, le=510)]  # + PACKED_EXTRA ≤ the fused kernels' 512 units


class ForecastConfig(Section):
    """Everything the forecast learner (``train.agent = "forecast"``) needs."""

    # Target
    horizon: int = Field(0, ge=0, le=10_000, description="bars h the forecast looks ahead: the target of bar t is "
                         "log(C_{t+h} / C_t) / (σ·√h), σ the fold's per-bar volatility (median |log return| × √(π/2) over "
                         "its training bars); 0: env.decision_interval (a decision's holding period)")
    # Network
    hidden: tuple[Width, ...] = Field((64, 64), min_length=1, max_length=6, description="MLP layer widths (LeakyReLU "
                                      "0.01); two layers run in the fused backtest kernel")
    policy: Literal["mlp", "attention"] = Field(
        "mlp", description="mlp: the forecast reads the decision bar's features alone; attention: the mlp plus lag "
        "attention over the last forecast.sequence bars' features (agents/sequence_net.py), run by the torch backtester "
        "only (the fused kernels run a per-bar MLP) and not in ensembles")
    sequence: int = Field(32, ge=2, le=1024, description="forecast.policy = attention: bars the forecast reads (L, the "
                          "decision bar and the L − 1 before it), gathered by index from the market's feature matrix")
    attention_heads: int = Field(4, ge=1, le=64, description="forecast.policy = attention: heads of the lag attention "
                                 "(hidden[0] must be a multiple)")
    # Loss
    loss: Literal["huber", "mse", "quantile"] = Field("huber", description="regression loss of the forecast against the "
                                                      "target: huber (forecast.huber_delta), mse, or quantile (pinball loss "
                                                      "over forecast.quantiles; execution trades the median)")
    huber_delta: float = Field(1.0, gt=0.0, le=1e3, description="loss = huber: where the loss turns linear, in units of "
                               "the target (h-bar volatilities)")
    quantiles: tuple[float, ...] = Field((0.1, 0.5, 0.9), min_length=1, max_length=15,
                                         description="loss = quantile: the quantile levels, strictly increasing in (0, 1), "
                                         "one of them 0.5 (the forecast execution trades)")
    # Execution
    risk_aversion: float = Field(0.0, ge=0.0, le=1e6, description="λ of the execution's risk term λ·v·level² (v the "
                                 "forecast's mean squared error in h-bar variances over the fold's held-back window with "
                                 "train.select = inner, else over its training bars; agents/forecast/evaluate.py): "
                                 "shrinks the position where the forecast is noisy")
    # Data per step, optimisation
    batch: int = Field(1024, ge=1, le=1 << 24, description="training bars per gradient step")
    steps_per_epoch: int = Field(32, ge=1, le=1_000_000, description="gradient steps per epoch")
    epoch_graph: bool = Field(False, description="(off by default: its GPU tests pass on an H100, bitwise equal to per-round graphs, but measured there it saves nothing in a steady epoch and its capture costs ~1 s a member a fold: BENCHMARKS.md) on a GPU an epoch's steps_per_epoch gradient steps are ONE CUDA graph: one host launch "
                              "an epoch instead of one a step; the same kernels in the same order, so the same results")
    lr: float = Field(1e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="L2 weight decay, added to the gradient before Adam")
    grad_clip: float = Field(1.0, gt=0.0, description="max global gradient norm")
    # Guard (agents/guard.py)
    loss_clip: float = Field(1e6, gt=0.0, description="a loss above this is a bad step (skipped)")
    grad_collapse: float = Field(0.0, ge=0.0, description="grad norm below this counts toward collapse (0: off; a "
                                 "converged regression has small gradients)")
    grad_collapse_warmup: int = Field(500, ge=0, description="steps before collapse is checked")
    grad_collapse_patience: int = Field(200, ge=1, description="consecutive collapsed steps that halt")
    max_skipped_steps: int = Field(0, ge=0, description="skipped (masked) steps tolerated per fold before halting")

    @model_validator(mode="after")
    def _check(self) -> "ForecastConfig":
        q = self.quantiles
        if any(not 0.0 < v < 1.0 for v in q) or any(b <= a for a, b in zip(q[:-1], q[1:])):
            raise ValueError(f"quantiles = {list(q)} must be strictly increasing inside (0, 1)")
        if self.policy == "attention" and self.hidden[0] % self.attention_heads:
            raise ValueError(f"policy = 'attention': hidden[0] = {self.hidden[0]} must be a multiple of attention_heads = "
                             f"{self.attention_heads}")
        if self.loss == "quantile" and 0.5 not in q:
            raise ValueError(f"loss = 'quantile' trades the median: quantiles = {list(q)} must contain 0.5")
        return self

    @property
    def n_outputs(self) -> int:
        """Outputs of the forecast network: the quantiles (loss = quantile) or one forecast."""
        return len(self.quantiles) if self.loss == "quantile" else 1

    @property
    def median_output(self) -> int:
        """The output execution and the evaluation read (the median quantile, or the one forecast)."""
        return self.quantiles.index(0.5) if self.loss == "quantile" else 0

    @property
    def head_hidden(self) -> int:
        """The packed greedy network's head width (what the accel resolver checks for the fused kernels)."""
        return PACKED_HEAD

    @property
    def lags(self) -> int:
        """Bars the forecast reads at a decision: ``sequence`` with attention, else 0 (the decision bar alone)."""
        return self.sequence if self.policy == "attention" else 0

    def horizon_for(self, decision_interval: int) -> int:
        """h: ``horizon``, or the env's decision interval when it is 0."""
        return self.horizon or int(decision_interval)


register_section("forecast", ForecastConfig)
