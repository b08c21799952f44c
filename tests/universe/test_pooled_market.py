"""Pooled training's market and env on a universe (issue 47): each symbol's rows are normalised with its own
training statistics, episodes are a symbol and a start inside that symbol's training rows (weighted by bars
or equal), and no episode, epoch reset or backtest window ever crosses a symbol's offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.state import RESET_PORTFOLIO
from foxhunt.universe_market import PooledFold
from tests.universe.conftest import prepared_universe


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory):
    return prepared_universe(tmp_path_factory.mktemp("pooled"))


def test_each_symbols_rows_are_normalised_with_its_own_training_statistics_and_medians(prepared) -> None:
    m, uf = prepared.market, prepared.folds[1]
    m.set_fold(PooledFold.of(uf))
    raw = m.raw_features.double().numpy()
    for s in range(m.n_symbols):
        a, b = uf.bounds[s, :2]
        mean, std = raw[a:b].mean(0), raw[a:b].std(0)
        rows = slice(int(m.offsets_host[s]), int(m.offsets_host[s + 1]))
        expect = np.where(std > 1e-8, (raw[rows] - mean) / np.where(std > 1e-8, std, 1.0), 0.0)
        np.testing.assert_allclose(m.features[rows].double().numpy(), expect, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(m.sym_mean[s].double().numpy(), mean, rtol=1e-6, atol=1e-6)
        # the medians that price and route its orders are its own training rows' (as MarketData.set_fold's)
        assert m.sym_median_abs_return[s] == m.log_return[a:b].abs().median()
        assert m.sym_median_range[s] == m.bar_range[a:b].median()
    # What an env observes (and a replayed bar index re-gathers) is that row, whatever symbol it belongs to.
    idx = torch.tensor([int(uf.bounds[s, 0]) + 7 for s in range(3)])
    out = torch.empty(3, m.obs_dim)
    m.observe(idx, torch.zeros(3, 3), out)
    assert torch.equal(out[:, : m.n_features], m.features[idx])
    assert torch.count_nonzero(m.norm_mean) == 0 and bool((m.norm_inv_std == 1).all())


def test_the_stored_normalisation_is_bitwise_the_gather_time_one_of_each_symbols_mean_and_inverse_std(prepared) -> None:
    m = prepared.market
    m.set_fold(PooledFold.of(prepared.folds[0]))
    for s in range(m.n_symbols):
        rows = slice(int(m.offsets_host[s]), int(m.offsets_host[s + 1]))
        gathered = (m.raw_features[rows] - m.sym_mean[s]) * m.sym_inv_std[s]  # float32, as gather_features
        assert torch.equal(m.features[rows], gathered)


@pytest.mark.parametrize("weighting", ["bars", "equal"])
def test_episode_starts_stay_inside_their_symbols_training_rows_and_follow_the_weighting(prepared, weighting: str) -> None:
    m, uf = prepared.market, prepared.folds[0]
    fold = PooledFold.of(uf, weighting)
    m.set_fold(fold)
    env = VecTradingEnv(m, 512, EnvParams(episode_length=48), seed=3)
    counts = np.zeros(m.n_symbols)
    for _ in range(40):  # 20,480 draws
        env.reset()
        st = env.state.episode_start.numpy()
        sym = np.searchsorted(m.offsets_host, st, side="right") - 1
        lo, hi = uf.bounds[sym, 0], uf.bounds[sym, 1]
        assert ((st >= lo) & (st + 48 <= hi - 1)).all()  # the episode's last bar read is inside the training rows
        counts += np.bincount(sym, minlength=m.n_symbols)
    share = counts / counts.sum()
    want = fold.weights / fold.weights.sum()
    np.testing.assert_allclose(share, want, atol=0.015)  # 20 K draws: ~0.003 standard error a share


def test_stepping_and_epoch_resets_never_leave_the_episodes_symbol(prepared) -> None:
    m, uf = prepared.market, prepared.folds[1]
    m.set_fold(PooledFold.of(uf))
    env = VecTradingEnv(m, 256, EnvParams(episode_length=48), seed=5)
    gen = torch.Generator().manual_seed(0)
    for t in range(150):
        start_sym = np.searchsorted(m.offsets_host, env.state.episode_start.numpy(), side="right") - 1
        env.step(torch.randint(0, env.n_actions, (256,), generator=gen))
        bar = env.state.bar.numpy()
        sym = np.searchsorted(m.offsets_host, bar, side="right") - 1
        lo, hi = uf.bounds[sym, 0], uf.bounds[sym, 1]
        assert ((bar >= lo) & (bar < hi)).all(), t
        assert (uf.member[sym]).all()
        if t % 50 == 49:  # an epoch's portfolio reset: the new episode starts in the bar's own symbol
            before = np.searchsorted(m.offsets_host, env.state.bar.numpy(), side="right") - 1
            env.reset_flags.fill_(RESET_PORTFOLIO)
            env.apply_reset_flags()
            st = env.state.episode_start.numpy()
            after = np.searchsorted(m.offsets_host, st, side="right") - 1
            assert (after == before).all() and (st + 48 <= uf.bounds[after, 1] - 1).all()
        else:
            same = env.state.step.numpy() > 0  # envs inside an episode are still on their start's symbol
            assert (sym[same] == start_sym[same]).all()


def test_a_non_member_symbol_is_never_drawn(tmp_path: Path) -> None:
    p = prepared_universe(tmp_path)
    m, uf = p.market, p.folds[0]
    member = uf.member.copy()
    member[1] = False
    from dataclasses import replace

    fold = PooledFold.of(replace(uf, member=member))
    m.set_fold(fold)
    env = VecTradingEnv(m, 1024, EnvParams(episode_length=48), seed=1)
    sym = np.searchsorted(m.offsets_host, env.state.episode_start.numpy(), side="right") - 1
    assert set(sym.tolist()) == {0, 2}


def test_a_backtest_window_that_crosses_a_symbols_offset_is_refused(prepared) -> None:
    m = prepared.market
    m.set_fold(PooledFold.of(prepared.folds[0]))
    bt = Backtester(m, prepared.config.env, chunk=16)
    ones = torch.ones((1, 20))
    end = int(m.offsets_host[1])
    with pytest.raises(ValueError, match="cross a symbol's offset"):
        bt.run([end - 10], [20], ExposurePolicy(ones))
    assert bt.run([end - 21], [20], ExposurePolicy(ones)).metrics[0]["sharpe"] is not None


def test_a_universe_is_annualised_on_its_union_calendar_not_on_its_concatenated_rows(prepared) -> None:
    from foxhunt.backtest.annualisation import infer_bars_per_year

    m = prepared.market
    union = np.unique(m.timestamps_host)
    assert np.array_equal(m.calendar_host(), union)
    bt = Backtester(m, prepared.config.env)
    # the rate of the symbols' shared calendar, not S symbols' bars counted as one symbol's
    assert bt.bars_per_year == infer_bars_per_year(union)
    one = infer_bars_per_year(m.timestamps_host[int(m.offsets_host[0]): int(m.offsets_host[1])])
    assert bt.bars_per_year == pytest.approx(one, rel=0.05)


@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_the_fused_kernel_backtests_every_symbols_window_in_one_launch_as_the_torch_backtester_does(prepared, mode) -> None:
    """Windows = the member symbols' validation ranges; each window's orders priced with its own symbol's
    medians ([W] in the kernel), bar for bar the torch step's (which reads each bar's symbol's)."""
    _fused_equals_torch(prepared, mode)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_on_a_gpu_the_compiled_fused_kernel_backtests_every_symbols_window_as_the_torch_backtester_does(
        tmp_path_factory: pytest.TempPathFactory, mode) -> None:
    """The same as the interpreter test above, with the kernel compiled for the card and both sides on it."""
    _fused_equals_torch(prepared_universe(tmp_path_factory.mktemp("pooled_gpu"), run={"device": "cuda"}), mode)


