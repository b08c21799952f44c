"""direct.policy = "attention": the policy over the last L bars. Its training forward pass trades what
the torch backtester trades with its greedy network (bars before the data's first clamped alike), the
model file round trip, the refusals (fused kernel, ensembles, unbound use), and that it reads a
planted edge L bars back that the per-bar MLP cannot see."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.agents.direct.config import DirectConfig
from foxhunt.agents.direct.pnl import LEVELS
from foxhunt.agents.direct.trainer import DirectTrainer
from foxhunt.agents.model_io import load_model, save_model
from foxhunt.agents.networks import merge_mean
from foxhunt.agents.sequence_net import SequenceQNet
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import EnsemblePolicy, GreedyPolicy
from foxhunt.env import EnvParams
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.agents.dqn_helpers import small_market
from tests.helpers import random_feature_set

ATOL = 2e-6
SEQ = dict(policy="attention", sequence=8, attention_heads=2)


def _trainer(m: MarketData, env: EnvParams, **over) -> DirectTrainer:
    kw = dict(window=64, batch_windows=10, steps_per_epoch=1, hidden=(16, 16), head_hidden=8, relaxation="straight_through",
              **SEQ)
    kw.update(over)
    return DirectTrainer(m, env, DirectConfig(**kw), seed=2, cuda_graphs=False)


@pytest.mark.parametrize("k,position_input", [(1, True), (3, True), (1, False)])
def test_the_training_forward_pass_trades_what_the_torch_backtester_trades_with_its_greedy_network(k, position_input):
    """straight_through: the forward pass's per-bar returns are the backtest's for the same windows,
    the first window starting 3 bars into the data (its history clamped at bar 0 in both)."""
    m = small_market(n_bars=1_200)
    env = EnvParams(decision_interval=k, episode_length=64)
    tr = _trainer(m, env, position_input=position_input)
    with torch.no_grad():
        tr.learner.net.head[2].weight.mul_(300.0)  # a random policy that trades often
    starts = torch.tensor([3, 50, 120, 200, 310, 400, 555, 600, 777, 900])
    with torch.no_grad():
        path = tr.learner.forward(starts)
    net = tr.policy_net()
    assert isinstance(net, SequenceQNet)
    res = Backtester(m, env, chunk=16, cuda_graphs=False).run(starts.numpy(), [64] * 10, GreedyPolicy(net, k), keep_curves=True)
    assert res.positions is not None and res.returns is not None
    np.testing.assert_allclose(path["ret"].numpy(), res.returns, rtol=0, atol=ATOL)
    held = torch.tensor(LEVELS)[path["level"]] * (1 - env.reserve)
    assert (np.sign(res.positions) == np.sign(held.numpy())).all()
    assert len(set(path["level"].flatten().tolist())) >= 3
    with torch.no_grad():  # the same network without its attention trades otherwise: the bars before count
        tr.learner.net.encoder.out.weight.zero_()
        other = tr.learner.forward(starts)
    assert not torch.equal(other["level"], path["level"])


def test_the_model_file_round_trip_gives_the_same_sequence_network(tmp_path):
    m = small_market(n_bars=600)
    tr = _trainer(m, EnvParams(episode_length=64), window=32)
    tr.train_epoch()
    net = tr.policy_net()
    path = save_model(tmp_path / "model.safetensors", net, m.norm_stats(0, 100), feature_names=tuple(m.names),
                      spec_version=m.spec_version, env=EnvParams().model_dump(mode="json"), extra={"agent": "direct"})
    loaded, _, meta = load_model(path)
    assert isinstance(loaded, SequenceQNet) and loaded.sequence_meta() == {"length": 8, "width": 16, "heads": 2}
    bar = torch.tensor([0, 5, 300, 599])
    mean, inv = m.norm_mean.expand(4, -1), m.norm_inv_std.expand(4, -1)
    obs = torch.randn(4, m.obs_dim)
    for n in (net, loaded):
        n.bind_history(m.features, bar, mean, inv)
    assert torch.equal(loaded(obs), net(obs)) and meta.n_actions == 45


def test_it_runs_alone_in_the_torch_backtester():
    from foxhunt.agents.networks import fused_net_unsupported

    m = small_market(n_bars=600)
    net = _trainer(m, EnvParams(episode_length=64), window=32).policy_net()
    with pytest.raises(RuntimeError, match="torch backtester"):
        net(torch.zeros(2, m.obs_dim))  # unbound: it has no bars to read
    assert "SequenceQNet" in (fused_net_unsupported(net, m.obs_dim, 45) or "")
    with pytest.raises(ValueError, match="not in an ensemble"):
        EnsemblePolicy([net, net])
    with pytest.raises(ValueError, match="only as one network"):
        merge_mean([net, net])
    one = merge_mean([net])  # abstention's flat network starts from such a copy
    assert isinstance(one, SequenceQNet) and all(torch.equal(a, b) for a, b in zip(one.parameters(), net.parameters()))


def test_the_resolver_names_torch_for_its_evaluation_and_refuses_the_fused_kernel(monkeypatch):
    from foxhunt.accel import triton as triton_status
    from foxhunt.accel.backend import resolve
    from foxhunt.agents.registry import LEARNERS
    from foxhunt.accel.config import AccelConfig
    from foxhunt.errors import ConfigError

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if not triton_status.status(torch.device("cpu")).usable:
        pytest.skip("no Triton interpreter here")
    direct = DirectConfig(**SEQ)
    learner = ("direct", direct, LEARNERS["direct"].implementations)
    with pytest.raises(ConfigError, match=r"accel.eval = 'fused'.*direct.policy = 'attention'"):
        resolve(AccelConfig(eval="fused"), None, "cpu", parts=("eval",), learner=learner)
    plan = resolve(AccelConfig(backend="fused"), None, "cpu", parts=("eval",),
                   learner=("direct", DirectConfig(), LEARNERS["direct"].implementations))
    assert plan.eval == "fused"  # the per-bar MLP runs in the kernel
    with pytest.raises(ConfigError, match=r"override accel.eval = 'torch'"):
        resolve(AccelConfig(backend="fused"), None, "cpu", parts=("eval",), learner=learner)


def test_train_ensemble_above_one_is_refused_for_a_sequence_policy():
    from foxhunt.agents.direct.checks import check_config
    from foxhunt.config import build_config
    from foxhunt.errors import ConfigError

    cfg = build_config({}, source="<test>").replace(train={"agent": "direct", "ensemble": 2}, env={"action_mode": "factored"}, direct=SEQ)
    with pytest.raises(ConfigError, match="set train.ensemble = 1"):
        check_config(cfg, [])
    check_config(cfg.replace(train={"ensemble": 1}), [])


def _lagged_edge_market(lag: int, n: int = 4_000) -> MarketData:
    """A market whose first feature at bar s is the sign of the return from bar s + lag to s + lag + 1:
    at a decision bar t it is readable ``lag`` bars back, not at t itself."""
    fs = random_feature_set(n, 4, seed=0)
    close = fs.ohlc[:, 3].double()
    nxt = torch.zeros(n, dtype=torch.float64)
    nxt[:-1] = torch.sign(torch.log(close[1:] / close[:-1]))
    feats = fs.features.clone()
    feats[:, 0] = 0.0
    feats[: n - lag, 0] = nxt[lag:].float()
    m = MarketData(dataclasses.replace(fs, features=feats), "cpu")
    m.set_fold(FoldRange(0, 0, 3_000, 3_010, n))
    return m


@pytest.mark.slow  # two policies × 100 steps: ~2 minutes on a 2-core CPU
def test_it_reads_an_edge_some_bars_back_that_the_per_bar_mlp_cannot_see():
    m = _lagged_edge_market(lag=5)
    env = EnvParams(episode_length=50, cost_bps=0.1, spread_bps=0.1, impact_eta=0.0)
    sharpe = {}
    for policy in ("attention", "mlp"):
        tr = _trainer(m, env, policy=policy, window=32, batch_windows=64, steps_per_epoch=10, lr=3e-3)
        tr.reset_for_fold(m.fold)
        for _ in range(10):
            tr.train_epoch()
        res = Backtester(m, env, chunk=32, cuda_graphs=False).run([3_010], [900], GreedyPolicy(tr.policy_net()))
        sharpe[policy] = res.metrics[0]["sharpe"]
    assert sharpe["attention"] > 50.0 and sharpe["mlp"] < 10.0, sharpe
