"""The fused train step (plan train_step = "fused"): the hand-written backward equals autograd, and the fused (compiled) train step
equals the eager ``QLearner.train_step`` — weights, Adam moments, target, priorities, records,
guard counters — including a skipped (NaN) step, which must leave the state bitwise unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from foxhunt.agents.dqn.fused_step import FusedTrainStep
from foxhunt.agents.dqn.learner import QLearner
from foxhunt.agents.dqn.manual_grad import DuelingLayout, dqn_loss_and_grad
from foxhunt.agents.networks import DuelingQNet
from foxhunt.testing import cuda_sync_errors, forbid_host_reads
from tests.agents.dqn_helpers import assert_q_monitor_matches, float64_q_stats, small_market, small_trainer, watch_batches


# ---------------------------------------------------------------------- gradient vs autograd
def _random_case(dtype, obs_dim, n_actions, hidden, head, batch, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = DuelingQNet(obs_dim, n_actions, hidden, head).to(dtype)
    tgt = DuelingQNet(obs_dim, n_actions, hidden, head).to(dtype)
    for p in tgt.parameters():
        p.requires_grad_(False)
    batch_t = dict(
        obs=torch.randn(batch, obs_dim, generator=g, dtype=dtype),
        action=torch.randint(0, n_actions, (batch,), generator=g),
        reward=torch.randn(batch, generator=g, dtype=dtype),
        done=torch.rand(batch, generator=g) < 0.3,
        next_obs=torch.randn(batch, obs_dim, generator=g, dtype=dtype),
        discount=torch.rand(batch, generator=g, dtype=dtype),
        weights=torch.rand(batch, generator=g, dtype=dtype) + 0.1,
    )
    return net, tgt, batch_t


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("hidden, head, n_actions", [((7, 13), 5, 3), ((7, 13), 5, 45), ((11,), 4, 3), ((6, 9, 5), 3, 45)])
def test_manual_gradient_equals_autograd(dtype, tol, hidden, head, n_actions):
    net, tgt, b = _random_case(dtype, 9, n_actions, hidden, head, batch=37, seed=len(hidden) * 100 + n_actions)
    delta = 0.4  # small enough that both Huber branches occur
    # The reference: QLearner._loss itself (autograd through the module), on a stand-in learner.
    ref_self = SimpleNamespace(online=net, target=tgt, cfg=SimpleNamespace(huber_delta=delta))
    loss, td, q_taken, q = QLearner._loss(ref_self, b["obs"], b["action"], b["reward"], b["done"], b["next_obs"],
                                       b["discount"], b["weights"])
    loss.backward()
    ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    lay = DuelingLayout.from_module(net)
    l2, grad, td2, q2, qa2 = dqn_loss_and_grad(_flat(net), _flat(tgt), lay, b["obs"], b["action"], b["reward"], b["done"],
                                          b["next_obs"], b["discount"], b["weights"], delta)
    assert bool((td.abs() > delta).any()) and bool((td.abs() < delta).any())
    # The forward is the module's, op for op: bitwise.
    assert torch.equal(l2, loss.detach()) and torch.equal(td2, td) and torch.equal(q2, q_taken) and torch.equal(qa2, q)
    scale = ref.abs().max()
    torch.testing.assert_close(grad, ref, rtol=tol, atol=tol * float(scale))


def test_layout_follows_the_flat_order_and_rejects_other_networks():
    net = DuelingQNet(5, 3, (4, 6), 2)
    lay = DuelingLayout.from_module(net)
    assert lay.numel == sum(p.numel() for p in net.parameters())
    assert lay.trunk[0].w == 0 and lay.trunk[0].b == 4 * 5 and lay.adv[1].n_out == 3 and lay.slope == 0.01
    net.value[2] = nn.Linear(2, 2)  # a value head that is not one unit
    with pytest.raises(ValueError, match="value head"):
        DuelingLayout.from_module(net)


# ---------------------------------------------------------------------- fused step vs eager step
def _state(tr) -> dict[str, torch.Tensor]:
    ln, s = tr.learner, tr.replay.sampler
    out = {"online": ln.flat.data, "target": ln.target_flat, "adam_m": ln.opt.m, "adam_v": ln.opt.v,
           "adam_t": ln.opt.step_count, "lr": ln.lr, "updates": ln.updates, "collapse_run": ln.collapse_run,
           "skipped_total": ln.skipped_total, "halted": ln.halted, "collapse_flag": ln.collapse_flag,
           "records": ln.records, "record_idx": ln.record_idx, "beta": s.beta, "grad": ln.flat.grad}
    if hasattr(s, "sum_tree"):
        out.update(sum_tree=s.sum_tree.leaves, min_tree=s.min_tree.leaves, max_priority=s.max_priority)
    return {k: v.clone() for k, v in out.items()}


def _assert_states_close(a: dict, b: dict, rtol: float) -> None:
    """Floats within rtol of each tensor's largest magnitude (NaN where NaN); ints and bools equal."""
    for k in a:
        x, y = a[k], b[k]
        if x.is_floating_point():
            assert torch.equal(x.isnan(), y.isnan()), k
            x, y = torch.nan_to_num(x), torch.nan_to_num(y)
            scale = float(x.abs().max()) or 1.0
            assert float((x - y).abs().max()) <= rtol * scale, f"{k}: {float((x - y).abs().max())} vs scale {scale}"
        else:
            assert torch.equal(x, y), k


