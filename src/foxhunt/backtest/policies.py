"""Backtest policies: what chooses each window's action on each bar.

A policy maps the observations of W windows at step t ([W, D] float32, normalised) to actions
([W] int64) with device ops only. The step index ``t`` is a 0-d int64 device tensor so that a
chunk of steps can be captured in a CUDA graph.

* ``GreedyPolicy(net, decision_interval=k)``: argmax of a Q-network (or of a PPO actor's logits),
  chosen on bars 0, k, 2k, … of each window and held in between (``env.decision_interval``: a
  model decides at the interval it was trained at; the backtester holds the action, execution stays
  per bar). Every network policy has ``decision_interval``; fixed arrays act on every bar. A network
  that reads the last bars of the market (``agents.sequence_net.SequenceQNet``) gets them through
  ``bind_history``, which the torch backtester calls.
* ``EnsemblePolicy(nets, weights, mode)``: K models in one batched forward (``torch.func``
  stacked weights + vmap); "vote" (weighted vote of the members' greedy actions) or "mean"
  (argmax of the weighted mean Q). An ensemble of one model acts exactly like that model.
* ``MemberGreedyPolicy(nets, blocks)``: M networks in one backtest, network m greedy on its own
  contiguous block of windows (a fold's members scored on one held-back window together).
* ``ActionPolicy(actions)``: a fixed action array [W, T] (any external signal, random baselines).
* ``ExposurePolicy(exposures, n_actions)``: a fixed exposure array [W, T] in [-1, 1] (fraction of
  max_position), as in vectorbt; each value is rounded to the nearest of the env's five exposure
  levels (-1, -1/2, 0, 1/2, 1) and executed as a market order of normal urgency, in either env
  action mode: it emits factored actions and says so (``action_mode = "factored"``), and the
  backtester steps it in factored mode (``evaluator.policy_params``) instead of letting the
  exposure mode route it to a limit or IoC order by the spread and volatility.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state

from foxhunt.env.params import EnvParams
from foxhunt.market import inverse_std

N_LEVELS = 5
_MARKET_NORMAL = 0 * 3 + 1  # order type 0 (market), urgency 1 (normal) inside a factored action


class Policy(Protocol):
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor: ...


class GreedyPolicy:
    """argmax_a net(obs)[a], decided every ``decision_interval`` bars (the model's
    ``env.decision_interval``) and held in between by the backtester."""

    def __init__(self, net: nn.Module, decision_interval: int = 1) -> None:
        self.net = net
        self.decision_interval = check_interval(decision_interval)

    def bind_history(self, features: torch.Tensor, bar: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor) -> None:
        """Hand a network that reads the last bars of the market (``SequenceQNet.bind_history``) the
        backtest's feature matrix, live decision bars [W] and per-window normalisation [W, F]; a
        per-bar network ignores them. ``Backtester.run`` calls it before the first step."""
        bind = getattr(self.net, "bind_history", None)
        if bind is not None:
            bind(features, bar, mean, inv_std)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(obs).argmax(dim=1)


class EnsemblePolicy:
    """K same-architecture models evaluated in one batched (vmapped) forward.

    weights: K non-negative weights (normalised to sum 1). mode "vote": each member votes its
    greedy action with its weight, the action with the most weight wins (ties: lowest index);
    "mean": argmax of the weighted mean of the members' Q-values.
    """

    def __init__(self, nets: Sequence[nn.Module], weights: Sequence[float] | None = None, mode: str = "vote",
                 norms: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None, decision_interval: int = 1) -> None:
        """norms: optional per-member (mean [F], std [F]) normalisation. Then the policy must be given
        raw (un-normalised) market features — run the backtest with identity norms — and each member
        sees the features normalised with its own training statistics. decision_interval: the
        members' common k (the ensemble decides every k bars)."""
        self.decision_interval = check_interval(decision_interval)
        if not nets:
            raise ValueError("EnsemblePolicy needs at least one model")
        if mode not in ("vote", "mean"):
            raise ValueError(f"EnsemblePolicy mode {mode!r}: expected 'vote' or 'mean'")
        seq = next((n for n in nets if hasattr(n, "bind_history")), None)
        if seq is not None:
            raise ValueError(f"EnsemblePolicy: a {type(seq).__name__} reads the last bars of the market and runs "
                             "alone (GreedyPolicy), not in an ensemble")
        w = torch.ones(len(nets)) if weights is None else torch.as_tensor(list(weights), dtype=torch.float32)
        if w.shape != (len(nets),) or bool((w < 0).any()) or float(w.sum()) <= 0:
            raise ValueError("EnsemblePolicy weights: one non-negative weight per model, not all zero")
        device = next(nets[0].parameters()).device
        self.weights = (w / w.sum()).to(device)
        self.mode = mode
        self.nets = list(nets)  # the members themselves (the fused kernel packs their weights)
        self.params, self.buffers = stack_module_state(list(nets))
        base = nets[0]

        def one(params: dict, buffers: dict, obs: torch.Tensor) -> torch.Tensor:
            return functional_call(base, (params, buffers), (obs,))

        self._forward = torch.vmap(one, in_dims=(0, 0, None))
        self._forward_each = torch.vmap(one, in_dims=(0, 0, 0))
        self.norm_mean = self.norm_inv = None
        if norms is not None:
            if len(norms) != len(nets):
                raise ValueError("EnsemblePolicy norms: one (mean, std) per model")
            mean = torch.stack([m.to(torch.float32) for m, _ in norms]).to(device)
            std = torch.stack([s.to(torch.float32) for _, s in norms]).to(device)
            self.norm_mean = mean[:, None, :]
            self.norm_inv = inverse_std(std)[:, None, :]

    @torch.no_grad()
    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """[K, W, A] Q-values of every member."""
        if self.norm_mean is None:
            return self._forward(self.params, self.buffers, obs)
        f = self.norm_mean.shape[-1]
        market = (obs[None, :, :f] - self.norm_mean) * self.norm_inv  # [K, W, F]
        port = obs[None, :, f:].expand(market.shape[0], -1, -1)
        return self._forward_each(self.params, self.buffers, torch.cat([market, port], dim=-1))

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        q = self.q_values(obs)
        if self.mode == "mean":
            return (q * self.weights[:, None, None]).sum(0).argmax(dim=1)
        votes = torch.zeros(q.shape[1:], dtype=q.dtype, device=q.device)
        greedy = q.argmax(dim=2)  # [K, W]
        votes.scatter_add_(1, greedy.T, self.weights.to(q.dtype).expand(greedy.shape[1], -1).contiguous())
        return votes.argmax(dim=1)


