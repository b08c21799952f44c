"""Part (c) of bench/bench_tune.py: a tuned configuration against the untuned one on a scorecard
scenario, in minutes instead of the issue's 30-minute study (the device budget holds no more; the
30-minute study runs in chunks across device calls: bench/bench_tune_long.py).

1. The scenario (``edge_daily`` by default: the H200 scorecard's planted daily edge, where
   configs/h200.toml captured −9 % of the oracle) is built at the scorecard's GPU size (60 K daily
   bars, folds of 25 K train + 5 K validation) and split: the last ``holdout`` fraction (20 %) is a
   hold-out that the search never sees; the search folds lie before it (4 folds).
2. A seeded TPE study over ``SPACE`` runs in-process through the real worker loop
   (``run_worker``, SQLite storage) for ``seconds`` (no new trial after that). Its first trial is
   the untuned configuration itself (enqueued), so the best trial is at least as good on the
   search folds by construction: that comparison is in-sample and is reported as such.
3. The honest comparison: the untuned configuration and the best trial's are each retrained on the
   bars before the hold-out and evaluated once on it, with the same seeds (seed 0 first, more while
   the time allows), next to the scenario's references on the same window (flat, buy-and-hold,
   the oracle rules). capture = agent Sharpe / best reference Sharpe, as in the scorecard.

Both sides run ``train.epochs = epochs`` (3 on the GPU instead of the configuration's 10, so that a
trial costs seconds): "untuned" means the configuration at that training length. On CUDA both sides
also run ``accel.train_step=torch`` by default (bench_tune --sc-set): the fused train step is one
compiled program specialised to the market's shape (the scenario's 60 K bars are not the 1 M bars
compiled for in parts (a)/(b)), and a fresh compilation would take a large part of the minutes
this part has; the torch train step is its tested twin (same arithmetic, CUDA graphs, no compiler).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.config import Config, build_config
from foxhunt.scorecard.build import SIZES, Size, prepare_scenario, scenario_config
from foxhunt.scorecard.markets import SPACING, make_scenario
from foxhunt.scorecard.policies import score_exposures
from foxhunt.tune.holdout import holdout_fold, search_folds, with_search_folds
from foxhunt.tune.outputs import best_trial, overfitting_stats
from foxhunt.tune.space import decode
from foxhunt.tune.study import counts, open_study
from foxhunt.tune.worker import TrialEvaluator, result_attrs, run_worker

SPACE = {"dqn": {"lr": {"low": 1e-5, "high": 3e-3, "log": True}, "gamma": {"low": 0.0, "high": 0.95}}}
QUICK_SIZE = Size("quick", bars=3000, train=1000, val=300, max_folds=3, real_train=1000, real_val=300,
                  daily_bars=3000, daily_train=1000, daily_val=300)
"""CPU smoke size: 3,000 daily bars, folds of 1,000 + 300 (3 search folds before a 600-bar hold-out)."""


class ScenarioEvaluator(TrialEvaluator):
    """A TrialEvaluator on a scorecard scenario's market (the search folds before the hold-out)
    instead of the market ``foxhunt tune`` loads from [data]; the space holds no data keys."""

    def __init__(self, cfg: Config, full: Any) -> None:
        super().__init__(cfg)
        self.full = full

    def prepared_for(self, cfg: Config) -> Any:
        if self._prepared is None:
            self._prepared, self.cut = with_search_folds(self.full, cfg.tune.holdout)
            self._prep_key = "scenario"
            self.stats["market_loads"] += 1
        return dataclasses.replace(self._prepared, config=cfg)


def scenario_cfg(base: dict[str, Any], name: str, size: Size, epochs: int, study_dir: Path, cache: Path,
                 holdout: float, overrides: list[str], tune: dict[str, Any] | None = None) -> tuple[Config, Any]:
    """(config with [tune], scenario) for scenario ``name`` at ``size``; ``tune`` entries replace
    the defaults of part (c)'s [tune] table (study "scorecard", TPE seed 0, no pruner, ``SPACE``)."""
    scenario = make_scenario(name, size.n_bars(SPACING[name]))
    # One agent a trial (train.ensemble = 1): the tuner searches a learner's settings, and its benches
    # measure the workload of stops 20-22 (the H200 configs train 4-agent ensembles since stop 23).
    over = [f"features.cache_dir={json.dumps(str(cache))}", f"run.out_dir={json.dumps(str(study_dir / 'runs'))}",
            f"train.epochs={epochs}", "train.ensemble=1", *overrides]
    d = scenario_config(base, scenario, size, over).to_dict()
    d["tune"] = {"study": "scorecard", "out_dir": str(study_dir.parent), "sampler": "tpe", "seed": 0, "pruner": "none",
                 "startup_trials": 3, "holdout": holdout, "space": SPACE, **(tune or {})}
    return build_config(d, source=f"<bench tune scorecard {name}>"), scenario


def scenario_setup(base: dict[str, Any], name: str, size: Size, epochs: int, study_dir: Path, cache: Path,
                   holdout: float, overrides: list[str]) -> tuple[Config, Any, Any]:
    """(config with [tune], scenario, prepared full market) for scenario ``name`` at ``size``."""
    cfg, scenario = scenario_cfg(base, name, size, epochs, study_dir, cache, holdout, overrides)
    return cfg, scenario, prepare_scenario(cfg, scenario)


