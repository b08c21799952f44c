"""A cheap synthetic objective run through the real tune machinery (storage, sampler, pruner,
ask-and-tell loop, heartbeats): fold k of a trial scores

    sharpe_k = 2 − (log10(dqn.lr) + 3)² + 0.1·k        (best at dqn.lr = 1e-3)

with no training at all, so studies of dozens of trials take seconds. ``python synthetic.py
STUDY_DIR URL TARGET INDEX [SLEEP_S]`` runs one worker process; with FOXHUNT_TEST_HANG=1 its first
trial hangs (for the SIGKILL test); with FOXHUNT_TEST_KILL_AFTER_ASK=1 it SIGKILLs itself right after
its first ``study.ask``, before the first heartbeat (the worker's ``first_beat`` is replaced)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from foxhunt.config import Config, build_config
from foxhunt.tune.objective import FoldScores
from foxhunt.tune.worker import TrialEvaluator

N_FOLDS = 4


def synthetic_config(study_dir: Path, *, pruner: str = "none", sampler: str = "tpe", seed: int = 0,
                     heartbeat_s: int = 1, grace_s: int = 3, storage: str = "") -> Config:
    return build_config({"tune": {
        "study": "synthetic", "out_dir": str(study_dir.parent), "sampler": sampler, "pruner": pruner, "seed": seed,
        "startup_trials": 4, "prune_warmup_folds": 1, "heartbeat_s": heartbeat_s, "grace_s": grace_s, "storage": storage,
        "space": {"dqn": {"lr": {"low": 1e-5, "high": 1e-1, "log": True}}},
    }}, source="<synthetic>")


def fold_sharpe(lr: float, k: int) -> float:
    return 2.0 - (math.log10(lr) + 3.0) ** 2 + 0.1 * k


class SyntheticEvaluator(TrialEvaluator):
    """TrialEvaluator whose folds are the formula above (plus seeded per-bar returns for the DSR)."""

    def __init__(self, cfg: Config, sleep_s: float = 0.0, hang: bool = False, n_folds: int = N_FOLDS) -> None:
        super().__init__(cfg)
        self.n_folds = n_folds
        self.sleep_s = sleep_s
        self.hang = hang
        self.folds_run = 0

    def evaluate(self, values: dict[str, Any], on_fold: Callable[[int, FoldScores, bool], None] | None = None) -> tuple[FoldScores, float]:
        scores = FoldScores()
        if self.hang:
            time.sleep(3600)
        lr = values["dqn.lr"]
        for k in range(self.n_folds):
            time.sleep(self.sleep_s)
            s = fold_sharpe(lr, k)
            rng = np.random.default_rng(k)
            r = rng.standard_normal(200) * 0.01 + s * 1e-3
            scores.add({"sharpe": s, "trade_count": 10.0, "max_drawdown": 0.1, "total_return": float(r.sum())}, r)
            self.folds_run += 1
            if on_fold is not None:
                on_fold(k, scores, k == self.n_folds - 1)
        return scores, 0.0


def main() -> int:
    from foxhunt.tune.study import quiet_optuna
    from foxhunt.tune.worker import run_worker

    study_dir, url, target, index = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sleep_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    quiet_optuna()
    if os.environ.get("FOXHUNT_TEST_KILL_AFTER_ASK") == "1":
        import signal

        import foxhunt.tune.worker as worker

        worker.first_beat = lambda study, trial: os.kill(os.getpid(), signal.SIGKILL)  # dies between ask and beat
    cfg = synthetic_config(study_dir)
    ev = SyntheticEvaluator(cfg, sleep_s, hang=os.environ.get("FOXHUNT_TEST_HANG") == "1")
    rep = run_worker(cfg, url, study_dir, target, 0.0, index, ev)
    print(json.dumps({"finished": rep.finished, "pruned": rep.pruned, "failed": rep.failed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
