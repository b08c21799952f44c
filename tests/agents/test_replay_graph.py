"""CUDA graphs: sample + update (and a whole add / sample / gather / update round) replayed from a
captured graph give exactly what the same calls give eagerly. GPU only."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agents.replay import (
    ProportionalPER,
    RankPER,
    ReplayBuffer,
    ReplayStorage,
    SegmentTree,
    UniformSampler,
)
from foxhunt.accel.graphs import capture as accel_capture
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.testing import cuda_sync_errors
from tests.agents.test_replay_storage import make_transitions
from tests.helpers import random_feature_set

pytestmark = pytest.mark.gpu

CAP, FILL, BATCH, STEPS, SEED = 3000, 2500, 256, 6, 11
KINDS = ["uniform", "proportional-partial", "proportional-full", "rank"]


def build(kind: str):
    st = ReplayStorage(CAP, device="cuda")
    s = {
        "uniform": lambda: UniformSampler(st, seed=SEED),
        "proportional-partial": lambda: ProportionalPER(st, rebuild="partial", search_level=0, seed=SEED),
        "proportional-full": lambda: ProportionalPER(st, rebuild="full", search_level=5, seed=SEED),
        "rank": lambda: RankPER(st, refresh_every=1, seed=SEED),
    }[kind]()
    slots = st.add(make_transitions(FILL, "cuda"))
    s.on_add(slots, torch.rand(FILL, device="cuda", generator=torch.Generator("cuda").manual_seed(0)))
    if isinstance(s, RankPER):
        s.refresh()
    return st, s


def device_state(obj) -> dict[str, torch.Tensor]:
    """Every tensor of a sampler / storage (trees included), by attribute path."""
    out = {}
    for name, v in vars(obj).items():
        if isinstance(v, torch.Tensor):
            out[name] = v
        elif isinstance(v, SegmentTree):
            out[name + ".tree"] = v.tree
    return out


def step_fn(sampler, counter: torch.Tensor):
    def step() -> None:
        idx, w = sampler.sample(BATCH)
        td = torch.sin(idx.to(torch.float32) * 0.37 + counter) * w  # deterministic TD errors
        sampler.update_priorities(idx, td)
        counter.add_(1.0)

    return step


def capture(fn, generator: torch.Generator) -> torch.cuda.CUDAGraph:
    return accel_capture(fn, "cuda", warmup=2, generators=[generator])


@pytest.mark.parametrize("kind", KINDS)
def test_sample_and_update_replayed_from_a_cuda_graph_equal_eager(kind):
    st_e, eager = build(kind)
    counter_e = torch.zeros((), device="cuda")
    step_e = step_fn(eager, counter_e)
    want = []
    with cuda_sync_errors("cuda"):
        for _ in range(STEPS):
            step_e()
            want.append(tuple(t.clone() for t in eager.outputs(BATCH)))

    st_g, graphed = build(kind)
    start = {k: v.clone() for k, v in device_state(graphed).items()}
    counter_g = torch.zeros((), device="cuda")
    g = capture(step_fn(graphed, counter_g), graphed.generator)
    for k, v in device_state(graphed).items():  # undo the warm-up and capture runs
        v.copy_(start[k])
    counter_g.zero_()
    graphed.reseed(SEED)
    got = []
    for _ in range(STEPS):
        g.replay()
        got.append(tuple(t.clone() for t in graphed.outputs(BATCH)))
    torch.cuda.synchronize()
    for (ie, we), (ig, wg) in zip(want, got):
        assert torch.equal(ie, ig)
        assert torch.equal(we, wg)
    for k, v in device_state(eager).items():
        assert torch.equal(v, device_state(graphed)[k]), k


def test_uniform_graph_follows_the_growing_buffer_without_recapture():
    st = ReplayStorage(1000, device="cuda")
    s = UniformSampler(st, seed=1)
    st.add(make_transitions(10, "cuda"))
    g = capture(lambda: s.sample(4096), s.generator)
    g.replay()
    assert s.outputs(4096)[0].max().item() < 10
    st.add(make_transitions(500, "cuda"))  # size_t grows in place
    g.replay()
    idx = s.outputs(4096)[0]
    assert idx.max().item() < 510 and idx.max().item() >= 400


def test_a_whole_add_sample_gather_update_round_replays_like_eager():
    fs = random_feature_set(400, 6, seed=2)
    market = MarketData(fs, "cuda")
    market.set_fold(FoldRange(0, 0, 300, 310, 400))
    n_add, n = 64, 5
    trans = make_transitions(n_add, "cuda")

    def setup():
        st = ReplayStorage(500, device="cuda")
        replay = ReplayBuffer(st, ProportionalPER(st, seed=3))
        replay.add(make_transitions(200, "cuda", start=100))
        obs = torch.empty(BATCH, market.obs_dim, device="cuda")
        return replay, obs, torch.empty_like(obs)

    def round_fn(replay, obs, nxt):
        def fn() -> None:
            replay.add(trans, td_abs=trans.reward)
            batch, idx, w = replay.sample(BATCH, market, obs, nxt)
            replay.update_priorities(idx, batch.reward - obs[:, 0] * w)

        return fn

    eager, obs_e, nxt_e = setup()
    fn = round_fn(eager, obs_e, nxt_e)
    outs_e = []
    for _ in range(n):
        fn()
        outs_e.append((obs_e.clone(), nxt_e.clone(), eager.sampler.outputs(BATCH)[1].clone()))

    graphed, obs_g, nxt_g = setup()
    states = [device_state(graphed.storage), device_state(graphed.sampler)]
    start = [{k: v.clone() for k, v in s.items()} for s in states]
    host = (graphed.storage.pos, graphed.storage.size)
    g = capture(round_fn(graphed, obs_g, nxt_g), graphed.sampler.generator)
    for s, s0 in zip(states, start):
        for k, v in s.items():
            v.copy_(s0[k])
    graphed.storage.pos, graphed.storage.size = host
    graphed.sampler.reseed(3)
    for (oe, ne, we) in outs_e:
        g.replay()
        graphed.storage.advance(n_add)  # host ints follow the replayed add
        assert torch.equal(obs_g, oe) and torch.equal(nxt_g, ne) and torch.equal(graphed.sampler.outputs(BATCH)[1], we)
    assert graphed.storage.size == eager.storage.size and int(graphed.storage.size_t) == graphed.storage.size
    assert torch.equal(graphed.sampler.sum_tree.tree, eager.sampler.sum_tree.tree)
