"""Sum / min tree: exact level-wise rebuilds, deterministic duplicate writes, batched descent."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agents.replay import ProportionalPER, ReplayStorage, SegmentTree
from foxhunt.agents.replay import reference as ref

F32_HALF_ULP = 2.0**-24  # relative rounding of one float32 add


def check_tree_consistent(tree: SegmentTree) -> None:
    """Every internal node = float64 combination of its two children, within one float32 rounding."""
    t = tree.tree.cpu().to(torch.float64).numpy()
    kids = t[2 : 2 * tree.n_leaves].reshape(-1, 2)  # children of nodes 1 .. n_leaves-1
    nodes = t[1 : tree.n_leaves]
    if tree.op == "sum":
        exact = kids.sum(1)
        np.testing.assert_array_less(np.abs(nodes - exact), F32_HALF_ULP * np.abs(exact) + 1e-300)
    else:
        np.testing.assert_array_equal(nodes, kids.min(1))


@pytest.mark.parametrize("capacity", [1, 2, 5, 100, 1000])
def test_tree_has_power_of_two_leaves_and_identity_padding(capacity):
    t = SegmentTree(capacity, "sum")
    assert t.n_leaves >= capacity and t.n_leaves & (t.n_leaves - 1) == 0 and t.n_leaves < 2 * max(capacity, 1)
    assert len(t.levels) == t.depth + 1 and t.levels[0].shape == (1,)
    m = SegmentTree(capacity, "min")
    assert torch.isinf(m.leaves).all() and m.root.item() == float("inf")


@pytest.mark.parametrize("rebuild", ["partial", "full"])
def test_random_priority_updates_with_duplicates_match_the_float64_reference(device, rng, rebuild):
    cap, alpha, eps = 100, 0.6, 1e-3
    st = ReplayStorage(cap, device=device)
    per = ProportionalPER(st, alpha=alpha, eps=eps, rebuild=rebuild)
    expect = np.zeros(per.sum_tree.n_leaves)
    td0 = rng.exponential(1.0, cap)
    per.on_add(torch.arange(cap, device=device), torch.tensor(td0, dtype=torch.float32, device=device))
    expect[:cap] = ref.proportional_priorities(td0.astype(np.float32), alpha, eps)
    seen_max = max(1.0, expect.max())
    for step in range(30):
        b = int(rng.integers(1, 64))
        idx = rng.integers(0, cap, b)
        idx[: b // 3] = idx[-(b // 3) or b :][: b // 3]  # force duplicates
        td = rng.normal(0, 2.0, b).astype(np.float32)
        if step == 7:
            td[0] = np.nan  # a non-finite TD error counts as 0
        per.update_priorities(torch.tensor(idx, device=device), torch.tensor(td, device=device))
        for i, v in ref.dedupe_max(idx, ref.proportional_priorities(td, alpha, eps)).items():
            expect[i] = v
            seen_max = max(seen_max, v)
    np.testing.assert_allclose(per.sum_tree.leaves.cpu().numpy(), expect, rtol=2e-6)
    check_tree_consistent(per.sum_tree)
    check_tree_consistent(per.min_tree)
    leaves = per.sum_tree.leaves.cpu().to(torch.float64).numpy()
    assert abs(per.total.item() - leaves.sum()) <= per.sum_tree.depth * F32_HALF_ULP * leaves.sum()
    assert per.min_tree.root.item() == per.sum_tree.leaves[:cap].min().item()
    assert per.max_priority.item() == pytest.approx(seen_max, rel=2e-6)  # max ever written


def test_partial_rebuild_is_bitwise_equal_to_a_full_rebuild(device, rng):
    for op in ("sum", "min"):
        t = SegmentTree(1000, op, device=device)
        t.assign(torch.arange(1000, device=device), torch.tensor(rng.random(1000), device=device))
        t.rebuild_full()
        for _ in range(5):
            idx = torch.tensor(rng.integers(0, 1000, 200), device=device)
            t.assign(idx, torch.tensor(rng.random(200) * 10, device=device))
            t.rebuild_partial(idx)
            full = t.tree.clone()
            t.rebuild_full()
            assert torch.equal(t.tree, full), op


def test_duplicate_leaf_writes_keep_the_max_whatever_their_order(device):
    t = SegmentTree(8, "sum", device=device)
    idx = torch.tensor([3, 5, 3, 3, 5], device=device)
    vals = torch.tensor([1.0, 7.0, 4.0, 2.0, 6.0], device=device)
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        t.clear()
        t.assign(idx[perm], vals[perm])
        t.rebuild_partial(idx[perm])
        assert t.leaves[[3, 5]].tolist() == [4.0, 7.0] and t.root.item() == 11.0


@pytest.mark.parametrize("search_level", [0, 4, 99])  # binary from the root / mixed / searchsorted only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_descent_finds_the_reference_leaf_of_each_prefix(device, rng, dtype, search_level):
    cap = 300
    t = SegmentTree(cap, "sum", dtype, device, search_level=search_level)
    leaves = rng.exponential(1.0, cap) * (rng.random(cap) > 0.2)  # some zero leaves
    t.assign(torch.arange(cap, device=device), torch.tensor(leaves, device=device))
    t.rebuild_full()
    stored = t.leaves[:cap].cpu().to(torch.float64).numpy()
    total = t.root.item()
    u = rng.random(5000) * total
    got = t.find_prefix(torch.tensor(u, device=device)).cpu().numpy()
    want = ref.prefix_to_leaf(stored, u)
    c = np.cumsum(stored)
    tol = 1e-5 * total if dtype == torch.float32 else 1e-12 * total
    far = np.min(np.abs(u[:, None] - c[None, :]), axis=1) > tol  # not at a boundary (rounding)
    assert far.mean() > 0.9
    np.testing.assert_array_equal(got[far], want[far])
    assert (stored[got] > 0).all()  # never an empty leaf


@pytest.mark.parametrize("search_level", [0, 1, 2, 4])
def test_descent_never_returns_an_empty_leaf_at_or_past_the_total(device, search_level):
    t = SegmentTree(10, "sum", device=device, search_level=search_level)
    t.assign(torch.arange(5, device=device), torch.tensor([0.1, 0.2, 0.0, 0.3, 0.4], device=device))
    t.rebuild_full()
    total = t.root.item()
    u = torch.tensor([0.0, 0.35, total * (1 - 1e-9), total, total * 1.5], dtype=torch.float64, device=device)
    assert t.find_prefix(u).tolist() == [0, 3, 4, 4, 4]
