"""DQN learner, collector and trainer: guard, masking, monitoring, n-step targets, no host reads."""

from __future__ import annotations

import pytest
import torch

from foxhunt.agents.dqn.trainer import TrainingHalted
from foxhunt.agents.monitor import FIELDS
from foxhunt.testing import cuda_sync_errors, forbid_host_reads
from tests.agents.dqn_helpers import assert_q_monitor_matches, float64_q_stats, small_market, small_trainer, watch_batches


def _fill(tr, rounds: int = 4) -> None:
    for _ in range(rounds):
        tr.collector.round()


def test_a_collection_round_and_a_train_step_do_no_host_reads():
    tr = small_trainer()
    _fill(tr)
    with forbid_host_reads():
        tr.collector.round()
        tr.learner.train_step()


def test_a_nan_batch_is_skipped_and_leaves_weights_moments_and_target_bitwise_unchanged():
    tr = small_trainer(max_skipped_steps=5)
    _fill(tr)
    tr.learner.train_step()  # one good step so that moments are non-zero
    ln = tr.learner
    before = [t.clone() for t in (ln.flat.data, ln.opt.m, ln.opt.v, ln.opt.step_count, ln.target_flat)]
    tr.replay.storage.reward.fill_(float("nan"))
    ln.train_step()
    after = (ln.flat.data, ln.opt.m, ln.opt.v, ln.opt.step_count, ln.target_flat)
    for b, a in zip(before, after):
        assert torch.equal(b, a)
    assert int(ln.skipped_total) == 1 and not bool(ln.halted)


def test_skips_beyond_the_limit_halt_training_with_an_error_naming_the_check_and_epoch():
    tr = small_trainer(max_skipped_steps=0)
    tr.train_epoch()
    tr.replay.storage.reward.fill_(float("nan"))
    with pytest.raises(TrainingHalted, match=r"fold 0, epoch 1: non-finite loss or gradient norm"):
        # New transitions are finite; poison the storage inside the epoch via the collector hook.
        orig = tr.collector.round

        def poisoned() -> None:
            orig()
            tr.replay.storage.reward.fill_(float("nan"))

        tr._round.fn = poisoned
        tr.train_epoch()


def test_loss_above_the_clip_is_a_skipped_step():
    tr = small_trainer(loss_clip=1e-12, max_skipped_steps=1_000)
    s = tr.train_epoch()
    assert s["skip_loss_clip"] == s["updates"] > 0
    assert s["halt"] == 0


def test_gradient_collapse_after_warmup_raises_the_halt_flag():
    tr = small_trainer(grad_collapse=1e9, grad_collapse_warmup=2, grad_collapse_patience=3)
    with pytest.raises(TrainingHalted, match="gradient collapse"):
        tr.train_epoch()


def test_epoch_summary_counts_every_transition_and_action():
    tr = small_trainer()
    s = tr.train_epoch()
    cfg = tr.cfg
    n = cfg.n_envs * cfg.rollout_len * cfg.rounds_per_epoch
    assert s["transitions"] == n
    assert sum(s.action_counts()) == n
    assert s["updates"] == cfg.train_steps_per_round * sum(
        1 for r in range(cfg.rounds_per_epoch) if (r + 1) * cfg.n_envs * cfg.rollout_len >= max(cfg.warmup_transitions, cfg.batch_size)
    )
    assert s["reward_min"] <= s.reward_mean <= s["reward_max"]
    assert set(s.values) == set(FIELDS)


def test_lagged_mode_returns_earlier_epochs_in_order_without_waiting():
    tr = small_trainer(readback="lagged")
    assert tr.train_epoch() is None  # nothing earlier has landed yet
    got = [s for s in (tr.train_epoch(), tr.train_epoch()) if s is not None]
    got += tr.drain()
    assert [s.epoch for s in got] == [0, 1, 2]
    assert tr.flush() is None


