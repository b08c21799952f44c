"""ForecastTrainer: causal targets (a bar's target reads the next h bars only, the training draws never
read past the training slice, a poisoned future bar changes no earlier forecast or decision), the
gradient step's residency, the epoch summary, fold independence, checkpoint state that continues
bitwise, the fold's IC report, that it learns a planted edge, eager = graphed (GPU)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from foxhunt.agents.forecast.evaluate import fold_report, information
from foxhunt.agents.forecast.target import sigma_h, targets, valid_span
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import GreedyPolicy
from foxhunt.env import EnvParams
from foxhunt.testing import cuda_sync_errors, forbid_host_reads
from tests.agents.dqn_helpers import small_market
from tests.agents.forecast_helpers import ENV, edge_market, small_forecast


def test_a_bars_target_is_its_next_h_log_returns_over_the_folds_h_bar_volatility_and_reads_nothing_else():
    m = small_market()
    h, bars = 4, torch.tensor([5, 17, 1_000, 2_095])
    lr = m.log_return.double()
    sig = float(m.median_abs_return) * math.sqrt(math.pi / 2) * math.sqrt(h)
    want = [float(lr[t + 1:t + h + 1].sum()) / sig for t in bars.tolist()]
    np.testing.assert_allclose(targets(m, bars, h).double().numpy(), want, rtol=1e-5)
    assert float(sigma_h(m, h)) == pytest.approx(sig, rel=1e-6)
    for t in bars.tolist():  # poison the bar itself and the bar after the horizon: the target is unchanged
        before = targets(m, torch.tensor([t]), h).clone()
        saved = m.log_return.clone()
        m.log_return[t] = float("nan")
        m.log_return[t + h + 1] = float("nan")
        assert torch.equal(targets(m, torch.tensor([t]), h), before)
        m.log_return.copy_(saved)


@pytest.mark.parametrize("h", [1, 3])
def test_training_draws_only_bars_whose_target_ends_inside_the_training_slice(h):
    tr = small_forecast(env=EnvParams(episode_length=50, action_mode="factored", decision_interval=h), batch=4_096)
    train_end = tr.market.fold.train_end
    lo, n = valid_span(tr.market, h)
    assert int(lo) == 0 and int(lo) + int(n) == train_end - h  # bars train_end − h … train_end − 1 are never drawn
    drawn = torch.cat([tr.learner.bars() for _ in range(20)])
    assert int(drawn.max()) == train_end - 1 - h and int(drawn.min()) == 0  # the last bar read is train_end − 1


def test_with_a_mirror_half_the_draws_are_the_mirrors_training_bars_with_targets_inside_its_training_rows():
    from foxhunt.folds import FoldRange
    from foxhunt.market import MarketData
    from tests.helpers import random_feature_set

    m = MarketData(random_feature_set(1_000, 6, seed=0), "cpu", mirror=random_feature_set(1_000, 6, seed=1))
    m.set_fold(FoldRange(0, 100, 700, 710, 1_000))
    tr = small_forecast(m, env=EnvParams(episode_length=50, action_mode="factored", decision_interval=4), batch=8_192)
    drawn = tr.learner.bars()
    in_mirror = drawn >= m.mirror_offset
    local = drawn - in_mirror.long() * m.mirror_offset
    assert 0.45 < float(in_mirror.double().mean()) < 0.55
    for part in (local[in_mirror], local[~in_mirror]):  # each copy's bars 100 … 700 − 4 − 1: targets end by row 699
        assert int(part.min()) == 100 and int(part.max()) == 700 - 4 - 1
    assert torch.isfinite(tr.learner.forward(drawn)[1]).all()


def test_bars_after_the_training_slice_change_no_trained_weight():
    """Every row from the training slice's end on (the purge, validation) poisoned with NaN: the
    epoch trains to the same weights bit for bit. The same poison one bar earlier (the last training
    bar's return, which the last drawn bar's target reads) halts it: the draws do reach the edge."""
    from foxhunt.agents.fold_trainer import TrainingHalted

    def trainer():
        return small_forecast(env=EnvParams(episode_length=50, action_mode="factored", decision_interval=3), steps_per_epoch=3,
                              batch=8_192)

    runs = []
    for poison in (False, True):
        tr = trainer()
        end = tr.market.fold.train_end
        if poison:
            for t in (tr.market.features, tr.market.log_return, tr.market.ohlc):
                t[end:] = float("nan")
        s = tr.train_epoch()
        assert s["skipped"] == 0
        runs.append(tr.learner.flat.data.clone())
    assert torch.equal(runs[0], runs[1])
    tr = trainer()
    tr.market.log_return[tr.market.fold.train_end - 1:] = float("nan")
    with pytest.raises(TrainingHalted, match="non-finite"):
        tr.train_epoch()


def test_a_poisoned_future_bar_changes_no_forecast_and_no_backtest_decision_before_it():
    m = small_market(n_bars=1_200)
    tr = small_forecast(m)
    tr.train_epoch()
    with torch.no_grad():
        tr.learner.net.out.weight.mul_(400.0)  # forecasts large against the band: the policy trades
    env = EnvParams(episode_length=50, action_mode="factored")
    bt = Backtester(m, env, chunk=16, cuda_graphs=False)
    start, steps, t0 = 900, 120, 960
    bars = torch.arange(start, start + steps)
    policy = GreedyPolicy(tr.policy_net())
    f0 = tr.forecasts(bars).clone()
    a = bt.run([start], [steps], policy, keep_curves=True)
    m.features[t0:] *= -50.0  # the future rewritten: features and prices from bar t0 on
    m.ohlc[t0:] *= 1.7
    f1 = tr.forecasts(bars)
    b = bt.run([start], [steps], policy, keep_curves=True)
    k = t0 - start
    assert torch.equal(f0[:k], f1[:k]) and not torch.equal(f0[k:], f1[k:])
    assert a.positions is not None and b.positions is not None
    # positions[j]: the exposure after step j (decided at bar start + j, filled at the next open, marked at
    # the next close): the steps before t0 − 1 read no poisoned price, and the decision at t0 − 1 is the same level
    np.testing.assert_array_equal(a.positions[0, :k - 1], b.positions[0, :k - 1])
    assert np.sign(a.positions[0, k - 1]) == np.sign(b.positions[0, k - 1])
    assert len(set(np.sign(a.positions[0, :k]).tolist())) > 1 and not np.array_equal(a.positions[0, k:], b.positions[0, k:])


@pytest.mark.parametrize("over", [{}, {"loss": "mse"}, {"loss": "quantile", "quantiles": (0.2, 0.5, 0.7, 0.9)}],
                         ids=["huber", "mse", "quantile"])
def test_the_gradient_step_reads_nothing_back_to_the_host(over):
    tr = small_forecast(**over)
    tr.train_epoch()  # warm-up outside the block (lazy allocations)
    before = tr.learner.flat.data.clone()
    with forbid_host_reads():
        tr.learner.step()
    assert not torch.equal(before, tr.learner.flat.data)


def test_the_losses_are_huber_mse_and_the_mean_pinball_loss_over_the_quantiles():
    from foxhunt.agents.forecast.config import ForecastConfig
    from foxhunt.agents.forecast.learner import loss_of

    gen = torch.Generator().manual_seed(0)
    out, y = torch.randn(37, 3, generator=gen, dtype=torch.float64), torch.randn(37, generator=gen, dtype=torch.float64) * 2
    taus = (0.1, 0.5, 0.8)
    want = np.mean([max(t * (yi - o), (t - 1) * (yi - o)) for row, yi in zip(out.tolist(), y.tolist()) for t, o in zip(taus, row)])
    got = loss_of(out, y, ForecastConfig(loss="quantile", quantiles=taus), torch.tensor(taus, dtype=torch.float64))
    assert float(got) == pytest.approx(want, rel=1e-12)
    assert float(loss_of(out, y, ForecastConfig(loss="mse"))) == pytest.approx(float((out[:, 0] - y).square().mean()), rel=1e-12)
    e = (out[:, 0] - y).abs()
    huber = torch.where(e < 0.7, 0.5 * e * e, 0.7 * (e - 0.35)).mean()
    assert float(loss_of(out, y, ForecastConfig(huber_delta=0.7))) == pytest.approx(float(huber), rel=1e-12)


def test_an_epoch_summary_counts_its_steps_and_bars_and_its_forecast_error():
    tr = small_forecast(loss="mse")
    s = tr.train_epoch()
    assert s["updates"] == 3 and s["transitions"] == 3 * 64 and s["skipped"] == 0
    assert s.loss_mean == pytest.approx(s["forecast_mse"], rel=1e-5)  # mse: the loss is the squared error
    assert s["train_r2"] == pytest.approx(1.0 - s["forecast_mse"] / s["target_ms"], rel=1e-9)


def test_a_fold_reset_gives_the_same_epoch_as_a_fresh_trainer():
    m = small_market()
    a = small_forecast(m, seed=3)
    a.reset_for_fold(m.fold)
    first = a.train_epoch().values
    a.reset_for_fold(m.fold)
    assert a.train_epoch().values == first
    b = small_forecast(small_market(), seed=3)
    b.reset_for_fold(b.market.fold)
    assert b.train_epoch().values == first


def test_a_restored_trainer_continues_bitwise_like_the_uninterrupted_one():
    m = small_market()
    a = small_forecast(m, seed=4)
    a.reset_for_fold(m.fold)
    a.train_epoch()
    saved = {k: {n: t.clone() for n, t in v.items()} for k, v in a.state_dict().items()}
    ref = [a.train_epoch().values for _ in range(2)]
    b = small_forecast(small_market(), seed=99)  # another seed: everything must come from the state
    b.reset_for_fold(b.market.fold)
    b.load_state_dict(saved)
    assert [b.train_epoch().values for _ in range(2)] == ref
    assert torch.equal(a.learner.flat.data, b.learner.flat.data)


def test_information_is_spearman_and_pearson_of_forecast_and_outcome_and_the_sign_hit_rate():
    f = torch.tensor([0.3, -1.0, 2.0, 0.0, 0.5, -0.2], dtype=torch.float64)
    r = torch.tensor([0.1, -0.2, 0.05, 0.3, -0.4, -0.1], dtype=torch.float64)
    got = information(f, r)
    from scipy.stats import pearsonr, spearmanr

    assert got["ic_spearman"] == pytest.approx(spearmanr(f, r)[0], rel=1e-12)
    assert got["ic_pearson"] == pytest.approx(pearsonr(f, r)[0], rel=1e-12)
    assert got["hit_rate"] == pytest.approx(4 / 5) and got["n"] == 6  # the zero forecast is left out
    tied_f, tied_r = torch.tensor([1.0, 1.0, 0.0, 2.0, 0.0, 3.0]), torch.tensor([0.0, 0.2, 0.0, 0.0, -0.1, 0.3])
    assert information(tied_f, tied_r)["ic_spearman"] == pytest.approx(spearmanr(tied_f, tied_r)[0], rel=1e-12)  # mean ranks


def test_the_fold_report_scores_the_validation_bars_whose_horizon_stays_inside_the_window():
    m = edge_market()
    tr = small_forecast(m, env=EnvParams(episode_length=50, action_mode="factored", decision_interval=2))
    rep = fold_report([tr, tr], m, m.fold)
    assert rep["kind"] == "forecast" and rep["horizon"] == 2 and rep["n"] == m.fold.val_end - 2 - m.fold.val_start


def test_it_learns_a_planted_edge_and_trades_it_through_the_costs():
    """A market whose feature leaks the next close-to-close sign: after two epochs the validation IC is
    high and the packed policy, backtested at the real costs on the validation window, earns."""
    m = edge_market()
    env = EnvParams(episode_length=50, action_mode="factored", cost_bps=0.1, spread_bps=0.1, impact_eta=0.0)
    tr = small_forecast(m, env=env, batch=256, steps_per_epoch=20, lr=3e-3)
    tr.reset_for_fold(m.fold)
    tr.train_epoch()
    tr.train_epoch()
    rep = fold_report([tr], m, m.fold)
    assert rep["ic_spearman"] > 0.5 and rep["hit_rate"] > 0.8
    res = Backtester(m, env, chunk=32, cuda_graphs=False).run([3_010], [900], GreedyPolicy(tr.policy_net()))
    assert res.metrics[0]["sharpe"] > 10.0 and res.metrics[0]["trade_count"] > 50


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager_on_a_fixed_seed():
    torch.backends.cuda.matmul.allow_tf32 = False
    res = []
    for graphs in (False, True):
        tr = small_forecast(small_market(device="cuda"), seed=5, graphs=graphs, batch=4_096)
        for _ in range(3):
            tr.train_epoch()
        res.append(tr.learner.flat.data.clone())
    assert torch.equal(res[0], res[1])


@pytest.mark.gpu
def test_cuda_epoch_runs_without_any_sync_except_the_readback():
    tr = small_forecast(small_market(device="cuda"), graphs=True, batch=4_096)
    tr.train_epoch()  # capture
    assert tr._train.graph is not None
    with cuda_sync_errors("cuda"):
        tr.run_epoch()
    tr.monitor.finish_readback()