def _pair(fused_compile: bool | None, **kw):
    """Two trainers on the same seed and replay contents: eager reference and fused learner.
    fused_compile None: the fused step comes from the plan (train_step = "fused": compiled on CUDA,
    eager on the CPU); True / False: a FusedTrainStep compiled or not, installed directly."""
    a = small_trainer(seed=4, **kw)
    b = small_trainer(seed=4, train_step="fused" if fused_compile is None else "torch", **kw)
    if fused_compile is not None:
        b.learner.fused = FusedTrainStep(b.learner, compile=fused_compile)
    for tr in (a, b):
        for _ in range(4):
            tr.collector.round()
    _assert_states_close(_state(a), _state(b), 0.0)
    return a, b


SCHEDULES = dict(lr_end=1e-4, lr_decay_steps=4, per_beta_steps=5, target_hard_every=2)


@pytest.mark.parametrize("sampler", ["uniform", "proportional"])
@pytest.mark.parametrize("target_update", ["polyak", "hard"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_fused_steps_equal_eager_steps(sampler, target_update, n_step):
    a, b = _pair(False, sampler=sampler, target_update=target_update, n_step=n_step, **SCHEDULES)
    for _ in range(6):
        a.learner.train_step()
        b.learner.train_step()
        _assert_states_close(_state(a), _state(b), 1e-5)
    assert int(b.learner.updates) == 6 and int(b.learner.skipped_total) == 0


@pytest.mark.parametrize("guard", [
    dict(loss_clip=1e-12, max_skipped_steps=2),  # every step over the clip: skipped, then halted
    dict(grad_collapse=1e9, grad_collapse_warmup=2, grad_collapse_patience=3),  # collapse halts
])
def test_fused_guard_skips_and_halts_like_eager(guard):
    a, b = _pair(False, sampler="proportional", **guard)
    for _ in range(6):
        a.learner.train_step()
        b.learner.train_step()
        _assert_states_close(_state(a), _state(b), 1e-5)
    assert bool(b.learner.halted)


def _nan_step_is_skipped_bitwise(tr) -> None:
    ln = tr.learner
    keep = ("online", "target", "adam_m", "adam_v", "adam_t")
    before = _state(tr)
    tr.replay.storage.reward.fill_(float("nan"))
    ln.train_step()
    after = _state(tr)
    for k in keep:
        assert torch.equal(before[k], after[k]), k
    assert int(after["skipped_total"]) == int(before["skipped_total"]) + 1
    row = after["records"][int(before["record_idx"])]
    assert row[6] == 0 and row[7] == 1  # ok = 0, nonfinite = 1


def test_a_nan_batch_is_skipped_by_the_fused_step_exactly_as_by_the_eager_step():
    a, b = _pair(False, sampler="proportional", max_skipped_steps=5)
    for tr in (a, b):
        tr.learner.train_step()  # one good step: moments non-zero
    for tr in (a, b):
        _nan_step_is_skipped_bitwise(tr)
    _assert_states_close(_state(a), _state(b), 1e-5)  # incl. zero priorities written for the skipped step


def test_the_fused_step_does_no_host_reads():
    _, b = _pair(False, n_step=3)
    with forbid_host_reads():
        b.learner.train_step()


@pytest.mark.slow
def test_compiled_fused_step_equals_eager_skips_nan_and_trains_an_epoch():
    """The compiled program (torch.compile, fullgraph; CUDA's path) on the CPU: one compile of ~20 s."""
    a, b = _pair(True, sampler="proportional", target_update="hard", n_step=3, max_skipped_steps=5, **SCHEDULES)
    assert b.learner.fused is not None
    for _ in range(5):
        a.learner.train_step()
        b.learner.train_step()
        _assert_states_close(_state(a), _state(b), 1e-4)
    with forbid_host_reads():
        b.learner.train_step()
    seen = watch_batches(b)
    b.learner.record_idx.zero_()  # the steps above were outside an epoch (no flush): the epoch's records start at 0
    s = b.train_epoch()  # the trainer drives the fused step (GraphedStep runs it eagerly on the CPU)
    assert s["updates"] > 0 and s["skip_nonfinite"] == 0 and s.loss_mean > 0
    assert_q_monitor_matches(s, float64_q_stats(b, seen), rel=1e-5)  # the Q monitor on the compiled program
    _nan_step_is_skipped_bitwise(b)


# ---------------------------------------------------------------------- CUDA (run on the GPU)
@pytest.mark.gpu
@pytest.mark.parametrize("sampler", ["uniform", "proportional"])
def test_cuda_graphed_fused_step_equals_the_eager_step_on_a_fixed_seed(sampler):
    m = small_market(device="cuda")
    kw = dict(n_envs=128, batch_size=256, sampler=sampler, n_step=3, matmul_precision="fp32", **SCHEDULES)
    a = small_trainer(m, seed=5, graphs=False, **kw)
    b = small_trainer(m, seed=5, graphs=True, train_step="fused", **kw)
    for tr in (a, b):
        for _ in range(4):
            tr.collector.round()
    for _ in range(8):
        a.learner.train_step()
        b._train()  # first call: eager warm-up (compile) on a side stream, then capture; replays after
    torch.cuda.synchronize()
    assert b._train.graph is not None
    _assert_states_close(_state(a), _state(b), 1e-4)


@pytest.mark.gpu
def test_cuda_fused_step_does_no_host_syncs_and_launches_few_kernels():
    m = small_market(device="cuda")
    tr = small_trainer(m, n_envs=256, rounds_per_epoch=6, train_step="fused", sampler="uniform")
    for _ in range(2):  # compile + capture (the per-round graphs, then the steady epoch's graph)
        tr.train_epoch()
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
        tr.learner.train_step()  # the compiled program called directly (not graphed): no sync either
    tr.monitor.finish_readback()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        tr.learner.train_step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    from collections import Counter

    print(f"fused train step (uniform): {len(kernels)} CUDA kernels/copies")
    for name, n in Counter(e.name[:80] for e in kernels).most_common():
        print(f"  {n:3d}  {name}")
    assert len(kernels) < 100
