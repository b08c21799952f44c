"""The B-ary replay trees (``foxhunt.kernels.replay.wide``) give the torch twin's bits
(``foxhunt.agents.replay.wide_per``): the same trees after writes and rebuilds, the same leaves
from the descent; and both are right: sums within one float32 rounding of a float64
recomputation, mins exact, descents obeying the prefix rule and never landing on an empty leaf.

Without CUDA the kernels run in the Triton interpreter (TRITON_INTERPRET=1, set here before Triton
is imported) on small trees; branch 4 as well as 32 gives deeper trees at small capacities. The
interpreter checks the arithmetic and the level order, not the GPU's atomics: the GPU tests repeat
the claims compiled at 1 M slots and batch 4096, eagerly and from a CUDA graph.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("triton")

from foxhunt.agents.replay import reference as ref  # noqa: E402
from foxhunt.agents.replay.wide_per import WideTree, descend_torch, rebuild_torch, write_leaves_torch  # noqa: E402
from foxhunt.kernels.replay import wide as wk  # noqa: E402
from foxhunt.accel.graphs import capture  # noqa: E402

from tests.helpers import capture_guards  # noqa: E402

DEV = torch.device("cpu" if wk.is_interpreted() else "cuda")
CASES = [(1, 32), (3, 32), (33, 32), (37, 32), (1000, 32), (37, 4), (300, 4)]
F32_HALF_ULP = 2.0**-24


class Pair:
    """A torch-twin tree pair and a kernel tree pair (sum, min) of one shape, updated in step."""

    def __init__(self, capacity: int, branch: int, dtype: torch.dtype = torch.float32) -> None:
        self.ref = (WideTree(capacity, "sum", branch, dtype, DEV), WideTree(capacity, "min", branch, dtype, DEV))
        self.ker = (WideTree(capacity, "sum", branch, dtype, DEV), WideTree(capacity, "min", branch, dtype, DEV))
        self.max_ref, self.max_ker = torch.ones((), dtype=dtype, device=DEV), torch.ones((), dtype=dtype, device=DEV)
        self.kw = dict(branch=branch, depth=self.ref[0].depth)

    def write(self, idx: torch.Tensor, vals: torch.Tensor, full: bool = False) -> None:
        write_leaves_torch(self.ref, idx, vals, self.max_ref)
        rebuild_torch(self.ref, None if full else idx)
        wk.write_leaves(self.ker[0].tree, self.ker[1].tree, idx, vals, self.max_ker, **self.kw)
        wk.rebuild(self.ker[0].tree, self.ker[1].tree, None if full else idx, **self.kw)

    def assert_equal(self, what: object = None) -> None:
        assert torch.equal(self.ker[0].tree, self.ref[0].tree), what
        assert torch.equal(self.ker[1].tree, self.ref[1].tree), what
        assert torch.equal(self.max_ker, self.max_ref), what


def random_leaves(cap: int, g: torch.Generator, zeros: float = 0.25) -> torch.Tensor:
    """[cap] float32 priorities spanning ~6 decades, about ``zeros`` of them 0; never all 0."""
    v = torch.empty(cap, dtype=torch.float64, device=DEV).exponential_(generator=g)
    v = v * torch.pow(10.0, torch.empty(cap, dtype=torch.float64, device=DEV).uniform_(-3, 3, generator=g))
    v = torch.where(torch.rand(cap, device=DEV, generator=g) >= zeros, v, 0.0)
    v[cap // 2] = 1.0
    return v.to(torch.float32)


def check_against_float64(tree: WideTree) -> None:
    """Every internal node = float64 combination of its children within one float32 rounding
    (exact for min); padding holds the identity."""
    t = tree.tree.cpu().to(torch.float64).numpy()
    b = tree.branch
    for d in range(tree.depth):
        kids = t[tree.starts[d + 1]: tree.starts[d + 1] + b ** (d + 1)].reshape(-1, b)
        nodes = t[tree.starts[d]: tree.starts[d] + b**d]
        if tree.op == "sum":
            exact = kids.sum(1)
            np.testing.assert_array_less(np.abs(nodes - exact), F32_HALF_ULP * 1.0001 * np.abs(exact) + 1e-300)
        else:
            np.testing.assert_array_equal(nodes, kids.min(1))
    assert (t[: b - 1] == tree.identity).all() and (t[tree.starts[-1] + tree.capacity:] == tree.identity).all()


# ---------------------------------------------------------------------------------------------- updates
@pytest.mark.parametrize("capacity,branch", CASES)
def test_writes_and_rebuilds_equal_the_torch_twin_bitwise_and_float64_within_rounding(capacity, branch):
    """A bulk write (full rebuild) then batches of 1, 5, 64 with forced duplicates, zeros and
    NaN/inf cleaned as the sampler does (partial rebuilds); then a full rebuild changes nothing."""
    g = torch.Generator(DEV).manual_seed(capacity + branch)
    p = Pair(capacity, branch)
    p.write(torch.arange(capacity, device=DEV), random_leaves(capacity, g), full=True)
    p.assert_equal("bulk")
    expect = p.ref[0].leaves.cpu().to(torch.float64).numpy().copy()
    for step, b in enumerate([1, 5, 64, 64, 5, 1]):
        idx = torch.randint(0, capacity, (b,), device=DEV, generator=g)
        idx[: b // 3] = idx[b - b // 3:]  # duplicates
        raw = torch.randn(b, device=DEV, generator=g) * 3
        raw[::4] = 0.0
        if step == 2:
            raw[0], raw[-1] = float("nan"), float("inf")
        vals = torch.nan_to_num(raw.abs(), nan=0.0, posinf=0.0)
        p.write(idx, vals)
        p.assert_equal(step)
        for i, v in ref.dedupe_max(idx.cpu().numpy(), vals.cpu().numpy()).items():  # the batch's max
            expect[i] = v
    np.testing.assert_array_equal(p.ker[0].leaves.cpu().to(torch.float64).numpy(), expect)
    np.testing.assert_array_equal(p.ker[1].leaves[:capacity].cpu().to(torch.float64).numpy(), expect[:capacity])
    for t in p.ker:
        check_against_float64(t)
    before = [t.tree.clone() for t in p.ker]
    wk.rebuild(p.ker[0].tree, p.ker[1].tree, None, **p.kw)
    assert all(torch.equal(t.tree, b) for t, b in zip(p.ker, before))


def test_duplicate_writes_keep_the_max_whatever_their_order_and_drop_the_old_value():
    p = Pair(8, 4)
    idx = torch.tensor([3, 5, 3, 3, 5], device=DEV)
    vals = torch.tensor([1.0, 7.0, 4.0, 2.0, 6.0], device=DEV)
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        p.write(torch.tensor([3], device=DEV), torch.tensor([100.0], device=DEV))  # old, larger value
        p.write(idx[perm], vals[perm])
        p.assert_equal(perm)
        assert p.ker[0].leaves[[3, 5]].tolist() == [4.0, 7.0] and p.ker[0].root.item() == 11.0
        assert p.ker[1].root.item() == 4.0 and p.max_ker.item() == 100.0


def test_float64_trees_and_stride0_values_match_the_twin():
    g = torch.Generator(DEV).manual_seed(1)
    p = Pair(200, 4, torch.float64)
    p.write(torch.arange(200, device=DEV), random_leaves(200, g).double(), full=True)
    idx = torch.randint(0, 200, (64,), device=DEV, generator=g)
    p.write(idx, p.max_ref.clone().expand(64))  # "new transitions get the max priority"
    p.assert_equal()


# ---------------------------------------------------------------------------------------------- descent
def hard_prefixes(tree: WideTree, g: torch.Generator, n: int) -> torch.Tensor:
    """[n + extras] float64: uniform in [0, total) plus 0, the total ±1 ulp, 1.5·total, NaN, and
    the float64 running sums of the leaves (child boundaries) with their neighbours ±1 ulp."""
    total = tree.root.to(torch.float64)
    u = torch.rand(n, dtype=torch.float64, device=DEV, generator=g) * total
    c = torch.cumsum(tree.leaves.to(torch.float64), 0)[: tree.capacity]
    c = c[torch.randperm(c.shape[0], device=DEV, generator=g)[:100]]
    nan = torch.full((1,), float("nan"), dtype=torch.float64, device=DEV)
    up, down = torch.full_like(total, float("inf")), torch.zeros_like(total)
    edge = torch.cat([down, total, torch.nextafter(total, down), torch.nextafter(total, up), total * 1.5, nan])
    return torch.cat([u, edge, c, torch.nextafter(c, torch.zeros_like(c)), torch.nextafter(c, c + 1)])


def descend_both(tree: WideTree, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out_r, out_k = (torch.empty(u.shape, dtype=torch.int64, device=DEV) for _ in range(2))
    val_r, val_k = (torch.empty(u.shape, dtype=torch.float64, device=DEV) for _ in range(2))
    descend_torch(tree, u, out_r, val_r)
    wk.descend(tree.tree, u, out_k, val_k, branch=tree.branch, depth=tree.depth)
    assert torch.equal(out_k, out_r) and torch.equal(val_k, val_r)
    return out_k, val_k


@pytest.mark.parametrize("capacity,branch", CASES)
def test_descent_equals_the_twin_obeys_the_prefix_rule_and_never_picks_an_empty_leaf(capacity, branch):
    g = torch.Generator(DEV).manual_seed(7 * capacity + branch)
    p = Pair(capacity, branch)
    p.write(torch.arange(capacity, device=DEV), random_leaves(capacity, g), full=True)
    tree = p.ker[0]
    u = hard_prefixes(tree, g, 300)
    leaf, val = descend_both(tree, u)
    stored = tree.leaves.cpu().to(torch.float64).numpy()
    got = leaf.cpu().numpy()
    assert (got >= 0).all() and (got < capacity).all()
    assert (stored[got] > 0).all()  # never an empty leaf, even at or past the total or for NaN
    np.testing.assert_array_equal(val.cpu().numpy(), stored[got])
    # The prefix rule against float64 prefix sums, away from boundaries (rounding width: the
    # float32 rounding of the nodes on the path, depth · 2^-24 · total, doubled for margin).
    un = u.cpu().numpy()
    c = np.cumsum(stored)
    total = c[-1]
    inside = np.isfinite(un) & (un < total)
    tol = 2 * tree.depth * F32_HALF_ULP * total
    far = inside & (np.min(np.abs(un[:, None] - c[None, :]), axis=1) > tol) & (un > tol)
    assert far.sum() >= 250
    np.testing.assert_array_equal(got[far], np.searchsorted(c, un[far], side="right"))
    # At or past the total (and NaN): the rightmost non-empty leaf.
    last = int(np.flatnonzero(stored > 0)[-1])
    assert (got[~np.isfinite(un) | (un >= total * (1 + 1e-6))] == last).all()


def test_descent_clamps_to_the_last_positive_leaf_and_skips_zero_leaves_at_boundaries():
    t = WideTree(10, "sum", 4, device=DEV)
    m = WideTree(10, "min", 4, device=DEV)
    write_leaves_torch((t, m), torch.arange(5, device=DEV), torch.tensor([0.1, 0.2, 0.0, 0.3, 0.4], device=DEV))
    rebuild_torch((t, m), None)
    total = t.root.item()
    s = torch.tensor([0.1, 0.2, 0.0, 0.3, 0.4], dtype=torch.float32).double().cumsum(0).tolist()
    u = torch.tensor([0.0, s[0], s[1], 0.35, total * (1 - 1e-9), total, total * 1.5, -1.0], dtype=torch.float64,
                     device=DEV)
    leaf, _ = descend_both(t, u)
    assert leaf.tolist() == [0, 1, 3, 3, 4, 4, 4, 0]  # u = s[1] (= the empty leaf 2's start) goes to 3


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_kernels_equal_the_twin_at_1m_slots_batch_4096_eager_and_graphed():
    if wk.is_interpreted():
        pytest.skip("runs the compiled kernels")
    cap, b = 1 << 20, 4096
    g = torch.Generator(DEV).manual_seed(11)
    p = Pair(cap, 32)
    assert p.ref[0].depth == 4
    p.write(torch.arange(cap, device=DEV), random_leaves(cap, g, zeros=0.1), full=True)
    p.assert_equal("bulk")
    for step in range(10):
        idx = torch.randint(0, cap, (b,), device=DEV, generator=g)
        idx[: b // 2] = idx[b // 2:].flip(0)  # heavy duplicates: atomic-max races
        idx[:64] = idx[0]
        p.write(idx, torch.rand(b, device=DEV, generator=g) * 10)
        p.assert_equal(step)
        u = hard_prefixes(p.ker[0], g, b)
        descend_both(p.ker[0], u)
    for t in p.ker:
        check_against_float64(t)
    # One captured update + descent replays like eager.
    idx = torch.randint(0, cap, (b,), device=DEV, generator=g)
    vals = torch.rand(b, device=DEV, generator=g)
    u = torch.rand(b, dtype=torch.float64, device=DEV, generator=g) * p.ker[0].root.double()
    out = torch.empty(b, dtype=torch.int64, device=DEV)
    val = torch.empty(b, dtype=torch.float64, device=DEV)

    def step() -> None:
        wk.write_leaves(p.ker[0].tree, p.ker[1].tree, idx, vals, p.max_ker, **p.kw)
        wk.rebuild(p.ker[0].tree, p.ker[1].tree, idx, **p.kw)
        wk.descend(p.ker[0].tree, u, out, val, **p.kw)

    graph = capture(step, DEV, during_capture=lambda: capture_guards(DEV))  # the warm-up call compiles
    vals.mul_(2.0)
    graph.replay()
    write_leaves_torch(p.ref, idx, vals, p.max_ref)
    rebuild_torch(p.ref, idx)
    p.assert_equal("graph")
    out_r, val_r = torch.empty_like(out), torch.empty_like(val)
    descend_torch(p.ref[0], u, out_r, val_r)
    assert torch.equal(out, out_r) and torch.equal(val, val_r)
