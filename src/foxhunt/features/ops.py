"""Prefix-stable building blocks for causal features: shifts, rolling windows, EMAs.

Every function here works along the last dimension of a float64 tensor ``[..., T]`` (time last) and
is *prefix-stable*: the value at position t is computed by the same sequence of floating-point
operations whatever T is, so features of a truncated series are bitwise equal to the full series'
features at every row before the cut (the causality test checks exactly this).

That rules out length-dependent algorithms (FFT, tree reductions over the whole series, parallel
scans whose association depends on T, ``torch.pow`` with fractional exponents, whose CPU kernel
rounds differently in its vectorised body and its tail). What remains:

* elementwise arithmetic, ``log``, ``sqrt`` (the same per element on every code path),
* shifts and concatenation (exact),
* sequential cumsums (``row_cumsum``) along rows of a fixed width anchored at absolute positions
  (blocks of w or C elements starting at index 0: truncation changes only the last, partial
  block, and a sequential cumsum's value at position j never depends on later elements),
* ``amax`` / ``amin`` over windows (exact, so the reduction order does not matter).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "shift",
    "row_cumsum",
    "rolling_sum",
    "rolling_mean",
    "rolling_max",
    "rolling_min",
    "ema",
    "ema_chunk_size",
    "ema_lookback",
    "safe_div",
]


def shift(x: torch.Tensor, k: int, fill: float = 0.0) -> torch.Tensor:
    """x delayed by k >= 0 steps: out[..., t] = x[..., t-k], ``fill`` for t < k.  [..., T] -> [..., T]."""
    if k == 0:
        return x
    T = x.shape[-1]
    if k >= T:
        return torch.full_like(x, fill)
    head = torch.full((*x.shape[:-1], k), fill, dtype=x.dtype, device=x.device)
    return torch.cat([head, x[..., : T - k]], dim=-1)


def _blocks(x: torch.Tensor, w: int) -> tuple[torch.Tensor, int]:
    """x zero-padded to a multiple of w and viewed as [..., nb, w]; also returns the original T."""
    T = x.shape[-1]
    pad = (-T) % w
    xp = F.pad(x, (0, pad)) if pad else x
    return xp.reshape(*x.shape[:-1], (T + pad) // w, w), T


def row_cumsum(xb: torch.Tensor) -> torch.Tensor:
    """Inclusive cumsum along the last dim of [..., n, w], added strictly left to right on any device.

    CPU: torch's kernel is a sequential loop per row. CUDA: torch scans an innermost dimension with
    a tree whose rounding was seen to change with the number of rows, and a tensor of one row
    goes through CUB's device scan; a scan over an outer dimension is a sequential loop per column.
    So on CUDA the blocks are transposed to [..., w, n] (at least two columns) and scanned there.
    """
    if xb.device.type == "cpu":
        return torch.cumsum(xb, dim=-1)
    t = xb.transpose(-1, -2)
    n = t.shape[-1]
    if n == 1:
        t = F.pad(t, (0, 1))
    out = torch.cumsum(t.contiguous(), dim=-2)[..., :n]
    return out.transpose(-1, -2)


def rolling_sum(x: torch.Tensor, w: int) -> torch.Tensor:
    """Sum over the trailing window [t-w+1, t].  [..., T] float64 -> [..., T].

    For t < w-1 the window is partial (sum of x[0..t]); those rows are inside every feature's
    warm-up. Van Herk / Gil-Werman block decomposition: blocks of w anchored at index 0; a window
    is the suffix of the previous block plus the prefix of the current one. Each sum adds at most
    2w numbers (no cancellation over the whole history, unlike differences of one global cumsum),
    costs O(1) per element, and only touches complete earlier blocks, hence is prefix-stable.
    """
    if w == 1:
        return x.clone()
    xb, T = _blocks(x, w)
    pre = row_cumsum(xb)
    suf = torch.flip(row_cumsum(torch.flip(xb, dims=[-1])), dims=[-1])
    # carry[b, r] = suffix of block b-1 from r+1 (0 for b = 0 and for r = w-1, whose window is the block itself)
    carry = torch.zeros_like(xb)
    carry[..., 1:, : w - 1] = suf[..., :-1, 1:]
    out = pre + carry
    return out.reshape(*x.shape[:-1], -1)[..., :T]


def rolling_mean(x: torch.Tensor, w: int) -> torch.Tensor:
    """Mean over the trailing window of w (partial window divided by w too: warm-up rows only)."""
    return rolling_sum(x, w) / w


def _rolling_extreme(x: torch.Tensor, w: int, largest: bool) -> torch.Tensor:
    if w == 1:
        return x.clone()
    fill = -math.inf if largest else math.inf
    # Front padding with ±inf makes warm-up windows the extreme of what exists; max/min are exact,
    # so the (shape-dependent) reduction order cannot change a single bit.
    xp = F.pad(x, (w - 1, 0), value=fill)
    win = xp.unfold(-1, w, 1)
    return win.amax(dim=-1) if largest else win.amin(dim=-1)


def rolling_max(x: torch.Tensor, w: int) -> torch.Tensor:
    """Maximum over the trailing window [t-w+1, t] (of what exists for t < w-1).  [..., T] -> [..., T]."""
    return _rolling_extreme(x, w, largest=True)


def rolling_min(x: torch.Tensor, w: int) -> torch.Tensor:
    """Minimum over the trailing window [t-w+1, t] (of what exists for t < w-1).  [..., T] -> [..., T]."""
    return _rolling_extreme(x, w, largest=False)


_EMA_MAX_LOG_SCALE = 460.0
"""Largest ln of the within-chunk scale factor (1-alpha)^-j allowed (e^460 ~ 1e200 < float64 max)."""


def ema_chunk_size(alpha: float) -> int:
    """Chunk length C for ``ema``: a power of two <= 1024 with (1-alpha)^-C <= e^460.

    Depends on alpha only (never on T), so chunk boundaries sit at the same absolute positions for
    every prefix of a series.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"EMA alpha must be in (0, 1], got {alpha}")
    if alpha == 1.0:
        return 1
    rate = -math.log1p(-alpha)
    c = 1024
    while c > 1 and c * rate > _EMA_MAX_LOG_SCALE:
        c //= 2
    return c


