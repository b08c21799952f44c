"""The forecast learner with forecast.policy = "attention": its forecast reads the decision bar and the
L − 1 bars before it only, its greedy network (a SequenceQNet) takes the rule's level in the torch
backtester, and the fused kernels and ensembles refuse it in one line."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from foxhunt.agents.forecast.net import gather
from foxhunt.agents.sequence_net import SequenceQNet
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import GreedyPolicy
from foxhunt.env import EnvParams
from tests.agents.dqn_helpers import small_market
from tests.agents.forecast_helpers import small_forecast
from tests.agents.test_forecast_execution import loop_level, trading

L = 5


def _trainer(m, **over):
    env = EnvParams(episode_length=50, action_mode="factored", cost_bps=2.0, spread_bps=2.0)
    return small_forecast(m, env=env, policy="attention", sequence=L, attention_heads=2, hidden=(8, 6), **over), env


def test_an_attention_forecast_reads_its_bar_and_the_l_minus_1_before_it_only():
    m = small_market(n_bars=1_200)
    tr, _ = _trainer(m)
    tr.train_epoch()
    bars = torch.arange(900, 1_000)
    before = tr.forecasts(bars).clone()
    t0 = 950
    saved = m.features.clone()
    m.features[t0:] += 7.0  # the future from t0 on
    after = tr.forecasts(bars)
    assert torch.equal(before[: t0 - 900], after[: t0 - 900]) and not torch.equal(before[t0 - 900:], after[t0 - 900:])
    m.features.copy_(saved)
    m.features[: 940 - L + 1] -= 7.0  # bars older than bar 940's span
    after = tr.forecasts(bars)
    assert torch.equal(before[940 - 900:], after[940 - 900:]) and not torch.equal(before[:2], after[:2])


class SpanRulePolicy:
    """The rule on the attention forecast, float64, reading the live bars the backtester binds."""

    def __init__(self, tr, market) -> None:
        self.net, self.band, self.market, self.decision_interval = copy.deepcopy(tr.learner.net).double(), tr.band(), market, 1
        self.margins: list[float] = []

    def bind_history(self, features, bar, mean, inv) -> None:
        self.bar = bar

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        f = self.net(gather(self.market, self.bar.clone(), L).double())[:, 0].tolist()
        x = (obs[:, self.net.n_features].double() / self.band.unit).tolist()
        picks = [loop_level(fi, xi, self.band) for fi, xi in zip(f, x)]
        self.margins += [mg for _, mg in picks]
        return torch.tensor([9 * e + 3 * 0 + 1 for e, _ in picks], dtype=torch.int64)


def test_the_torch_backtest_of_its_sequence_network_trades_exactly_the_rule():
    m = small_market(n_bars=1_200)
    tr, env = _trainer(m)
    tr.train_epoch()
    trading(tr.learner.net, gather(m, torch.arange(900, 1_100), L), 300.0)
    net = tr.policy_net()
    assert isinstance(net, SequenceQNet)
    bt = Backtester(m, env, chunk=16, cuda_graphs=False)
    starts, lengths = [900, 1_003], [57, 41]
    rule = SpanRulePolicy(tr, m)
    a = bt.run(starts, lengths, GreedyPolicy(net), keep_curves=True)
    r = bt.run(starts, lengths, rule, keep_curves=True)
    assert min(rule.margins) > 1e-4 and a.positions is not None and r.positions is not None
    np.testing.assert_array_equal(a.positions, r.positions)
    assert {-1.0, 1.0} <= set(np.sign(a.positions).ravel().tolist())


@pytest.mark.parametrize("sets,line", [
    (['accel.eval="fused"'], "accel.eval = 'fused' on cpu: forecast: forecast.policy = 'attention' reads the last forecast.sequence bars: "
     "the fused backtest kernel runs a per-bar MLP only"),
    (["train.ensemble=2"], "forecast.policy = 'attention' runs alone in the torch backtester (its network reads the last bars "
     "of the market), not as a merged ensemble; set train.ensemble = 1 (got 2)"),
], ids=["fused", "ensemble"])
def test_the_fused_kernel_and_an_ensemble_refuse_it_in_one_line(tmp_path, monkeypatch, sets, line):
    from foxhunt.accel.backend import resolve_config
    from foxhunt.agents import registry
    from foxhunt.config import load_config
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange
    from tests.train.test_cli_train_forecast import forecast_config

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = load_config(forecast_config(tmp_path), overrides=['forecast.policy="attention"', "forecast.hidden=[8, 8]", *sets])
    entry = registry.of(cfg)
    with pytest.raises(ConfigError) as err:
        entry.check(cfg, [FoldRange(0, 0, 2_000, 2_010, 2_300)])
        resolve_config(cfg, torch.device("cpu"), obs_dim=54, learner=entry.plan_learner(cfg))
    assert str(err.value) == line


def test_the_model_file_round_trip_gives_the_same_sequence_network(tmp_path):
    from foxhunt.agents.model_io import load_model, save_model

    m = small_market(n_bars=600)
    tr, env = _trainer(m)
    tr.train_epoch()
    net = tr.policy_net()
    path = save_model(tmp_path / "model.safetensors", net, m.norm_stats(0, 100), feature_names=tuple(m.names),
                      spec_version=m.spec_version, env=env.model_dump(mode="json"), extra={"agent": "forecast"})
    loaded, _, meta = load_model(path)
    assert isinstance(loaded, SequenceQNet) and loaded.sequence_meta() == {"length": L, "width": 8, "heads": 2}
    bar = torch.tensor([0, 5, 300, 599])
    mean, inv = m.norm_mean.expand(4, -1), m.norm_inv_std.expand(4, -1)
    obs = torch.randn(4, m.obs_dim)
    for n in (net, loaded):
        n.bind_history(m.features, bar, mean, inv)
    assert torch.equal(loaded(obs), net(obs)) and meta.n_actions == 45 and meta.extra["agent"] == "forecast"
