"""One ``foxhunt tune`` invocation: study directory, workers, live progress, the finishing stage.

``open_session`` validates everything first (config, space bounds, fold layout and hold-out on the
real data), then creates or resumes the study directory: an existing study continues when its
config equals the new one except for the run-time keys (trials, timeout, workers, storage);
otherwise it is an error naming the first differing key. ``run_workers`` runs the trial loop
in-process (one worker) or starts K worker processes (``python -m foxhunt.tune.worker``), one per
GPU by default; ``finish`` writes trials.csv, best.toml, the hold-out run, summary.json and
report.html.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from foxhunt.config import Config, load_config
from foxhunt.errors import ConfigError
from foxhunt.tune.config import check_space_bounds
from foxhunt.tune.study import counts, open_study, storage_url
from foxhunt.tune.worker import TrialEvaluator, WorkerReport, run_worker

RUNTIME_KEYS = ("trials", "timeout_s", "workers", "storage", "population")
"""[tune] keys that may change when a study is resumed (they do not change what a trial computes: a
trial in a population records what it records alone, tests/tune/test_population.py)."""


@dataclass
class Session:
    cfg: Config
    study_dir: Path
    url: str
    resumed: bool
    evaluator: TrialEvaluator
    reports: list[WorkerReport] = field(default_factory=list)
    wall_s: float = 0.0


def _identity(cfg: Config) -> dict[str, Any]:
    d = cfg.to_dict()
    for k in RUNTIME_KEYS:
        d.get("tune", {}).pop(k, None)
    return d


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    return f"{path} ({a!r} in the study, {b!r} now)"


def open_session(cfg: Config, console: Any = None) -> Session:
    """Validate, then create or resume the study directory and the Optuna study."""
    check_space_bounds(cfg)
    if not cfg.tune.entries():
        raise ConfigError("tune.space is empty: name at least one key to search, e.g. dqn.lr = { low = 1e-4, high = 1e-2, log = true }")
    ev = TrialEvaluator(cfg, console)
    ev.prepared_for(ev.trial_config({}))  # loads the market once; raises on bad folds / hold-out
    study_dir = Path(cfg.tune.out_dir) / cfg.tune.study
    url = storage_url(cfg.tune.storage, study_dir)
    resumed = (study_dir / "config.toml").is_file()
    if resumed:
        old = load_config(study_dir / "config.toml")
        if _identity(old) != _identity(cfg):
            raise ConfigError(f"study {cfg.tune.study!r} in {study_dir} was started with another config: "
                              f"{_first_difference(_identity(old), _identity(cfg))}; pass --study NAME for a new study")
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the study directory {study_dir}: {exc.strerror or exc}") from None
    cfg.write(study_dir)
    study = open_study(url, cfg.tune.study, cfg.tune, create=True)
    study.set_user_attr("config_sha256", cfg.hash())
    return Session(cfg, study_dir, url, resumed, ev)


def worker_count(requested: int) -> tuple[int, int]:
    """(workers, GPUs): 0 means one per GPU (1 without CUDA)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return (requested or max(1, gpus)), gpus


class _Live:
    """The progress bar (finished / target trials) and the best-so-far line, fed by polling."""

    def __init__(self, console: Any, target: int, name: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.target = target
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[best]}"), console=console,
                                 disable=console is None, transient=False)
        self.task = self.progress.add_task(f"study {name}", total=max(1, target), best="")

    def update(self, study: optuna.Study, note: str = "") -> None:
        from foxhunt.tune.outputs import best_trial

        c = counts(study)
        best = best_trial(study)
        line = f"best {best.value:+.3f} (trial {best.number})" if best is not None else "best –"
        extra = f" | running {c['RUNNING']} pruned {c['PRUNED']} failed {c['FAIL']}"
        self.progress.update(self.task, completed=min(self.target, c["COMPLETE"] + c["PRUNED"]), best=line + extra + note)


def run_workers(s: Session, console: Any = None) -> None:
    """Run the study to its target with tune.workers workers (see the module docstring)."""
    tcfg = s.cfg.tune
    k, gpus = worker_count(tcfg.workers)
    t0 = time.perf_counter()
    study = open_study(s.url, tcfg.study, tcfg, create=False)
    live = _Live(console, tcfg.trials, tcfg.study)
    with live.progress:
        live.update(study)
        if k == 1:
            def on_event(kind: str, payload: Any) -> None:
                if kind == "fold":
                    num, fold, v = payload
                    live.update(study, f" | trial {num} fold {fold}: {v:+.3f}")
                else:
                    live.update(study)

            s.reports.append(run_worker(s.cfg, s.url, s.study_dir, tcfg.trials, tcfg.timeout_s, 0, s.evaluator, on_event))
        else:
            s.reports.extend(_spawn(s, k, gpus, live, study))
        live.update(study)
    s.wall_s = time.perf_counter() - t0


def _spawn(s: Session, k: int, gpus: int, live: _Live, study: optuna.Study) -> list[WorkerReport]:
    tcfg = s.cfg.tune
    s.evaluator.release()  # the workers load their own market: free this process's device copy
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()] or [str(g) for g in range(gpus)]
    procs = []
    # Each worker's output goes to files in the study directory: pipes that nobody reads while the
    # workers run would block a worker once it has written a pipe buffer's worth (64 KiB) of warnings.
    outs = [s.study_dir / f"worker-{i}.out" for i in range(k)]
    logs = [s.study_dir / f"worker-{i}.log" for i in range(k)]
    for i in range(k):
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = visible[i % gpus]  # several workers per GPU when k > gpus
        cmd = [sys.executable, "-m", "foxhunt.tune.worker", str(s.study_dir), "--storage", s.url, "--trials", str(tcfg.trials),
               "--timeout", str(tcfg.timeout_s), "--index", str(i)]
        with open(outs[i], "w") as out, open(logs[i], "w") as log:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=log, text=True))
    try:
        while any(p.poll() is None for p in procs):
            live.update(study)
            time.sleep(1.0)
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        raise
    reports = []
    errors = []
    for i, p in enumerate(procs):
        p.wait()
        out, err = outs[i].read_text(), logs[i].read_text()
        outs[i].unlink()
        if p.returncode == 0 and out.strip():
            reports.append(WorkerReport(**json.loads(out.strip().splitlines()[-1])))
        else:
            errors.append(f"worker {i} exited with {p.returncode}: {(err.strip().splitlines() or ['?'])[-1]} (log: {logs[i]})")
    if errors and not reports:
        raise ConfigError("; ".join(errors))
    for e in errors:
        if live.progress.console is not None:
            live.progress.console.print(f"[yellow]warning:[/] {e}", highlight=False)
    return reports
