"""Tune trials as a population (``tune.population = K``, foxhunt.tune.population): K trials asked
together and run as one walk-forward record, bit for bit, what the same trials record alone (their
per-fold reported values, final values and fold results); a pruned trial leaves the population and a
failed one fails alone while the others' results stay those of the trials alone; a worker on
PostgreSQL asks a population at a time and never passes the target; trials whose market or fold loop
differ never share one; ``foxhunt tune --set tune.population=3`` runs in a fresh process
and a bad value is refused in one line. Tiny configuration (tests/tiny.py), CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from foxhunt.config import Config, build_config, load_config
from foxhunt.errors import ConfigError
from foxhunt.train.lockstep import Lockstep
from foxhunt.tune.population import Outcome, population_key, share_groups
from foxhunt.tune.study import counts, open_study, storage_url
from foxhunt.tune.worker import TrialEvaluator, result_attrs, run_worker
from tests.cli_run import assert_refused, run_ok
from tests.tiny import tiny_tune_config
from tests.tune.synthetic import SyntheticEvaluator, synthetic_config

pytestmark = pytest.mark.slow

# Three trials whose trainers differ in learning rate, discount and network widths (one population:
# the members are stepped side by side, not stacked, so their shapes need not match).
PARAMS = [{"dqn.lr": 1e-3, "dqn.hidden": "[16]", "dqn.gamma": 0.5},
          {"dqn.lr": 4e-3, "dqn.hidden": "[8, 8]", "dqn.gamma": 0.9},
          {"dqn.lr": 3e-4, "dqn.hidden": "[16]", "dqn.gamma": 0.0}]


def _config(root: Path, population: int, study: str) -> Config:
    d = load_config(tiny_tune_config(root)).to_dict()
    d["tune"].update(study=study, population=population, pruner="none")
    d["tune"]["space"]["dqn.gamma"] = {"low": 0.0, "high": 0.95}
    return build_config(d, source="<test>")


def _study(root: Path, population: int, name: str) -> tuple[optuna.Study, TrialEvaluator, Any]:
    """A study of the three PARAMS trials, run by one in-process worker with ``population``."""
    cfg = _config(root, population, name)
    d = Path(cfg.tune.out_dir) / name
    d.mkdir(parents=True)
    url = storage_url("", d)
    study = open_study(url, name, cfg.tune, create=True)
    for p in PARAMS:
        study.enqueue_trial(p)
    ev = TrialEvaluator(cfg)
    rep = run_worker(cfg, url, d, len(PARAMS), evaluator=ev)
    return open_study(url, name, cfg.tune, create=False), ev, rep


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> optuna.Study:
    """The three trials run one at a time (tune.population = 1, today's worker)."""
    study, _, rep = _study(tmp_path_factory.mktemp("alone"), 1, "alone")
    assert rep.finished == 3
    return study


def _record(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    r = result_attrs(t)
    return {"params": t.params, "state": t.state, "value": t.value, "intermediate": t.intermediate_values,
            **{k: r[k] for k in ("fold_sharpe", "fold_trades", "fold_max_drawdown", "fold_total_return", "return_power_sums")}}


def test_a_population_of_three_trials_records_bit_for_bit_what_the_trials_record_alone(tmp_path: Path, alone: optuna.Study) -> None:
    study, ev, rep = _study(tmp_path, 3, "population")
    assert rep.finished == 3 and ev.stats["runner_builds"] == 3 and ev.stats["market_loads"] == 1
    trials = study.trials
    # one population: every trial started before any finished
    assert max(t.datetime_start for t in trials) < min(t.datetime_complete for t in trials)
    assert [_record(t) for t in trials] == [_record(t) for t in alone.trials]  # floats compared with ==
    assert len({t.value for t in trials}) == 3  # three different trials, not one repeated


def test_a_pruned_trial_leaves_the_population_and_a_failed_one_fails_alone(
        tmp_path: Path, alone: optuna.Study, monkeypatch: pytest.MonkeyPatch) -> None:
    stepped: list[int] = []  # members in each lockstep epoch
    run_epoch = Lockstep.run_epoch

    def spy(self: Lockstep, on_error: Any = None) -> None:
        stepped.append(len(self.members))
        run_epoch(self, on_error)

    monkeypatch.setattr(Lockstep, "run_epoch", spy)
    ev = TrialEvaluator(_config(tmp_path, 4, "pruned"))
    calls: list[tuple[int, int]] = []

    def on_fold(i: int) -> Any:
        def cb(k: int, scores: Any, last: bool) -> None:
            calls.append((i, k))
            if i == 1:
                raise optuna.TrialPruned()  # after its first fold
        return cb

    values = [{"dqn.lr": p["dqn.lr"], "dqn.hidden": json.loads(p["dqn.hidden"]), "dqn.gamma": p["dqn.gamma"]} for p in PARAMS]
    values.insert(2, {"dqn.lr": 5.0})  # breaks dqn.lr's rule: its config fails, alone
    out = ev.evaluate_population(values, [on_fold(i) for i in range(4)])
    assert stepped == [3, 2]  # fold 0: trials 0, 1, 3; fold 1: the pruned trial 1 is no longer stepped
    assert calls == [(0, 0), (1, 0), (3, 0), (0, 1), (3, 1)]
    assert isinstance(out[1].error, optuna.TrialPruned) and len(out[1].scores.sharpe) == 1
    assert isinstance(out[2].error, ConfigError) and "dqn.lr" in str(out[2].error) and not out[2].scores.sharpe
    for i, t in ((0, alone.trials[0]), (3, alone.trials[2])):
        r = result_attrs(t)
        assert out[i].error is None
        assert (out[i].scores.sharpe, out[i].scores.returns.sums) == (r["fold_sharpe"], r["return_power_sums"])
    assert out[1].scores.sharpe == result_attrs(alone.trials[1])["fold_sharpe"][:1]


class _SyntheticPopulations(SyntheticEvaluator):
    """The synthetic objective (no training), recording the size of every population it is given."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.sizes: list[int] = []

    def evaluate_population(self, values: list[dict[str, Any]], on_fold: list[Any], labels: list[str] | None = None) -> list[Outcome]:
        self.sizes.append(len(values))
        out = [Outcome() for _ in values]
        for o, v, cb in zip(out, values, on_fold):
            o.scores, o.overhead_s = self.evaluate(v, cb)
        return out


def test_a_worker_on_postgresql_asks_a_population_at_a_time_and_stops_exactly_at_the_target(
        tmp_path: Path, postgres_url: str) -> None:
    d = tmp_path / "synthetic"
    d.mkdir()
    data = synthetic_config(d).to_dict()
    data["tune"].update(study="pg-population", population=3)
    cfg = build_config(data, source="<test>")
    open_study(postgres_url, cfg.tune.study, cfg.tune, create=True)
    ev = _SyntheticPopulations(cfg)
    rep = run_worker(cfg, postgres_url, d, 7, evaluator=ev)
    study = open_study(postgres_url, cfg.tune.study, cfg.tune, create=False)
    assert ev.sizes == [3, 3] and rep.finished == 7  # the seventh, asked alone, runs as with population 1
    assert counts(study)["COMPLETE"] == 7 and counts(study)["RUNNING"] == 0
    assert [t.number for t in study.trials] == list(range(7))
    assert all(len(t.intermediate_values) == 4 and result_attrs(t)["folds_run"] == 4 for t in study.trials)


def test_trials_share_a_population_only_with_one_market_and_fold_loop(tmp_path: Path) -> None:
    ev = TrialEvaluator(_config(tmp_path, 3, "keys"))
    keys = [population_key(ev.trial_config(v)) for v in (
        {"dqn.lr": 1e-3}, {"dqn.gamma": 0.9, "dqn.hidden": [8, 8], "train.train_cost_multiplier": 2.0, "run.seed": 3},
        {"train.epochs": 2}, {"data.bars": 2900}, {"folds.purge": 5}, {"dqn.lr": 2e-3})]
    assert share_groups(keys) == [[0, 1, 5], [2], [3], [4]]
    assert share_groups([None, keys[0], None]) == [[1]]


def test_cli_tune_with_a_population_runs_its_trials_in_a_fresh_process(tmp_path: Path) -> None:
    cfg = tiny_tune_config(tmp_path)
    # no hold-out (its retraining is tested in test_cli_tune.py): the three trials are what is tested here
    p = run_ok(tmp_path, "tune", "--config", str(cfg), "--workers", "1", "--set", "tune.population=3", "--set", "tune.holdout=0")
    d = tmp_path / "studies" / "tiny"
    rows = list(csv.DictReader((d / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == [0, 1, 2], p.stdout
    assert all(r["state"] in ("COMPLETE", "PRUNED") for r in rows) and all(r["fold_0_sharpe"] for r in rows)
    saved = load_config(d / "config.toml")
    assert saved.tune.population == 3
    trials = open_study(storage_url("", d), "tiny", saved.tune, create=False).trials
    assert max(t.datetime_start for t in trials) < min(t.datetime_complete for t in trials)  # asked and run together


def test_cli_refuses_a_population_below_one_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    cfg = tiny_tune_config(tmp_path)
    assert_refused(tmp_path, ["tune", "--config", str(cfg), "--set", "tune.population=0"],
                   f"{cfg} + overrides: tune.population: Input should be greater than or equal to 1 (got 0)")
