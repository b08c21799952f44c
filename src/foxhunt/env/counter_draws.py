"""Counter-based random draws: every draw a hash of (seed, counter, stream, row), so a stack of members draws in
one launch what each member draws alone.

Why: a generator is a sequential stream, one per member, so M members' exploration and episode-start draws are
3·M small launches a collection step (on a GPU each costs its launch latency, not its arithmetic). A
counter-based draw has no state but the (seed, counter) pair: member m's rows of a batched draw are a function
of its seed, its counter and its own row number only, so M members' draws are one launch of M·N rows, and
each member's rows are bit for bit the rows it draws alone (the same idea as Philox in JAX and in cuRAND's
counter-based generators; the hash here is Wellons' two-multiply 32-bit mixer, chained over the key words).

The definition (``word``; the Triton kernel ``foxhunt.kernels.draws`` must equal it bit for bit):

    mix(x)   = x ^= x >> 16; x = x·0x21F0AAAD mod 2³²; x ^= x >> 15; x = x·0x735A2D97 mod 2³²; x ^ (x >> 15)
    key      = mix(seed_lo ^ mix(seed_hi ^ stream))
    c        = mix(mix(key ^ counter_lo) ^ counter_hi)
    word     = mix(c ^ (row·0x61C88647 mod 2³²))

    u32  = (word_U32 >> 8) · 2⁻²⁴                         float32 in [0, 1)
    ints = word_INT mod n                                  int64 in [0, n)   (bias < n / 2³²)
    u64  = ((word_HI >> 11) · 2³² + word_LO) · 2⁻⁵³         float64 in [0, 1)

Every word is held in an int64 lane and every product is a word times a constant below 2³¹, so the torch
arithmetic never overflows and equals the kernel's. Shapes: ``seed`` and ``counter`` [M] int64 (one a member),
outputs [M·N], member m's rows m·N … (m+1)·N − 1. The counter is read, never advanced: the owner advances it
once a step (the DQN collector's and the PPO rollout's ``env_steps``, the start sampler's draw count), and
re-seeding sets the seed while the owner zeroes the counter, so a fold's draws restart from (seed, 0) like a
re-seeded generator (``StepDraws``: a component's generator or counter-based draws behind one interface).
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
STREAM_U32, STREAM_INT, STREAM_U64_HI, STREAM_U64_LO = 0x1B873593, 0x3C6EF372, 0x5BD1E995, 0x27D4EB2F
STREAM_U32_B = 0x2545F491
"""A second float32 stream (``u32_stream``) for an owner that needs two independent float32 draws a step."""


def mix(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit mixer on int64 words in [0, 2³²) (a bijection of the word)."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & M32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & M32
    return x ^ (x >> 15)


def word(seed: torch.Tensor, counter: torch.Tensor, n_rows: int, stream: int) -> torch.Tensor:
    """[M, N] int64 words in [0, 2³²) of (seed [M], counter [M]) at rows 0 … N − 1 of each member."""
    key = mix((seed & M32) ^ mix(((seed >> 32) & M32) ^ stream))
    c = mix(mix(key ^ (counter & M32)) ^ ((counter >> 32) & M32))
    rows = (torch.arange(n_rows, dtype=torch.int64, device=seed.device) * 0x61C88647) & M32
    return mix(c.view(-1, 1) ^ rows.view(1, -1))


def counter_draws_torch(seed: torch.Tensor, counter: torch.Tensor, n_rows: int, *, u32: torch.Tensor | None = None,
                        ints: torch.Tensor | None = None, n_int: int = 1, u64: torch.Tensor | None = None,
                        u32_stream: int = STREAM_U32) -> None:
    """The definition, in torch ops: fill the given outputs ([M·N] each)."""
    if u32 is not None:
        w = word(seed, counter, n_rows, u32_stream)
        torch.mul((w >> 8).to(torch.float32), 2.0 ** -24, out=u32.view(w.shape))
    if ints is not None:
        torch.remainder(word(seed, counter, n_rows, STREAM_INT), n_int, out=ints.view(-1, n_rows))
    if u64 is not None:
        hi = word(seed, counter, n_rows, STREAM_U64_HI)
        lo = word(seed, counter, n_rows, STREAM_U64_LO)
        torch.mul(((hi >> 11) * 4294967296 + lo).to(torch.float64), 2.0 ** -53, out=u64.view(hi.shape))


def counter_draws(seed: torch.Tensor, counter: torch.Tensor, n_rows: int, *, u32: torch.Tensor | None = None,
                  ints: torch.Tensor | None = None, n_int: int = 1, u64: torch.Tensor | None = None,
                  u32_stream: int = STREAM_U32) -> None:
    """Fill the given outputs: one Triton launch on CUDA (``foxhunt.kernels.draws``), the torch twin elsewhere.
    Reads nothing on the host and allocates nothing on CUDA (capturable in a CUDA graph)."""
    if seed.device.type == "cuda":
        from foxhunt.accel.triton import unavailable

        if unavailable(seed.device) is None:
            from foxhunt.kernels.draws.kernel import counter_draws_fused

            counter_draws_fused(seed, counter, n_rows, u32=u32, ints=ints, n_int=n_int, u64=u64, u32_stream=u32_stream)
            return
    counter_draws_torch(seed, counter, n_rows, u32=u32, ints=ints, n_int=n_int, u64=u64, u32_stream=u32_stream)


class StepDraws:
    """A component's draws of one step (the DQN collector's exploration, the PPO rollout's sampling, the env's
    episode starts): from its generator, or, with ``counted``, counter-based on (its draw seed, the step counter the
    caller passes: its ``env_steps``, the start sampler's draw count). ``seed_t`` (0-d int64, None without
    ``counted``) is what a stack of members stacks."""

    def __init__(self, device: torch.device | str, seed: int, counted: bool) -> None:
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.seed_t = torch.full((), seed, dtype=torch.int64, device=device) if counted else None

    def generators(self) -> dict[str, torch.Generator]:
        """The generator the draws advance, for a state dict or a CUDA graph (none when counted)."""
        return {} if self.seed_t is not None else {"generator": self.generator}

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The draw seed when counted (a checkpoint carries it), else nothing."""
        return {} if self.seed_t is None else {"draw_seed": self.seed_t}

    def seed(self, seed: int) -> None:
        """Restart the draws from ``seed`` (the caller zeroes its step counter)."""
        self.generator.manual_seed(seed)
        if self.seed_t is not None:
            self.seed_t.fill_(seed)

    def uniform(self, out: torch.Tensor, counter: torch.Tensor, stream: int = STREAM_U32) -> None:
        """``out`` (float32, any shape) := uniforms in [0, 1) of this step (``counter``: the 0-d step counter)."""
        if self.seed_t is None:
            torch.rand(out.shape, generator=self.generator, device=out.device, out=out)
        else:
            counter_draws(self.seed_t.view(1), counter.view(1), out.numel(), u32=out.view(-1), u32_stream=stream)

    def uniform64(self, out: torch.Tensor, counter: torch.Tensor) -> None:
        """``out`` [N] float64 := uniforms in [0, 1) of this step (53 bits when counted)."""
        if self.seed_t is None:
            torch.rand(out.shape, generator=self.generator, out=out)
        else:
            counter_draws(self.seed_t.view(1), counter.view(1), out.shape[0], u64=out)

    def integers(self, out: torch.Tensor, high: int, counter: torch.Tensor) -> None:
        """``out`` [N] int64 := integers in [0, high) of this step."""
        if self.seed_t is None:
            torch.randint(0, high, out.shape, generator=self.generator, device=out.device, out=out)
        else:
            counter_draws(self.seed_t.view(1), counter.view(1), out.shape[0], ints=out, n_int=high)


__all__ = ["STREAM_U32_B", "StepDraws", "counter_draws", "counter_draws_torch", "mix", "word"]
