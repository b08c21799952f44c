"""The Q-value monitor and the Q-divergence check (agents/monitor.py, guard.py, the three train steps),
and the curiosity bonus's distribution in the epoch summary.

Per epoch the summary holds the mean, std, min and max of max_a Q of the online network over every
train batch row, and the largest |Q|: each train-step path (eager autograd, torch.compile'd, fused
hand-written backward, compiled or not) must report exactly what a float64 computation over the same
batches with the same weights gives. Any |Q| above ``dqn.q_divergence`` masks the step and halts.
"""

from __future__ import annotations

import math

import pytest
import torch

from foxhunt.agents.dqn.trainer import TrainingHalted
from foxhunt.agents.guard import Guard
from foxhunt.agents.monitor import EpochMonitor
from foxhunt.testing import forbid_host_reads
from tests.agents.dqn_helpers import assert_q_monitor_matches, float64_q_stats, small_trainer, watch_batches


def _trainer(path: str, seed: int = 2, **kw):
    # "fused" on a CPU: the same hand-written-backward program, run eagerly (the trainer's choice there)
    return small_trainer(seed=seed, train_step=path, **kw)


@pytest.mark.parametrize("path", ["torch", "fused"])
def test_each_train_step_path_reports_the_max_q_statistics_of_a_float64_computation(path):
    """The compiled paths (torch.compile'd step, compiled fused program) are checked the same way in
    the slow tests that compile them once: tests/agents/test_dqn.py, test_dqn_fused_step.py."""
    tr = _trainer(path, n_step=2 if path == "fused" else 1)
    seen = watch_batches(tr)
    for _ in range(2):
        seen.clear()
        s = tr.train_epoch()
        assert s["updates"] > 0 and len(seen) == s["updates"]
        assert_q_monitor_matches(s, float64_q_stats(tr, seen), rel=1e-5)
    row = s.to_dict()
    assert row["maxq_mean"] == s.maxq_mean and row["maxq_std"] == s.maxq_std
    assert row["maxq_min"] <= row["maxq_mean"] <= row["maxq_max"] <= row["q_abs_max"]


def test_the_fused_and_eager_steps_write_the_same_q_monitor_records():
    a, b = small_trainer(seed=6), _trainer("fused", seed=6)
    for tr in (a, b):
        for _ in range(4):
            tr.collector.round()
        for _ in range(3):
            tr.learner.train_step()
    torch.testing.assert_close(b.learner.records[:3, 9:], a.learner.records[:3, 9:], rtol=1e-5, atol=1e-6)


def test_chan_combination_of_record_rows_equals_the_pooled_statistics():
    """add_maxq_records called twice (two partial epochs) pools exactly like one call over all rows."""
    g = torch.Generator().manual_seed(0)
    batch = 7
    rows = [torch.randn(batch, generator=g, dtype=torch.float64) * (k + 1) + 3 * k for k in range(5)]

    def rec(xs):
        return torch.stack([torch.stack([x.mean(), (x - x.mean()).square().sum(), x.min(), x.max(), x.abs().max(),
                                         torch.zeros((), dtype=torch.float64)]) for x in xs])

    m = EpochMonitor(torch.device("cpu"))
    m.add_maxq_records(rec(rows[:2]), batch)
    m.add_maxq_records(rec(rows[2:]), batch)
    m.start_readback(0)
    s = m.finish_readback()
    x = torch.cat(rows)
    assert s["maxq_count"] == x.numel()
    assert s.maxq_mean == pytest.approx(float(x.mean()), rel=1e-12)
    assert s.maxq_std == pytest.approx(float(x.std(unbiased=False)), rel=1e-12)
    assert (s["maxq_min"], s["maxq_max"]) == (float(x.min()), float(x.max()))


def test_an_epoch_without_train_steps_reports_no_q_statistics():
    tr = small_trainer(warmup_transitions=100_000, buffer_capacity=200_000)
    s = tr.train_epoch()
    assert s["updates"] == 0 and s["maxq_count"] == 0
    assert math.isnan(s.maxq_mean) and math.isnan(s.maxq_std) and s["maxq_min"] == math.inf


