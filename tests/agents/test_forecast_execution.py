"""The forecast learner's execution through the costs: the level rule against a float64 loop over
positions, its no-trade band, the band's costs as the env charges a market order, and the packed
DuelingQNet whose argmax is the rule, in the torch backtester and in the fused backtest kernel (the
Triton interpreter on a CPU), in model files and in a mean-Q ensemble."""

from __future__ import annotations

import copy
import os

import torch

if not torch.cuda.is_available():  # the fused backtest runs on the CPU in the Triton interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from foxhunt.agents.forecast.execution import LEVELS, MARKET_NORMAL, Band, band, pack, scores  # noqa: E402
from foxhunt.agents.forecast.net import ForecastNet  # noqa: E402
from foxhunt.agents.model_io import load_model, save_model  # noqa: E402
from foxhunt.agents.networks import merge_mean  # noqa: E402
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.policies import GreedyPolicy  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from tests.agents.dqn_helpers import small_market  # noqa: E402
from tests.agents.forecast_helpers import small_forecast  # noqa: E402


def loop_level(f: float, x: float, b: Band) -> tuple[int, float]:
    """(the level index the rule takes, its score's margin over the runner-up): a plain float64 loop."""
    best, scores_ = 0, []
    for e, level in enumerate(LEVELS):
        s = f * level - b.cost * abs(level - x) - b.risk * level * level
        scores_.append(s)
        if s > scores_[best]:
            best = e
    ranked = sorted(scores_)
    return best, ranked[-1] - ranked[-2]


def random_band(gen: torch.Generator) -> Band:
    u = torch.rand(4, generator=gen, dtype=torch.float64).tolist()
    return Band(cost=0.05 + 1.5 * u[0], risk=0.8 * u[1], unit=0.5 + u[2])


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 13)])
def test_the_level_scores_pick_what_a_float64_loop_over_positions_picks(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    for _ in range(5):
        b = random_band(gen)
        f = torch.randn(shape, generator=gen, dtype=torch.float64) * 2.0
        x = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2.4 - 1.2)
        got = scores(f, x, b).argmax(-1)
        want = torch.tensor([loop_level(fi, xi, b)[0] for fi, xi in zip(f.reshape(-1).tolist(), x.reshape(-1).tolist())])
        assert torch.equal(got.reshape(-1), want)


def test_a_forecast_inside_the_band_holds_the_current_level_and_one_beyond_it_moves():
    b = Band(cost=0.4, risk=0.0, unit=1.0)
    for e, level in enumerate(LEVELS):  # |f| < c: no neighbour pays its switch
        for f in (-0.39, 0.0, 0.39):
            assert loop_level(f, level, b)[0] == e == int(scores(torch.tensor([f]), torch.tensor([level]), b).argmax())
    assert int(scores(torch.tensor([0.41]), torch.tensor([0.0]), b).argmax()) == 4  # beyond it: all the way long
    assert int(scores(torch.tensor([-0.41]), torch.tensor([0.5]), b).argmax()) == 0


def test_the_risk_term_shrinks_the_position():
    b = Band(cost=0.0, risk=1.0, unit=1.0)  # f·L − L²: the best level is nearest f / 2
    assert [int(scores(torch.tensor([f]), torch.tensor([0.0]), b).argmax()) for f in (-2.0, -0.8, 0.3, 0.8, 2.0)] == [0, 1, 2, 3, 4]


def test_the_band_prices_a_unit_of_exposure_as_the_env_charges_a_market_order():
    env = EnvParams(cost_bps=3.0, spread_bps=4.0, max_position=0.8, reserve=0.1)
    b = band(3e-4, 2e-4, env.max_position, env.reserve, sigma_h=0.01, risk_aversion=2.0, error_variance=0.9)
    assert b.cost == pytest.approx((3e-4 + 2e-4 * (1 + 3e-4)) / 0.01) and b.risk == pytest.approx(1.8)
    assert b.unit == pytest.approx(0.72)
    tr = small_forecast(env=EnvParams(episode_length=50, action_mode="factored", cost_bps=3.0, spread_bps=4.0), risk_aversion=0.5)
    got = tr.band()
    sig = float(tr.market.median_abs_return) * (np.pi / 2) ** 0.5
    assert got.cost == pytest.approx((3e-4 + 2e-4 * (1 + 3e-4)) / sig, rel=1e-5) and got.risk > 0


