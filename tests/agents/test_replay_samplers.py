"""Samplers: frequencies follow the reference distributions (chi-square), IS weights follow the
paper's formula, rank refresh schedule, no host reads inside add / sample / update."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from foxhunt.agents.replay import ProportionalPER, RankPER, ReplayBuffer, ReplayStorage, UniformSampler
from foxhunt.agents.replay import reference as ref
from foxhunt.testing import cuda_sync_errors, forbid_host_reads
from tests.agents.test_replay_storage import make_transitions

N_LEAVES = 100
DRAWS = 204_800
BATCH = 256


def filled(n: int, device, capacity: int | None = None) -> ReplayStorage:
    st = ReplayStorage(capacity or n, device=device)
    st.add(make_transitions(n, device))
    return st


def counts(sampler, n: int) -> np.ndarray:
    out = torch.zeros(sampler.capacity, dtype=torch.int64, device=sampler.device)
    for _ in range(DRAWS // BATCH):
        idx, _ = sampler.sample(BATCH)
        out.add_(torch.bincount(idx, minlength=sampler.capacity))
    c = out.cpu().numpy()
    assert c[n:].sum() == 0, "sampled an empty slot"
    return c[:n]


def assert_chisquare(observed: np.ndarray, probs: np.ndarray) -> None:
    expected = probs * observed.sum()
    assert expected.min() >= 5
    p_value = chisquare(observed, expected).pvalue
    assert p_value > 1e-3, p_value


def test_uniform_frequencies_are_uniform_over_the_filled_part_chisquare(device):
    st = filled(N_LEAVES, device, capacity=128)
    s = UniformSampler(st, seed=1)
    assert_chisquare(counts(s, N_LEAVES), ref.uniform_probs(N_LEAVES))
    _, w = s.sample(BATCH)
    assert (w == 1).all()


@pytest.mark.parametrize("search_level", [0, 3, 12])
def test_proportional_frequencies_match_priorities_chisquare(device, rng, search_level):
    st = filled(N_LEAVES, device, capacity=120)
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s = ProportionalPER(st, alpha=0.7, eps=1e-2, search_level=search_level, seed=2)
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    probs = ref.proportional_probs(ref.proportional_priorities(td, 0.7, 1e-2))
    assert_chisquare(counts(s, N_LEAVES), probs)


def test_rank_frequencies_match_inverse_rank_power_chisquare(device, rng):
    st = filled(N_LEAVES, device, capacity=128)
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s = RankPER(st, alpha=0.7, seed=3)
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    s.refresh()
    assert_chisquare(counts(s, N_LEAVES), ref.rank_probs(td, 0.7))


@pytest.mark.parametrize("norm", ["buffer", "batch"])
def test_proportional_is_weights_equal_the_paper_formula(device, rng, norm):
    st = filled(N_LEAVES, device, capacity=128)
    s = ProportionalPER(st, alpha=0.6, beta=0.4, eps=1e-3, weight_norm=norm, seed=4)
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    s.set_beta(0.7)  # annealed in place
    idx, w = s.sample(512)
    probs = ref.proportional_probs(ref.proportional_priorities(td, 0.6, 1e-3))
    want = ref.is_weights(probs, idx.cpu().numpy(), 0.7, norm)
    np.testing.assert_allclose(w.cpu().numpy(), want, rtol=2e-6)
    assert w.max().item() <= 1.0


@pytest.mark.parametrize("norm", ["buffer", "batch"])
def test_rank_is_weights_equal_the_paper_formula(device, rng, norm):
    st = filled(N_LEAVES, device, capacity=128)
    s = RankPER(st, alpha=0.7, beta=0.5, weight_norm=norm, seed=5)
    td = rng.exponential(1.0, N_LEAVES).astype(np.float32)
    s.on_add(torch.arange(N_LEAVES, device=device), torch.tensor(td, device=device))
    s.refresh()
    idx, w = s.sample(512)
    want = ref.is_weights(ref.rank_probs(td, 0.7), idx.cpu().numpy(), 0.5, norm)
    np.testing.assert_allclose(w.cpu().numpy(), want, rtol=1e-6)


def test_new_transitions_get_the_max_priority_seen_so_far(device):
    st = ReplayStorage(16, device=device)
    s = ProportionalPER(st, alpha=1.0, eps=1e-6)
    s.on_add(st.add(make_transitions(4, device)))
    assert s.sum_tree.leaves[:4].tolist() == [1.0] * 4  # p1 = 1 (paper)
    s.update_priorities(torch.tensor([2], device=device), torch.tensor([-5.0], device=device))
    s.on_add(st.add(make_transitions(2, device)))
    np.testing.assert_allclose(s.sum_tree.leaves[4:6].cpu().numpy(), 5.0 + 1e-6, rtol=1e-6)
    r = RankPER(st)
    r.update_priorities(torch.tensor([1], device=device), torch.tensor([3.0], device=device))
    r.on_add(torch.tensor([7, 8], device=device))
    assert r.priorities[[7, 8]].tolist() == [3.0, 3.0]


def test_rank_refreshes_every_k_updates_and_is_stale_in_between(device):
    st = filled(6, device, capacity=8)
    s = RankPER(st, alpha=1.0, refresh_every=3)
    s.on_add(torch.arange(6, device=device), torch.tensor([1.0, 2, 3, 4, 5, 6], device=device))
    assert s.order.tolist() == list(range(8))  # not sorted before the first refresh
    one = torch.tensor([0], device=device)
    s.update_priorities(one, torch.tensor([10.0], device=device))
    s.update_priorities(one, torch.tensor([10.0], device=device))
    assert s.order.tolist() == list(range(8))  # stale
    s.update_priorities(one, torch.tensor([10.0], device=device))
    assert s.order.tolist() == [0, 5, 4, 3, 2, 1, 6, 7]  # empty slots last, in slot order
    never = RankPER(st, refresh_every=0)
    for _ in range(5):
        never.update_priorities(one, torch.tensor([1.0], device=device))
    assert never.order.tolist() == list(range(8))


def test_samplers_grow_with_the_storage_without_new_shapes(device):
    st = ReplayStorage(64, device=device)
    samplers = [UniformSampler(st), ProportionalPER(st, search_level=2), RankPER(st, refresh_every=1)]
    for n in (3, 20, 64):
        st.clear()
        for s in samplers:
            s.clear()
        slots = st.add(make_transitions(n, device))
        for s in samplers:
            s.on_add(slots)
            s.update_priorities(slots[:1], torch.ones(1, device=device))
            idx, w = s.sample(300)
            assert idx.shape == (300,) and 0 <= idx.min().item() and idx.max().item() < n
            assert torch.isfinite(w).all() and (w > 0).all() and (w <= 1).all()


def test_sampling_an_empty_buffer_is_a_clear_error():
    st = ReplayStorage(8)
    with pytest.raises(ValueError, match="empty"):
        ProportionalPER(st).sample(4)


@pytest.mark.parametrize("kind", ["uniform", "proportional-partial", "proportional-full", "rank"])
def test_add_sample_update_do_no_host_reads(device, kind):
    st = ReplayStorage(50, device=device)
    s = {
        "uniform": lambda: UniformSampler(st),
        "proportional-partial": lambda: ProportionalPER(st, rebuild="partial", search_level=0),
        "proportional-full": lambda: ProportionalPER(st, rebuild="full", search_level=3),
        "rank": lambda: RankPER(st, refresh_every=2),
    }[kind]()
    replay = ReplayBuffer(st, s)
    batches = [make_transitions(16, device, start=16 * i) for i in range(6)]
    replay.add(batches[0])
    replay.sampler.sample(32)  # first calls of a size allocate their buffers
    with forbid_host_reads(), cuda_sync_errors(device):
        for i, b in enumerate(batches[1:]):
            replay.add(b, td_abs=b.reward if i % 2 else None)
            idx, w = replay.sampler.sample(32)
            replay.update_priorities(idx, w * 3 - 1)
        replay.clear()
        replay.add(batches[0])
        replay.sampler.sample(32)
