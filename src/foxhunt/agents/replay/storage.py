"""Compact, device-resident ring buffer of transitions.

A stored transition is ~57 bytes, whatever the observation width, because observations are not
stored: the bar index and the three portfolio features are, and the observation is re-gathered
from ``MarketData`` (normalised with the *current* fold's statistics) when the transition is
sampled (see ``gather``).

Per slot (capacity C):

    bar            [C]     int64    bar index t of the observation
    portfolio      [C, P]  float32  portfolio features at t (P = 3: exposure, unrealised return,
                                    bars in position)
    action         [C]     int64
    reward         [C]     float32
    done           [C]     bool     the episode ended on this transition (no bootstrap)
    next_bar       [C]     int64    t + k (k = 1, or n for an n-step transition)
    next_portfolio [C, P]  float32
    discount       [C]     float32  gamma^k for the bootstrap term (gamma when the writer gives
                                    none: a plain one-step transition)

Positions are known on the host by construction: every ``add`` writes exactly N rows at
``(pos + arange(N)) % capacity`` (a device index tensor, no branch on tensor values), so
``pos`` and ``size`` are host ints advanced by N, never read back. Device mirrors ``pos_t`` and
``size_t`` (0-d int64) advance in place too, so ``add`` and the samplers (which read ``size_t``)
can be captured in a CUDA graph; when ``add`` is replayed from a graph, call ``advance(N)`` once
per replay to keep the host ints in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from foxhunt.state import pack, unpack

if TYPE_CHECKING:
    from foxhunt.market import MarketData


class Transitions(NamedTuple):
    """N transitions to write, on the storage's device (dtypes are converted if they differ)."""

    bar: torch.Tensor  # [N] int64
    portfolio: torch.Tensor  # [N, P] float32
    action: torch.Tensor  # [N] int64
    reward: torch.Tensor  # [N] float32
    done: torch.Tensor  # [N] bool
    next_bar: torch.Tensor  # [N] int64
    next_portfolio: torch.Tensor  # [N, P] float32
    discount: torch.Tensor | None = None  # [N] float32 gamma^k; None -> gamma


class SampledBatch(NamedTuple):
    """A gathered minibatch (preallocated buffers, overwritten by the next gather of that size)."""

    obs: torch.Tensor  # [B, F + P] float32
    action: torch.Tensor  # [B] int64
    reward: torch.Tensor  # [B] float32
    done: torch.Tensor  # [B] bool
    next_obs: torch.Tensor  # [B, F + P] float32
    discount: torch.Tensor  # [B] float32


_FIELDS = ("bar", "portfolio", "action", "reward", "done", "next_bar", "next_portfolio", "discount")