def test_the_guard_masks_and_halts_a_step_whose_q_exceeds_the_divergence_limit():
    g = Guard(torch.device("cpu"), loss_clip=1e6, collapse=0.0, warmup=0, patience=1, max_skipped=100, q_divergence=10.0)
    one = torch.ones(())
    ok, nonfinite, over_clip = g.check(one, one, torch.zeros((), dtype=torch.int64), q_abs_max=torch.tensor(9.5))
    assert bool(ok) and not bool(g.halted)
    ok, nonfinite, over_clip = g.check(one, one, torch.ones((), dtype=torch.int64), q_abs_max=torch.tensor(10.5))
    assert not bool(ok) and not bool(nonfinite) and not bool(over_clip)
    assert bool(g.halted)  # at once, although 100 skipped steps are tolerated
    ok, *_ = g.check(one, one, torch.ones((), dtype=torch.int64), q_abs_max=torch.tensor(0.0))
    assert not bool(ok)  # sticky


@pytest.mark.parametrize("path", ["torch", "fused"])
def test_a_diverging_learner_is_halted_by_the_q_divergence_check_and_its_diverged_step_is_not_applied(path):
    # A learning rate of 1 with a target that follows the online network at once and γ = 0.99: Q runs away.
    tr = _trainer(path, seed=0, lr=1.0, gamma=0.99, target_tau=1.0, hidden=(16,), head_hidden=8,
                  max_skipped_steps=1_000)
    ln = tr.learner
    real = ln.train_step
    frozen: list[torch.Tensor] = []

    def step() -> None:
        before = ln.flat.data.clone()
        real()
        if bool(ln.halted) and not frozen:  # the first diverged step: weights untouched
            frozen.append(before)
            assert torch.equal(before, ln.flat.data)

    tr._train.fn = step
    with pytest.raises(TrainingHalted, match=r"^training halted by the guard in fold 0, epoch \d+: Q-value divergence "
                                             r"\(max \|Q\| [0-9.e+]+ above dqn.q_divergence=10000 in \d+ steps\)$"):
        for _ in range(6):
            tr.train_epoch()
    s = tr.last_summary
    assert s["q_abs_max"] > 1e4 and s["q_diverged"] >= 1 and s["skip_nonfinite"] == 0 and s["skip_loss_clip"] == 0
    assert frozen


def test_the_q_monitor_does_no_host_reads_in_the_train_step():
    for path in ("torch", "fused"):
        tr = _trainer(path)
        for _ in range(4):
            tr.collector.round()
        with forbid_host_reads():
            tr.learner.train_step()
            tr.learner.flush_records(1)


# ---------------------------------------------------------------------- the curiosity bonus (issue 39 item 5)
def test_the_curiosity_bonus_distribution_equals_a_direct_computation_over_the_epochs_bonuses():
    tr = small_trainer(seed=3, curiosity=True, curiosity_every=1, curiosity_batch=64)
    col = tr.collector
    real = tr._round.fn
    bonuses: list[torch.Tensor] = []

    def round_and_keep() -> None:
        real()
        bonuses.append(col.r_curiosity.detach().double().reshape(-1).clone())  # [L · N] of this round

    tr._round.fn = round_and_keep
    for _ in range(2):
        bonuses.clear()
        s = tr.train_epoch()
        x = torch.cat(bonuses)
        assert s["curiosity_count"] == x.numel() == s["transitions"]
        assert s.curiosity_mean == pytest.approx(float(x.mean()), rel=1e-9)
        assert s.curiosity_std == pytest.approx(float(x.std(unbiased=False)), rel=1e-6)
        assert s["curiosity_max"] == float(x.max()) and float(x.std()) > 0
        row = s.to_dict()
        assert (row["curiosity_mean"], row["curiosity_std"]) == (s.curiosity_mean, s.curiosity_std)


def test_without_curiosity_the_bonus_fields_say_nothing_was_measured():
    s = small_trainer().train_epoch()
    assert s["curiosity_count"] == 0 and math.isnan(s.curiosity_mean) and math.isnan(s.curiosity_std)
    assert s["curiosity_max"] == -math.inf