@torch.no_grad()
def trading(net: ForecastNet, feats: torch.Tensor, scale: float) -> None:
    """Scale ``net``'s forecasts by ``scale`` and centre them on ``feats`` (median 0): forecasts of order
    one against the band, of both signs, so every level is taken somewhere."""
    net.out.weight.mul_(scale)
    net.out.bias.mul_(scale)
    net.out.bias.sub_(net(feats).median(0).values)


def _obs(gen: torch.Generator, n: int, f: int, unit: float) -> torch.Tensor:
    obs = torch.randn(n, f + 3, generator=gen)
    obs[:, f] = (torch.rand(n, generator=gen) * 2.4 - 1.2) * unit  # exposure, around every level
    obs[:, f + 1:] = torch.randn(n, 2, generator=gen) * 3.0  # unrealised return, bars in position: ignored
    return obs


@pytest.mark.parametrize("hidden,quantile", [((16, 16), False), ((5, 11), True), ((9,), False), ((7, 3, 6), False)])
def test_the_packed_networks_argmax_is_the_rules_market_order_on_random_observations(hidden, quantile):
    gen = torch.Generator().manual_seed(len(hidden))
    n_feat = 6
    net = ForecastNet(n_feat, hidden, 3 if quantile else 1)
    b = random_band(gen)
    out = 1 if quantile else 0
    obs = _obs(gen, 3_001, n_feat, b.unit)
    trading(net, obs[:, :n_feat], 150.0)
    q = pack(net, b, out)
    with torch.no_grad():
        act = q(obs).argmax(-1)
        f = copy.deepcopy(net).double()(obs[:, :n_feat].double())[:, out]
    checked = 0
    for i in range(obs.shape[0]):
        level, margin = loop_level(float(f[i]), float(obs[i, n_feat]) / b.unit, b)
        if margin > 1e-4:  # float32 against float64: near-ties aside
            assert int(act[i]) == 9 * level + MARKET_NORMAL, i
            checked += 1
    assert checked > 2_900 and len(set((act // 9).tolist())) == 5  # every level taken somewhere


class RulePolicy:
    """The rule itself as a backtest policy: float64 forecasts and the float64 loop over positions."""

    def __init__(self, net: ForecastNet, b: Band, k: int = 1) -> None:
        self.net, self.band, self.decision_interval = copy.deepcopy(net).double(), b, k
        self.margins: list[float] = []

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        n_feat = self.net.n_features
        f = self.net(obs[:, :n_feat].double())[:, 0].tolist()
        x = (obs[:, n_feat].double() / self.band.unit).tolist()
        picks = [loop_level(fi, xi, self.band) for fi, xi in zip(f, x)]
        self.margins += [m for _, m in picks]
        return torch.tensor([9 * e + MARKET_NORMAL for e, _ in picks], dtype=torch.int64, device=obs.device)


def _trading_trainer(m, k: int = 1):
    env = EnvParams(episode_length=50, action_mode="factored", decision_interval=k, cost_bps=2.0, spread_bps=2.0)
    tr = small_forecast(m, env=env, hidden=(16, 16), risk_aversion=0.3)
    tr.train_epoch()
    feats = (m.features[900:1_100] - m.norm_mean) * m.norm_inv_std
    trading(tr.learner.net, feats, 300.0)  # a forecast that trades, inside and outside its band
    return tr, env


@pytest.mark.parametrize("k", [1, 3])
def test_the_torch_backtest_of_the_packed_network_trades_exactly_the_rule(k):
    m = small_market(n_bars=1_200)
    tr, env = _trading_trainer(m, k)
    b = tr.band()
    bt = Backtester(m, env, chunk=16, cuda_graphs=False)
    starts, lengths = [900, 1_000, 1_051], [61, 45, 37]
    rule = RulePolicy(tr.learner.net, b, k)
    a = bt.run(starts, lengths, GreedyPolicy(tr.policy_net(), k), keep_curves=True)
    r = bt.run(starts, lengths, rule, keep_curves=True)
    assert min(rule.margins) > 1e-4  # no near-tie that float32 could break the other way
    assert a.positions is not None and r.positions is not None
    np.testing.assert_array_equal(a.positions, r.positions)
    assert [x["total_return"] for x in a.metrics] == [x["total_return"] for x in r.metrics]
    assert len(set(np.sign(a.positions[a.positions != 0]).tolist())) == 2 and a.metrics[0]["trade_count"] > 2


def test_the_fused_backtest_kernel_trades_the_rule_as_the_torch_backtester_does():
    from foxhunt.backtest.fused import unsupported

    m = small_market(n_bars=1_200)
    tr, env = _trading_trainer(m)
    bt = Backtester(m, env, chunk=16, cuda_graphs=False)
    policy = GreedyPolicy(tr.policy_net())
    assert unsupported(bt, policy) is None
    starts, lengths = [900, 1_000], [40, 29]
    rule = RulePolicy(tr.learner.net, tr.band())
    a = bt.run(starts, lengths, rule, backend="torch", keep_curves=True)
    f = bt.run(starts, lengths, policy, backend="fused", keep_curves=True)
    assert a.positions is not None and f.positions is not None and min(rule.margins) > 1e-3
    assert {-1.0, 1.0} <= set(np.sign(a.positions).ravel().tolist())  # it trades both ways
    np.testing.assert_array_equal(np.sign(a.positions), np.sign(f.positions))
    np.testing.assert_allclose(f.positions, a.positions, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose([x["total_return"] for x in f.metrics], [x["total_return"] for x in a.metrics], rtol=1e-4, atol=1e-7)


def test_the_model_file_and_a_mean_q_ensemble_keep_the_rule(tmp_path):
    m = small_market()
    tr, env = _trading_trainer(m)
    net = tr.policy_net()
    path = save_model(tmp_path / "model.safetensors", net, m.norm_stats(0, 100), feature_names=tuple(m.names),
                      spec_version=m.spec_version, env=env.model_dump(mode="json"), extra={"agent": "forecast"})
    loaded, _, meta = load_model(path)
    obs = _obs(torch.Generator().manual_seed(1), 512, m.n_features, tr.band().unit)
    assert torch.equal(loaded(obs), net(obs)) and meta.n_actions == 45 and meta.extra["agent"] == "forecast"
    # two members: the mean of their scores is the rule on their mean forecast and mean risk
    other = small_forecast(m, env=env, hidden=(16, 16), risk_aversion=0.3, seed=1)
    other.train_epoch()
    trading(other.learner.net, obs[:, :m.n_features], 300.0)
    merged = merge_mean([net, other.policy_net()])
    b1, b2 = tr.band(), other.band()
    mean_band = Band(cost=b1.cost, risk=(b1.risk + b2.risk) / 2, unit=b1.unit)
    feats = obs[:, :m.n_features]
    with torch.no_grad():
        f = (tr.learner.net(feats)[:, 0].double() + other.learner.net(feats)[:, 0].double()) / 2
        act = merged(obs).argmax(-1)
    for i in range(obs.shape[0]):
        level, margin = loop_level(float(f[i]), float(obs[i, m.n_features]) / b1.unit, mean_band)
        if margin > 1e-4:
            assert int(act[i]) == 9 * level + MARKET_NORMAL
