"""Curiosity: a forward model of the next bar's market features, trained on the device.

Input: the first 32 normalised market features of bar t and the short/flat/long category of the
action; target: the same features of bar t+1. The clamped squared error is the env's curiosity
bonus (the env clamps it with ``curiosity_max`` and weights it). The model is trained every
``curiosity_every`` rounds on a uniform replay sample, with the masked Adam (always ok).
"""

from __future__ import annotations

import torch

from foxhunt.agents.flat import FlatParams, MaskedAdam
from foxhunt.agents.networks import CuriosityModel, action_category
from foxhunt.agents.replay import ReplayStorage
from foxhunt.market import MarketData
from foxhunt.state import pack, unpack


class Curiosity:
    def __init__(self, market: MarketData, storage: ReplayStorage, n_actions: int, lr: float, batch: int, seed: int = 0) -> None:
        dev = market.device
        self.market = market
        self.storage = storage
        self.n_actions = n_actions
        self.n_state = min(32, market.n_features)
        torch.manual_seed(seed + 77)
        self.model = CuriosityModel(self.n_state).to(dev)
        self.flat = FlatParams(self.model)
        self._init = self.flat.data.clone()
        self.opt = MaskedAdam(self.flat, torch.full((), lr, dtype=torch.float32, device=dev))
        self._ok = torch.ones((), dtype=torch.bool, device=dev)
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(seed + 991)
        self.batch = batch
        self._u = torch.zeros(batch, dtype=torch.float64, device=dev)
        self._feat = torch.zeros((batch, market.n_features), dtype=torch.float32, device=dev)
        self._next = torch.zeros((batch, market.n_features), dtype=torch.float32, device=dev)
        self._step_next: torch.Tensor | None = None
        self.last_loss = torch.zeros((), dtype=torch.float32, device=dev)

    def reset(self) -> None:
        self.flat.data.copy_(self._init)
        self.opt.reset()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Forward-model weights, its Adam state and the batch generator (``foxhunt.state``)."""
        return pack({"weights": self.flat.data, **self.opt.state_dict()}, generators={"generator": self.generator})

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        unpack("Curiosity", state, {"weights": self.flat.data, **self.opt.state_dict()},
               generators={"generator": self.generator})

    @torch.no_grad()
    def bonus(self, obs: torch.Tensor, actions: torch.Tensor, bars: torch.Tensor) -> torch.Tensor:
        """Squared prediction error of the next bar's features, [N] float32 (unclamped)."""
        if self._step_next is None or self._step_next.shape[0] != obs.shape[0]:
            self._step_next = torch.zeros((obs.shape[0], self.market.n_features), dtype=torch.float32, device=obs.device)
        nxt = self.market.gather_features(bars + 1, self._step_next)[:, : self.n_state]
        cat = action_category(actions, self.n_actions)
        return self.model.error(obs[:, : self.n_state], cat, nxt)

    def train_step(self) -> None:
        """One Adam step of the forward model on a uniform replay sample (device only)."""
        st = self.storage
        torch.rand(self._u.shape, generator=self.generator, dtype=torch.float64, device=self._u.device, out=self._u)
        idx = (self._u * st.size_t.to(torch.float64)).long().clamp_(max=st.capacity - 1)
        bars = st.bar.index_select(0, idx)
        state = self.market.gather_features(bars, self._feat)[:, : self.n_state]
        nxt = self.market.gather_features(bars + 1, self._next)[:, : self.n_state]
        cat = action_category(st.action.index_select(0, idx), self.n_actions)
        loss = self.model.error(state, cat, nxt).mean()
        self.flat.zero_grad()
        loss.backward()
        self.opt.step(self.flat.grad, self._ok)
        self.last_loss.copy_(loss.detach())
