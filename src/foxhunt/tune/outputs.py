"""What a finished search writes into its study directory.

    config.toml        the resolved config the study runs (with [tune])
    best.toml          the best trial's configuration without [tune]: `foxhunt train --config best.toml`
    trials.csv         one row per trial: number, state, value, duration, worker, params, fold Sharpes
    holdout-<trial>/   the best config retrained and evaluated once on the hold-out (a train run dir)
    summary.json       best trial, per-fold table, the search's folds, hold-out result, deflated Sharpe, PBO, timings
    report.html        Optuna's matplotlib plots + the tables above
    worker-<k>.log     what local worker process k wrote to stderr (``--workers K``), kept for reading

All files are written to a temporary name and renamed.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import tomli_w

from foxhunt.config import Config, build_config
from foxhunt.tune.objective import PowerSums
from foxhunt.tune.space import apply_params, decode
from foxhunt.tune.stats import deflated_sharpe, pbo_cscv
from foxhunt.tune.worker import result_attrs


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def feasible(t: optuna.trial.FrozenTrial) -> bool:
    return not result_attrs(t).get("constraints_broken")


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The complete trial with the highest score, feasible ones first (None: no complete trial)."""
    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.value is not None]
    if not done:
        return None
    pool = [t for t in done if feasible(t)] or done
    return max(pool, key=lambda t: (t.value, -t.number))


def best_config(cfg: Config, trial: optuna.trial.FrozenTrial) -> Config:
    """The base config with the trial's parameters (what `foxhunt train` should run)."""
    values = decode(cfg.tune.entries(), trial.params)
    return build_config(apply_params(cfg.to_dict(), values), source=f"best trial {trial.number}")


def best_toml(cfg: Config, trial: optuna.trial.FrozenTrial) -> str:
    """best.toml: the best config without [tune] (a plain training config)."""
    d = best_config(cfg, trial).to_dict()
    d.pop("tune", None)
    d.setdefault("run", {}).pop("name", None)
    head = (f"# Best configuration of study {cfg.tune.study!r}: trial {trial.number}, score {trial.value:+.4f}\n"
            f"# Run it with: foxhunt train --config best.toml\n")
    return head + tomli_w.dumps(d)


def write_trials_csv(path: Path, study: optuna.Study, keys: list[str], n_folds: int) -> None:
    cols = ["number", "state", "value", "duration_s", "worker", "retry_of", *[f"param:{k}" for k in keys],
            *[f"fold_{i}_sharpe" for i in range(n_folds)], "folds_run", "constraints_broken", "error"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    for t in study.get_trials(deepcopy=False):
        r = result_attrs(t)
        fs = list(r.get("fold_sharpe", []))
        dur = r.get("duration_s")
        w.writerow([t.number, t.state.name, "" if t.value is None else repr(t.value), "" if dur is None else f"{dur:.3f}",
                    r.get("worker", ""), t.system_attrs.get("failed_trial", ""),
                    *[t.params.get(k, "") for k in keys], *[repr(fs[i]) if i < len(fs) else "" for i in range(n_folds)],
                    r.get("folds_run", ""), "; ".join(r.get("constraints_broken", []) or []), r.get("error", "")])
    _atomic(path, buf.getvalue())


def overfitting_stats(study: optuna.Study, best: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """Deflated Sharpe of the best trial and PBO over the complete trials × folds (float64).

    DSR: the best trial's per-bar Sharpe, skewness and kurtosis over its validation bars (all
    folds), N = complete + pruned trials (every configuration tried), V[SR] = variance of the
    complete trials' per-bar Sharpes. PBO: CSCV over the [folds × complete trials] Sharpe matrix."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    n_tried = len(done) + len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,)))
    srs = []
    for t in done:
        ps = result_attrs(t).get("return_power_sums")
        if ps:
            srs.append(PowerSums(list(ps)).moments()["sharpe"])
    out: dict[str, Any] = {"n_trials": n_tried}
    mom = PowerSums(list(result_attrs(best).get("return_power_sums", [0.0] * 5))).moments()
    srs = [s for s in srs if math.isfinite(s)]
    if len(srs) >= 2 and mom["n"] >= 2 and math.isfinite(mom["sharpe"]):
        var = float(np.var(srs, ddof=1))
        dsr, sr0 = deflated_sharpe(mom["sharpe"], int(mom["n"]), max(1, n_tried), var, mom["skew"], mom["kurtosis"])
        out["deflated_sharpe"] = {"dsr": dsr, "sr0_per_bar": sr0, "sharpe_per_bar": mom["sharpe"], "n_obs": int(mom["n"]),
                                  "skew": mom["skew"], "kurtosis": mom["kurtosis"], "sharpe_variance": var}
    else:
        out["deflated_sharpe"] = {"dsr": None, "why": "needs >= 2 complete trials with validation returns"}
    rows = [result_attrs(t).get("fold_sharpe", []) for t in done]
    k = max((len(r) for r in rows), default=0)
    full = [r for r in rows if len(r) == k]
    if len(full) >= 2 and k >= 2:
        res = pbo_cscv(np.asarray(full, dtype=np.float64).T)
        out["pbo"] = {"pbo": res.pbo, "splits": res.n_splits, "blocks": res.blocks, "trials": len(full)}
    else:
        out["pbo"] = {"pbo": None, "why": "needs >= 2 complete trials and >= 2 folds"}
    return out
