"""DirectTrainer: residency (no host reads in the gradient step), the guard's bitwise skip and halt,
fold independence, checkpoint state that continues bitwise, the model file round trip, the fused
backtest kernel on its greedy network, that it learns a planted edge, eager = graphed (GPU)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # the fused backtest runs on the CPU in the Triton interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from foxhunt.agents.direct.config import DirectConfig  # noqa: E402
from foxhunt.agents.direct.trainer import DirectTrainer  # noqa: E402
from foxhunt.agents.fold_trainer import TrainingHalted  # noqa: E402
from foxhunt.agents.model_io import load_model, save_model  # noqa: E402
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.policies import GreedyPolicy  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from foxhunt.folds import FoldRange  # noqa: E402
from foxhunt.market import MarketData  # noqa: E402
from foxhunt.testing import cuda_sync_errors, forbid_host_reads  # noqa: E402
from tests.agents.dqn_helpers import small_market  # noqa: E402
from tests.helpers import random_feature_set  # noqa: E402

ENV = EnvParams(episode_length=50)


def small_direct(market=None, seed: int = 0, graphs: bool = False, env: EnvParams = ENV, **over) -> DirectTrainer:
    kw = dict(window=32, batch_windows=16, steps_per_epoch=3, hidden=(16, 16), head_hidden=8)
    kw.update(over)
    m = market or small_market()
    return DirectTrainer(m, env, DirectConfig(**kw), seed=seed, cuda_graphs=graphs)


def _state(tr: DirectTrainer) -> list[torch.Tensor]:
    lr = tr.learner
    return [t.clone() for t in (lr.flat.data, lr.opt.m, lr.opt.v, lr.opt.step_count)]


@pytest.mark.parametrize("over", [{}, {"position_input": False, "objective": "dsr", "vol_target": True},
                                  {"relaxation": "straight_through", "objective": "mean_variance", "turnover_penalty": 3.0},
                                  {"relaxation": "continuous"}], ids=["softmax", "dsr", "straight", "continuous"])
def test_the_gradient_step_reads_nothing_back_to_the_host(over):
    tr = small_direct(**over)
    tr.train_epoch()  # warm-up outside the block (lazy allocations)
    before = tr.learner.flat.data.clone()
    with forbid_host_reads():
        tr.learner.step()
    assert not torch.equal(before, tr.learner.flat.data)  # the step did change the weights


def test_an_epoch_summary_counts_its_steps_bars_and_levels():
    tr = small_direct()
    s = tr.train_epoch()
    assert s["updates"] == 3 and s["transitions"] == 3 * 16 * 32 and sum(s.action_counts()) == 3 * 16 * 32
    assert s["skipped"] == 0 and np.isfinite([s["objective"], s["turnover"], s["exposure_abs"], s["relax_gap"], s.loss_mean]).all()
    assert s.loss_mean == pytest.approx(-s["objective"], rel=1e-6)


def test_a_non_finite_loss_is_skipped_with_weights_and_adam_bitwise_unchanged_and_halts():
    tr = small_direct()
    tr.train_epoch()
    before = _state(tr)
    tr.monitor.reset()
    inv = tr.market.norm_inv_std.clone()
    tr.market.norm_inv_std.fill_(float("nan"))  # every feature NaN: a NaN objective
    tr.learner.step()
    tr.market.norm_inv_std.copy_(inv)
    for a, b in zip(before, _state(tr)):
        assert torch.equal(a, b)
    assert int(tr.learner.guard.skipped_total) == 1 and bool(tr.learner.guard.halted)
    tr.learner.flush_records(1)
    tr._end_epoch()
    with pytest.raises(TrainingHalted, match="non-finite loss or gradient norm"):
        tr._collect_summary()


def test_a_fold_reset_gives_the_same_epoch_as_a_fresh_trainer():
    m = small_market()
    a = small_direct(m, seed=3)
    a.reset_for_fold(m.fold)
    first = a.train_epoch().values
    a.reset_for_fold(m.fold)
    assert a.train_epoch().values == first
    b = small_direct(small_market(), seed=3)
    b.reset_for_fold(b.market.fold)
    assert b.train_epoch().values == first


def test_a_restored_trainer_continues_bitwise_like_the_uninterrupted_one():
    m = small_market()
    a = small_direct(m, seed=4)
    a.reset_for_fold(m.fold)
    a.train_epoch()
    saved = {k: {n: t.clone() for n, t in v.items()} for k, v in a.state_dict().items()}
    ref = [a.train_epoch().values for _ in range(2)]
    b = small_direct(small_market(), seed=99)  # another seed: everything must come from the state
    b.reset_for_fold(b.market.fold)
    b.load_state_dict(saved)
    assert [b.train_epoch().values for _ in range(2)] == ref
    assert torch.equal(a.learner.flat.data, b.learner.flat.data)


@pytest.mark.parametrize("relaxation", ["softmax", "continuous"])
def test_the_model_file_round_trip_gives_the_same_greedy_network(tmp_path, relaxation):
    m = small_market()
    tr = small_direct(m, relaxation=relaxation)
    tr.train_epoch()
    net = tr.policy_net()
    path = save_model(tmp_path / "model.safetensors", net, m.norm_stats(0, 100), feature_names=tuple(m.names),
                      spec_version=m.spec_version, env=EnvParams().model_dump(mode="json"), extra={"agent": "direct"})
    loaded, norm, meta = load_model(path)
    obs = torch.randn(256, m.obs_dim)
    assert torch.equal(loaded(obs), net(obs)) and meta.n_actions == 45 and meta.head == "flat"
    assert meta.extra["agent"] == "direct"


def test_the_fused_backtest_kernel_runs_the_greedy_network_as_the_torch_backtester_does():
    from foxhunt.backtest.fused import unsupported

    m = small_market(n_bars=1_200)
    tr = small_direct(m, hidden=(16, 16))
    with torch.no_grad():
        tr.learner.net.head[2].weight.mul_(300.0)  # a policy that trades
    bt = Backtester(m, ENV, chunk=16, cuda_graphs=False)
    policy = GreedyPolicy(tr.policy_net())
    assert unsupported(bt, policy) is None
    starts, lengths = [900, 1_000], [60, 45]
    a = bt.run(starts, lengths, policy, backend="torch", keep_curves=True)
    b = bt.run(starts, lengths, policy, backend="fused", keep_curves=True)
    assert a.positions is not None and b.positions is not None
    agree = (np.sign(a.positions) == np.sign(b.positions)).mean()
    assert agree > 0.97 and np.abs(a.positions).max() > 0  # tf32 near-ties aside, the same trades


def _edge_market(n: int = 4_000, seed: int = 0) -> MarketData:
    """A market whose first feature is the sign of the next bar's return (a planted, costless-to-read edge)."""
    import dataclasses

    fs = random_feature_set(n, 4, seed=seed)
    close = fs.ohlc[:, 3].double()
    nxt = torch.zeros(n, dtype=torch.float64)
    nxt[:-1] = torch.sign(torch.log(close[1:] / close[:-1]))
    feats = fs.features.clone()
    feats[:, 0] = nxt.float()  # at bar t: sign of the return from C_t to C_{t+1}: filled at O_{t+1}, so part of it is earned
    fs = dataclasses.replace(fs, features=feats)
    m = MarketData(fs, "cpu")
    m.set_fold(FoldRange(0, 0, 3_000, 3_010, n))
    return m


