"""A tune population stacked across trials (``dqn.stack_members = true``, every trial one DQN member):
the population's updates run as one stacked program, each trial a row, and every trial records what it
records alone within float32 rounding (the stack's batched GEMMs); a pruned trial leaves (the stack
stops waiting for it) while the others still equal their runs alone; trials whose networks differ in
shape fall back to side by side, saying why. Tiny configuration (tests/tiny.py), CPU, the fused train
step eager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

from foxhunt.config import Config, build_config, load_config
from foxhunt.train.lockstep import Lockstep
from foxhunt.tune import population as pop_mod
from foxhunt.tune.worker import TrialEvaluator
from tests.tiny import tiny_tune_config

pytestmark = pytest.mark.slow

REL = 1e-4
"""Fold Sharpes and return sums: relative tolerance (float32 rounding of batched GEMMs; equal in the runs
measured, where the greedy actions did not change)."""

# three trials of one network shape, each its own learning rate and discount (rows of one stack)
VALUES = [{"dqn.lr": 1e-3, "dqn.gamma": 0.5}, {"dqn.lr": 4e-3, "dqn.gamma": 0.9}, {"dqn.lr": 3e-4, "dqn.gamma": 0.0}]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _config(root: Path, study: str) -> Config:
    d = load_config(tiny_tune_config(root)).to_dict()
    d["tune"].update(study=study, population=3, pruner="none")
    d["tune"]["space"]["dqn.gamma"] = {"low": 0.0, "high": 0.95}
    d["dqn"]["stack_members"] = True
    d["dqn"]["joint_rounds"] = True
    d.setdefault("accel", {})["train_step"] = "fused"  # the stack stacks fused steps (eager on the CPU)
    return build_config(d, source="<test>")


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Each trial alone (one member: nothing to stack), its fold scores."""
    cfg = _config(tmp_path_factory.mktemp("alone"), "alone")
    return [TrialEvaluator(cfg).evaluate(v)[0] for v in VALUES]


BATCHED: list[list[bool]] = []
"""Per lockstep epoch of the last spied run: whether each of its stacks collects as one batched program."""


def _spy_stacks(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Per lockstep epoch: the member counts of its stacks (and in BATCHED, whether each collects batched)."""
    seen: list[list[int]] = []
    BATCHED.clear()
    run_epoch = Lockstep.run_epoch

    def spy(self: Lockstep, on_error: Any = None) -> None:
        seen.append([len(st.members) for st in self.stacks])
        BATCHED.append([getattr(getattr(st.rounds, "__wrapped__", st.rounds), "collection", None) is not None
                        for st in self.stacks])
        run_epoch(self, on_error)

    monkeypatch.setattr(Lockstep, "run_epoch", spy)
    return seen


def _assert_close(a: Any, b: Any) -> None:
    assert len(a.sharpe) == len(b.sharpe)
    assert a.sharpe == pytest.approx(b.sharpe, rel=REL, abs=1e-9)
    assert a.returns.sums == pytest.approx(b.returns.sums, rel=REL, abs=1e-12)


def test_a_stacked_population_runs_one_stack_and_each_trial_equals_itself_alone_within_float32(
        tmp_path: Path, alone: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_stacks(monkeypatch)
    ev = TrialEvaluator(_config(tmp_path, "stacked"))
    out = ev.evaluate_population(VALUES, [None] * 3)
    assert seen and all(s == [3] for s in seen)  # every epoch: one stack of the three trials
    assert all(b == [True] for b in BATCHED)  # collecting as one program too (one env of trials x envs)
    for o, a in zip(out, alone):
        assert o.error is None
        _assert_close(o.scores, a)
    assert len({tuple(o.scores.returns.sums) for o in out}) == 3  # three different trials, not one repeated


def test_a_pruned_trial_leaves_the_stack_and_the_others_still_equal_their_runs_alone(
        tmp_path: Path, alone: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_stacks(monkeypatch)
    ev = TrialEvaluator(_config(tmp_path, "pruned"))

    def on_fold(i: int) -> Any:
        def cb(k: int, scores: Any, last: bool) -> None:
            if i == 1:
                raise optuna.TrialPruned()  # after its first fold
        return cb

    out = ev.evaluate_population(VALUES, [on_fold(i) for i in range(3)])
    epochs = len(seen) // 2
    assert seen[:epochs] == [[3]] * epochs and seen[epochs:] == [[2]] * epochs  # fold 1: trial 1 no longer waited for
    assert isinstance(out[1].error, optuna.TrialPruned)
    _assert_close(out[0].scores, alone[0])
    _assert_close(out[2].scores, alone[2])


def test_trials_whose_networks_differ_in_shape_run_side_by_side_and_say_why(
        tmp_path: Path, alone: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    notes: list[str | None] = []
    init = pop_mod.PopulationRunner.__init__

    def spy(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        notes.append(self.stack_note)

    monkeypatch.setattr(pop_mod.PopulationRunner, "__init__", spy)
    seen = _spy_stacks(monkeypatch)
    ev = TrialEvaluator(_config(tmp_path, "shapes"))
    values = [dict(VALUES[0]), {**VALUES[2], "dqn.hidden": [8, 8]}]
    out = ev.evaluate_population(values, [None] * 2)
    assert all(s == [] for s in seen)
    assert len(notes) == 1 and notes[0] is not None and notes[0].startswith("dqn.stack_members:")
    assert out[0].error is None and out[1].error is None
    _assert_close(out[0].scores, alone[0])


@pytest.mark.gpu
def test_gpu_a_stacked_population_equals_its_trials_alone_within_float32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA: the stack compiled, its round one graph on its own stream, each member's sampling on a side stream."""
    d = _config(tmp_path, "gpu").to_dict()
    d["run"]["device"] = "cuda"
    d["dqn"]["hidden"] = [16, 16]  # the fused acting kernel needs two trunk layers
    d["accel"].update(backend="fused", matmul_precision="fp32")
    cfg = build_config(d, source="<test>")
    alone = [TrialEvaluator(cfg).evaluate(v)[0] for v in VALUES]
    seen = _spy_stacks(monkeypatch)
    out = TrialEvaluator(cfg).evaluate_population(VALUES, [None] * 3)
    assert seen and all(s == [3] for s in seen)
    for o, a in zip(out, alone):
        assert o.error is None
        _assert_close(o.scores, a)