def test_epsilon_decays_on_the_device_schedule():
    tr = small_trainer(eps_start=1.0, eps_end=0.1, eps_decay_steps=8)
    s = tr.train_epoch()  # 16 steps per env > 8
    assert s["epsilon"] == pytest.approx(0.1)


def test_n_step_targets_equal_a_direct_computation():
    tr = small_trainer(n_step=3, gamma=0.5)
    _fill(tr, 3)
    ln, st = tr.learner, tr.replay.storage
    idx = torch.arange(0, st.size, 5)[: tr.cfg.batch_size]
    assert idx.shape[0] == tr.cfg.batch_size
    ln.replay.sampler.sample = lambda b: (idx, torch.ones_like(idx, dtype=torch.float32))  # type: ignore[method-assign]
    obs, action, ret, done, next_obs, disc = ln._nstep_batch(idx)
    n = tr.cfg.n_envs
    for j, i in enumerate(idx.tolist()):
        g, k, s = 0.0, 0, i
        while True:
            g += (0.5 ** k) * float(st.reward[s])
            k += 1
            nxt = s + n
            if k == 3 or bool(st.done[s]) or nxt >= st.size or int(st.bar[nxt]) != int(st.next_bar[s]):
                break
            s = nxt
        assert float(ret[j]) == pytest.approx(g, rel=1e-5, abs=1e-7)
        assert float(disc[j]) == pytest.approx(0.5 ** k)
        assert bool(done[j]) == bool(st.done[s])


def test_reset_for_fold_reuses_the_trainer_and_clears_per_fold_state():
    m = small_market()
    tr = small_trainer(m)
    tr.train_epoch()
    w0 = tr.learner._init_weights.clone()
    from foxhunt.folds import FoldRange

    secs = tr.reset_for_fold(FoldRange(1, 500, 2_500, 2_510, 3_000))
    assert secs < 5.0
    assert tr.replay.storage.size == 0 and int(tr.learner.updates) == 0
    assert torch.equal(tr.learner.flat.data, w0) and torch.equal(tr.learner.target_flat, w0)
    assert int(tr.market.fold_bounds[0]) == 500
    assert int(tr.env.state.bar.min()) >= 500
    tr.train_epoch()


def test_same_seed_gives_bitwise_identical_training_on_cpu():
    a = small_trainer(seed=3)
    b = small_trainer(seed=3)
    for _ in range(2):
        sa, sb = a.train_epoch(), b.train_epoch()
        assert sa.values == sb.values
    assert torch.equal(a.learner.flat.data, b.learner.flat.data)


@pytest.mark.gpu
def test_cuda_epoch_runs_without_any_sync_except_the_readback():
    m = small_market(device="cuda")
    tr = small_trainer(m, n_envs=256, rounds_per_epoch=6)
    for _ in range(2):  # capture: the per-round graphs (epoch 0 starts with an empty replay), the steady epoch's graph
        tr.train_epoch()
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
    tr.monitor.finish_readback()


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager_on_a_fixed_seed():
    res = []
    for graphs in (False, True):
        m = small_market(device="cuda")
        tr = small_trainer(m, n_envs=128, graphs=graphs, seed=5)
        for _ in range(3):
            tr.train_epoch()
        res.append((tr.learner.flat.data.clone(), tr.env.state.equity.clone(), tr.replay.storage.reward.clone()))
    for a, b in zip(*res):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_compiled_learner_equals_the_eager_learner_within_float_rounding():
    a = small_trainer(seed=1)
    b = small_trainer(seed=1, train_step="compiled", acting="compiled")
    seen = watch_batches(b)
    for _ in range(2):
        seen.clear()
        sa, sb = a.train_epoch(), b.train_epoch()
        assert sb.loss_mean == pytest.approx(sa.loss_mean, rel=1e-4)
        assert_q_monitor_matches(sb, float64_q_stats(b, seen), rel=1e-5)  # the Q monitor on the compiled step
    torch.testing.assert_close(b.learner.flat.data, a.learner.flat.data, rtol=1e-4, atol=1e-6)