@pytest.mark.parametrize("relaxation", ["softmax", "straight_through"])
def test_it_learns_a_planted_edge_after_costs(relaxation):
    """Twenty steps on a market whose feature leaks the next close-to-close sign (the fill at the next
    open leaves it the open-to-close part): the greedy network, backtested on the validation window
    at the real costs, earns. (The continuous relaxation learns here too, but at exposures of a few
    percent, which the nearest level rounds to flat: docs/LEARNING.md.)"""
    m = _edge_market()
    env = EnvParams(episode_length=50, cost_bps=0.1, spread_bps=0.1, impact_eta=0.0)
    tr = small_direct(m, env=env, relaxation=relaxation, window=32, batch_windows=64, steps_per_epoch=10, lr=3e-3)
    tr.reset_for_fold(m.fold)
    first = tr.train_epoch()
    last = tr.train_epoch()
    assert last["objective"] > first["objective"] > 0.05
    res = Backtester(m, env, chunk=32, cuda_graphs=False).run([3_010], [900], GreedyPolicy(tr.policy_net()))
    assert res.metrics[0]["sharpe"] > 10.0 and res.metrics[0]["trade_count"] > 50


@pytest.mark.gpu
@pytest.mark.parametrize("position_input", [True, False])
def test_cuda_graph_replay_equals_eager_on_a_fixed_seed(position_input):
    torch.backends.cuda.matmul.allow_tf32 = False
    res = []
    for graphs in (False, True):
        m = small_market(device="cuda")
        tr = small_direct(m, seed=5, graphs=graphs, batch_windows=256, position_input=position_input)
        for _ in range(3):
            tr.train_epoch()
        res.append(tr.learner.flat.data.clone())
    assert torch.equal(res[0], res[1])


@pytest.mark.gpu
def test_cuda_epoch_runs_without_any_sync_except_the_readback():
    tr = small_direct(small_market(device="cuda"), graphs=True, batch_windows=256)
    tr.train_epoch()  # capture
    assert tr._train.graph is not None
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
    tr.monitor.finish_readback()
