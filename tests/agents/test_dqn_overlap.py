"""dqn.overlap_collection (``foxhunt.agents.dqn.overlap``): collection one round ahead of the updates.

The CPU twin defines the result: the trainer with the option on equals the lagged order written out
by hand here with the same components (insert(r), collect(r+1), updates(r)); the acting copy lags
exactly one round; the staged round travels in the trainer's state (a resumed trainer equals the
uninterrupted one) and a new fold drops it. With the option off the trainer runs today's order.
On CUDA, collection on the second stream equals the same order on one stream bit for bit.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.agents.dqn.config import DQNConfig  # noqa: E402
from foxhunt.folds import FoldRange  # noqa: E402
from foxhunt.testing import cuda_sync_errors  # noqa: E402
from tests.agents.dqn_helpers import small_market, small_trainer  # noqa: E402

FUSED = dict(acting="fused", env_step="fused", train_step="fused", replay="fused", sampler="proportional",
             tree_arity=32, matmul_precision="fp32")
needs_triton = pytest.mark.skipif(not accel_triton.status("cpu").usable, reason="Triton (TRITON_INTERPRET=1) needed")


def _epoch_by_hand(tr, lagged: bool, staged: bool) -> tuple[object, bool]:
    """One epoch of ``tr``'s components in the plain order (collect(r), insert(r), updates(r)) or the
    lagged one (prologue collect(0) when nothing is staged; insert(r), collect(r+1), updates(r)).
    Returns (the epoch summary, whether a round is staged)."""
    cfg, col, st = tr.cfg, tr.collector, tr.replay.storage
    tr.monitor.reset()
    ready = max(cfg.warmup_transitions, cfg.batch_size)
    if lagged and not staged:
        col.collect()
    updates = 0
    for _ in range(cfg.rounds_per_epoch):
        if lagged:
            col.flush()    # insert(r)
            col.collect()  # collect(r+1): the weights after round r-1's updates
        else:
            col.collect()
            col.flush()
        if st.size >= ready and cfg.train_steps_per_round:
            for _ in range(cfg.train_steps_per_round):
                tr.learner.train_step()
            updates += cfg.train_steps_per_round
    tr.learner.flush_records(updates)
    tr.monitor.set_scalar("epsilon", col.epsilon)
    tr._end_epoch()
    return tr._collect_summary(), lagged


def _state(tr) -> dict[str, torch.Tensor]:
    """Every tensor of the trainer's state (learner, replay, env, collector, monitor; generators
    included) but the host counters and the staging, cloned."""
    return {f"{c}.{k}": v.clone() for c, part in tr.state_dict().items() if c not in ("trainer", "staging")
            for k, v in part.items()}


def _assert_same(a, b) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_option_off_is_the_default_and_runs_collect_insert_update_in_turn():
    assert DQNConfig().overlap_collection is False
    tr, ref = small_trainer(seed=4), small_trainer(seed=4)
    assert tr.lag is None and tr.collector.nets is tr.learner and "staging" not in tr.state_dict()
    for _ in range(3):
        assert tr.train_epoch().values == _epoch_by_hand(ref, lagged=False, staged=False)[0].values
    _assert_same(tr, ref)


@pytest.mark.parametrize("over", [{}, {"n_step": 3, "sampler": "uniform"}, {"check": True},
                                  # fused: two rounds an epoch (the interpreter steps every kernel; still a prologue
                                  # round, then staged rounds with updates, and one carried into the second epoch)
                                  pytest.param(dict(FUSED, rounds_per_epoch=2), marks=[needs_triton, pytest.mark.slow],
                                               id="fused")])
def test_option_on_equals_the_lagged_order_written_by_hand(over):
    tr = small_trainer(seed=4, overlap_collection=True, **over)
    ref = small_trainer(seed=4, **over)  # the same components, driven by the loop above
    assert tr.lag is not None and tr.lag.streams == 1 and tr.collector.nets is tr.lag.acting
    staged = False
    for _ in range(2):  # the first epoch (its prologue round) and a steady one (the staged round carried in)
        s = tr.train_epoch()
        r, staged = _epoch_by_hand(ref, lagged=True, staged=staged)
        assert s.values == r.values
    _assert_same(tr, ref)
    rounds = tr.cfg.rounds_per_epoch  # 4 (2 fused)
    assert s["transitions"] == rounds * 16 * 4 and s["updates"] == rounds * 2
    assert int(tr.collector.env_steps) == (2 * rounds + 1) * 4  # one round ahead: the fold's prologue round


def test_the_acting_copy_lags_exactly_one_round():
    """collect(k + 1) acts with the weights after round k-1's updates (the initial ones for k = 0),
    never those after round k's."""
    tr = small_trainer(seed=1, overlap_collection=True, warmup_transitions=0)
    acting, ln = tr.lag.acting, tr.learner
    assert tr.collector._online is acting.online and tr.collector._target is acting.target
    used: list[tuple[torch.Tensor, torch.Tensor]] = []
    after: list[torch.Tensor] = [ln.flat.data.clone()]  # after[k + 1]: the weights after round k's updates
    collect, train_round = tr.collector.collect, tr._train_round

    def recording_collect():
        # the acting networks' own parameters (views into the acting copy) at the moment they act
        used.append((torch.cat([p.reshape(-1) for p in acting.online.parameters()]).clone(),
                     torch.cat([p.reshape(-1) for p in acting.target.parameters()]).clone()))
        collect()

    def recording_updates():
        train_round()
        after.append(ln.flat.data.clone())

    tr.collector.collect = recording_collect
    tr._collect.fn = recording_collect  # the graphed step's function (eager on the CPU)
    tr._train_round = recording_updates
    tr.train_epoch()
    tr.train_epoch()
    rounds = 2 * tr.cfg.rounds_per_epoch
    assert len(used) == rounds + 1 and len(after) == rounds + 1
    assert torch.equal(used[0][0], after[0]) and torch.equal(used[1][0], after[0])
    for k in range(1, rounds):
        assert torch.equal(used[k + 1][0], after[k]), k  # the weights after round k-1's updates
        assert not torch.equal(used[k + 1][0], after[k + 1]), k  # not those after round k's
    assert torch.equal(acting.target_flat, used[-1][1])


