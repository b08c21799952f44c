"""WidePER (proportional PER on 32-ary trees): frequencies follow the priorities (chi-square
against the float64 reference), IS weights follow the paper's formula, the Triton kernels and the
torch twin give the same samples, weights and trees, no host reads, and a DQN trainer runs on it.

The Triton backend runs in the interpreter without CUDA (TRITON_INTERPRET=1, set here before Triton
is imported); the frequency tests use the torch twin, the interpreter being slow per operation.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy.stats import chisquare  # noqa: E402

from foxhunt.agents.replay import ReplayBuffer, ReplayStorage, WidePER  # noqa: E402
from foxhunt.agents.replay import reference as ref  # noqa: E402
from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.agents.replay import fused as replay_fused  # noqa: E402
from foxhunt.accel.graphs import capture  # noqa: E402
from foxhunt.testing import cuda_sync_errors, forbid_host_reads  # noqa: E402
from tests.helpers import capture_guards  # noqa: E402
from tests.agents.test_replay_storage import make_transitions  # noqa: E402

N_LEAVES = 100
DRAWS = 204_800
BATCH = 2048
TRITON = replay_fused.unsupported("cuda" if torch.cuda.is_available() else "cpu") is None
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
needs_triton = pytest.mark.skipif(not TRITON, reason="Triton kernels need CUDA or TRITON_INTERPRET=1")


def filled(n: int, device, capacity: int | None = None) -> ReplayStorage:
    st = ReplayStorage(capacity or n, device=device)
    st.add(make_transitions(n, device))
    return st


@pytest.mark.parametrize("branch", [32, 4])
def test_wide_frequencies_match_priorities_chisquare(device, rng, branch):
    st = filled(N_LEAVES, device, capacity=120)
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s = WidePER(st, alpha=0.7, eps=1e-2, branch=branch, seed=2, backend="torch")
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    out = torch.zeros(s.capacity, dtype=torch.int64, device=device)
    for _ in range(DRAWS // BATCH):
        idx, _ = s.sample(BATCH)
        out.add_(torch.bincount(idx, minlength=s.capacity))
    c = out.cpu().numpy()
    assert c[N_LEAVES:].sum() == 0, "sampled an empty slot"
    expected = ref.proportional_probs(ref.proportional_priorities(td, 0.7, 1e-2)) * c.sum()
    assert expected.min() >= 5
    assert chisquare(c[:N_LEAVES], expected).pvalue > 1e-3


@pytest.mark.parametrize("norm", ["buffer", "batch"])
def test_wide_is_weights_equal_the_paper_formula(device, rng, norm):
    st = filled(N_LEAVES, device, capacity=128)
    s = WidePER(st, alpha=0.6, beta=0.4, eps=1e-3, weight_norm=norm, seed=4, backend="torch")
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    s.set_beta(0.7)  # annealed in place
    idx, w = s.sample(512)
    probs = ref.proportional_probs(ref.proportional_priorities(td, 0.6, 1e-3))
    np.testing.assert_allclose(w.cpu().numpy(), ref.is_weights(probs, idx.cpu().numpy(), 0.7, norm), rtol=2e-6)
    assert w.max().item() <= 1.0


def test_wide_priorities_new_max_duplicates_and_clear_match_the_reference(device, rng):
    cap, alpha, eps = 100, 0.6, 1e-3
    st = ReplayStorage(cap, device=device)
    s = WidePER(st, alpha=alpha, eps=eps, backend="torch")
    s.on_add(st.add(make_transitions(4, device)))
    assert s.sum_tree.leaves[:4].tolist() == [1.0] * 4  # p1 = 1 (paper)
    expect = np.zeros(s.sum_tree.n_leaves)
    expect[:4] = 1.0
    seen = 1.0
    for step in range(20):
        b = int(rng.integers(1, 64))
        idx = rng.integers(0, 4, b)
        td = rng.normal(0, 2.0, b).astype(np.float32)
        if step == 7:
            td[0] = np.nan  # counts as 0
        s.update_priorities(torch.tensor(idx, device=device), torch.tensor(td, device=device))
        for i, v in ref.dedupe_max(idx, ref.proportional_priorities(td, alpha, eps)).items():
            expect[i], seen = v, max(seen, v)
    np.testing.assert_allclose(s.sum_tree.leaves.cpu().numpy(), expect, rtol=2e-6)
    assert s.max_priority.item() == pytest.approx(seen, rel=2e-6)
    s.on_add(st.add(make_transitions(2, device)))  # new rows at the max seen
    assert s.sum_tree.leaves[4:6].tolist() == [s.max_priority.item()] * 2
    assert s.total.item() == pytest.approx(s.sum_tree.leaves.double().sum().item(), rel=1e-6)
    assert s.min_tree.root.item() == s.sum_tree.leaves[:6].min().item()
    s.clear()
    assert s.total.item() == 0 and s.min_tree.root.item() == float("inf") and s.max_priority.item() == 1.0


@needs_triton
@pytest.mark.parametrize("capacity", [1, 3, 33, 37, 1000])
def test_triton_and_torch_backends_give_the_same_samples_weights_and_trees(capacity):
    """add / sample / update sequences (growing then wrapping buffer, TD errors with NaN and ±inf,
    new rows at the max priority and at given |δ|, batches 1, 5, 64): bitwise equal."""
    g = torch.Generator(DEV).manual_seed(capacity)
    st = ReplayStorage(capacity, device=DEV)
    a, b = WidePER(st, seed=3, backend="torch"), WidePER(st, seed=3, backend="fused", weight_norm="buffer")
    for step in range(6):
        n = min(capacity, 1 + 17 * step % 50)
        slots = st.add(make_transitions(n, DEV, start=100 * step))
        td_abs = None if step % 3 == 0 else torch.rand(n, device=DEV, generator=g) * 2
        for s in (a, b):
            s.on_add(slots, td_abs)
            s.set_beta(0.4 + 0.1 * step)
        for batch in (1, 5, 64):
            i_a, w_a = (t.clone() for t in a.sample(batch))
            i_b, w_b = b.sample(batch)
            assert torch.equal(i_b, i_a) and torch.equal(w_b, w_a), (step, batch)
            td = torch.randn(batch, device=DEV, generator=g) * 3
            td[0] = float("nan") if step % 2 else float("inf")
            a.update_priorities(i_a, td)
            b.update_priorities(i_b, td)
        assert torch.equal(b.sum_tree.tree, a.sum_tree.tree) and torch.equal(b.min_tree.tree, a.min_tree.tree)
        assert torch.equal(b.max_priority, a.max_priority)


@pytest.mark.parametrize("backend", ["torch", pytest.param("fused", marks=needs_triton)])
def test_wide_add_sample_update_do_no_host_reads(backend):
    st = ReplayStorage(50, device=DEV)
    replay = ReplayBuffer(st, WidePER(st, backend=backend, weight_norm="batch"))
    batches = [make_transitions(16, DEV, start=16 * i) for i in range(4)]
    replay.add(batches[0])
    replay.sampler.sample(32)  # the first call of a size allocates its buffers
    with forbid_host_reads(), cuda_sync_errors(DEV):
        for i, bt in enumerate(batches[1:]):
            replay.add(bt, td_abs=bt.reward if i % 2 else None)
            idx, w = replay.sampler.sample(32)
            replay.update_priorities(idx, w * 3 - 1)
        replay.clear()
        replay.add(batches[0])
        replay.sampler.sample(32)


def test_wide_backend_choice_and_errors(monkeypatch):
    st = ReplayStorage(64, device="cpu")
    assert WidePER(st, backend="torch").backend == "torch"
    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: False)
    assert WidePER(st).backend == "torch"  # the default: the plan picks "fused" explicitly
    with pytest.raises(ValueError, match=r"WidePER: fused \(Triton\) replay trees unavailable: .*TRITON_INTERPRET"):
        WidePER(st, backend="fused")
    with pytest.raises(ValueError, match="WidePER: backend must be 'torch' or 'fused', got 'auto'"):
        WidePER(st, backend="auto")
    with pytest.raises(ValueError, match="branch"):
        WidePER(st, branch=6)
    with pytest.raises(ValueError, match="empty"):
        WidePER(ReplayStorage(8), backend="torch").sample(4)


def test_dqn_epoch_runs_with_the_wide_sampler():
    from tests.agents.dqn_helpers import small_market, small_trainer

    tr = small_trainer(small_market(device=DEV), seed=3, sampler="proportional", tree_arity=32,
                       replay="fused" if TRITON else "torch")
    s = tr.replay.sampler
    assert isinstance(s, WidePER) and s.backend == ("fused" if TRITON else "torch")
    tr.run_epoch()
    assert not torch.equal(tr.learner.flat.data, tr.learner._init_weights)  # it trained (sample + update)
    assert s.total.item() > 0 and s.max_priority.item() >= 1.0


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_wide_per_triton_equals_torch_and_graph_replay_equals_eager_at_1m_slots():
    if DEV.type != "cuda":
        pytest.skip("CUDA")
    cap, b, steps = 1 << 20, 4096, 8
    st = ReplayStorage(cap, device=DEV)
    for k in range(cap // (1 << 16)):
        st.add(make_transitions(1 << 16, DEV, start=k << 16))
    td0 = torch.rand(cap, device=DEV, generator=torch.Generator(DEV).manual_seed(0)) * 3
    slots = torch.arange(cap, device=DEV)
    twin, eager, graphed = (WidePER(st, seed=1, backend=be) for be in ("torch", "fused", "fused"))
    for s in (twin, eager, graphed):
        s.on_add(slots, td0)
    assert torch.equal(eager.sum_tree.tree, twin.sum_tree.tree) and torch.equal(eager.min_tree.tree, twin.min_tree.tree)
    logs = {s: (torch.zeros((steps, b), dtype=torch.int64, device=DEV), torch.zeros((steps, b), device=DEV))
            for s in (twin, eager, graphed)}
    counter = torch.zeros((), device=DEV)

    def step(s: WidePER, k: int) -> None:
        idx, w = s.sample(b)
        logs[s][0][k].copy_(idx)
        logs[s][1][k].copy_(w)
        s.update_priorities(idx, torch.sin(idx.to(torch.float32) * 0.37 + counter))
        counter.add_(1.0)

    snap = (graphed.sum_tree.tree.clone(), graphed.min_tree.tree.clone(), graphed.max_priority.clone())
    warm = iter([True])  # the warm-up call (compiles the kernels) is step 0 only

    def body() -> None:
        for k in range(1 if next(warm, False) else steps):
            step(graphed, k)

    graph = capture(body, DEV, generators=[graphed.generator], during_capture=lambda: capture_guards(DEV))
    graphed.sum_tree.tree.copy_(snap[0])
    graphed.min_tree.tree.copy_(snap[1])
    graphed.max_priority.copy_(snap[2])
    graphed.reseed(1)
    for s in (graphed, eager, twin):
        counter.zero_()
        if s is graphed:
            graph.replay()
        else:
            for k in range(steps):
                step(s, k)
    torch.cuda.synchronize()
    for s in (eager, graphed):
        assert torch.equal(logs[s][0], logs[twin][0]) and torch.equal(logs[s][1], logs[twin][1])
        assert torch.equal(s.sum_tree.tree, twin.sum_tree.tree) and torch.equal(s.min_tree.tree, twin.min_tree.tree)
        assert torch.equal(s.max_priority, twin.max_priority)
