"""A tuning worker: evaluates trials of one study until the study has its trials.

``TrialEvaluator`` keeps what does not change between trials: the bars, the feature cache and the
device-resident market (loaded and uploaded once per worker, reloaded only when a trial changes a
[data]/[features]/[folds] key), and the walk-forward runner with its trainer and captured graphs,
reused when a trial's [env]/[dqn]/[ppo]/[train]/[run] sections equal the previous trial's up to the
agent's learning rate and the epoch count (a new trainer is built otherwise: networks, replay and
graphs depend on those sections). ``overhead_s`` is the
time a trial spends outside its folds (config, market and runner set-up): the per-trial overhead.

``run_worker`` is the ask-and-tell loop. Under a file lock in the study directory (local workers
agree on it; remote workers on other machines share only the database) it fails stale trials (dead
workers' heartbeats, and trials that never got one: foxhunt.tune.heartbeat), counts trials and asks
for one only while COMPLETE + PRUNED + RUNNING + WAITING trials are fewer than the target (a
WAITING retry is always taken), then beats once for it before releasing the lock, so local workers
never overshoot the target and a re-queued trial is never counted twice. A heartbeat thread beats
for the running trial on RDB storages. When the target is reached only through other workers'
RUNNING trials, a worker waits for them on RDB storages (a dead worker's trial comes back as a
WAITING retry); on journal storage, which has no heartbeats, it stops instead (a dead worker's
trial would never come back, so waiting could hang for ever).

A trial that another worker failed while it ran (its heartbeat went stale, e.g. a stalled host) is
counted as ``lost``: its retry is queued by whoever failed it, and this worker writes nothing more
to it.

``python -m foxhunt.tune.worker STUDY_DIR --storage URL --trials N [--timeout S] --index K`` is
what ``foxhunt tune --workers K`` starts per worker.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import optuna
from filelock import FileLock

from foxhunt.agents import registry
from foxhunt.config import Config, build_config
from foxhunt.errors import FoxhuntError
from foxhunt.tune.heartbeat import Liveness, first_beat
from foxhunt.tune.objective import FoldScores
from foxhunt.tune.space import apply_params, distributions
from foxhunt.tune.study import counts, make_storage, open_study
from foxhunt.tune.trial_run import WorkerReport, run_population, run_trial

TRIAL_TRAIN = {"eval_buy_and_hold": False, "save_trades": False, "save_curves": True, "progress": False,
               "tensorboard": False, "report": False}
"""[train] keys every trial runs with: no buy-and-hold or trade lists (not scored), curves kept
(per-bar returns feed the deflated Sharpe), no per-trial logs."""


def _key(cfg_dict: dict[str, Any], sections: tuple[str, ...]) -> str:
    return json.dumps({s: cfg_dict.get(s) for s in sections}, sort_keys=True)


SWAPPABLE = (("<agent>", "lr"), ("train", "epochs"))
"""Keys a built trainer takes without a rebuild: the learning rate of the agent's section (dqn.lr,
ppo.lr or direct.lr) is a device tensor refilled from the learner's config at every fold reset (when
no lr schedule is compiled in: that section's lr_end unset), and the epoch count is the runner's host
loop. Everything else in [env] and the learners' sections shapes buffers or is captured into graphs as
a constant, so it means a new trainer."""

RUNNER_SECTIONS = ("env", "train", "run", "agent", *registry.sections())
"""The sections whose values the runner is built from (every learner's, ``foxhunt.agents.registry``)."""


def _without_swappable(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    agent = out.get("train", {}).get("agent", "dqn")
    section = registry.learner(agent).section if agent in registry.names() else None
    if section is not None and out.get(section, {}).get("lr_end") is None:
        for part, key in SWAPPABLE:
            out.get(section if part == "<agent>" else part, {}).pop(key, None)
    return out


def _swap(runner: Any, cfg: Config) -> bool:
    """Point a built runner (and its trainer's learner) at ``cfg``; the next reset_for_fold applies
    the new learning rate. False if the objects do not have the expected shape (rebuild): an
    ensemble (every member would need its own member config), or a trainer without a learner."""
    entry = registry.of(cfg)
    trainer = getattr(runner, "trainer", None)
    learner = getattr(trainer, "learner", None)
    if (len(getattr(runner, "members", ())) != 1 or learner is None
            or not hasattr(learner, "cfg") or not hasattr(learner, "lr")):
        return False
    section = getattr(cfg, entry.section)
    runner.cfg, runner.tcfg, trainer.cfg, learner.cfg = cfg, cfg.train, section, section
    for part in entry.swap_parts:  # DQN's collector, PPO's rollout: they read the section too
        if hasattr(trainer, part):
            getattr(trainer, part).cfg = section
    return True


class TrialEvaluator:
    """Runs one trial's walk-forward folds with cached market and runner (module docstring)."""

    def __init__(self, base: Config, console: Any = None) -> None:
        self.base = base
        self.tcfg = base.tune
        self.entries = base.tune.entries()
        self.dists = distributions(self.entries)
        self.console = console
        self._prepared: Any = None
        self._prep_key: str | None = None
        self._runner: Any = None
        self._runner_key: str | None = None
        self.cut: int | None = None  # the first hold-out bar (a universe: union-calendar date)
        self.stats = {"market_loads": 0, "runner_builds": 0, "runner_reuses": 0}
        self.times: dict[str, float] = {}

    def release(self) -> None:
        """Drop the cached market and runner (their device memory); the next trial reloads them."""
        self._prepared = self._prep_key = None
        self.release_runner()

    def release_runner(self) -> None:
        """Drop the cached runner (its trainer's device memory); the market stays."""
        self._runner = self._runner_key = None
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def trial_config(self, values: dict[str, Any]) -> Config:
        """The base config with the trial's values (config units) and the trial [train] keys."""
        data = apply_params(self.base.to_dict(), values)
        data["train"] = {**data.get("train", {}), **TRIAL_TRAIN}
        return build_config(data, source=f"trial {values}")

    def prepared_for(self, cfg: Config) -> Any:
        """The market for ``cfg``: loaded once, again only if the data, features, folds or ``train.mirror``
        (whether the market holds its mirror) change."""
        from foxhunt.pipeline import prepare_market
        from foxhunt.tune.holdout import with_search_folds

        d = cfg.to_dict()
        key = _key(d, ("data", "features", "folds")) + json.dumps([d["run"].get("device"), d["tune"]["holdout"],
                                                                     d["train"].get("mirror", False)])
        if key != self._prep_key:
            universe = _universe(cfg)
            if universe is not None:  # a universe of several symbols: pooled training, the portfolio's score
                from foxhunt.tune.holdout import universe_search

                self._prepared, self.cut = universe_search(cfg, universe)  # cut: a union-calendar date
            else:
                self._prepared, self.cut = with_search_folds(prepare_market(cfg), cfg.tune.holdout)
            self._prep_key = key
            self._runner, self._runner_key = None, None
            self.stats["market_loads"] += 1
        return dataclasses.replace(self._prepared, config=cfg)

    def runner_for(self, cfg: Config) -> Any:
        """A walk-forward runner for ``cfg``: the previous one when its sections match, or differ
        only in keys the trainer takes in place (see ``_swap``)."""
        from foxhunt.train.runner import WalkForwardRunner

        prepared = self.prepared_for(cfg)
        key = _key(_without_swappable(cfg.to_dict()), RUNNER_SECTIONS)
        if key == self._runner_key and _swap(self._runner, cfg):
            self.stats["runner_reuses"] += 1
            return self._runner
        self._runner = None  # free the old trainer's device memory before building the next
        if hasattr(prepared, "parts"):  # a pooled universe (foxhunt.train.universe_runner)
            from foxhunt.train.universe_runner import UniverseRunner

            self._runner = UniverseRunner(prepared, None)
        else:
            prepared.market.set_fold(prepared.folds[0])
            self._runner = WalkForwardRunner(prepared, None)
        self._runner_key = key
        self.stats["runner_builds"] += 1
        return self._runner

    def evaluate(self, values: dict[str, Any], on_fold: Callable[[int, FoldScores, bool], None] | None = None) -> tuple[FoldScores, float]:
        """Train and score every search fold for ``values``; returns (scores, overhead seconds).
        on_fold(k, scores so far, last fold?) runs after each fold and may raise TrialPruned.
        ``self.times`` then holds the trial's training and validation-backtest seconds (train_s,
        eval_s, summed over the folds run)."""
        t0 = time.perf_counter()
        self.times = {"train_s": 0.0, "eval_s": 0.0}
        runner = self.runner_for(self.trial_config(values))
        overhead = time.perf_counter() - t0
        scores = FoldScores()

        def fold_done(k: int, fold: Any, agent: Any) -> None:
            scores.add(*runner.fold_score(fold, agent))  # one file: its window; a universe: its portfolio
            if on_fold is not None:
                on_fold(k, scores, k == len(runner.folds) - 1)

        runner.score_folds(fold_done, self.times)
        return scores, overhead

    def evaluate_population(self, values: list[dict[str, Any]], on_fold: list[Callable[[int, FoldScores, bool], None] | None],
                            labels: list[str] | None = None) -> list[Any]:
        """Several trials at once (``tune.population``): those that share a market and fold loop as
        one walk-forward (``foxhunt.tune.population.evaluate_population``); one ``Outcome`` each."""
        from foxhunt.tune.population import evaluate_population

        return evaluate_population(self, values, on_fold, labels)


def _universe(cfg: Config) -> Any:
    """The universe of several symbols ``cfg`` names, else None; ConfigError (one line) for what a universe
    study does not do yet: populations (``tune.population``)."""
    from foxhunt.backtest.universe_run_dir import universe_of_config
    from foxhunt.errors import ConfigError

    universe = universe_of_config(cfg)
    if universe is not None and cfg.tune.population > 1:
        raise ConfigError(f"tune.population = {cfg.tune.population}: populations on a universe of several symbols are not "
                          "available yet; --set tune.population=1")
    return universe


def _next_trial(study: optuna.Study, target: int, dists: dict[str, Any], live: Liveness, sweep: bool = True) -> optuna.Trial | None | bool:
    """A trial to run, None when the study is done (for this worker), False when others' running
    trials may still need retries (wait and look again). Called under the study's file lock.
    sweep: False skips the liveness sweep (a population's later asks: the first one swept)."""
    # Beats older than the grace period, and RUNNING trials that never beat (a worker killed
    # between ask and first beat): foxhunt.tune.heartbeat.
    if sweep:
        live.sweep()
    c = counts(study)
    done = c["COMPLETE"] + c["PRUNED"]
    if done >= target:
        return None
    if c["WAITING"] == 0 and done + c["RUNNING"] >= target:
        # Without heartbeats (journal storage) a dead worker's trial never comes back: do not wait.
        return False if live.interval else None
    trial = study.ask(dists)
    first_beat(live, trial)  # shrink the no-heartbeat window to the ask itself (Liveness.sweep covers it)
    return trial


def _next_trials(study: optuna.Study, target: int, dists: dict[str, Any], live: Liveness, k: int) -> list[optuna.Trial] | None | bool:
    """Up to ``k`` trials to run as one population (``tune.population``), each asked under the rule of
    ``_next_trial`` (the study's counts are read again before each ask: a trial asked is RUNNING, so
    the population never takes the study past its target); None / False as ``_next_trial`` when the
    first ask gets none. Called under the study's file lock."""
    first = _next_trial(study, target, dists, live)
    if not isinstance(first, optuna.Trial):
        return first
    trials = [first]
    while len(trials) < k:
        more = _next_trial(study, target, dists, live, sweep=False)
        if not isinstance(more, optuna.Trial):
            break
        trials.append(more)
    return trials


def run_worker(cfg: Config, url: str, study_dir: Path, target: int, timeout_s: float = 0.0, index: int = 0,
               evaluator: TrialEvaluator | None = None, on_event: Callable[[str, Any], None] | None = None) -> WorkerReport:
    """Evaluate trials of the study until it has ``target`` finished trials (or the timeout).

    on_event(kind, payload): "fold" (trial number, fold k, running value) and "trial" (FrozenTrial)
    for a live display."""
    tcfg = cfg.tune
    ev = evaluator or TrialEvaluator(cfg)
    storage = make_storage(url, tcfg)
    study = open_study(url, tcfg.study, tcfg, worker_index=index, create=False, storage=storage)
    live = Liveness(storage, study, tcfg.grace_s)
    lock = FileLock(str(study_dir / ".ask.lock"))
    rep = WorkerReport()
    t_start = time.monotonic()
    max_failures = max(3, target)
    while not (timeout_s and time.monotonic() - t_start > timeout_s):
        with lock:
            trials = _next_trials(study, target, ev.dists, live, tcfg.population)
        if trials is None:
            break
        if trials is False:
            time.sleep(min(2.0, tcfg.heartbeat_s))
            continue
        assert isinstance(trials, list)
        if len(trials) == 1:
            run_trial(study, live, trials[0], ev, tcfg, rep, index, on_event)
        else:
            run_population(study, live, trials, ev, tcfg, rep, index, on_event)
        if rep.failed >= max_failures:
            raise FoxhuntError(f"study {tcfg.study}: {rep.failed} trials failed in this worker; the last error: "
                               f"{result_attrs(study.trials[-1]).get('error', '?') if study.trials else '?'}")
    rep.stats = dict(ev.stats)
    return rep


def result_attrs(t: Any) -> dict[str, Any]:
    """A trial's measured results (one user attribute, written once: each write is a commit)."""
    return t.user_attrs.get("result", {})


def main(argv: list[str] | None = None) -> int:
    """Worker process entry point (started by ``foxhunt tune --workers K``)."""
    from foxhunt.config import load_config
    from foxhunt.tune.study import quiet_optuna

    p = argparse.ArgumentParser(prog="python -m foxhunt.tune.worker")
    p.add_argument("study_dir", type=Path)
    p.add_argument("--storage", required=True)
    p.add_argument("--trials", type=int, required=True)
    p.add_argument("--timeout", type=float, default=0.0)
    p.add_argument("--index", type=int, default=0)
    a = p.parse_args(argv)
    quiet_optuna()
    try:
        cfg = load_config(a.study_dir / "config.toml")
        if cfg.train.threads:
            import torch

            torch.set_num_threads(cfg.train.threads)
        rep = run_worker(cfg, a.storage, a.study_dir, a.trials, a.timeout, a.index)
    except FoxhuntError as exc:
        print(f"worker {a.index}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(rep)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
