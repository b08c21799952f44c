"""The action-branching head (``dqn.head = "branching"``, agents/networks.BranchingQNet): its Q and
greedy action, the train step's double-DQN targets over the joint Q (eager, and the fused step's
hand-written backward), torch acting, ensembles and the abstention's flat network, model files, the
torch backtester, and the fused kernels' refusals that the resolver and the backtest fall back on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from foxhunt.accel.backend import ExecutionPlan, resolve
from foxhunt.accel.config import AccelConfig
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.fused_step import FusedTrainStep, unsupported as train_step_unsupported
from foxhunt.agents.dqn.learner import QLearner
from foxhunt.agents.dqn.manual_grad import DuelingLayout, dqn_loss_and_grad
from foxhunt.agents.model_io import load_model, save_model
from foxhunt.agents.networks import (BRANCHES, BranchingQNet, DuelingQNet, fused_net_unsupported, merge_mean,
                                     q_network)
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import GreedyPolicy
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData, NormStats
from foxhunt.train.abstain import flat_action, flat_net
from tests.agents.dqn_helpers import assert_q_monitor_matches, float64_q_stats, small_trainer, watch_batches
from tests.helpers import random_feature_set


def _net(obs_dim=9, hidden=(7, 13), head=5, seed=0, dtype=torch.float32) -> BranchingQNet:
    torch.manual_seed(seed)
    return BranchingQNet(obs_dim, hidden, head).to(dtype)


def dueling_equivalent(net: BranchingQNet) -> DuelingQNet:
    """The DuelingQNet with the same Q: the branches' hidden layers side by side as one advantage head
    3 × head_hidden wide, its output layer A(a) = Σ_b a_b(a's sub-action b) (so mean_a A = Σ_b mean a_b),
    the value head padded with zero units. An oracle built without BranchingQNet.forward."""
    hh, h = net.value[0].out_features, net.value[0].in_features
    k = len(net.branches)
    out = DuelingQNet(net.obs_dim, net.n_actions, [m.out_features for m in net.trunk if isinstance(m, nn.Linear)], k * hh)
    out = out.to(net.value[0].weight.dtype)
    with torch.no_grad():
        for p in out.parameters():
            p.zero_()
        out.trunk.load_state_dict(net.trunk.state_dict())
        out.value[0].weight[:hh] = net.value[0].weight
        out.value[0].bias[:hh] = net.value[0].bias
        out.value[2].weight[:, :hh] = net.value[2].weight
        out.value[2].bias.copy_(net.value[2].bias)
        out.advantage[0].weight.copy_(torch.cat([br[0].weight for br in net.branches]))
        out.advantage[0].bias.copy_(torch.cat([br[0].bias for br in net.branches]))
        for a in range(net.n_actions):
            subs, rest = [], a
            for n in reversed(BRANCHES):
                subs.append(rest % n)
                rest //= n
            for b, sub in enumerate(reversed(subs)):
                out.advantage[2].weight[a, b * hh:(b + 1) * hh] = net.branches[b][2].weight[sub]
                out.advantage[2].bias[a] += net.branches[b][2].bias[sub]
    assert out.advantage[0].in_features == h
    return out.eval()


# ---------------------------------------------------------------------- the network
@pytest.mark.parametrize("obs_dim, hidden, head", [(9, (7, 13), 5), (4, (3,), 1), (54, (64, 64), 16)])
def test_q_is_the_value_plus_each_branchs_centred_advantage_and_greedy_is_the_joint_argmax(obs_dim, hidden, head):
    net = _net(obs_dim, hidden, head, dtype=torch.float64)
    x = torch.randn(301, obs_dim, dtype=torch.float64)
    q = net(x)
    assert q.shape == (301, 45)
    h = net.trunk(x)
    v = net.value(h)[:, 0]
    a = [br(h) for br in net.branches]
    for act in range(45):
        e, o, u = act // 9, (act // 3) % 3, act % 3
        ref = v + (a[0][:, e] - a[0].mean(1)) + (a[1][:, o] - a[1].mean(1)) + (a[2][:, u] - a[2].mean(1))
        torch.testing.assert_close(q[:, act], ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(net.greedy(x), q.argmax(1))
    torch.testing.assert_close(dueling_equivalent(net)(x), q, rtol=1e-10, atol=1e-10)
    # ties resolve alike: an all-zero net's Q is constant, both pick action 0
    zero = BranchingQNet(obs_dim, hidden, head)
    for p in zero.parameters():
        nn.init.zeros_(p)
    assert int(zero.greedy(x[:3].float()).max()) == 0 == int(zero(x[:3].float()).argmax(1).max())


def test_the_memory_budget_counts_the_branching_nets_parameters():
    from foxhunt.budget import dueling_params

    assert dueling_params(23, (40, 30), 12, 45, "branching") == sum(p.numel() for p in BranchingQNet(23, (40, 30), 12).parameters())


def test_the_branching_head_needs_the_factored_actions():
    assert isinstance(q_network("branching", 9, 45, (8,), 4), BranchingQNet)
    assert isinstance(q_network("flat", 9, 5, (8,), 4), DuelingQNet)
    with pytest.raises(ValueError, match=r"dqn.head = 'branching' needs the 45 factored actions \(env.action_mode = "
                                         r"'factored'\); this env has 5"):
        q_network("branching", 9, 5, (8,), 4)
    with pytest.raises(ConfigError, match="this env has 5"):
        from tests.agents.dqn_helpers import small_market
        from foxhunt.agents.monitor import EpochMonitor
        from foxhunt.agents.replay import ReplayBuffer, ReplayStorage, UniformSampler

        m = small_market()
        st = ReplayStorage(64, 3, m.device)
        QLearner(DQNConfig(head="branching", buffer_capacity=256, n_envs=4, batch_size=8), m,
                 ReplayBuffer(st, UniformSampler(st)), 5, 4, EpochMonitor(m.device))


# ---------------------------------------------------------------------- the train step
def _batch(obs_dim, batch, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(obs=torch.randn(batch, obs_dim, generator=g, dtype=dtype),
                action=torch.randint(0, 45, (batch,), generator=g),
                reward=torch.randn(batch, generator=g, dtype=dtype),
                done=torch.rand(batch, generator=g) < 0.3,
                next_obs=torch.randn(batch, obs_dim, generator=g, dtype=dtype),
                discount=torch.rand(batch, generator=g, dtype=dtype),
                weights=torch.rand(batch, generator=g, dtype=dtype) + 0.1)


def test_the_targets_are_double_dqn_over_the_joint_q():
    net, tgt = _net(seed=1, dtype=torch.float64), _net(seed=2, dtype=torch.float64)
    b = _batch(9, 23, torch.float64, 3)
    ref_self = SimpleNamespace(online=net, target=tgt, cfg=SimpleNamespace(huber_delta=0.5))
    loss, td, q_taken, q = QLearner._loss(ref_self, b["obs"], b["action"], b["reward"], b["done"], b["next_obs"],
                                          b["discount"], b["weights"])
    with torch.no_grad():
        for i in range(23):
            best = int(net.greedy(b["next_obs"][i:i + 1])[0])  # the online net's per-branch argmax picks a'
            y = float(b["reward"][i]) + float(b["discount"][i]) * (not bool(b["done"][i])) * float(tgt(b["next_obs"][i:i + 1])[0, best])
            taken = float(net(b["obs"][i:i + 1])[0, int(b["action"][i])])
            assert float(q_taken[i]) == pytest.approx(taken, rel=1e-12)
            assert float(td[i]) == pytest.approx(taken - y, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(q, net(b["obs"]).detach())


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("hidden, head", [((7, 13), 5), ((11,), 4), ((6, 9, 5), 3)])
def test_the_hand_written_branching_gradient_equals_autograd(dtype, tol, hidden, head):
    net, tgt = _net(9, hidden, head, seed=4, dtype=dtype), _net(9, hidden, head, seed=5, dtype=dtype)
    for p in tgt.parameters():
        p.requires_grad_(False)
    b = _batch(9, 37, dtype, 6)
    delta = 0.4
    ref_self = SimpleNamespace(online=net, target=tgt, cfg=SimpleNamespace(huber_delta=delta))
    loss, td, q_taken, q = QLearner._loss(ref_self, b["obs"], b["action"], b["reward"], b["done"], b["next_obs"],
                                          b["discount"], b["weights"])
    loss.backward()
    ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
    lay = DuelingLayout.from_module(net)
    assert lay.branches == BRANCHES and len(lay.advs) == 3
    flat = lambda n: torch.cat([p.detach().reshape(-1) for p in n.parameters()])  # noqa: E731
    l2, grad, td2, q2, qa2 = dqn_loss_and_grad(flat(net), flat(tgt), lay, b["obs"], b["action"], b["reward"], b["done"],
                                               b["next_obs"], b["discount"], b["weights"], delta)
    torch.testing.assert_close(l2, loss.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(td2, td, rtol=tol, atol=tol)
    torch.testing.assert_close(qa2, q, rtol=tol, atol=tol)
    torch.testing.assert_close(grad, ref, rtol=tol, atol=tol * float(ref.abs().max()))


def test_the_fused_train_step_runs_the_branching_head_like_the_eager_step():
    assert train_step_unsupported(_net()) is None
    a = small_trainer(seed=4, head="branching", sampler="proportional", n_step=2)
    b = small_trainer(seed=4, head="branching", sampler="proportional", n_step=2)
    b.learner.fused = FusedTrainStep(b.learner, compile=False)
    for tr in (a, b):
        for _ in range(4):
            tr.collector.round()
    for _ in range(5):
        a.learner.train_step()
        b.learner.train_step()
    for x, y in ((a.learner.flat.data, b.learner.flat.data), (a.learner.target_flat, b.learner.target_flat),
                 (a.learner.opt.m, b.learner.opt.m), (a.learner.records[:5], b.learner.records[:5])):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5 * float(x.abs().max()))


@pytest.mark.parametrize("train_step", ["torch", "fused"])
def test_a_branching_trainer_acts_in_torch_trains_and_monitors_q(train_step):
    tr = small_trainer(seed=7, head="branching", train_step=train_step)
    assert isinstance(tr.learner.online, BranchingQNet) and isinstance(tr.learner.target, BranchingQNet)
    seen = watch_batches(tr)
    before = tr.learner.flat.data.clone()
    s = tr.train_epoch()
    assert s["updates"] > 0 and s["halt"] == 0 and not torch.equal(before, tr.learner.flat.data)
    assert sum(s.action_counts()) == s["transitions"]
    assert_q_monitor_matches(s, float64_q_stats(tr, seen), rel=1e-5)


# ---------------------------------------------------------------------- the fused kernels refuse it
def test_the_fused_kernels_refuse_a_branching_net_and_the_resolver_names_torch_for_it():
    net = _net(54, (64, 64), 16)
    why = fused_net_unsupported(net, 54, 45)
    assert why == "the network is a BranchingQNet, not a DuelingQNet"
    from foxhunt.agents.dqn.fused import unsupported as acting_unsupported

    if acting_unsupported(DuelingQNet(54, 45, (64, 64), 16), torch.device("cpu")) is None:  # TRITON_INTERPRET=1
        assert acting_unsupported(net, torch.device("cpu")) == why
        with pytest.raises(ValueError, match="^fused acting unavailable: the network is a BranchingQNet, not a DuelingQNet$"):
            small_trainer(head="branching", acting="fused")
    branching = DQNConfig(head="branching", hidden=(16, 16), head_hidden=8)
    plan = resolve(AccelConfig(), branching, "cuda")  # a plan is data: resolving for CUDA needs no GPU
    if plan.backend == "fused":  # Triton imports here
        assert plan.acting == plan.eval == "torch" and plan.train_step == "fused"
        for part in ("acting", "eval"):
            assert plan.notes[part] == ("dqn: dqn.head = 'branching': the fused acting and backtest kernels run the "
                                        "flat dueling head only: torch")
        with pytest.raises(ConfigError, match=r"^accel.acting = 'fused' on cuda: dqn: dqn.head = 'branching': the fused "
                                              r"acting and backtest kernels run the flat dueling head only$"):
            resolve(AccelConfig(acting="fused"), branching, "cuda")
    flat = resolve(AccelConfig(), DQNConfig(hidden=(16, 16), head_hidden=8), "cuda")
    assert "acting" not in flat.notes


# ---------------------------------------------------------------------- ensembles, abstention
def test_merged_branching_members_give_the_weighted_mean_q_and_the_flat_net_picks_the_flat_action():
    nets = [_net(seed=s) for s in range(3)]
    merged = merge_mean(nets, [1.0, 2.0, 3.0])
    assert isinstance(merged, BranchingQNet) and merged.value[0].out_features == 15
    x = torch.randn(50, 9)
    ref = (nets[0](x) * 1 + nets[1](x) * 2 + nets[2](x) * 3) / 6
    torch.testing.assert_close(merged(x), ref, rtol=1e-5, atol=1e-5)
    flat = flat_net(nets[0])
    assert isinstance(flat, BranchingQNet)
    assert torch.equal(flat(x).argmax(1), torch.full((50,), flat_action(45)))
    with pytest.raises(ValueError, match="one architecture"):
        merge_mean([nets[0], DuelingQNet(9, 45, (7, 13), 5)])


# ---------------------------------------------------------------------- model files
def _norm(f: int) -> NormStats:
    return NormStats(mean=torch.zeros(f, dtype=torch.float64), std=torch.ones(f, dtype=torch.float64))


def _meta_json(path) -> dict:
    import json

    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return json.loads(fh.metadata()["foxhunt"])


def test_a_model_file_records_the_branching_head_and_loads_it_back_bitwise(tmp_path):
    from foxhunt.env.params import EnvParams

    net = _net(9, (7, 13), 5)
    names = tuple(f"f{i}" for i in range(6))
    env = EnvParams().model_dump(mode="json")
    p = save_model(tmp_path / "b.safetensors", net, _norm(6), feature_names=names, spec_version="t", env=env)
    assert _meta_json(p)["head"] == "branching"
    back, _, meta = load_model(p)
    assert isinstance(back, BranchingQNet) and meta.head == "branching"
    x = torch.randn(40, 9)
    assert torch.equal(back(x), net(x))
    # a flat model's file has no head key (as files written before it existed), and loads as flat
    flat = DuelingQNet(9, 45, (7, 13), 5)
    q = save_model(tmp_path / "f.safetensors", flat, _norm(6), feature_names=names, spec_version="t", env=env)
    assert "head" not in _meta_json(q)
    back, _, meta = load_model(q)
    assert type(back) is DuelingQNet and meta.head == "flat"


def test_a_branching_model_file_for_the_exposure_actions_is_refused(tmp_path):
    from foxhunt.agents.model_io import ModelFileError, parse_meta
    from foxhunt.env.params import EnvParams

    env = EnvParams(action_mode="exposure").model_dump(mode="json")
    raw = {"format": "foxhunt-model/2", "obs_dim": 9, "n_actions": 5, "hidden": [7], "head_hidden": 5,
           "head": "branching", "feature_names": [f"f{i}" for i in range(6)], "spec_version": "t", "env": env}
    import json

    with pytest.raises(ModelFileError) as e:
        parse_meta(tmp_path / "x.safetensors", {"foxhunt": json.dumps(raw)})
    assert str(e.value) == (f"model file {tmp_path / 'x.safetensors'}: metadata <top>: Value error, head = 'branching' "
                            "needs n_actions = 45 (got 5)")


# ---------------------------------------------------------------------- backtests
def test_the_torch_backtester_runs_a_branching_model_as_its_dueling_equivalent_and_the_fused_one_refuses():
    m = MarketData(random_feature_set(3_000, 5, seed=4))
    m.set_fold(FoldRange(0, 0, 2_000, 2_010, 3_000))
    net = _net(m.obs_dim, (16, 16), 8, seed=9)
    with torch.no_grad():
        net.branches[0][2].weight *= 20.0  # the exposure follows the observation: the policy trades
    bt = Backtester(m)
    args = ([2_010, 2_300], [300, 123])
    a = bt.run(*args, GreedyPolicy(net), keep_curves=True)
    b = bt.run(*args, GreedyPolicy(dueling_equivalent(net)), keep_curves=True)
    assert a.metrics[0]["trade_count"] > 0
    torch.testing.assert_close(torch.as_tensor(a.returns), torch.as_tensor(b.returns), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError):
        bt.run(*args, GreedyPolicy(net), backend="fused")


def test_foxhunt_backtest_falls_back_to_torch_for_a_branching_model_under_auto_and_refuses_a_named_fused(monkeypatch):
    from foxhunt.accel import triton as accel_triton
    from foxhunt.backtest.standalone import run_models

    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: True)  # the kernel is never launched here
    fs = random_feature_set(200, seed=6, warmup=20)
    torch.manual_seed(0)
    loaded = [(BranchingQNet(fs.n_features + 3, (16, 16), 8), _norm(fs.n_features),
               SimpleNamespace(extra={}, env={"cost_bps": 1.0}))]
    kw = dict(windows=2, ensemble_mode="vote", bars_per_year=None, barriers=False)
    said: list[str] = []
    auto = ExecutionPlan(eval="fused", parts=("eval",), backend="fused")
    res = run_models(["b"], loaded, fs, torch.device("cpu"), plan=auto, say=said.append, **kw)
    assert res.plan.eval == "torch" and "BranchingQNet, not a DuelingQNet" in res.plan.notes["eval"]
    assert "model backtest: torch path" in said
    named = ExecutionPlan(eval="fused", parts=("eval",), backend="fused", named=("eval",))
    with pytest.raises(ConfigError, match="accel.eval = 'fused' on cpu: the fused kernel cannot run b: the network is a "
                                          "BranchingQNet, not a DuelingQNet"):
        run_models(["b"], loaded, fs, torch.device("cpu"), plan=named, say=said.append, **kw)


# ---------------------------------------------------------------------- CUDA (run on the GPU)
@pytest.mark.gpu
def test_cuda_graphed_fused_step_trains_the_branching_head_like_the_eager_step_without_syncs():
    from foxhunt.testing import cuda_sync_errors
    from tests.agents.dqn_helpers import small_market

    m = small_market(device="cuda")
    kw = dict(n_envs=128, batch_size=256, n_step=3, matmul_precision="fp32", head="branching")
    a = small_trainer(m, seed=5, graphs=False, **kw)
    b = small_trainer(m, seed=5, graphs=True, train_step="fused", **kw)
    for tr in (a, b):
        for _ in range(4):
            tr.collector.round()
    for _ in range(8):
        a.learner.train_step()
        b._train()  # compile, capture, then replays
    torch.cuda.synchronize()
    assert b._train.graph is not None
    torch.testing.assert_close(b.learner.flat.data, a.learner.flat.data, rtol=1e-4, atol=1e-5)
    b.train_epoch()  # capture the collection round too (torch acting)
    with cuda_sync_errors("cuda"):
        b.run_epoch()
    assert b.monitor.finish_readback()["updates"] > 0