def _fused_equals_torch(prepared, mode: str) -> None:
    from foxhunt.agents.networks import DuelingQNet
    from foxhunt.backtest.fused import run_fused
    from foxhunt.backtest.policies import GreedyPolicy
    from foxhunt.env.params import EnvParams

    m, uf = prepared.market, prepared.folds[1]
    m.set_fold(PooledFold.of(uf))
    assert len(set(m.sym_median_range.tolist())) == m.n_symbols  # the symbols' medians differ: the test can tell
    params = EnvParams(**{**prepared.config.env.model_dump(), "action_mode": mode})
    n_actions = 45 if mode == "factored" else params.n_actions
    torch.manual_seed(3)
    net = DuelingQNet(m.obs_dim, n_actions, hidden=(16, 16), head_hidden=8).to(m.device)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(4.0)  # decisive Q-values: the policy trades often, so the medians' prices matter
    starts = [int(b[2]) for b in uf.bounds[uf.member]]
    lengths = [int(b[3] - b[2]) - 1 for b in uf.bounds[uf.member]]
    bt = Backtester(m, params, chunk=16, cuda_graphs=False)
    a = bt.run(starts, lengths, GreedyPolicy(net), keep_curves=True, keep_trades=True)
    b = run_fused(bt, starts, lengths, net, keep_curves=True, keep_trades=True, precision="ieee")
    assert len(a.trades) >= 5
    np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.positions, a.positions, rtol=1e-5, atol=1e-7)
    assert [(t["window"], t["entry_bar"], t["exit_bar"], t["side"]) for t in b.trades] == \
           [(t["window"], t["entry_bar"], t["exit_bar"], t["side"]) for t in a.trades]
