"""The fused acting op's adapter: the collector's two forward passes in the fused Triton MLP kernel.

``unsupported(net, device, n_actions=None)`` says why the kernel cannot run (None when it can):
Triton unusable on the device (``foxhunt.accel.triton``), or a network outside the kernel's rules
(``foxhunt.agents.networks.fused_net_unsupported``, shared with the backtest kernel).
``FusedActing(learner, n, n_actions, precision)`` holds packed online and target weights
(refreshed in place by ``refresh`` inside the captured round) and preallocated outputs.
The kernel is ``foxhunt.kernels.acting.kernel`` (activations stay on chip; the online pass also
writes the greedy action, the target pass only the row max); the weights are packed by
``foxhunt.kernels.rules.packing``.
"""

from __future__ import annotations

import torch
from torch import nn

from foxhunt.accel.triton import unavailable
from foxhunt.agents.networks import fused_net_unsupported
from foxhunt.kernels.rules.packing import dueling_pairs, pack_dueling_into, pack_net

PRECISION = {"fp32": "ieee", "tf32": "tf32", "bf16": "bf16"}  # accel.matmul_precision → kernel precision


def unsupported(net: nn.Module, device: torch.device, n_actions: int | None = None) -> str | None:
    """Why the fused acting kernel cannot run ``net`` on ``device`` (None when it can)."""
    reason = unavailable(device)
    if reason is not None:
        return reason
    obs_dim = getattr(net, "obs_dim", 0)
    reason = fused_net_unsupported(net, obs_dim, n_actions if n_actions is not None else getattr(net, "n_actions", 0))
    if reason is not None:
        return reason
    if any(p.device.type != torch.device(device).type for p in net.parameters()):
        return "the network's parameters are not on the env's device"
    return None


class FusedActing:
    """The collector's two forward passes through the fused kernel: packed online and target
    weights (refreshed in place by ``refresh``) and preallocated outputs (graph-safe).

    q [N, n_actions] f32 and greedy [N] i64 of the online net; q_next_max [N] f32 of the target."""

    def __init__(self, learner, n: int, n_actions: int, precision: str) -> None:
        reason = unsupported(learner.online, learner.device, n_actions)
        if reason is not None:
            raise ValueError(f"fused acting unavailable: {reason}")
        from foxhunt.kernels.acting import kernel as k

        self.k = k
        self.learner = learner
        self.precision = PRECISION[precision]
        # the head and hidden blocks the compiled kernel is right with (kernels.acting.kernel.MIN_WIDTH)
        self.online = pack_net(learner.online, self.precision, k.MIN_HEAD, k.MIN_WIDTH)
        self.target = pack_net(learner.target, self.precision, k.MIN_HEAD, k.MIN_WIDTH)
        dev = learner.device
        self.q = torch.zeros((n, n_actions), dtype=torch.float32, device=dev)
        self.greedy = torch.zeros(n, dtype=torch.int64, device=dev)
        self.q_next_max = torch.zeros(n, dtype=torch.float32, device=dev)
        self._sources = self._source_ptrs()
        self._check_layout()

    def _source_ptrs(self) -> list[int]:
        return [p.data_ptr() for net in (self.learner.online, self.learner.target) for p in net.parameters()]

    def _check_layout(self) -> None:
        """Host-side, at construction: both packs have one layout for this net (a pack laid out for
        another width would read past W1 or write past q), and their padding is zero. One host read."""
        o, t = self.online, self.target
        if o.dims != t.dims or (o.obs_dim, o.n_actions) != (t.obs_dim, t.n_actions) or o.w1.dtype != t.w1.dtype:
            raise ValueError(f"fused acting: online pack {o.dims} != target pack {t.dims}")
        if o.n_actions != self.q.shape[1] or o.obs_dim != getattr(self.learner.online, "obs_dim", o.obs_dim):
            raise ValueError(f"fused acting: pack maps {o.obs_dim} -> {o.n_actions}, buffers hold {self.q.shape[1]} actions")
        for name, pk in (("online", o), ("target", t)):
            ws = (pk.w1, pk.b1, pk.w2, pk.b2, pk.w3, pk.b3, pk.w4, pk.b4)
            if not all(w.is_contiguous() for w in ws):
                raise ValueError(f"fused acting: the {name} pack is not contiguous")
            if bool(pk.w1[pk.obs_dim:].any()) or bool(pk.w4[:, pk.n_actions + 1:].any()):
                raise ValueError(f"fused acting: the {name} pack's padding is not zero")

    def refresh(self) -> None:
        """Copy the current online and target weights into the packed buffers (in place).

        Python runs this only eagerly and at capture (replays repeat the captured copies), so it
        checks there, host-side, that the networks' parameters still live where they did at
        construction: a re-homed parameter would leave the captured copies reading freed memory."""
        if self._source_ptrs() != self._sources:
            raise RuntimeError("fused acting: the online / target parameters moved since construction "
                               "(captured weight refreshes would read freed memory)")
        for net, packed in ((self.learner.online, self.online), (self.learner.target, self.target)):
            trunk, value, adv, _ = dueling_pairs(net)
            pack_dueling_into(trunk, value, adv, packed)

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q [N, n_actions], greedy action [N]) of the online net on obs [N, obs_dim]."""
        self.k.fused_dueling_q(self.online, obs, precision=self.precision, q=self.q, argmax=self.greedy)
        return self.q, self.greedy

    def next_max(self, next_obs: torch.Tensor) -> torch.Tensor:
        """max_a Q_target(next_obs, a): [N]."""
        self.k.fused_dueling_q(self.target, next_obs, precision=self.precision, q=False, q_max=self.q_next_max)
        return self.q_next_max


__all__ = ["PRECISION", "FusedActing", "unsupported"]
