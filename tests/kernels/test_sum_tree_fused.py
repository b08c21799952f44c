"""The fused replay trees (``foxhunt.kernels.replay.binary``) give the torch ``SegmentTree`` /
``ProportionalPER`` bits: the same leaves from the descent, the same sum and min trees after
updates, the same samples and IS weights from a sampler.

Without CUDA the kernels run in the Triton interpreter (TRITON_INTERPRET=1, set here before Triton
is imported; CI sets it too) on small trees. The interpreter runs a program's lanes in lockstep, so
it checks the arithmetic and the level order, not the GPU's barriers and atomics: the GPU tests
repeat the claims compiled on CUDA at 1 M slots and batch 4096, eagerly and from a CUDA graph.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

pytest.importorskip("triton")

from foxhunt.agents.replay import ProportionalPER, ReplayStorage, SegmentTree  # noqa: E402
from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.agents.replay import fused as replay_fused  # noqa: E402
from foxhunt.kernels.replay import binary as sf  # noqa: E402
from foxhunt.accel.graphs import capture  # noqa: E402
from foxhunt.testing import cuda_sync_errors, forbid_host_reads  # noqa: E402
from tests.helpers import capture_guards  # noqa: E402

DEV = torch.device("cpu" if sf.is_interpreted() else "cuda")
CAPACITIES = [1, 3, 37, 1000, 4096]


def random_leaves(cap: int, g: torch.Generator, dtype: torch.dtype, zeros: float = 0.25) -> torch.Tensor:
    """[cap] exponential priorities, about ``zeros`` of them 0 (empty slots), spanning ~6 decades."""
    v = torch.empty(cap, dtype=torch.float64, device=DEV).exponential_(generator=g)
    v = v * torch.pow(10.0, torch.empty(cap, dtype=torch.float64, device=DEV).uniform_(-3, 3, generator=g))
    keep = torch.rand(cap, device=DEV, generator=g) >= zeros
    return torch.where(keep, v, 0.0).to(dtype)


def tree_pair(cap: int, op: str, dtype: torch.dtype, search_level: int = 16) -> tuple[SegmentTree, SegmentTree]:
    """(torch tree, fused tree) of the same shape."""
    return (SegmentTree(cap, op, dtype, DEV, search_level),
            SegmentTree(cap, op, dtype, DEV, search_level, backend="fused"))


def hard_prefixes(tree: SegmentTree, g: torch.Generator, n: int) -> torch.Tensor:
    """[n + extras] float64: uniform in [0, total) plus the rounding-sensitive values: 0, the total,
    just below and above it, 1.5·total, NaN, and the float64 running sums of the leaves (segment
    boundaries, where left/right is decided by an exact tie)."""
    total = tree.root.to(torch.float64)
    u = torch.rand(n, dtype=torch.float64, device=DEV, generator=g) * total
    s = min(tree.depth, tree.search_level)
    bounds = torch.cat([torch.cumsum(tree.leaves.to(torch.float64), 0)[:64],
                        torch.cumsum(tree.levels[s].to(torch.float64), 0)[:64]])  # the searchsorted's ties
    nan = torch.full((1,), float("nan"), dtype=torch.float64, device=DEV)
    edge = torch.cat([torch.zeros_like(total), total, total * (1 - 2**-52), total * (1 + 2**-52), total * 1.5, nan])
    return torch.cat([u, edge, bounds, torch.nextafter(bounds, torch.zeros_like(bounds))])


# ---------------------------------------------------------------------------------------------- descent
def scan_with_ulps(monkeypatch, bumped: list[int]) -> None:
    """Make torch's float64 cumsum raise the running sum at ``bumped`` indices by one ulp, as CUDA's
    parallel scan may (a zero node's sum can then exceed its left neighbour's): both paths read it."""
    real = torch.cumsum

    def cumsum(x, dim, *args, **kw):
        out = real(x, dim, *args, **kw)
        if out.dtype == torch.float64 and out.dim() == 1:
            for i in (i for i in bumped if i < out.shape[0]):
                out[i] = torch.nextafter(out[i], torch.tensor(float("inf"), dtype=out.dtype, device=out.device))
        return out

    monkeypatch.setattr(torch, "cumsum", cumsum)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_running_sum_an_ulp_high_never_sends_a_prefix_to_an_empty_leaf(monkeypatch, dtype):
    # The H200 found this (bench/results/sanitizer_cuda.json): a zero leaf whose running sum lies an
    # ulp above its neighbour's owned the prefix at that boundary. Both paths now take the next leaf
    # with mass at the searchsorted level, and never descend into an empty left child.
    leaves = torch.tensor([1.0, 0.0, 2.0, 0.0, 0.0, 2.0, 3.0, 1.0], dtype=dtype, device=DEV)
    scan_with_ulps(monkeypatch, [1, 3])  # level 3 (the leaves): zero leaves 1 and 3 an ulp wide
    for search_level, u, want in ((3, 1.0, 2), (3, 3.0, 5), (1, 3.0, 5)):  # level 1: [3, 6], its sum 9 + ulp
        for tree in tree_pair(8, "sum", dtype, search_level):
            tree.assign(torch.arange(8, device=DEV), leaves)
            tree.rebuild_full()
            got = tree.find_prefix(torch.tensor([u], dtype=torch.float64, device=DEV))
            assert int(got[0]) == want and float(leaves[want]) > 0


@pytest.mark.parametrize("fused", [False, True])
def test_a_remainder_rounded_below_zero_does_not_enter_an_empty_left_child(monkeypatch, fused):
    # Level 1 = [2, 6]; its running sum 8 + ulp makes node 1's start 2 + ulp, so the prefix 2.0 enters
    # node 1 with a remainder of -ulp: the old descent went left into leaf 4 (priority 0).
    leaves = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 2.0, 3.0, 1.0], dtype=torch.float64, device=DEV)
    scan_with_ulps(monkeypatch, [1])
    tree = tree_pair(8, "sum", torch.float64, 1)[int(fused)]
    tree.assign(torch.arange(8, device=DEV), leaves)
    tree.rebuild_full()
    assert int(tree.find_prefix(torch.tensor([2.0], dtype=torch.float64, device=DEV))[0]) == 5


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("search_level", [0, 3, 16])
def test_fused_descent_returns_the_torch_find_prefix_leaves_bit_for_bit(capacity, dtype, search_level):
    g = torch.Generator(DEV).manual_seed(capacity * 7 + search_level)
    ref, fused = tree_pair(capacity, "sum", dtype, search_level)
    leaves = random_leaves(capacity, g, dtype)
    leaves[torch.randint(0, capacity, (1,), device=DEV, generator=g)] = 1.0  # never an all-empty tree
    for t in (ref, fused):
        t.assign(torch.arange(capacity, device=DEV), leaves)
        t.rebuild_full()
    u = hard_prefixes(ref, g, 300)
    want = ref.find_prefix(u)
    value = torch.empty_like(u)
    got = fused.find_prefix(u, value_out=value)
    finite = ~torch.isnan(u)
    assert (ref.leaves.index_select(0, got[finite]) > 0).all()  # never an empty slot
    assert torch.equal(value, fused.leaves.index_select(0, got).to(torch.float64))
    if DEV.type == "cuda" and dtype == torch.float64:
        # On CUDA torch's float64 cumsum is a parallel scan: at an exact segment boundary (the bounds in
        # hard_prefixes) its rounding may send a prefix one leaf the other way; everywhere else: equal.
        n = 300 + 6
        assert torch.equal(got[:n], want[:n])
        leaves64 = ref.leaves.to(torch.float64).cpu()
        start = torch.cumsum(leaves64, 0) - leaves64  # each leaf's segment start, summed in order on the host
        tol = 1e-12 * float(ref.root)
        for a, b, x in zip(got[n:].tolist(), want[n:].tolist(), u[n:].cpu().tolist()):
            assert a == b or min(abs(float(start[a]) - x), abs(float(start[b]) - x),
                                 abs(float(start[a] + leaves64[a]) - x), abs(float(start[b] + leaves64[b]) - x)) <= tol
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("search_level", [2, 5])
def test_fused_descent_follows_torchs_binary_search_even_on_a_non_monotone_running_sum(search_level):
    """Negative 'priorities' make the running sum of level s unsorted: searchsorted's answer is then
    a property of its exact loop, which the kernel reproduces (so a CUDA scan's rounding can never
    make the two disagree)."""
    g = torch.Generator(DEV).manual_seed(5)
    ref, fused = tree_pair(200, "sum", torch.float32, search_level)
    v = torch.randn(200, device=DEV, generator=g)
    for t in (ref, fused):
        t.assign(torch.arange(200, device=DEV), v)
        t.rebuild_full()
    u = torch.randn(500, dtype=torch.float64, device=DEV, generator=g) * 8
    assert torch.equal(fused.find_prefix(u), ref.find_prefix(u))


def test_fused_descent_writes_into_given_buffers_and_accepts_a_search_level_override():
    g = torch.Generator(DEV).manual_seed(1)
    ref, fused = tree_pair(1000, "sum", torch.float32)
    v = random_leaves(1000, g, torch.float32, zeros=0.0)
    for t in (ref, fused):
        t.update(torch.arange(1000, device=DEV), v)
    u = hard_prefixes(ref, g, 100)
    out = torch.full(u.shape, -1, dtype=torch.int64, device=DEV)
    for s in (0, 4, 10, 99):
        assert fused.find_prefix(u, s, out=out) is out
        assert torch.equal(out, ref.find_prefix(u, s))


# ---------------------------------------------------------------------------------------------- updates
@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_update_leaves_sum_and_min_trees_bitwise_equal_to_torch(capacity, dtype):
    """Batches of 1, 5 and 64 indices (duplicates forced, zeros, values cleaned of NaN/inf as the
    sampler does), each written to a torch and a fused tree of either op: equal trees after each,
    and equal to a full rebuild."""
    g = torch.Generator(DEV).manual_seed(capacity)
    pairs = {op: tree_pair(capacity, op, dtype) for op in ("sum", "min")}
    for step, b in enumerate([1, 5, 64, 64, 5, 1, 64]):
        idx = torch.randint(0, capacity, (b,), device=DEV, generator=g)
        idx[: b // 3] = idx[b - b // 3:]  # duplicates
        raw = torch.randn(b, device=DEV, generator=g) * 3
        raw[::4] = 0.0
        if step == 2:
            raw[0], raw[-1] = float("nan"), float("inf")
        vals = torch.nan_to_num(raw.abs(), nan=0.0, posinf=0.0).to(dtype)
        for op, (ref, fused) in pairs.items():
            ref.assign(idx, vals)
            ref.rebuild_partial(idx)
            fused.update(idx, vals)
            assert torch.equal(fused.tree, ref.tree), (op, step)
    for op, (ref, fused) in pairs.items():
        ref.rebuild_full()
        assert torch.equal(fused.tree, ref.tree), op


@pytest.mark.parametrize("capacity", [37, 4096])
def test_fused_pair_update_equals_torch_writes_rebuilds_and_running_max(capacity):
    """One launch for both trees and the max priority, as ``ProportionalPER`` uses it, against the
    torch sequence (assign both, full rebuild both, maximum); values read through a stride-0 view."""
    g = torch.Generator(DEV).manual_seed(3)
    ref_s, ref_m = SegmentTree(capacity, "sum", device=DEV), SegmentTree(capacity, "min", device=DEV)
    fus_s, fus_m = SegmentTree(capacity, "sum", device=DEV), SegmentTree(capacity, "min", device=DEV)
    ref_max, fus_max = torch.ones((), device=DEV), torch.ones((), device=DEV)
    for b in (64, 5, 1, 64):
        idx = torch.randint(0, capacity, (b,), device=DEV, generator=g)
        vals = torch.rand(b, device=DEV, generator=g) * 4
        for at_max in (False, True):  # td values, then "new transitions get the max" (stride 0)
            vr = ref_max.clone().expand(b) if at_max else vals
            for t in (ref_s, ref_m):
                t.assign(idx, vr)
                t.rebuild_full()
            torch.maximum(ref_max, vr.max(), out=ref_max)
            sf.write_rebuild(fus_s.tree, idx, fus_max.expand(b) if at_max else vals, depth=fus_s.depth, op="sum",
                             other=fus_m.tree, other_op="min", running_max=fus_max)
            assert torch.equal(fus_s.tree, ref_s.tree) and torch.equal(fus_m.tree, ref_m.tree)
            assert torch.equal(fus_max, ref_max)


def test_fused_duplicate_leaf_writes_keep_the_max_whatever_their_order():
    t = SegmentTree(8, "sum", device=DEV, backend="fused")
    idx = torch.tensor([3, 5, 3, 3, 5], device=DEV)
    vals = torch.tensor([1.0, 7.0, 4.0, 2.0, 6.0], device=DEV)
    for perm in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        t.clear()
        t.leaves[3] = 100.0  # an old value larger than every new one is overwritten, not kept
        t.update(idx[perm], vals[perm])
        assert t.leaves[[3, 5]].tolist() == [4.0, 7.0] and t.root.item() == 11.0


# ---------------------------------------------------------------------------------------------- sampler
def per_pair(capacity: int, **kw) -> tuple[ReplayStorage, ProportionalPER, ProportionalPER]:
    storage = ReplayStorage(capacity, device=DEV)
    return storage, ProportionalPER(storage, seed=4, **kw), ProportionalPER(storage, seed=4, backend="fused", **kw)


def add_rows(storage: ReplayStorage, n: int, g: torch.Generator) -> torch.Tensor:
    from foxhunt.agents.replay import Transitions

    bar = torch.randint(0, 1000, (n,), device=DEV, generator=g)
    pf = torch.randn(n, 3, device=DEV, generator=g)
    return storage.add(Transitions(bar, pf, bar % 45, torch.randn(n, device=DEV, generator=g),
                                   torch.zeros(n, dtype=torch.bool, device=DEV), bar + 1, pf))


@pytest.mark.parametrize("kw", [
    dict(),
    dict(weight_norm="batch", rebuild="partial", search_level=0),
    dict(dtype=torch.float64, search_level=3, alpha=0.9),
], ids=["default", "batch-norm-partial-s0", "float64-s3"])
def test_fused_proportional_per_samples_the_same_indices_and_weights_as_torch(kw):
    """add / sample / update sequences (growing then wrapping buffer, TD errors with NaN and ±inf,
    new rows at the max priority and at given |δ|): equal indices, weights, trees and max priority."""
    g = torch.Generator(DEV).manual_seed(9)
    storage, ref, fused = per_pair(300, **kw)
    for step in range(12):
        slots = add_rows(storage, 40, g)
        td_abs = None if step % 3 == 0 else torch.rand(40, device=DEV, generator=g) * 2
        ref.on_add(slots, td_abs)
        fused.on_add(slots, td_abs)
        ref.set_beta(0.4 + 0.05 * step)
        fused.set_beta(0.4 + 0.05 * step)
        for b in (64, 5):
            i_ref, w_ref = (t.clone() for t in ref.sample(b))
            i_fus, w_fus = fused.sample(b)
            assert torch.equal(i_fus, i_ref) and torch.equal(w_fus, w_ref), (step, b)
            td = torch.randn(b, device=DEV, generator=g) * 3
            td[0] = float("nan") if step % 2 else float("inf")
            ref.update_priorities(i_ref, td)
            fused.update_priorities(i_fus, td)
        assert torch.equal(fused.sum_tree.tree, ref.sum_tree.tree)
        assert torch.equal(fused.min_tree.tree, ref.min_tree.tree)
        assert torch.equal(fused.max_priority, ref.max_priority)


def test_fused_sample_and_update_do_no_host_reads():
    g = torch.Generator(DEV).manual_seed(2)
    storage, _, fused = per_pair(200)
    fused.on_add(add_rows(storage, 200, g), torch.rand(200, device=DEV, generator=g))
    td = torch.randn(32, device=DEV, generator=g)
    idx, _ = fused.sample(32)  # compile / warm up outside the guard
    with forbid_host_reads(), cuda_sync_errors(DEV):
        for _ in range(3):
            idx, w = fused.sample(32)
            fused.update_priorities(idx, td)
            fused.on_add(idx)


def test_fused_trees_name_why_they_cannot_run(monkeypatch):
    assert replay_fused.unsupported(DEV) is None
    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: False)
    reason = replay_fused.unsupported("cpu")
    assert reason is not None and "TRITON_INTERPRET" in reason
    with pytest.raises(ValueError, match="ProportionalPER: fused .*TRITON_INTERPRET"):
        ProportionalPER(ReplayStorage(64, device="cpu"), backend="fused")
    with pytest.raises(ValueError, match="SegmentTree: fused"):
        SegmentTree(64, backend="fused")
    ProportionalPER(ReplayStorage(64, device="cpu"))  # the torch path never needs Triton
    with pytest.raises(ValueError, match="ProportionalPER: backend must be 'torch' or 'fused', got True"):
        ProportionalPER(ReplayStorage(64, device="cpu"), backend=True)  # the old fused=bool vocabulary


def test_dqn_trainer_with_fused_replay_trains_like_the_torch_replay():
    """The plan's ``replay = "fused"`` reaches the sampler; one epoch of two same-seed trainers gives
    the same trees and the same network (every sample and priority update was equal)."""
    if not sf.is_interpreted():
        pytest.skip("two CUDA trainers are not bitwise reproducible (learner); the GPU tests compare the sampler")
    from tests.agents.dqn_helpers import small_market, small_trainer

    a = small_trainer(small_market(device=DEV), seed=3)
    b = small_trainer(small_market(device=DEV), seed=3, replay="fused")
    assert b.replay.sampler.backend == "fused" and a.replay.sampler.backend == "torch"
    a.run_epoch()
    b.run_epoch()
    assert not torch.equal(a.learner.flat.data, a.learner._init_weights)  # it did train (sample + update)
    sa, sb = a.replay.sampler, b.replay.sampler
    assert torch.equal(sb.sum_tree.tree, sa.sum_tree.tree) and torch.equal(sb.min_tree.tree, sa.min_tree.tree)
    assert torch.equal(b.learner.flat.data, a.learner.flat.data)


# ---------------------------------------------------------------------------------------------- GPU
def _gpu_only() -> None:
    if sf.is_interpreted():
        pytest.skip("runs the compiled kernels")


@pytest.mark.gpu
@pytest.mark.parametrize("search_level", [0, 16])
def test_gpu_fused_descent_and_update_equal_torch_at_1m_slots_and_batch_4096(search_level):
    _gpu_only()
    cap, b = 1 << 20, 4096
    g = torch.Generator(DEV).manual_seed(11)
    pairs = {op: tree_pair(cap, op, torch.float32, search_level) for op in ("sum", "min")}
    init = random_leaves(cap, g, torch.float32, zeros=0.1)
    for op, (ref, fused) in pairs.items():
        ref.update(torch.arange(cap, device=DEV), init)
        fused.update(torch.arange(cap, device=DEV), init)  # B > 4096: the chunked single-CTA loop
        assert torch.equal(fused.tree, ref.tree), op
    for step in range(20):
        idx = torch.randint(0, cap, (b,), device=DEV, generator=g)
        idx[: b // 2] = idx[b // 2:].flip(0)  # heavy duplicates: atomic-max races
        idx[:64] = idx[0]
        vals = torch.rand(b, device=DEV, generator=g) * 10
        for op, (ref, fused) in pairs.items():
            ref.update(idx, vals)
            fused.update(idx, vals)
            assert torch.equal(fused.tree, ref.tree), (op, step)
        ref, fused = pairs["sum"]
        u = hard_prefixes(ref, g, b)
        assert torch.equal(fused.find_prefix(u), ref.find_prefix(u)), step


@pytest.mark.gpu
def test_gpu_fused_per_sample_update_captured_in_a_cuda_graph_replays_like_eager_torch():
    _gpu_only()
    cap, b, steps = 1 << 20, 4096, 8
    storage = ReplayStorage(cap, device=DEV)
    g = torch.Generator(DEV).manual_seed(0)
    for _ in range(cap // (1 << 16)):
        add_rows(storage, 1 << 16, g)
    td0 = torch.rand(cap, device=DEV, generator=g) * 3
    slots = torch.arange(cap, device=DEV)
    ref, fused = ProportionalPER(storage, seed=1), ProportionalPER(storage, seed=1, backend="fused")
    for s in (ref, fused):
        s.on_add(slots, td0)
    counter = torch.zeros((), device=DEV)
    idx_log = torch.zeros((steps, b), dtype=torch.int64, device=DEV)
    w_log = torch.zeros((steps, b), device=DEV)

    def step(sampler: ProportionalPER, k: int) -> None:
        idx, w = sampler.sample(b)
        idx_log[k].copy_(idx)
        w_log[k].copy_(w)
        sampler.update_priorities(idx, torch.sin(idx.to(torch.float32) * 0.37 + counter))
        counter.add_(1.0)

    snap = (fused.sum_tree.tree.clone(), fused.min_tree.tree.clone(), fused.max_priority.clone())
    warm = iter([True])  # the warm-up call (compiles the kernels) is step 0 only

    def body() -> None:
        for k in range(1 if next(warm, False) else steps):
            step(fused, k)

    graph = capture(body, DEV, generators=[fused.generator], during_capture=lambda: capture_guards(DEV))
    fused.sum_tree.tree.copy_(snap[0])
    fused.min_tree.tree.copy_(snap[1])
    fused.max_priority.copy_(snap[2])
    fused.reseed(1)
    counter.zero_()
    graph.replay()
    torch.cuda.synchronize()
    got_idx, got_w = idx_log.clone(), w_log.clone()
    counter.zero_()
    for k in range(steps):
        step(ref, k)
    assert torch.equal(got_idx, idx_log) and torch.equal(got_w, w_log)
    assert torch.equal(fused.sum_tree.tree, ref.sum_tree.tree) and torch.equal(fused.min_tree.tree, ref.min_tree.tree)
    assert torch.equal(fused.max_priority, ref.max_priority)
