"""``train.mirror`` on a pooled universe (issue 47): every symbol's mirrored bars sit after the R real rows;
half of the training draws land in the drawn symbol's mirrored rows, normalised with that symbol's own
statistics and priced with its own medians; an episode never leaves its copy or its symbol; selection,
validation and the files read the real symbols only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.env.state import RESET_PORTFOLIO
from foxhunt.universe_market import PooledFold
from tests.cli_run import run_ok
from tests.universe.conftest import prepared_universe, universe_files


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory):
    return prepared_universe(tmp_path_factory.mktemp("mirror"), train={"mirror": True})


def copy_and_symbol(m, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(1 where a row is a mirrored row, else 0; the row's symbol) from the host offsets."""
    half = (rows >= m.n_bars).astype(np.int64)
    return half, np.searchsorted(m.offsets_host, rows - half * m.mirror_offset, side="right") - 1


def test_the_mirrored_rows_follow_the_real_ones_negated_and_normalised_with_their_symbols_statistics(prepared) -> None:
    m = prepared.market
    r = m.n_bars
    assert m.mirror_offset == r == prepared.universe.n_bars and m.n_rows == 2 * r
    m.set_fold(PooledFold.of(prepared.folds[1]))
    first = m.offsets_host[:-1]
    assert torch.count_nonzero(m.log_return[torch.as_tensor(first + r)]) == 0  # no cross-symbol return in the mirror
    inner = np.setdiff1d(np.arange(r), first)
    np.testing.assert_allclose(m.log_return[r + inner].numpy(), -m.log_return[inner].numpy(), atol=2e-6)
    for s in range(m.n_symbols):
        rows = slice(int(m.offsets_host[s]) + r, int(m.offsets_host[s + 1]) + r)
        assert torch.equal(m.features[rows], (m.raw_features[rows] - m.sym_mean[s]) * m.sym_inv_std[s])
    rows = torch.as_tensor(np.concatenate([first + 400, first + 400 + r]))
    rng, ret = m.medians_at(rows)
    assert torch.equal(rng[:3], rng[3:]) and torch.equal(ret[:3], ret[3:])
    assert torch.equal(ret[:3], m.sym_median_abs_return)


def test_half_the_episode_starts_are_in_the_mirror_inside_their_symbols_training_rows_by_weight(prepared) -> None:
    m, uf = prepared.market, prepared.folds[0]
    fold = PooledFold.of(uf)
    m.set_fold(fold)
    env = VecTradingEnv(m, 512, EnvParams(episode_length=48), seed=3)
    counts = np.zeros((2, m.n_symbols))
    for _ in range(40):  # 20,480 draws
        env.reset()
        st = env.state.episode_start.numpy()
        half, sym = copy_and_symbol(m, st)
        local = st - half * m.mirror_offset
        assert ((local >= uf.bounds[sym, 0]) & (local + 48 <= uf.bounds[sym, 1] - 1)).all()
        np.add.at(counts, (half, sym), 1)
    assert counts[1].sum() / counts.sum() == pytest.approx(0.5, abs=0.015)
    want = fold.weights / fold.weights.sum()
    for h in (0, 1):
        np.testing.assert_allclose(counts[h] / counts[h].sum(), want, atol=0.02)


def test_stepping_and_epoch_resets_keep_an_episode_in_its_copy_and_symbol(prepared) -> None:
    m, uf = prepared.market, prepared.folds[1]
    m.set_fold(PooledFold.of(uf))
    env = VecTradingEnv(m, 256, EnvParams(episode_length=48), seed=5)
    gen = torch.Generator().manual_seed(0)
    start = copy_and_symbol(m, env.state.episode_start.numpy())
    for t in range(150):
        env.step(torch.randint(0, env.n_actions, (256,), generator=gen))
        bar = env.state.bar.numpy()
        half, sym = copy_and_symbol(m, bar)
        local = bar - half * m.mirror_offset
        assert ((local >= uf.bounds[sym, 0]) & (local < uf.bounds[sym, 1])).all(), t
        if t % 50 == 49:  # an epoch's portfolio reset: the new episode starts in the bar's own copy and symbol
            env.reset_flags.fill_(RESET_PORTFOLIO)
            env.apply_reset_flags()
            st = env.state.episode_start.numpy()
            assert [a.tolist() for a in copy_and_symbol(m, st)] == [half.tolist(), sym.tolist()]
        else:
            same = env.state.step.numpy() > 0
            assert (half[same] == start[0][same]).all() and (sym[same] == start[1][same]).all()
        start = copy_and_symbol(m, env.state.episode_start.numpy())


def test_train_with_the_mirror_on_a_universe_reports_the_real_symbols_and_backtests_again_from_its_files(tmp_path: Path) -> None:
    universe_files(tmp_path / "u")
    out = run_ok(tmp_path, "train", "--data", "u", "--folds", "1", "--epochs", "1", "--name", "m", "--set", "train.mirror=true",
                 "--set", "dqn.rounds_per_epoch=2", "--set", "dqn.warmup_transitions=256", "--set", "train.tensorboard=false",
                 "--set", "run.device=cpu", "--set", "run.out_dir=runs", "--set", "features.cache_dir=cache").stdout
    assert "episodes drawn by bars (train.symbol_weighting), half of them in the drawn symbol's mirror (train.mirror)" in out
    run = tmp_path / "runs" / "m"
    m = json.loads((run / "folds" / "fold_0" / "metrics.json").read_text())
    assert [s["symbol"] for s in m["symbols"]] == ["AAA", "BBB", "CCC"]
    # the run's model backtests again from its files (the backtest uploads the real rows only): the same Sharpes
    run_ok(tmp_path, "backtest", "--run", "runs/m")
    again = {r["symbol"]: r["sharpe"] for r in json.loads((run / "backtest" / "metrics.json").read_text())
             if r["label"] == "agent" and r["symbol"] != "portfolio"}
    assert again == pytest.approx({s["symbol"]: s["agent"]["sharpe"] for s in m["symbols"]}, rel=1e-6)
