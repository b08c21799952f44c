"""Counter-based random draws as ONE Triton launch for every member of a stack.

A draw is a pure function of (member seed, member counter, stream, row within the member): no generator
state, so M members' draws are one launch over their M·N rows, and a member's rows hold exactly what it
draws alone (its seed and counter, its own row numbers). The torch twin, and the definition the kernel
must equal bit for bit, is ``foxhunt.env.counter_draws`` (all integer arithmetic on int64 lanes holding
32-bit words: every product is a word times a constant below 2**31, so it stays below 2**63 and the two
sides cannot differ).

Layout: ``seed`` [M] int64, ``counter`` [M] int64 (read, not advanced: the caller adds 1 after the draw),
rows r = m·N + i of the outputs ``u32`` [M·N] float32 in [0, 1) (24 bits), ``ints`` [M·N] int64 in
[0, n_int), ``u64`` [M·N] float64 in [0, 1) (53 bits). A leaf module: imports nothing of ours.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from foxhunt.kernels._triton import is_interpreted


@triton.jit
def _mix32(x):
    """Wellons' two-multiply 32-bit integer hash (bijective), on an int64 lane holding a word."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & 0xFFFFFFFF
    return x ^ (x >> 15)


@triton.jit
def _word(seed, counter, row, stream):
    """The 32-bit word of (seed, counter, stream) at a member's row (``counter_draws.word``)."""
    key = _mix32((seed & 0xFFFFFFFF) ^ _mix32(((seed >> 32) & 0xFFFFFFFF) ^ stream))
    c = _mix32(_mix32(key ^ (counter & 0xFFFFFFFF)) ^ ((counter >> 32) & 0xFFFFFFFF))
    return _mix32(c ^ ((row * 0x61C88647) & 0xFFFFFFFF))


@triton.jit
def _draws_kernel(seed_ptr, counter_ptr, u32_ptr, ints_ptr, u64_ptr, total, n_rows, n_int, u32_stream,
                  HAS_U32: tl.constexpr, HAS_INT: tl.constexpr, HAS_U64: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = r < total
    m = r // n_rows
    row = (r - m * n_rows).to(tl.int64)
    seed = tl.load(seed_ptr + m, mask=ok, other=0)
    counter = tl.load(counter_ptr + m, mask=ok, other=0)
    if HAS_U32:
        w = _word(seed, counter, row, u32_stream.to(tl.int64))
        tl.store(u32_ptr + r, (w >> 8).to(tl.float32) * 5.9604644775390625e-08, mask=ok)  # 2**-24
    if HAS_INT:
        w = _word(seed, counter, row, 0x3C6EF372)
        tl.store(ints_ptr + r, w % n_int, mask=ok)
    if HAS_U64:
        hi = _word(seed, counter, row, 0x5BD1E995)
        lo = _word(seed, counter, row, 0x27D4EB2F)
        tl.store(u64_ptr + r, ((hi >> 11) * 4294967296 + lo).to(tl.float64) * 1.1102230246251565e-16, mask=ok)  # 2**-53


def counter_draws_fused(seed: torch.Tensor, counter: torch.Tensor, n_rows: int, *, u32: torch.Tensor | None = None,
                        ints: torch.Tensor | None = None, n_int: int = 1, u64: torch.Tensor | None = None,
                        u32_stream: int = 0x1B873593) -> None:
    """Fill the given outputs ([M·N] each) in one launch (see the module docstring; ``u32_stream``: the float32
    draws' stream, so one owner can draw two independent float32 sets at one counter)."""
    out = next(t for t in (u32, ints, u64) if t is not None)
    total = out.numel()
    block = triton.next_power_of_2(max(total, 1)) if is_interpreted() else 512
    dummy = seed
    _draws_kernel[(triton.cdiv(total, block),)](
        seed, counter, u32 if u32 is not None else dummy, ints if ints is not None else dummy,
        u64 if u64 is not None else dummy, total, n_rows, n_int, u32_stream,
        HAS_U32=u32 is not None, HAS_INT=ints is not None, HAS_U64=u64 is not None, BLOCK=block)


__all__ = ["counter_draws_fused"]
