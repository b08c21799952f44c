"""The member stack (agents/dqn/member_stack.py): M members' fused train steps as one vmapped program.

Three real DQNTrainers (fused train step, eager on the CPU) with different seeds and discounts, their
replays filled by the same collection rounds as a second, identical set that steps each member alone.
Tolerances: float32 results agree to rounding, not bit for bit, because the stacked program's batched
GEMMs (bmm over the member axis) may sum in another order than a member's own mm; the float64 run of
the same programs shows the arithmetic is otherwise the same (1e-12). Counters, flags, schedules,
the sampled slots and a skipped step's state are compared bitwise.
"""

from __future__ import annotations

import pytest
import torch

from foxhunt.agents.dqn.member_stack import StackedTrainSteps
from foxhunt.testing import forbid_host_reads
from tests.agents.dqn_helpers import small_market, small_trainer
from tests.agents.test_dqn_fused_step import SCHEDULES, _assert_states_close, _state

GAMMAS = (0.9, 0.95, 0.99)
RTOL = 1e-5
"""float32: of each tensor's largest magnitude (measured ~1e-7 after 6 steps; batched GEMMs' summation order)."""
EXACT = ("adam_t", "lr", "updates", "collapse_run", "skipped_total", "halted", "collapse_flag", "record_idx", "beta")
"""Counters, flags and the schedules computed from them: bitwise in every test."""


def _members(market, n: int = 3, **kw) -> list:
    """n trainers with the fused step (seeds 0..n-1, discounts GAMMAS), replays filled by 4 rounds."""
    trs = [small_trainer(market, seed=s, train_step="fused", gamma=GAMMAS[s], **kw) for s in range(n)]
    for tr in trs:
        for _ in range(4):
            tr.collector.round()
    return trs


def _twin_sets(**kw):
    """(alone, stacked trainers, their StackedTrainSteps): the same members twice, equal before any step."""
    m = small_market()
    alone, both = _members(m, **kw), _members(m, **kw)
    stack = StackedTrainSteps.from_trainers(both)
    for a, b in zip(alone, both):
        _assert_states_close(_state(a), _state(b), 0.0)
    return alone, both, stack


def _watch(tr) -> list[torch.Tensor]:
    """Every slot index the trainer's sampler draws (copies)."""
    seen: list[torch.Tensor] = []
    sampler = tr.replay.sampler
    real = sampler.sample

    def sample(b: int):
        idx, w = real(b)
        seen.append(idx.clone())
        return idx, w

    sampler.sample = sample  # type: ignore[method-assign]
    return seen


def _assert_same(a, b) -> None:
    sa, sb = _state(a), _state(b)
    _assert_states_close(sa, sb, RTOL)
    for k in EXACT:
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("kw", [dict(sampler="uniform"),
                                dict(sampler="proportional", n_step=3, target_update="hard", **SCHEDULES)],
                         ids=["uniform-1step-polyak", "per-3step-hard-schedules"])
def test_stacked_steps_equal_the_members_stepping_alone(kw):
    alone, both, stack = _twin_sets(**kw)
    # the discounts differ: carried per member where the n-step return reads them
    assert stack.carry_gamma == (kw.get("n_step", 1) > 1)
    drawn_alone, drawn_stacked = [_watch(t) for t in alone], [_watch(t) for t in both]
    for _ in range(6):
        for tr in alone:
            tr.learner.train_step()
        stack()
        for a, b in zip(alone, both):
            _assert_same(a, b)
    for da, ds in zip(drawn_alone, drawn_stacked):  # each member drew the same slots in both arms
        assert len(da) == len(ds) == 6 and all(torch.equal(x, y) for x, y in zip(da, ds))
    assert [int(b.learner.updates) for b in both] == [6, 6, 6]
    assert not torch.equal(both[0].learner.flat.data, both[1].learner.flat.data)  # three different members
    stack.check_views()


def test_the_stacked_program_in_float64_equals_the_members_programs():
    """The same programs on float64 copies of the state: equal to 1e-12 (the float32 gap is rounding)."""
    m = small_market()
    trs = _members(m, sampler="proportional", n_step=3)
    stack = StackedTrainSteps.from_trainers(trs)

    def f64(t: dict, gamma: float) -> dict:
        out = {k: (v.double() if v.is_floating_point() else v).clone() for k, v in t.items()}
        out["gamma_pow"] = torch.tensor([gamma ** k for k in range(1, 4)], dtype=torch.float64)  # as gamma ** k
        return out

    alone = [f64(s._tensors, s.gamma) for s in stack.steps]
    stacked = {k: (v.double() if v.is_floating_point() else v).clone() for k, v in stack._tensors.items()}
    stacked["gamma_pow"] = torch.stack([a["gamma_pow"] for a in alone])
    dims = {k: (0 if k in stack.state else None) for k in stacked}
    program = torch.vmap(stack.core._program, in_dims=(0, 0, dims))
    for _ in range(4):
        draws = [tr.replay.sampler.sample(32) for tr in trs]
        td_alone = torch.stack([s._program(i, w.double(), a) for s, (i, w), a in zip(stack.steps, draws, alone)])
        td = program(torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws]).double(), stacked)
        torch.testing.assert_close(td, td_alone, rtol=0, atol=1e-12 * float(td_alone.abs().max()))
    for i, a in enumerate(alone):
        for k, x in a.items():
            y = stacked[k][i] if k in stack.state else stacked[k]
            if x.is_floating_point():
                assert float((x - y).abs().max()) <= 1e-12 * (float(x.abs().max()) or 1.0), k
            else:
                assert torch.equal(x, y), k
    assert int(alone[0]["updates"]) == 4