def holdout_score(ev: ScenarioEvaluator, values: dict[str, Any], seed: int, scenario: Any) -> dict[str, Any]:
    """Retrain ``values``' config (run.seed = seed) before the hold-out; evaluate it once on it."""
    from foxhunt.train.runner import WalkForwardRunner

    full = ev.full
    cfg = ev.trial_config({**values, "run.seed": seed})
    search, cut = search_folds(full, cfg.tune.holdout)
    fold = holdout_fold(search, cut, full.market.n_bars, cfg.folds.mode)
    full.market.set_fold(fold)
    t0 = time.perf_counter()
    runner = WalkForwardRunner(dataclasses.replace(full, config=cfg, folds=[fold]), None)
    agent = runner.score_folds()[0]
    wall = time.perf_counter() - t0
    m = agent.metrics[0]
    sharpe = float(m.get("sharpe") or 0.0)
    rules: dict[str, Any] = {"buy_and_hold": np.ones(len(scenario.bars)), **scenario.oracles}
    refs = score_exposures(full.market, runner.backtester, [fold], rules, runner.trainer.env.n_actions,
                           float(cfg.env.capital), runner.plan.eval)
    ref_sharpe = {"flat": 0.0, **{k: float(v.summary()["sharpe"]) for k, v in refs.items()}}
    best_ref = max(ref_sharpe, key=lambda k: ref_sharpe[k])
    del runner
    return {"seed": seed, "sharpe": sharpe if math.isfinite(sharpe) else 0.0, "total_return": m.get("total_return"),
            "max_drawdown": m.get("max_drawdown"), "trades": m.get("trade_count"), "wall_s": wall,
            "references": ref_sharpe, "best_reference": best_ref,
            "capture": sharpe / ref_sharpe[best_ref] if ref_sharpe[best_ref] > 0 and math.isfinite(sharpe) else None,
            "holdout_bars": fold.val_len - 1, "train_bars": fold.train_len}


def compare(base: dict[str, Any], name: str, quick: bool, epochs: int, seconds: float, budget_s: float, tmp: Path,
            cache: Path, holdout: float = 0.2, max_seeds: int = 3, overrides: list[str] | None = None) -> dict[str, Any]:
    """The whole part (c) within ``budget_s`` seconds (study for ``seconds`` at most; see the module
    docstring). Returns the JSON-ready result."""
    t_begin = time.monotonic()
    size = QUICK_SIZE if quick else SIZES["gpu"]
    d = tmp / "scorecard"
    d.mkdir(parents=True)
    cfg, scenario, full = scenario_setup(base, name, size, epochs, d, cache, holdout, list(overrides or []))
    ev = ScenarioEvaluator(cfg, full)
    folds = ev.prepared_for(ev.trial_config({})).folds
    url = f"sqlite:///{d / 'study.db'}"
    study = open_study(url, cfg.tune.study, cfg.tune, create=True)
    untuned = {"dqn.lr": cfg.dqn.lr, "dqn.gamma": cfg.dqn.gamma}
    study.enqueue_trial(untuned)
    setup_s = time.monotonic() - t_begin
    # Keep about a third of what is left for the hold-out runs (at least one pair).
    window = max(1.0, min(seconds, (budget_s - setup_s) * 0.62))
    t0 = time.monotonic()
    rep = run_worker(cfg, url, d, 1_000_000, window, 0, ev)
    study_s = time.monotonic() - t0
    study = open_study(url, cfg.tune.study, cfg.tune, create=False)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    first = study.trials[0]
    best = best_trial(study)
    out: dict[str, Any] = {
        "shortened": f"{study_s:.0f}-s study instead of 30 minutes (device budget); train.epochs={epochs} on both sides",
        "overrides": list(overrides or []),
        "scenario": name, "description": scenario.description, "size": dataclasses.asdict(size), "epochs": epochs,
        "space": SPACE, "search_folds": len(folds), "val_bars_per_fold": [f.val_len for f in folds], "holdout": holdout,
        "hold_out_from_bar": ev.cut, "setup_s": setup_s, "study_s": study_s, "counts": counts(study),
        "trial_s": rep.trial_s, "untuned": {"params": untuned, "search_score": first.value,
                                            "fold_sharpe": result_attrs(first).get("fold_sharpe")},
    }
    if best is None:
        out["error"] = "no complete trial"
        return out
    out["best"] = {"number": best.number, "params": best.params, "search_score": best.value,
                   "fold_sharpe": result_attrs(best).get("fold_sharpe")}
    if len(done) >= 2:
        out["overfitting"] = overfitting_stats(study, best)
    ev.release()  # the search's runner: free its device memory before the hold-out runs
    same = best.number == first.number
    rows: dict[str, list[dict[str, Any]]] = {"untuned": [], "best": []}
    pair_s = 0.0
    for seed in range(max_seeds):
        left = budget_s - (time.monotonic() - t_begin)
        if seed > 0 and left < 1.3 * pair_s:
            break
        t1 = time.monotonic()
        rows["untuned"].append(holdout_score(ev, untuned, seed, scenario))
        if not same:
            rows["best"].append(holdout_score(ev, decode(ev.entries, best.params), seed, scenario))
        pair_s = time.monotonic() - t1
    if same:
        rows["best"] = rows["untuned"]
    out["holdout_runs"] = rows
    out["holdout_mean"] = {k: {"sharpe": float(np.mean([r["sharpe"] for r in v])),
                               "capture": _mean([r["capture"] for r in v]), "seeds": len(v)} for k, v in rows.items()}
    out["best_is_untuned"] = same
    out["wall_s"] = time.monotonic() - t_begin
    return out


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None