class ReplayStorage:
    """Ring buffer of compact transitions on ``device``.

    capacity: slots (millions are fine: ~57 MB per million).
    n_portfolio: portfolio features per observation (3 in this project).
    gamma: discount written for transitions added without one (one-step transitions).
    """

    def __init__(
        self, capacity: int, n_portfolio: int = 3, device: torch.device | str = "cpu", gamma: float = 0.99
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayStorage: capacity must be >= 1, got {capacity}")
        if n_portfolio < 1:
            raise ValueError(f"ReplayStorage: n_portfolio must be >= 1, got {n_portfolio}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"ReplayStorage: gamma must be in [0, 1], got {gamma}")
        dev = torch.device(device)
        self.capacity = int(capacity)
        self.n_portfolio = int(n_portfolio)
        self.gamma = float(gamma)
        c, p = self.capacity, self.n_portfolio
        self.bar = torch.zeros(c, dtype=torch.int64, device=dev)
        self.portfolio = torch.zeros((c, p), dtype=torch.float32, device=dev)
        self.action = torch.zeros(c, dtype=torch.int64, device=dev)
        self.reward = torch.zeros(c, dtype=torch.float32, device=dev)
        self.done = torch.zeros(c, dtype=torch.bool, device=dev)
        self.next_bar = torch.zeros(c, dtype=torch.int64, device=dev)
        self.next_portfolio = torch.zeros((c, p), dtype=torch.float32, device=dev)
        self.discount = torch.zeros(c, dtype=torch.float32, device=dev)
        self.device = self.bar.device
        """The resolved device ("cuda" becomes "cuda:0"), as input tensors report theirs."""
        self.pos = 0
        """Host int: the next slot to write."""
        self.size = 0
        """Host int: filled slots, min(total written, capacity)."""
        self.pos_t = torch.zeros((), dtype=torch.int64, device=self.device)
        self.size_t = torch.zeros((), dtype=torch.int64, device=self.device)
        self._offsets: dict[int, torch.Tensor] = {}
        self._slots: dict[int, torch.Tensor] = {}
        self._gathered: dict[int, dict[str, torch.Tensor]] = {}

    @property
    def nbytes(self) -> int:
        """Device bytes held by the transition arrays."""
        return sum(getattr(self, f).nbytes for f in _FIELDS)

    def __len__(self) -> int:
        return self.size

    # ------------------------------------------------------------------ writing
    def add(self, batch: Transitions) -> torch.Tensor:
        """Write the N transitions of ``batch`` at slots (pos + arange(N)) % capacity.

        Returns the slots written, [N] int64 on the device (a buffer reused by the next add of N
        rows): pass it to the sampler's ``on_add``. No host reads; graph-capturable (see the
        module docstring for ``advance``).
        """
        n = self._check(batch)
        slots = self.write_slots(n)
        for name in _FIELDS[:-1]:
            dst = getattr(self, name)
            dst.index_copy_(0, slots, getattr(batch, name).to(dst.dtype))
        if batch.discount is None:
            self.discount.index_fill_(0, slots, self.gamma)
        else:
            self.discount.index_copy_(0, slots, batch.discount.to(torch.float32))
        self.pos_t.add_(n).remainder_(self.capacity)
        self.size_t.add_(n).clamp_(max=self.capacity)
        self.advance(n)
        return slots

    def write_slots(self, n: int) -> torch.Tensor:
        """[n] int64 device slots of the next write: (pos_t + arange(n)) % capacity (no host read)."""
        if n not in self._offsets:
            self._offsets[n] = torch.arange(n, dtype=torch.int64, device=self.device)
            self._slots[n] = torch.empty(n, dtype=torch.int64, device=self.device)
        out = self._slots[n]
        torch.add(self._offsets[n], self.pos_t, out=out)
        return out.remainder_(self.capacity)

    def advance(self, n: int) -> None:
        """Advance the host ints by one write of n rows (``add`` does this itself)."""
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every transition array, the device write head / fill, and the host ``pos`` / ``size``."""
        live = {f: getattr(self, f) for f in _FIELDS}
        return pack({**live, "pos_t": self.pos_t, "size_t": self.size_t}, {"pos": self.pos, "size": self.size})

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore a ``state_dict`` of a storage of the same capacity (in place; ValueError on mismatch)."""
        live = {f: getattr(self, f) for f in _FIELDS}
        host = unpack("ReplayStorage", state, {**live, "pos_t": self.pos_t, "size_t": self.size_t}, ("pos", "size"))
        self.pos, self.size = host["pos"], host["size"]

    def clear(self) -> None:
        """Empty the buffer (a new fold): counters to 0 and every slot zeroed."""
        for name in _FIELDS:
            getattr(self, name).zero_()
        self.pos_t.zero_()
        self.size_t.zero_()
        self.pos = 0
        self.size = 0

    def _check(self, batch: Transitions) -> int:
        n = int(batch.bar.shape[0])
        if not 1 <= n <= self.capacity:
            raise ValueError(f"ReplayStorage.add: batch of {n} rows, expected 1..capacity={self.capacity}")
        want = {"portfolio": (n, self.n_portfolio), "next_portfolio": (n, self.n_portfolio)}
        for name in _FIELDS:
            t = getattr(batch, name)
            if t is None and name == "discount":
                continue
            shape = want.get(name, (n,))
            if tuple(t.shape) != shape:
                raise ValueError(f"ReplayStorage.add: {name} has shape {tuple(t.shape)}, expected {shape}")
            if t.device != self.device:
                raise ValueError(f"ReplayStorage.add: {name} is on {t.device}, storage is on {self.device}")
        return n

    # ------------------------------------------------------------------ reading
    def gather(
        self, indices: torch.Tensor, market: MarketData, obs_out: torch.Tensor, next_obs_out: torch.Tensor
    ) -> SampledBatch:
        """Build the minibatch of slots ``indices`` ([B] int64) into preallocated buffers.

        obs_out, next_obs_out: [B, F + P] float32, written in place by ``market.observe`` from the
        stored bar index and portfolio features (normalised with the market's current fold).
        action / reward / done / discount go into per-B buffers owned by the storage.
        No host reads, no allocation after the first call for a given B (graph-capturable).
        """
        b = int(indices.shape[0])
        buf = self._gathered.get(b)
        if buf is None:
            buf = {name: torch.empty((b, *getattr(self, name).shape[1:]), dtype=getattr(self, name).dtype,
                                     device=self.device) for name in _FIELDS}
            self._gathered[b] = buf
        for name in _FIELDS:
            torch.index_select(getattr(self, name), 0, indices, out=buf[name])
        market.observe(buf["bar"], buf["portfolio"], obs_out)
        market.observe(buf["next_bar"], buf["next_portfolio"], next_obs_out)
        return SampledBatch(obs_out, buf["action"], buf["reward"], buf["done"], next_obs_out, buf["discount"])