def test_a_member_whose_step_the_guard_skips_stays_bitwise_unchanged_while_the_others_update():
    alone, both, stack = _twin_sets(sampler="proportional", max_skipped_steps=5)
    for tr in alone:
        tr.learner.train_step()
    stack()  # one good step: the moments are non-zero
    before = [_state(b) for b in both]
    for tr in (alone[1], both[1]):
        tr.replay.storage.reward.fill_(float("nan"))  # member 1's batch is non-finite (written through its view)
    for tr in alone:
        tr.learner.train_step()
    stack()
    after = [_state(b) for b in both]
    for k in ("online", "target", "adam_m", "adam_v", "adam_t"):
        assert torch.equal(before[1][k], after[1][k]), k
        assert not torch.equal(before[0][k], after[0][k]) and not torch.equal(before[2][k], after[2][k]), k
    assert int(after[1]["skipped_total"]) == 1 and int(after[0]["skipped_total"]) == int(after[2]["skipped_total"]) == 0
    row = after[1]["records"][1]
    assert row[6] == 0 and row[7] == 1  # ok = 0, nonfinite = 1
    for a, b in zip(alone, both):  # incl. the skipped member's |δ| = 0 priorities
        _assert_same(a, b)


def test_the_members_networks_and_own_steps_see_the_stack():
    """After stacked steps each member's online module acts (greedy actions) as the member stepped alone;
    a member's own step, a checkpoint load and a fold reset write its row of the stack in place."""
    alone, both, stack = _twin_sets(sampler="uniform")
    for _ in range(6):
        for tr in alone:
            tr.learner.train_step()
        stack()
    obs = torch.randn(256, both[0].market.obs_dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for a, b in zip(alone, both):
            qa, qb = a.learner.online(obs), b.learner.online(obs)
            torch.testing.assert_close(qb, qa, rtol=RTOL, atol=RTOL * float(qa.abs().max()))
            assert torch.equal(qa.argmax(1), qb.argmax(1))
            assert b.learner.target(obs).shape == qa.shape
    for i, b in enumerate(both):
        assert torch.equal(stack.state["online"][i], b.learner.flat.data)
    alone[0].learner.train_step()
    both[0].learner.train_step()  # the member alone, through its views: its row of the stack moves
    _assert_same(alone[0], both[0])
    both[1].load_state_dict(alone[1].state_dict())  # checkpoints copy in place
    assert torch.equal(stack.state["online"][1], alone[1].learner.flat.data)
    assert torch.equal(stack.state["st_reward"][1], alone[1].replay.storage.reward)
    both[2].learner.reset()
    both[2].replay.clear()
    assert int(stack.state["updates"][2]) == 0 and not bool(stack.state["st_reward"][2].any())
    stack.check_views()


def test_a_member_attribute_rebound_to_a_new_tensor_is_named_by_check_views():
    _, both, stack = _twin_sets(sampler="uniform")
    both[1].learner.updates = both[1].learner.updates.clone()
    with pytest.raises(ValueError, match="member 1's 'updates' is no longer row 1"):
        stack.check_views()


def test_the_stacked_step_does_no_host_reads():
    _, _, stack = _twin_sets(sampler="proportional", n_step=3)
    with forbid_host_reads():
        stack()


@pytest.mark.parametrize("over, what", [
    (dict(batch_size=16), "batch_size"), (dict(huber_delta=2.0), "huber_delta"),
    (dict(hidden=(8, 8)), "network layout"),
    (dict(buffer_capacity=2_048), "replay capacity"), (dict(target_update="hard"), "target update"),
    (dict(n_step=3), "n_step"), (dict(loss_clip=1.0), "guard limits"), (dict(lr_end=1e-5), "lr schedule"),
    (dict(rounds_per_epoch=8), "records"),
])
def test_members_that_differ_are_refused_with_a_one_line_error_naming_the_difference(over, what):
    m = small_market()
    trs = [small_trainer(m, seed=0, train_step="fused"), small_trainer(m, seed=1, train_step="fused", **over)]
    with pytest.raises(ValueError, match=f"member 1 differs from member 0 in {what}") as err:
        StackedTrainSteps.from_trainers(trs)
    assert "\n" not in str(err.value)


def test_members_on_different_markets_or_without_the_fused_step_are_refused():
    trs = [small_trainer(small_market(), train_step="fused"), small_trainer(small_market(), train_step="fused")]
    with pytest.raises(ValueError, match="share one MarketData"):
        StackedTrainSteps.from_trainers(trs)
    m = small_market()
    with pytest.raises(ValueError, match="member 1 has no fused train step"):
        StackedTrainSteps.from_trainers([small_trainer(m, train_step="fused"), small_trainer(m, seed=1)])


# ---------------------------------------------------------------------- CUDA (run on the GPU)
@pytest.mark.gpu
def test_cuda_compiled_stack_equals_the_members_stepping_alone():
    """The GPU path: the vmapped program compiled (fullgraph), against each member's own compiled fused step."""
    m = small_market(device="cuda")
    kw = dict(n_envs=128, batch_size=256, sampler="proportional", n_step=3, matmul_precision="fp32", graphs=False)
    alone, both = _members(m, **kw), _members(m, **kw)
    stack = StackedTrainSteps.from_trainers(both, compile=True)
    for _ in range(8):
        for tr in alone:
            tr.learner.train_step()
        stack()
    torch.cuda.synchronize()
    for a, b in zip(alone, both):
        _assert_states_close(_state(a), _state(b), 1e-4)
    with forbid_host_reads():
        stack()
