"""`foxhunt tune` throughput: trials per hour with K worker processes sharing one GPU (or the CPU),
the per-trial evaluation time, the per-trial overhead, and (optionally) pruned against unpruned.

1. In-process: one TrialEvaluator builds the runner for a trial (timed: the per-trial overhead of a
   new trainer), trains all folds once (one whole trial), then times the validation backtests of
   all folds again (the per-trial evaluation time; CUDA synchronised, best of 3).
2. For each K in --workers: a fresh SQLite study in a temporary directory, K worker processes
   (``python -m foxhunt.tune.worker``, the processes ``foxhunt tune --workers K`` starts) asking
   trials for --seconds; trials/hour from the trials that finished, over the span from the first
   trial's start to the last one's end (process start-up and market load excluded; also reported
   with them). No pruner here, so every trial costs the same.
3. --prune-trials N: the same seeded study of N trials with 1 worker, median pruner vs none:
   wall time and folds trained.

    python -m bench.bench_tune                                # CUDA: configs/h200-fast.toml, 5 folds × 3 epochs, K = 1 2 4
    python -m bench.bench_tune --workers 4 --seconds 300 --name tune_cuda_k4
    python -m bench.bench_tune --prune-trials 12 --workers --no-eval --name tune_cuda_prune   # pruning only
    python -m bench.bench_tune --workers 1 --set accel.train_step=torch   # any config override
    python -m bench.bench_tune --quick                        # small CPU run (a smoke test of the harness)

Writes bench/results/<name>.json (default tune_<device>[_quick]).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
from bench import common  # noqa: E402  (run as: PYTHONPATH=src:. python -m bench.bench_tune)

from foxhunt.config import Config, build_config  # noqa: E402
from foxhunt.train.config import config_from_text  # noqa: E402
from foxhunt.tune.study import counts, open_study, quiet_optuna  # noqa: E402
from foxhunt.tune.worker import TrialEvaluator, run_worker  # noqa: E402

SPACE = {"dqn": {"lr": {"low": 1e-4, "high": 3e-3, "log": True}, "gamma": {"low": 0.5, "high": 0.99}}}
QUICK = {"run": {"device": "cpu"}, "data": {"bars": 4000}, "folds": {"train": 1000, "val": 300, "max_folds": 5},
         "env": {"episode_length": 64},
         "dqn": {"n_envs": 32, "rollout_len": 8, "rounds_per_epoch": 4, "train_steps_per_round": 2, "batch_size": 64,
                 "hidden": [32, 32], "head_hidden": 16, "buffer_capacity": 8192, "warmup_transitions": 256,
                 "sampler": "proportional"},
         "accel": {"backend": "torch", "matmul_precision": "fp32"},
         "train": {"epochs": 1}}


def base_config(args: argparse.Namespace, study_dir: Path, name: str, pruner: str = "none") -> Config:
    data = config_from_text(Path(args.config).read_text(), source=args.config).to_dict()
    for section, upd in (QUICK if args.quick else {}).items():
        data.setdefault(section, {}).update(upd)
    if args.epochs:
        data["train"]["epochs"] = args.epochs
    if args.bars:
        data["data"]["bars"] = args.bars
    from foxhunt.config import apply_overrides

    apply_overrides(data, args.set)
    data["train"].update(checkpoint_every=0, tensorboard=False, progress=False, report=False)
    data["features"] = {"cache_dir": str(ROOT / ".foxhunt-cache")}
    data["tune"] = {"study": name, "out_dir": str(study_dir.parent), "pruner": pruner, "sampler": "tpe", "seed": 0,
                    "holdout": args.holdout, "startup_trials": 3, "space": SPACE}
    return build_config(data, source="bench")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def evaluation_times(cfg: Config) -> dict[str, Any]:
    """Per-trial overhead (new runner), one whole trial, and the folds' validation backtests."""
    ev = TrialEvaluator(cfg)
    values = {"dqn.lr": 1e-3, "dqn.gamma": 0.9}
    t0 = time.perf_counter()
    ev.prepared_for(ev.trial_config(values))
    market_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner = ev.runner_for(ev.trial_config(values))
    _sync()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.score_folds()
    _sync()
    trial_s = time.perf_counter() - t0
    evals = []
    for _ in range(3):
        t0 = time.perf_counter()
        for f in runner.folds:
            runner.trainer.market.set_fold(f)
            runner.evaluate(f)
        _sync()
        evals.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    ev.runner_for(ev.trial_config({"dqn.lr": 2e-3, "dqn.gamma": 0.8}))  # a second trial's trainer (warm process)
    _sync()
    rebuild_s = time.perf_counter() - t0
    folds = runner.folds
    out = {"market_load_s": market_s, "first_runner_build_s": build_s, "runner_rebuild_s": rebuild_s, "first_trial_s": trial_s,
           "eval_all_folds_s": min(evals), "eval_all_folds_s_runs": evals, "n_folds": len(folds),
           "val_bars_per_fold": [f.val_len for f in folds], "train_bars_last_fold": folds[-1].train_len}
    del runner, ev
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def throughput(args: argparse.Namespace, k: int, tmp: Path) -> dict[str, Any]:
    d = tmp / f"k{k}"
    cfg = base_config(args, d, f"k{k}")
    d.mkdir(parents=True)
    cfg.write(d)
    url = f"sqlite:///{d / 'study.db'}"
    open_study(url, cfg.tune.study, cfg.tune, create=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "foxhunt.tune.worker", str(d), "--storage", url, "--trials", "1000000",
                               "--timeout", str(args.seconds), "--index", str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(k)]
    errs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            errs.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    wall = time.perf_counter() - t0
    study = open_study(url, cfg.tune.study, cfg.tune, create=False)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    row: dict[str, Any] = {"workers": k, "trials": len(done), "wall_s": wall, "errors": errs, "counts": counts(study)}
    if done:
        span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
        durs = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done]
        over = [t.user_attrs.get("result", {}).get("overhead_s") for t in done]
        row.update(trials_per_hour=3600 * len(done) / span if span > 0 else None, trials_per_hour_with_startup=3600 * len(done) / wall,
                   trial_s_mean=sum(durs) / len(durs), overhead_s_mean=sum(o for o in over if o is not None) / max(1, len(over)))
    print(f"K={k}: {row['trials']} trials in {wall:.0f} s; {row.get('trials_per_hour') or 0:.0f} trials/h "
          f"(trial {row.get('trial_s_mean') or 0:.1f} s each) {errs or ''}", flush=True)
    return row


