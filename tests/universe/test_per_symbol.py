"""`train.pool = false` on a universe: one agent per symbol, each its file's run alone, written as the universe.

The proof (fresh processes, the CPU): a two-symbol universe on one calendar trained with train.pool = false
gives, symbol by symbol and fold by fold, the bytes of metrics.json (validation metrics, selected epoch,
abstention) of that symbol's file trained alone with the same seed; the universe's fold files are the
pooled rows of those symbols' validation returns; a run killed mid-way resumes to the uninterrupted result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

from foxhunt.errors import ConfigError
from foxhunt.train.universe_outputs import pooled_row
from tests.cli_run import run_ok
from tests.data.universe_files import bars_frame, write
from tests.universe.conftest import TINY_DQN, config, universe_files

# two epochs and a 10 % held-back window (each epoch's selection scores it bar by bar): the selection still picks
COMMON = ["--folds", "2", "--epochs", "2", "--set", "train.select=inner", "--set", "train.inner_fraction=0.1", "--set", "train.abstain_z=0",
          "--set", "train.tensorboard=false", "--set", "train.report=false", "--set", "run.device=cpu",
          "--set", "run.out_dir=runs", "--set", "features.cache_dir=cache", "--set", "run.seed=3",
          *[x for k, v in TINY_DQN.items() for x in ("--set", f"dqn.{k}={json.dumps(v)}")]]


def _two_symbols(d: Path) -> None:
    """AAA.csv and BBB.parquet: 1,100 daily bars each on the same calendar, their own random walks."""
    idx = pd.date_range(end="2019-12-31", periods=1_100)
    write(d / "AAA.csv", bars_frame(idx, 21))
    write(d / "BBB.parquet", bars_frame(idx, 22))


@pytest.mark.slow
def test_pool_false_on_a_two_symbol_universe_equals_the_two_single_file_runs_fold_for_fold(tmp_path: Path) -> None:
    _two_symbols(tmp_path / "u")
    out = run_ok(tmp_path, "train", "--data", "u", "--name", "uni", "--set", "train.pool=false", *COMMON).stdout
    assert "one agent per symbol (train.pool = false)" in out and "symbol BBB (2/2): 2 folds, 1100 bars" in out
    for sym, f in (("AAA", "AAA.csv"), ("BBB", "BBB.parquet")):
        run_ok(tmp_path, "train", "--data", f"u/{f}", "--name", sym, *COMMON)
    runs = tmp_path / "runs"
    uni = runs / "uni"
    folds = [json.loads((uni / "folds" / f"fold_{k}" / "metrics.json").read_text()) for k in (0, 1)]
    for sym in ("AAA", "BBB"):
        for k in (0, 1):
            mine = (uni / "symbols" / sym / "folds" / f"fold_{k}" / "metrics.json").read_bytes()
            alone = (runs / sym / "folds" / f"fold_{k}" / "metrics.json").read_bytes()
            assert mine == alone, (sym, k)  # validation metrics, last epoch, selected epoch: the same bytes
            m = json.loads(alone)
            row = next(r for r in folds[k]["symbols"] if r["symbol"] == sym)
            assert row["agent"] == m["agent"] and row["selection"]["epoch"] == m["selection"]["epoch"]
            assert row["run"] == f"symbols/{sym}"
            a = load_file(str(runs / sym / "folds" / f"fold_{k}" / "curves.safetensors"))
            b = load_file(str(uni / "symbols" / sym / "folds" / f"fold_{k}" / "curves.safetensors"))
            assert all(np.array_equal(a[key], b[key]) for key in a)
    assert all(f["pool"] is False and f["agent"] == f["pooled"] and f["agent"]["symbols"] == 2 for f in folds)
    summary = json.loads((uni / "summary.json").read_text())
    assert [r["fold"] for r in summary["folds"]] == [0, 1]


def test_the_universe_fold_files_are_the_pooled_rows_of_the_symbols_validation_returns(tmp_path: Path) -> None:
    """Three symbols on their own calendars (a late start, a gap): each fold's pooled row is ``pooled_row``
    of the member symbols' curves, curves.safetensors holds them in ``symbols`` order, and a symbol that
    sits a fold out (data.min_train_bars) has no run files for it."""
    from foxhunt.train.per_symbol import PerSymbolRunner, per_symbol_prepared
    from foxhunt.train.run_dir import create_run_dir
    from foxhunt.data.universe import config_sources, load_universe

    d = universe_files(tmp_path / "u")
    cfg = config(tmp_path, d, dqn=TINY_DQN, data={"min_train_bars": 420},
                 train={"epochs": 1, "pool": False, "tensorboard": False, "progress": False, "report": False},
                 run={"out_dir": str(tmp_path / "runs"), "device": "cpu"})
    universe = load_universe(config_sources(cfg.data), cfg.data)
    p = per_symbol_prepared(cfg, universe)
    assert [f.member.tolist() for f in p.universe_folds] == [[True, False, True], [True, True, True]]
    runner = PerSymbolRunner(p)
    run, resolved = create_run_dir(p.config, p, "ps")  # type: ignore[arg-type]
    runner.use_config(resolved)
    runner.create_symbol_dirs(run)
    results = runner.run(run)
    assert not (run / "symbols" / "BBB" / "folds" / "fold_0").exists() and (run / "symbols" / "BBB" / "folds" / "fold_1").is_dir()
    for k, r in enumerate(results):
        c = load_file(str(run / "folds" / f"fold_{k}" / "curves.safetensors"))
        names = [row["symbol"] for row in r["symbols"]]
        assert [universe.symbols[i] for i in c["symbol_index"]] == names
        rets = [c["agent_returns"][w, : n].astype(np.float64) for w, n in enumerate(c["lengths"])]
        for w, sym in enumerate(names):
            own = load_file(str(run / "symbols" / sym / "folds" / f"fold_{k}" / "curves.safetensors"))["agent_returns"]
            assert np.array_equal(own, c["agent_returns"][w, : c["lengths"][w]])
        want = json.loads(json.dumps(pooled_row([row["agent"] for row in r["symbols"]], rets, p.annualisation.bars_per_year)))
        assert r["pooled"] == pytest.approx(want, nan_ok=True)


def test_what_a_symbol_cannot_train_is_refused_naming_the_symbol_before_anything_is_built(tmp_path: Path) -> None:
    from foxhunt.data.universe import config_sources, load_universe
    from foxhunt.train.per_symbol import per_symbol_prepared

    d = universe_files(tmp_path / "u")
    cfg = config(tmp_path, d, env={"episode_length": 400}, train={"pool": False})
    with pytest.raises(ConfigError) as exc:
        per_symbol_prepared(cfg, load_universe(config_sources(cfg.data), cfg.data))
    assert str(exc.value).startswith("symbol BBB: episode_length = 400 breaks the rule: must be <= train length - 1 = 397") and "\n" not in str(exc.value)
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_pool_false_run_killed_mid_way_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    from tests.train.test_kill_resume import CLI, _finish, _kill, _popen, _wait
    from foxhunt.train import checkpoint as ckpt

    d = universe_files(tmp_path / "u")
    cfg = config(tmp_path, d, dqn=TINY_DQN, train={"epochs": 2, "checkpoint_every": 1, "pool": False, "tensorboard": False,
                                                   "progress": False, "report": False},
                 run={"out_dir": str(tmp_path / "runs"), "device": "cpu"})
    path = cfg.write(tmp_path)
    _finish(_popen(CLI + ["--config", str(path), "--name", "ref"], pause=False))
    run = tmp_path / "runs" / "k"
    proc = _popen(CLI + ["--config", str(path), "--name", "k"], pause=False)
    _wait(proc, lambda: bool(ckpt.committed(run / "symbols" / "BBB" / "checkpoints")), "BBB's first committed checkpoint")
    _kill(proc)
    out = _finish(_popen(CLI + ["--resume", str(run)], pause=False))
    assert "symbol AAA (1/3): complete" in out and "symbol BBB (2/3)" in out
    ref = tmp_path / "runs" / "ref"
    for f in sorted(ref.rglob("metrics.json")):
        assert (run / f.relative_to(ref)).read_bytes() == f.read_bytes(), f.relative_to(ref)
    assert len(list(ref.rglob("metrics.json"))) == 2 + 3 * 2
