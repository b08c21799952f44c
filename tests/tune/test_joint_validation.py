"""A tune population's validation backtests of one fold (foxhunt.tune.joint_validation): trials whose fold
models share a shape, a decision interval and the backtest's costs step ONE backtest, and each trial's
metrics and returns equal its own backtest's bit for bit; a trial of another shape, or one whose costs
differ, runs alone; a trial whose model fails is that trial's outcome only. Tiny configuration, CPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.config import load_config
from foxhunt.pipeline import prepare_market
from foxhunt.train.runner import WalkForwardRunner
from foxhunt.tune.joint_validation import validate_together
from tests.tiny import tiny_config


def _runners(tmp_path: Path, variants: list[dict[str, Any]]) -> list[WalkForwardRunner]:
    """One runner per variant (sections merged into the tiny config; seed = its index) on ONE prepared market."""
    base = load_config(tiny_config(tmp_path, epochs=1, every=0))
    prepared = prepare_market(base)
    out = []
    for i, v in enumerate(variants):
        d = base.to_dict()
        d["train"]["save_trades"] = False  # as a tune trial's (foxhunt.tune.worker.TRIAL_TRAIN)
        for section, values in v.items():
            d[section].update(values)
        cfg = base.replace(**{s: d[s] for s in {*v, "train"}}, run={**d["run"], "seed": i})
        out.append(WalkForwardRunner(dataclasses.replace(prepared, config=cfg), None))
    return out


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def test_trials_of_one_shape_share_one_backtest_and_each_gets_its_own_result_bit_for_bit(tmp_path: Path, monkeypatch) -> None:
    runners = _runners(tmp_path, [{"dqn": {"lr": 1e-3}}, {"dqn": {"lr": 4e-3, "hidden": [8, 8]}}, {"dqn": {"lr": 3e-4}},
                                  {"dqn": {"lr": 2e-3}, "env": {"cost_bps": 9.0}}])
    fold = runners[0].folds[0]
    alone = [r.evaluate(fold)[0] for r in runners]
    windows: list[int] = []
    for r in runners:
        run = r.backtester.run

        def counted(starts, *a, _run=run, **kw):
            windows.append(len(starts))
            return _run(starts, *a, **kw)

        monkeypatch.setattr(r.backtester, "run", counted)
    together = validate_together(runners, fold)
    # trials 0 and 2 ([16], same costs) in one 2-window backtest; trial 1 (another shape) and 3 (other costs) alone
    assert sorted(windows) == [1, 1, 2]
    n = fold.val_len - 1
    for a, t in zip(alone, together):
        assert not isinstance(t, Exception)
        assert _same(a.metrics[0], t.metrics[0])
        np.testing.assert_array_equal(a.returns[0, :n], t.returns[0, :n])
        np.testing.assert_array_equal(a.positions[0, :n], t.positions[0, :n])
    assert together[0].metrics[0] != together[2].metrics[0]  # two different networks, not one repeated


def test_a_trial_whose_model_fails_is_its_own_outcome_and_the_others_are_scored(tmp_path: Path, monkeypatch) -> None:
    runners = _runners(tmp_path, [{"dqn": {"lr": 1e-3}}, {"dqn": {"lr": 4e-3}}, {"dqn": {"lr": 3e-4}}])
    fold = runners[0].folds[0]
    expected = runners[2].evaluate(fold)[0]

    def broken() -> Any:
        raise RuntimeError("trial 1's model")

    monkeypatch.setattr(runners[1], "fold_net", broken)
    out = validate_together(runners, fold)
    assert isinstance(out[1], RuntimeError) and str(out[1]) == "trial 1's model"
    assert not isinstance(out[0], Exception) and _same(out[2].metrics[0], expected.metrics[0])
