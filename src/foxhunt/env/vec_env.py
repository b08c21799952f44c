"""The vectorised trading env: a thin class over ``bar_step``'s pure step / reset / observe and
``decision``'s k-bar decision step.

``step``, ``reset``, ``observe`` and ``StepOutput`` are re-exported here for callers that take the env
and its pure functions from one module.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from foxhunt.env.bar_step import StepOutput, _arange3, observe, reset, step
from foxhunt.env.decision import DecisionScratch, step_decision
from foxhunt.env.params import EnvConfigError, EnvParams, EnvTensors, check_episode_length
from foxhunt.env.state import EnvState, StartSampler, apply_reset_flags_
from foxhunt.folds import FoldRange
from foxhunt.market import N_PORTFOLIO_FEATURES, MarketData
from foxhunt.state import pack, unpack

__all__ = ["StepOutput", "VecTradingEnv", "observe", "reset", "step"]


class VecTradingEnv:
    """N trading envs stepping in lockstep on ``market.device``; a thin holder of preallocated buffers.

    market: MarketData with a fold set (episode starts come from its training range).
    params: EnvParams (defaults if None); per_env: name → [N] overrides (see EnvTensors.build).
    auto_reset: True (training): done envs restart at once at a random start. False (backtest):
    done envs freeze (``state.finished``) until the next ``reset``.
    """

    def __init__(
        self,
        market: MarketData,
        n_envs: int,
        params: EnvParams | None = None,
        seed: int = 0,
        per_env: Mapping[str, Any] | None = None,
        auto_reset: bool = True,
    ) -> None:
        if market.fold is None:
            raise EnvConfigError("VecTradingEnv: the market has no fold; call market.set_fold(fold) first")
        self.market = market
        self.device = market.device
        self.n_envs = int(n_envs)
        self.auto_reset = bool(auto_reset)
        self.params = EnvTensors.build(params if params is not None else EnvParams(), self.n_envs, self.device, per_env)
        self.check_fold()
        self.state = EnvState.allocate(self.n_envs, self.device)
        self.out = StepOutput.allocate(self.n_envs, self.device)
        self.sampler = StartSampler(self.n_envs, self.device, seed)
        self._decision = DecisionScratch(self.n_envs, self.device)
        self._step_decision = step_decision
        self.obs = torch.zeros((self.n_envs, market.obs_dim), dtype=torch.float32, device=self.device)
        self._portfolio = torch.zeros((self.n_envs, N_PORTFOLIO_FEATURES), dtype=torch.float32, device=self.device)
        self.reset_flags = torch.zeros((), dtype=torch.int64, device=self.device)
        _arange3(self.state)
        self.reset(persistent=True)

    # ------------------------------------------------------------------ host-side API
    @property
    def n_actions(self) -> int:
        return self.params.n_actions

    @property
    def obs_dim(self) -> int:
        return self.market.obs_dim

    @property
    def decision_interval(self) -> int:
        """k: bars per decision (``env.decision_interval``); ``step`` steps k bars."""
        return self.params.decision_interval

    def check_fold(self) -> None:
        """episode_length ≤ train length − 1 of the market's current fold (host facts only)."""
        fold = self.market.fold
        if fold is None:
            raise EnvConfigError("VecTradingEnv: the market has no fold; call market.set_fold(fold) first")
        check_episode_length(self.params.max_episode_length, fold.train_start, fold.train_end)

    def set_fold(self, fold: FoldRange) -> None:
        """Check episode_length against ``fold``, then make it the market's current fold (in place)."""
        check_episode_length(self.params.max_episode_length, fold.train_start, fold.train_end)
        self.market.set_fold(fold)

    def set_params(self, params: EnvParams, per_env: Mapping[str, Any] | None = None) -> None:
        """Change parameter values in place (same N); checked against the current fold."""
        fold = self.market.fold
        new = EnvTensors.build(params, self.n_envs, "cpu", per_env)
        if fold is not None:
            check_episode_length(new.max_episode_length, fold.train_start, fold.train_end)
        self.params.update_(params, per_env)

    def reset(self, starts: Any = None, persistent: bool = False) -> torch.Tensor:
        """Fresh portfolios at random starts in the fold's training range, or at ``starts`` ([N] ints).

        Host-given starts (list / numpy) are checked against the data; a device tensor is trusted.
        persistent=True also re-initialises v, Kelly, DSR and the diversity ring. Returns the obs buffer.
        """
        if starts is None:
            self.check_fold()
            st = self.sampler.draw(self.params, self.market)
        else:
            if not isinstance(starts, torch.Tensor):
                arr = np.asarray(starts, dtype=np.int64).reshape(-1)
                if arr.shape != (self.n_envs,):
                    raise ValueError(f"reset: starts must have shape [{self.n_envs}], got {list(arr.shape)}")
                lengths = self.params.episode_length.cpu().numpy()
                bad = (arr < 0) | (arr + lengths > self.market.n_bars - 1)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise ValueError(
                        f"reset: starts[{i}] = {arr[i]} with episode_length {lengths[i]} runs past the data "
                        f"(last bar {self.market.n_bars - 1})"
                    )
                starts = torch.as_tensor(arr)
            st = starts.to(self.device, torch.int64)
        reset(self.state, self.params, self.market, st, None, persistent)
        return self.observe()

    # ------------------------------------------------------------------ device hot path
    def observe(self) -> torch.Tensor:
        """[N, F + 3] float32 observation at every env's bar (the preallocated ``self.obs``)."""
        return observe(self.state, self.params, self.market, self._portfolio, self.obs)

    def step(
        self, actions: torch.Tensor, curiosity: torch.Tensor | None = None, active: torch.Tensor | None = None
    ) -> StepOutput:
        """One decision of every env with ``actions`` [N] int64 on the device: ``env.decision_interval``
        bars with the action held (``foxhunt.env.decision``; one bar, the plain step, when it is 1).
        Returns the preallocated ``self.out``."""
        if not self.auto_reset:
            live = ~self.state.finished
            active = live if active is None else (live & active)
        return self._step_decision(
            self.state,
            self.params,
            self.market,
            actions,
            curiosity,
            self.out,
            self._decision,
            active=active,
            auto_reset=self.auto_reset,
            sampler=self.sampler,
        )

    def apply_reset_flags(self) -> None:
        """Apply ``self.reset_flags`` (bits: 1 portfolio, 2 DSR, 4 vol EMA, 8 Kelly, 16 diversity), then clear it."""
        apply_reset_flags_(self.state, self.params, self.market, self.reset_flags)
        self.reset_flags.zero_()

    # ------------------------------------------------------------------ snapshots (tests, graphs)
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The env state's live tensors and the episode-start generator, or the counter-based draws' seed and
        counter (``foxhunt.state``)."""
        return pack({**self.state.tensors(), **self.sampler.state_tensors()}, generators=self.sampler.generators())

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        unpack("VecTradingEnv", state, {**self.state.tensors(), **self.sampler.state_tensors()},
               generators=self.sampler.generators())

    def snapshot(self) -> tuple[EnvState, torch.Tensor, dict[str, torch.Tensor]]:
        """A copy of the state, of the start generator's state and of the counter-based draws' seed and counter."""
        return (self.state.clone(), self.sampler.generator.get_state(),
                {k: v.clone() for k, v in self.sampler.state_tensors().items()})

    def restore(self, snap: tuple[EnvState, torch.Tensor, dict[str, torch.Tensor]]) -> None:
        state, gen, counters = snap
        self.state.copy_(state)
        self.sampler.generator.set_state(gen)
        for k, v in self.sampler.state_tensors().items():
            v.copy_(counters[k])
