"""Every memory access of the fused acting path stays inside its tensors, at the scorecard's shapes.

Why: configs/h200-fast.toml with ``accel.acting = "fused"`` stopped on the H200 with "an illegal
memory access was encountered" (docs/DESIGN.md "Fused acting" and BENCHMARKS.md "Kernels under compute-sanitizer"). These tests run the kernels in
the Triton interpreter with ``tests.kernels.bounds.checked_accesses``, which fails any load or store
(masked lanes excluded) that leaves the storages of the launch's tensor arguments — what the GPU
reports without naming a kernel. They cover the acting kernel at N = 4096, obs 54 (no_edge) and 55
(leak), 256/256/128, 5 actions, bf16 with the GPU's launch parameters (128 rows, 32-wide chunks);
a whole fused collection (env step, acting, PER trees) at those widths; and the packed weights
after the epoch selector loads an earlier epoch into the online network in place.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from foxhunt.agents.dqn.config import DQNConfig  # noqa: E402
from foxhunt.agents.dqn.trainer import DQNTrainer  # noqa: E402
from foxhunt.accel.backend import ExecutionPlan  # noqa: E402
from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.env.params import EnvParams  # noqa: E402
from foxhunt.kernels.acting import kernel as dmf  # noqa: E402
from foxhunt.kernels.rules.packing import pack_net  # noqa: E402
from foxhunt.train.selection import EpochSelector  # noqa: E402
from tests.agents.dqn_helpers import small_market, small_trainer  # noqa: E402
from tests.kernels.bounds import checked_accesses  # noqa: E402

pytestmark = pytest.mark.skipif(not dmf.is_interpreted(), reason="the bounds checker patches the Triton interpreter")

PACKED = ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")


@triton.jit
def _store_one_past(out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, i.to(tl.float32), mask=i <= n)  # the bug under test: <= instead of <


def test_the_bounds_checker_names_a_store_one_past_the_end():
    out = torch.zeros(64, 5)[:, 0].contiguous()  # a storage of exactly 64 floats
    with checked_accesses(), pytest.raises(Exception, match=r"_store_one_past: store of 1 element"):
        _store_one_past[(1,)](out, 64, BLOCK=128)
    with checked_accesses() as launched:
        _store_one_past[(1,)](out, 63, BLOCK=128)
    assert launched == ["_store_one_past"]


@pytest.mark.parametrize("obs_dim", [54, 55])
def test_the_acting_kernel_stays_inside_its_tensors_at_the_scorecard_shapes(obs_dim):
    torch.manual_seed(obs_dim)
    net = DuelingQNet(obs_dim, 5, [256, 256], 128)
    packed = pack_net(net, "bf16")
    assert packed.dims == (64, 256, 256, 256, 16)
    n = 4096
    obs = torch.randn(n + 3, obs_dim)[3:]  # a storage offset, as a view into a larger buffer
    q, greedy, q_max = torch.empty(n, 5), torch.empty(n, dtype=torch.int64), torch.empty(n)
    gpu = dict(precision="bf16", block_m=128, bn=32)  # the H200's launch: 32 programs of 128 rows
    with checked_accesses() as launched:
        dmf.fused_dueling_q(packed, obs, q=q, argmax=greedy, **gpu)
        dmf.fused_dueling_q(packed, obs, q=False, q_max=q_max, **gpu)
    assert launched == ["_dueling_q_kernel"] * 2
    assert int(greedy.min()) >= 0 and int(greedy.max()) < 5
    assert torch.equal(greedy, q.argmax(1)) and torch.equal(q_max, q.amax(1))


def test_a_fused_collection_at_the_scorecard_widths_stays_inside_every_tensor():
    """Fused env step, acting (online and target passes), PER trees (32-ary): obs 54, 5 exposure
    actions, 256/256/128, bf16, rollouts of 16, with train steps between rounds."""
    m = small_market(n_bars=3_000, n_features=51)
    n = 64
    cfg = DQNConfig(n_envs=n, rollout_len=16, rounds_per_epoch=2, train_steps_per_round=2, batch_size=64,
                    buffer_capacity=n * 16 * 4, warmup_transitions=n * 16, hidden=(256, 256), head_hidden=128,
                    sampler="proportional", tree_arity=32, gamma=0.5)
    plan = ExecutionPlan(device="cpu", env_step="fused", acting="fused", replay="fused", train_step="torch",
                         matmul_precision="bf16", graphs=False)
    with checked_accesses() as launched:
        tr = DQNTrainer(m, EnvParams(episode_length=256, reward_scale=3600.0, action_mode="exposure"), cfg, plan=plan)
        tr.reset_for_fold(m.fold)
        tr.train_epoch()
    assert {"_dueling_q_kernel", "_env_step_kernel", "_descend_kernel"} <= set(launched)
    a = tr.replay.storage.action[: int(tr.replay.storage.size)]
    assert int(a.min()) >= 0 and int(a.max()) < 5


def test_after_the_selector_loads_an_earlier_epoch_the_next_round_acts_with_its_weights():
    """train.select = "inner" copies the selected epoch's parameters into the online network in
    place at a fold's end; the fused adapter re-packs from the live parameters at every round, so
    the next round's packed weights are the selected epoch's (no stale copy, no re-allocation)."""
    tr = small_trainer(small_market(), acting="fused", hidden=(32, 32), head_hidden=16)
    scores = iter([1.0, -1.0])
    sel = EpochSelector(tr.learner.online, lambda: tr.learner.online, lambda *a: next(scores))
    sel.begin_fold(0, 10)
    tr.train_epoch()
    sel.observe(1)
    epoch1 = pack_net(tr.learner.online, tr.collector._fused.precision, dmf.MIN_HEAD, dmf.MIN_WIDTH)  # the collector's padding
    ptrs = {k: getattr(tr.collector._fused.online, k).data_ptr() for k in PACKED}
    tr.train_epoch()
    sel.observe(2)
    assert not torch.equal(pack_net(tr.learner.online, "ieee").w1, epoch1.w1.float())  # epoch 2 moved on
    assert sel.finish()["epoch"] == 1
    tr.collector.round()
    for k in PACKED:
        assert torch.equal(getattr(tr.collector._fused.online, k), getattr(epoch1, k)), k
        assert getattr(tr.collector._fused.online, k).data_ptr() == ptrs[k], k


def test_a_parameter_re_homed_after_construction_is_named_at_the_next_refresh():
    tr = small_trainer(small_market(), acting="fused")
    tr.collector.round()
    p = next(tr.learner.target.parameters())
    p.data = p.data.clone()  # what a captured refresh would then read stale
    with pytest.raises(RuntimeError, match="parameters moved since construction"):
        tr.collector.round()