def prune_compare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from foxhunt.tune.worker import TrialEvaluator

    out = {}
    for pruner in ("none", "median"):
        d = tmp / f"prune-{pruner}"
        cfg = base_config(args, d, f"prune-{pruner}", pruner=pruner)
        d.mkdir(parents=True)
        url = f"sqlite:///{d / 'study.db'}"
        open_study(url, cfg.tune.study, cfg.tune, create=True)
        t0 = time.perf_counter()
        rep = run_worker(cfg, url, d, args.prune_trials, 0.0, 0, TrialEvaluator(cfg))
        wall = time.perf_counter() - t0
        study = open_study(url, cfg.tune.study, cfg.tune, create=False)
        folds = sum(t.user_attrs.get("result", {}).get("folds_run", 0) for t in study.trials)
        best = max((t.value for t in study.trials if t.state.name == "COMPLETE"), default=None)
        out[pruner] = {"wall_s": wall, "folds_trained": folds, "complete": rep.finished, "pruned": rep.pruned, "best_value": best}
        print(f"pruner {pruner}: {wall:.0f} s, {folds} folds trained, {rep.pruned} pruned, best {best}", flush=True)
    out["time_saved_fraction"] = 1.0 - out["median"]["wall_s"] / out["none"]["wall_s"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "h200-fast.toml"))
    p.add_argument("--quick", action="store_true", help="small CPU run")
    p.add_argument("--workers", type=int, nargs="*", default=None, help="worker counts (default: 1 2 4; quick: 1 2)")
    p.add_argument("--seconds", type=float, default=None, help="each worker asks trials for this long (default 150; quick 40)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per fold (train.epochs)")
    p.add_argument("--bars", type=int, default=None, help="data.bars override")
    p.add_argument("--holdout", type=float, default=0.1)
    p.add_argument("--prune-trials", type=int, default=0, help="also compare median pruning with none over N trials")
    p.add_argument("--no-eval", action="store_true", help="skip the in-process evaluation timing")
    p.add_argument("--set", action="append", default=[], help="config override section.key=value (repeatable)")
    p.add_argument("--name", default=None)
    args = p.parse_args()
    quiet_optuna()
    ks = args.workers if args.workers is not None else ([1, 2] if args.quick else [1, 2, 4])
    args.seconds = args.seconds or (40.0 if args.quick else 150.0)
    if args.quick:
        args.epochs = 1
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    result: dict[str, Any] = {"machine": common.machine(device), "config": args.config, "quick": args.quick,
                              "epochs": args.epochs, "seconds_per_k": args.seconds, "space": SPACE}
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        if not args.no_eval:
            result["evaluation"] = evaluation_times(base_config(args, Path(tmp) / "eval", "eval"))
            e = result["evaluation"]
            print(f"{e['n_folds']} folds: trial {e['first_trial_s']:.2f} s (first, incl. warm-up); validation backtests of all folds "
                  f"{e['eval_all_folds_s']:.3f} s; new trainer {e['runner_rebuild_s']:.3f} s", flush=True)
        result["throughput"] = [throughput(args, k, Path(tmp)) for k in ks]
        if args.prune_trials:
            result["pruning"] = prune_compare(args, Path(tmp))
    name = args.name or f"tune_{device.type}{'_quick' if args.quick else ''}"
    print(f"wrote {common.write_result(name, result)}")


if __name__ == "__main__":
    main()
