"""PPOTrainer: residency (no host reads in a rollout or an update), the guard's bitwise skip and
halt, target-KL masking, the packed greedy network, fold independence, eager = graphed (GPU)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # the [accel] test resolves env_step = "fused" on the CPU (Triton interpreter)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from foxhunt.agents.dqn.trainer import TrainingHalted  # noqa: E402
from foxhunt.agents.exec_choice import ExecChoice, exec_choice  # noqa: E402
from foxhunt.agents.networks import ActorCritic  # noqa: E402
from foxhunt.agents.ppo.config import PPOConfig  # noqa: E402
from foxhunt.agents.ppo.trainer import PPOTrainer  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from foxhunt.testing import cuda_sync_errors, forbid_host_reads  # noqa: E402
from tests.agents.dqn_helpers import small_market  # noqa: E402


def small_ppo(market=None, seed: int = 0, choice: ExecChoice | None = None, **over) -> PPOTrainer:
    kw = dict(n_envs=16, rollout_len=8, iterations_per_epoch=2, minibatches=4, update_epochs=2, hidden=(16, 16), head_hidden=8)
    kw.update(over)
    return PPOTrainer(market or small_market(), EnvParams(episode_length=50, reward_scale=100.0), PPOConfig(**kw), seed=seed,
                      choice=choice)


def _state(tr: PPOTrainer) -> list[torch.Tensor]:
    return [t.clone() for t in (tr.learner.flat.data, tr.learner.opt.m, tr.learner.opt.v, tr.learner.opt.step_count)]


def test_a_rollout_and_an_update_read_nothing_back_to_the_host():
    tr = small_ppo(target_kl=0.01, lr_end=1e-5)
    tr.train_epoch()  # warm-up outside the block (lazy allocations)
    before = tr.learner.flat.data.clone()
    with forbid_host_reads():
        tr.rollout.collect()
        tr.learner.update()
    assert not torch.equal(before, tr.learner.flat.data)  # the update did change the weights
    assert tr.learner.lr.item() < 3e-4  # the learning-rate schedule moved on the device


def test_a_non_finite_loss_is_skipped_with_weights_and_adam_bitwise_unchanged_and_halts():
    tr = small_ppo()
    tr.train_epoch()
    tr.monitor.reset()
    tr.rollout.collect()
    tr.buffer.advantage[3, 5] = float("nan")  # poisons every minibatch holding it (normalised advantages)
    tr.buffer.ret.fill_(float("nan"))  # and every value loss
    before = _state(tr)
    tr.learner.update()
    for a, b in zip(before, _state(tr)):
        assert torch.equal(a, b)
    assert int(tr.learner.guard.skipped_total) == 1  # the first bad step halts (max_skipped_steps = 0) ...
    assert bool(tr.learner.guard.halted)  # ... and the sticky halt masks the rest
    tr.learner.flush_records(8, tr.rollout.ev)
    tr.monitor.start_readback(7)
    with pytest.raises(TrainingHalted, match=r"fold 0, epoch 7: non-finite loss or gradient norm \(8 steps skipped\)"):
        tr._collect_summary()


def test_an_exploding_loss_is_skipped_bitwise_and_the_halt_names_loss_clip():
    tr = small_ppo()
    tr.monitor.reset()
    tr.rollout.collect()
    tr.buffer.ret.fill_(1e6)  # finite, but the value loss explodes far above loss_clip = 1e6
    before = _state(tr)
    tr.learner.update()
    assert all(torch.equal(a, b) for a, b in zip(before, _state(tr)))
    tr.learner.flush_records(8, tr.rollout.ev)
    tr.monitor.start_readback(0)
    with pytest.raises(TrainingHalted, match=r"loss above loss_clip=1e\+06 \(8 steps skipped\)"):
        tr._collect_summary()


def test_tolerated_skips_do_not_halt_and_later_steps_apply():
    tr = small_ppo(max_skipped_steps=100)
    tr.rollout.collect()
    tr.buffer.ret.fill_(float("nan"))
    before = _state(tr)
    tr.learner.update()
    assert all(torch.equal(a, b) for a, b in zip(before, _state(tr)))
    assert not bool(tr.learner.guard.halted)
    s = tr.train_epoch()
    assert s["skipped"] == 0 and s["halt"] == 0 and s["updates"] == 2 * 2 * 4
    assert not torch.equal(before[0], tr.learner.flat.data)


def test_target_kl_masks_the_rest_of_the_update_on_the_device():
    tr = small_ppo(target_kl=1e-6, lr=1e-2, update_epochs=3)
    tr.rollout.collect()
    tr.learner.update()
    rec = tr.learner.records[:12]
    applied = int(tr.learner.opt.step_count)
    masked = int(rec[:, 14].sum())
    assert 1 <= applied < 12 and applied + masked == 12
    # Once masked, every later step of the update is masked too (sticky), and the first is never.
    flags = rec[:, 14].tolist()
    assert flags[0] == 0.0 and flags == sorted(flags)
    s = tr.train_epoch()
    assert s["kl_stopped"] > 0 and s["approx_kl"] > 0


def test_the_packed_greedy_network_has_the_policy_argmax_and_softmax():
    for shared in (True, False):
        net = ActorCritic(9, 5, (12, 10), 6, shared_trunk=shared)
        for p in net.parameters():  # make the value head matter if it leaked into the packed net
            p.data.normal_(0, 0.5)
        obs = torch.randn(64, 9)
        logits, _ = net(obs)
        q = net.greedy_net()(obs)
        assert torch.equal(q.argmax(1), logits.argmax(1))
        torch.testing.assert_close(torch.softmax(q, 1), torch.softmax(logits, 1))


def test_the_fused_backtest_kernel_covers_the_packed_actor():
    from foxhunt.agents.networks import fused_net_unsupported as net_unsupported

    tr = small_ppo()
    assert net_unsupported(tr.policy_net(), tr.env.obs_dim, tr.env.n_actions) is None
    one_layer = small_ppo(hidden=(16,)).policy_net()  # the fallback says why
    assert "two trunk layers" in net_unsupported(one_layer, tr.env.obs_dim, tr.env.n_actions)


def test_a_fold_reset_gives_the_same_epoch_as_a_fresh_trainer():
    m = small_market()
    a = small_ppo(m, seed=3)
    a.reset_for_fold(m.fold)  # the runner starts every fold so: generators from (seed, fold)
    first = [a.train_epoch().values]
    a.reset_for_fold(m.fold)
    again = [a.train_epoch().values]
    assert again == first
    b = small_ppo(small_market(), seed=3)
    b.reset_for_fold(b.market.fold)
    assert [b.train_epoch().values] == first


def test_the_execution_choice_follows_the_resolved_accel_plan():
    from foxhunt.accel.backend import resolve_config
    from foxhunt.train.config import default_train_config

    cfg = default_train_config(["accel.env_step=fused", "accel.matmul_precision=fp32", 'train.agent="ppo"'])
    c = exec_choice(resolve_config(cfg, "cpu"))
    assert c.env_step == "fused" and not c.cuda_graphs and c.matmul_precision == "fp32"


def test_factored_actions_and_a_separate_critic_train():
    tr = PPOTrainer(small_market(), EnvParams(episode_length=50, reward_scale=100.0, action_mode="factored"),
                    PPOConfig(n_envs=8, rollout_len=4, iterations_per_epoch=1, minibatches=2, hidden=(8,), head_hidden=4,
                              shared_trunk=False))
    s = tr.train_epoch()
    assert s["transitions"] == 32 and sum(s.action_counts()) == 32
    assert tr.policy_net().n_actions == 45


@pytest.mark.gpu
@pytest.mark.parametrize("explore_hold", [0.0, 0.7])
def test_cuda_graph_replay_equals_eager_on_a_fixed_seed(explore_hold):
    res = []
    for graphs in (False, True):
        m = small_market(device="cuda")
        tr = small_ppo(m, seed=5, choice=ExecChoice(cuda_graphs=graphs, matmul_precision="fp32"), n_envs=128, target_kl=0.05,
                       explore_hold=explore_hold)
        for _ in range(3):
            tr.train_epoch()
        res.append((tr.learner.flat.data.clone(), tr.env.state.equity.clone(), tr.buffer.advantage.clone()))
    for a, b in zip(*res):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("explore_hold", [0.0, 0.7])
def test_cuda_epoch_runs_without_any_sync_except_the_readback(explore_hold):
    tr = small_ppo(small_market(device="cuda"), n_envs=256, target_kl=0.05, explore_hold=explore_hold)
    tr.train_epoch()  # capture
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
    tr.monitor.finish_readback()


@pytest.mark.gpu
def test_the_fused_env_step_trains_like_the_torch_step():
    res = []
    for fused in (False, True):
        tr = small_ppo(small_market(device="cuda"), seed=2, choice=ExecChoice(env_step="fused" if fused else "torch", matmul_precision="fp32"),
                       n_envs=256)
        res.append(tr.train_epoch())
    assert res[1]["transitions"] == res[0]["transitions"] and res[1]["updates"] == res[0]["updates"]
    # Same results to float32 rounding: a rare flipped draw moves a few envs' paths, not the statistics.
    assert abs(res[1].reward_mean - res[0].reward_mean) < 0.1 * res[0].reward_std
    assert res[1]["skipped"] == 0 and res[1].loss_mean == pytest.approx(res[0].loss_mean, rel=0.2, abs=1e-3)


def test_explore_hold_keeps_each_envs_previous_action_on_held_steps_and_decides_after_an_episode_ends():
    tr = small_ppo(explore_hold=0.8, rollout_len=64, n_envs=32, iterations_per_epoch=1)
    tr.train_epoch()
    b = tr.rollout.buffer
    decided = b.decided.bool()
    held = ~decided
    assert 0.7 < held.float().mean().item() < 0.9  # about explore_hold of the steps
    # a held step repeats the env's action of the step before; the first step of an episode is decided
    assert torch.equal(b.action[1:][held[1:]], b.action[:-1][held[1:]])
    assert decided[0].all() and decided[1:][b.done[:-1]].all()
    plain = small_ppo(iterations_per_epoch=1, rollout_len=64, n_envs=32)
    plain.train_epoch()
    assert plain.rollout.buffer.decided.bool().all()  # explore_hold = 0: every step sampled



def test_with_explore_hold_a_restored_trainer_continues_bitwise_like_the_uninterrupted_one():
    # the previous actions a held step repeats are state: a checkpoint carries them
    a = small_ppo(seed=2, explore_hold=0.7)
    a.train_epoch()
    saved = {c: {k: v.clone() for k, v in g.items()} for c, g in a.state_dict().items()}
    assert {"prev_action", "has_prev"} <= set(saved["rollout"]) and bool(saved["rollout"]["has_prev"].any())
    a.train_epoch()
    b = small_ppo(seed=2, explore_hold=0.7)
    b.load_state_dict(saved)
    b.train_epoch()
    assert torch.equal(a.learner.flat.data, b.learner.flat.data)
    assert torch.equal(a.rollout.buffer.action, b.rollout.buffer.action)


def test_with_counter_draws_a_restored_trainer_continues_bitwise_and_its_state_holds_seeds_not_generators():
    a = small_ppo(seed=2, explore_hold=0.5, counter_draws=True)
    assert a.rollout.draws.generators() == {} and a.env.sampler.generators() == {}
    a.train_epoch()
    saved = {c: {k: v.clone() for k, v in g.items()} for c, g in a.state_dict().items()}
    assert "draw_seed" in saved["rollout"] and "generator" not in saved["rollout"]
    assert {"start_seed", "start_counter"} <= set(saved["env"])
    a.train_epoch()
    b = small_ppo(seed=2, explore_hold=0.5, counter_draws=True)
    b.load_state_dict(saved)
    b.train_epoch()
    assert torch.equal(a.learner.flat.data, b.learner.flat.data)
    assert torch.equal(a.rollout.buffer.action, b.rollout.buffer.action)
    plain = small_ppo(seed=2, explore_hold=0.5)
    plain.train_epoch()
    plain.train_epoch()
    assert not torch.equal(plain.rollout.buffer.action, a.rollout.buffer.action)  # other draws, other actions