class MemberGreedyPolicy:
    """Several networks in one backtest, each acting on its own contiguous block of windows: window w
    of block m takes argmax_a nets[m](obs)[a] (every ``decision_interval`` bars, held in between).

    Why: a fold's members are scored on the same held-back window after every epoch; one backtest of
    M × n windows steps the env once for all of them instead of M times (``selection.score_members``).
    Each block's forward is the member's network on a [n, D] slice, the shape it has alone, so every
    window's actions are those of its member's GreedyPolicy over its own n windows.
    blocks: [(first window, end)] per network, contiguous and in order, covering every window."""

    def __init__(self, nets: Sequence[nn.Module], blocks: Sequence[tuple[int, int]], decision_interval: int = 1) -> None:
        if not nets or len(nets) != len(blocks):
            raise ValueError("MemberGreedyPolicy: one block of windows per network, at least one")
        end = 0
        for a, b in blocks:
            if a != end or b <= a:
                raise ValueError(f"MemberGreedyPolicy: blocks {list(blocks)} must be contiguous, non-empty and in order")
            end = b
        seq = next((n for n in nets if hasattr(n, "bind_history")), None)
        if seq is not None:
            raise ValueError(f"MemberGreedyPolicy: a {type(seq).__name__} reads the last bars of the market and runs "
                             "alone (GreedyPolicy)")
        self.nets = list(nets)
        self.blocks = [(int(a), int(b)) for a, b in blocks]
        self.n_windows = end
        self.decision_interval = check_interval(decision_interval)

    def window_index(self) -> list[int]:
        """[W]: the network of each window."""
        return [m for m, (a, b) in enumerate(self.blocks) for _ in range(a, b)]

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.cat([net(obs[a:b]).argmax(dim=1) for net, (a, b) in zip(self.nets, self.blocks)])


class ActionPolicy:
    """A fixed action array ``actions`` [W, T] int64 (row w, column t)."""

    def __init__(self, actions: torch.Tensor) -> None:
        self.actions = actions.long()

    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.actions.device != t.device:  # host metadata, no sync: moved once, on first use
            self.actions = self.actions.to(t.device)
        col = t.clamp(max=self.actions.shape[1] - 1).reshape(1)
        return self.actions.index_select(1, col).squeeze(1)


class ExposurePolicy(ActionPolicy):
    """A fixed exposure array [W, T] in [-1, 1], rounded to the five levels, market orders of normal
    urgency whatever the env's action mode (factored actions, ``action_mode = "factored"``)."""

    action_mode = "factored"

    def __init__(self, exposures: torch.Tensor, n_actions: int | None = None) -> None:
        """n_actions: the env's action count; kept for compatibility, the actions are always factored."""
        ex = exposures.to(torch.float32)
        if not bool(torch.isfinite(ex).all()) or bool((ex.abs() > 1.0 + 1e-6).any()):
            raise ValueError("ExposurePolicy: exposures must be finite and within [-1, 1] (fraction of max_position)")
        level = torch.round((ex + 1.0) * 2.0).long().clamp(0, N_LEVELS - 1)  # -1 → 0, 0 → 2, +1 → 4
        super().__init__(level * 9 + _MARKET_NORMAL)


def check_interval(k: int) -> int:
    """A decision interval as an int >= 1 (ValueError otherwise)."""
    if int(k) != k or int(k) < 1:
        raise ValueError(f"decision_interval = {k!r}: must be a whole number >= 1")
    return int(k)


def decision_interval(policy: object) -> int:
    """Bars between the policy's decisions (``policy.decision_interval``; 1 for fixed action arrays)."""
    return int(getattr(policy, "decision_interval", 1))


def policy_params(params: EnvParams, policy: object) -> EnvParams:
    """``params`` with the action mode the policy asks for (``policy.action_mode``), if any."""
    mode = getattr(policy, "action_mode", None)
    if mode is None or mode == params.action_mode:
        return params
    return params.model_copy(update={"action_mode": mode})