def test_a_trainer_resumed_from_a_mid_run_state_equals_the_uninterrupted_one():
    a = small_trainer(seed=6, overlap_collection=True)
    a.train_epoch()
    saved = {c: {k: v.clone() for k, v in part.items()} for c, part in a.state_dict().items()}
    assert int(saved["staging"]["staged"]) == 1  # a collected round waits for the next epoch's insert
    ref = [a.train_epoch().values for _ in range(2)]
    b = small_trainer(seed=6, overlap_collection=True)
    b.load_state_dict(saved)
    assert b.epoch == 1 and b.lag.staged
    assert [b.train_epoch().values for _ in range(2)] == ref
    _assert_same(a, b)


def test_a_new_fold_drops_the_staged_round_and_starts_with_the_prologue():
    fold1 = FoldRange(1, 500, 2_300, 2_310, 3_000)
    tr = small_trainer(seed=2, overlap_collection=True)
    ref = small_trainer(seed=2)
    tr.train_epoch()
    _epoch_by_hand(ref, lagged=True, staged=False)
    tr.reset_for_fold(fold1)
    ref.reset_for_fold(fold1)
    assert not tr.lag.staged
    staged = False  # the new fold's first round collects round 0 first
    for _ in range(2):
        r, staged = _epoch_by_hand(ref, lagged=True, staged=staged)
        assert tr.train_epoch().values == r.values
    _assert_same(tr, ref)


def test_overlap_with_curiosity_is_a_one_line_error_naming_both_keys():
    with pytest.raises(ValueError, match=r"overlap_collection = true cannot combine with curiosity = true"):
        DQNConfig(overlap_collection=True, curiosity=True)
    DQNConfig(overlap_collection=True)  # alone, or curiosity alone, is fine
    DQNConfig(curiosity=True)


def test_two_streams_need_cuda():
    tr = small_trainer(overlap_collection=True)
    with pytest.raises(ValueError, match=r"overlap_collection: 2 streams on cpu"):
        tr.lag.set_streams(2)


@pytest.mark.gpu
@pytest.mark.parametrize("over", [{}, {"n_step": 3}, dict(FUSED, hidden=(64, 64), head_hidden=32)], ids=["torch", "nstep", "fused"])
def test_two_streams_equal_the_lagged_order_on_one_stream_on_cuda(over):
    res = []
    for streams in (1, 2):
        tr = small_trainer(small_market(device="cuda"), seed=5, overlap_collection=True, n_envs=256, **over)
        tr.lag.set_streams(streams)
        res.append(([tr.train_epoch().values for _ in range(4)], _state(tr)))
    (s1, t1), (s2, t2) = res
    assert s1 == s2
    for k in t1:
        assert torch.equal(t1[k], t2[k]), k


@pytest.mark.gpu
def test_a_two_stream_epoch_runs_without_any_sync_except_the_readback():
    tr = small_trainer(small_market(device="cuda"), overlap_collection=True, n_envs=256, rounds_per_epoch=6)
    assert tr.lag.streams == 2
    tr.train_epoch()  # capture
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
    tr.monitor.finish_readback()


def test_the_memory_estimate_counts_the_acting_copy():
    from foxhunt.budget import dqn_trainer_bytes

    tr = small_trainer(overlap_collection=True)
    on = dqn_trainer_bytes(tr.cfg, tr.market.n_features, tr.env.n_actions)
    off = dqn_trainer_bytes(small_trainer().cfg, tr.market.n_features, tr.env.n_actions)
    acting = tr.lag.acting
    assert on["acting copy"] == acting.online_flat.nbytes + acting.target_flat.nbytes
    assert "acting copy" not in off and {k: v for k, v in on.items() if k != "acting copy"} == off


def test_the_phase_timer_counts_the_lagged_collection_and_insert_as_collection():
    from foxhunt.train.logs import PhaseTimer

    tr = small_trainer(overlap_collection=True)
    timer = PhaseTimer(tr.device)
    timer.install(tr)
    timer.begin_epoch(tr.epoch)
    tr.train_epoch()
    t = timer.take(0)
    assert t["collect_s"] > 0 and t["train_s"] > 0
    assert timer.calls["collect_s"] == 2 * tr.cfg.rounds_per_epoch + 1  # each round's insert and collect, the prologue
