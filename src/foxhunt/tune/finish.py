"""The finishing stage of a study: trials.csv, best.toml, the hold-out evaluation, statistics,
summary.json and report.html (see foxhunt.tune.outputs for the file list).

The hold-out is looked at once per best trial: ``holdout-<trial>/`` is reused when the study is
finished again with the same best trial; a new best trial (after more trials) is a second look,
and summary.json counts the looks (each one weakens the hold-out as an unseen test).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from foxhunt.train.outputs import write_json
from foxhunt.tune.outputs import _atomic, best_config, best_toml, best_trial, overfitting_stats, write_trials_csv
from foxhunt.tune.report import write_study_report
from foxhunt.tune.session import Session
from foxhunt.tune.space import decode
from foxhunt.tune.worker import result_attrs
from foxhunt.tune.study import counts, open_study


def finish(s: Session, console: Any = None) -> dict[str, Any]:
    """Write the study's outputs; returns the summary (also written as summary.json)."""
    cfg, d = s.cfg, s.study_dir
    study = open_study(s.url, cfg.tune.study, cfg.tune, create=False)
    keys = list(cfg.tune.entries())
    prepared = s.evaluator.prepared_for(s.evaluator.trial_config({}))
    n_folds = len(prepared.folds)
    write_trials_csv(d / "trials.csv", study, keys, n_folds)
    best = best_trial(study)
    trial_s = [x for r in s.reports for x in r.trial_s]
    over_s = [x for r in s.reports for x in r.overhead_s]
    summary: dict[str, Any] = {
        "study": cfg.tune.study, "storage": s.url.split("@")[-1], "counts": counts(study),
        "objective": f"{cfg.tune.objective} fold Sharpe − {cfg.tune.spread_penalty} × std", "n_folds": n_folds,
        "search_folds": _fold_rows(prepared),
        "this_session": {"wall_s": s.wall_s, "trials": len(trial_s), "trial_s_mean": float(np.mean(trial_s)) if trial_s else None,
                         "overhead_s_mean": float(np.mean(over_s)) if over_s else None,
                         "workers": len(s.reports), "evaluator": [r.stats for r in s.reports],
                         "lost": sum(r.lost for r in s.reports)},
    }
    looks = sorted(p.name for p in d.glob("holdout-*") if (p / "summary.json").is_file())
    if best is not None:
        summary["best"] = {"number": best.number, "value": best.value, "params": best.params,
                           "fold_sharpe": result_attrs(best).get("fold_sharpe"),
                           "constraints_broken": result_attrs(best).get("constraints_broken", [])}
        _atomic(d / "best.toml", best_toml(cfg, best))
        summary["overfitting"] = overfitting_stats(study, best)
        if cfg.tune.holdout > 0:
            summary["holdout"] = _holdout(s, best, console)
            looks = sorted(p.name for p in d.glob("holdout-*") if (p / "summary.json").is_file())
    summary["holdout_evaluations"] = len(looks)
    write_json(d / "summary.json", summary)
    write_study_report(d, study, summary)
    return summary


def _fold_rows(prepared: Any) -> list[dict[str, Any]]:
    """The search's folds as in a run's folds.json: indices into the bars (a universe: its union
    calendar) and their times; every validation window ends at or before the hold-out's cut."""
    from foxhunt.folds import folds_to_json

    times = getattr(prepared, "calendar", None)
    return json.loads(folds_to_json(prepared.folds, prepared.market.timestamps_host if times is None else times))


def _holdout(s: Session, best: Any, console: Any) -> dict[str, Any]:
    from foxhunt.tune.holdout import run_holdout

    name = f"holdout-{best.number}"
    run_dir = s.study_dir / name
    saved = run_dir / "holdout.json"
    if saved.is_file():
        return json.loads(saved.read_text())
    if run_dir.exists():  # an interrupted earlier look: it never produced a result, start it again
        import shutil

        shutil.rmtree(run_dir)
    if console is not None:
        console.print(f"retraining trial {best.number}'s config before the hold-out and evaluating it once …", highlight=False)
    cfg = best_config(s.cfg, best)
    ev = s.evaluator
    prepared = ev.prepared_for(ev.trial_config(decode(ev.entries, best.params)))  # the best trial's data
    res = run_holdout(cfg, prepared, s.study_dir, name, console)
    write_json(saved, res)
    return res
