"""ReplayStorage: compact ring buffer on the device, host-known positions, gather into buffers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agents.replay import ReplayStorage, Transitions
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.testing import cuda_sync_errors, forbid_host_reads
from tests.helpers import random_feature_set


def make_transitions(n: int, device, start: int = 0, discount: bool = False) -> Transitions:
    """n distinct transitions tagged by their global number k = start..start+n-1."""
    k = torch.arange(start, start + n, dtype=torch.int64, device=device)
    pf = torch.stack([k * 0.5, -k * 0.25, k * 0.125], 1).to(torch.float32)
    return Transitions(
        bar=k + 10,
        portfolio=pf,
        action=k % 45,
        reward=k.to(torch.float32) * 0.01,
        done=(k % 3) == 0,
        next_bar=k + 11,
        next_portfolio=pf + 1.0,
        discount=(0.9 ** (1 + k % 4)).to(torch.float32) if discount else None,
    )


def test_add_wraps_around_the_ring_and_matches_a_numpy_ring(device):
    st = ReplayStorage(10, device=device, gamma=0.9)
    ring = np.full(10, -1)
    written = 0
    for n in (4, 4, 4, 7, 10, 3):
        slots = st.add(make_transitions(n, device, start=written))
        expect = (np.arange(n) + written) % 10
        np.testing.assert_array_equal(slots.cpu().numpy(), expect)
        ring[expect] = np.arange(written, written + n)
        written += n
        assert st.pos == written % 10 and st.size == min(written, 10)
        assert int(st.pos_t) == st.pos and int(st.size_t) == st.size
        filled = ring >= 0
        np.testing.assert_array_equal(st.bar.cpu().numpy()[filled], ring[filled] + 10)
        np.testing.assert_array_equal(st.action.cpu().numpy()[filled], ring[filled] % 45)
        np.testing.assert_allclose(st.portfolio[:, 1].cpu().numpy()[filled], -ring[filled] * 0.25)
        np.testing.assert_array_equal(st.done.cpu().numpy()[filled], ring[filled] % 3 == 0)


def test_discount_defaults_to_gamma_and_stores_n_step_factors(device):
    st = ReplayStorage(8, device=device, gamma=0.97)
    st.add(make_transitions(3, device))
    st.add(make_transitions(3, device, start=3, discount=True))
    d = st.discount.cpu().numpy()
    np.testing.assert_allclose(d[:3], 0.97, rtol=1e-7)
    np.testing.assert_allclose(d[3:6], 0.9 ** (1 + np.arange(3, 6) % 4), rtol=1e-6)


def test_clear_empties_counters_and_slots(device):
    st = ReplayStorage(6, device=device)
    st.add(make_transitions(5, device))
    st.clear()
    assert st.pos == 0 and st.size == 0 and len(st) == 0
    assert int(st.pos_t) == 0 and int(st.size_t) == 0
    assert not st.bar.any() and not st.done.any()
    slots = st.add(make_transitions(2, device, start=100))
    assert slots.tolist() == [0, 1] and st.bar[:2].tolist() == [110, 111]


def test_add_rejects_wrong_shapes_and_oversized_batches(device):
    st = ReplayStorage(4, device=device)
    with pytest.raises(ValueError, match="batch of 5 rows"):
        st.add(make_transitions(5, device))
    bad = make_transitions(3, device)._replace(portfolio=torch.zeros(3, 2, device=device))
    with pytest.raises(ValueError, match="portfolio has shape"):
        st.add(bad)
    with pytest.raises(ValueError, match="capacity"):
        ReplayStorage(0)


def test_capacity_of_a_million_allocates_about_57_bytes_per_slot_and_wraps():
    st = ReplayStorage(1_000_000)
    assert 50e6 <= st.nbytes <= 60e6
    st.pos = 999_998
    st.pos_t.fill_(999_998)
    slots = st.add(make_transitions(4, "cpu", start=7))
    assert slots.tolist() == [999_998, 999_999, 0, 1]
    assert st.bar[[999_998, 999_999, 0, 1]].tolist() == [17, 18, 19, 20]
    assert st.pos == 2 and int(st.pos_t) == 2


def test_gather_rebuilds_observations_from_market_data_into_preallocated_buffers(device):
    fs = random_feature_set(300, 5, seed=3)
    market = MarketData(fs, device)
    market.set_fold(FoldRange(0, 0, 200, 210, 300))
    st = ReplayStorage(64, device=device, gamma=0.95)
    st.add(make_transitions(40, device))
    idx = torch.tensor([3, 0, 39, 3, 17], device=device)
    obs = torch.empty(5, market.obs_dim, device=device)
    nxt = torch.empty_like(obs)
    with forbid_host_reads(), cuda_sync_errors(device):
        batch = st.gather(idx, market, obs, nxt)
    assert batch.obs is obs and batch.next_obs is nxt
    ref_obs = torch.empty_like(obs)
    market.observe(st.bar[idx], st.portfolio[idx], ref_obs)
    torch.testing.assert_close(obs, ref_obs, rtol=0, atol=0)
    market.observe(st.next_bar[idx], st.next_portfolio[idx], ref_obs)
    torch.testing.assert_close(nxt, ref_obs, rtol=0, atol=0)
    k = idx.cpu()
    assert batch.action.cpu().tolist() == (k % 45).tolist()
    assert batch.done.cpu().tolist() == ((k % 3) == 0).tolist()
    torch.testing.assert_close(batch.reward.cpu(), k.float() * 0.01)
    torch.testing.assert_close(batch.discount.cpu(), torch.full((5,), 0.95))
    # the same buffers are reused by the next gather of that size
    again = st.gather(idx.flip(0), market, obs, nxt)
    assert again.action.data_ptr() == batch.action.data_ptr()


def test_add_and_gather_do_no_host_reads(device):
    fs = random_feature_set(100, 4, seed=0)
    market = MarketData(fs, device)
    market.set_fold(FoldRange(0, 0, 60, 70, 100))
    st = ReplayStorage(16, device=device)
    batches = [make_transitions(6, device, start=6 * i) for i in range(4)]
    obs = torch.empty(8, market.obs_dim, device=device)
    nxt = torch.empty_like(obs)
    idx = torch.arange(8, device=device)
    st.add(batches[0])  # first call of a size allocates its buffers
    st.gather(idx, market, obs, nxt)
    with forbid_host_reads(), cuda_sync_errors(device):
        for b in batches[1:]:
            st.add(b)
            st.gather(idx, market, obs, nxt)
    assert st.size == 16 and st.pos == 24 % 16