def ema_lookback(alpha: float) -> int:
    """Bars after which an EMA counts as formed: ceil(6 / alpha).

    The seed's weight is then (1-alpha)^(6/alpha) < e^-6 ~ 0.25 %; for a span-n EMA
    (alpha = 2/(n+1)) that is 3(n+1) bars, for Wilder smoothing (alpha = 1/n) 6n bars.
    """
    return math.ceil(6.0 / alpha - 1e-9)


def ema(x: torch.Tensor, alpha: float, seed: torch.Tensor | None = None) -> torch.Tensor:
    """Exponential moving average y[t] = alpha*x[t] + (1-alpha)*y[t-1], y[-1] = seed.

    x: [..., T] float64; seed: [...] (default x[..., 0], so y[0] = x[0]). Returns [..., T] float64.

    Vectorised chunked scan. Within a chunk of C elements starting at absolute position nC,
        y[nC+k] = sum_{j<=k} alpha x[nC+j] s^(k-j)  +  s^(k+1) y[nC-1],      s = 1 - alpha,
    and the first sum is cumsum(alpha x s^-j) * s^k over the chunk (all chunks at once). The
    scale s^-j grows geometrically, which is why chunks are short enough (``ema_chunk_size``) to
    keep it below 1e200; rounding stays ~eps/alpha relative. The state entering each chunk is
    carried by a short host loop over T/C chunk ends (plain float64 multiply-add).
    """
    if x.dtype != torch.float64:
        raise TypeError("ema expects float64 input")
    s = 1.0 - alpha
    T = x.shape[-1]
    batch = x.shape[:-1]
    if seed is None:
        seed = x[..., 0]
    if T == 0:
        return x.clone()
    C = ema_chunk_size(alpha)
    if C == 1:  # alpha == 1: y = x
        return x.clone()
    xb, _ = _blocks(x, C)  # [..., nC, C]
    n_chunks = xb.shape[-2]
    # Scale vectors from Python floats: identical for every call with this alpha.
    inv = torch.tensor([alpha * s ** (-j) for j in range(C)], dtype=torch.float64, device=x.device)
    dec = torch.tensor([s**j for j in range(C)], dtype=torch.float64, device=x.device)
    dec1 = torch.tensor([s ** (j + 1) for j in range(C)], dtype=torch.float64, device=x.device)
    local = row_cumsum(xb * inv) * dec  # EMA within each chunk from a zero state

    # Carry: state entering chunk n; one small host transfer of the chunk ends (a build-time sync).
    ends = local[..., C - 1].reshape(-1, n_chunks).cpu().tolist()
    seeds = seed.reshape(-1).to(torch.float64).cpu().tolist()
    s_c = s**C
    carries = []
    for row_ends, state in zip(ends, seeds):
        row = []
        for e in row_ends:
            row.append(state)
            state = e + s_c * state
        carries.append(row)
    carry = torch.tensor(carries, dtype=torch.float64, device=x.device).reshape(*batch, n_chunks, 1)
    y = local + carry * dec1
    return y.reshape(*batch, -1)[..., :T]


def safe_div(num: torch.Tensor, den: torch.Tensor, fill: float = 0.0, eps: float = 0.0) -> torch.Tensor:
    """num / den where |den| > eps, else ``fill`` (no inf/NaN is ever produced, even transiently)."""
    ok = den.abs() > eps
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.full_like(num, fill))
