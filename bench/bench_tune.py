"""`foxhunt tune` on one device: per-trial evaluation time and overhead, trials per hour with K
worker processes sharing it, and (shortened) a tuned configuration against the untuned one on a
scorecard scenario. One invocation fits a fixed wall-time budget (``--deadline``).

(b) ``evaluation`` (in-process, one TrialEvaluator): market load; the first runner (trainer) build;
    a warm-up epoch on fold 0 (compilation and graph capture: later processes of this machine find
    the compiled code in the on-disk caches); one steady epoch; one whole warm trial (every fold
    trained and scored, split into training and validation-backtest seconds); the validation
    backtests of all folds again (best of 2); a new trainer for another trial (a searched
    [dqn] key changed) and its first epoch.
(a) ``throughput``: for each K in --workers, a fresh SQLite study asked for trials for --seconds
    (no pruner: every trial trains every fold). K = 1 runs in this process on the warm evaluator
    of (b), as ``foxhunt tune --workers 1`` does; K > 1 starts K worker processes
    (``python -m foxhunt.tune.worker``, what ``foxhunt tune --workers K`` starts) whose --timeout
    is --seconds plus their start-up estimated from (b). Reported: complete trials; trials/hour
    over the steady window (from the moment every worker has finished its first trial, which
    carries process start-up, market load and the first trainer, to the last completion), over
    everything (first start to last end) and estimated from the steady trials' durations (sum over
    workers of 3600 / mean duration); trial-folds/hour; per trial: duration, training, validation
    backtests and the rest (set-up outside the folds: the per-trial overhead), and the gap between
    a worker's trials (ask, sampling, storage). Workers still running at a cap are SIGKILLed (their
    running trial is not counted).
(c) ``scorecard`` (bench/tune_scorecard.py): a short seeded study on one scorecard scenario's
    search folds, then the best trial's configuration and the untuned one retrained and scored
    once on the scenario's hold-out (labelled shortened: minutes, not the issue's 30).
--population P [P ...]: after (a), for each P one more in-process worker on the warm evaluator
    with ``tune.population = P`` (P trials asked together and run as one walk-forward, their trainers
    in one lockstep: foxhunt.tune.population), a fresh study asked for --seconds like K = 1. A
    population's trials start together, so its row has no per-worker steady window: compare its
    trials/hour over everything (first start to last end; the evaluator is warm, every trial builds
    its trainer in both modes) with the K = 1 row's. Its "outside folds" column holds, besides set-up,
    the other trials' validation backtests (a trial's duration is its population's).
--prune-trials N: the same seeded study of N trials with one in-process worker, median pruner
    against none: wall time and folds trained.

    PYTHONPATH=src:. python -m bench.bench_tune             # CUDA: configs/h200-fast.toml, 5 folds x 2 epochs, K = 1 2 4, (c)
    PYTHONPATH=src:. python -m bench.bench_tune --quick     # small CPU run (a smoke test of the harness, ~3 min)
    PYTHONPATH=src:. python -m bench.bench_tune --workers 4 --seconds 300 --no-eval --no-scorecard --name tune_cuda_k4
    PYTHONPATH=src:. python -m bench.bench_tune --prune-trials 12 --workers --no-eval --no-scorecard --name tune_cuda_prune
    PYTHONPATH=src:. python -m bench.bench_tune --workers 1 --population 8 32 --seconds 120 --no-scorecard --name tune_cuda_population

The shared flags of ``bench/common.py`` apply (``--device``, ``--out``, ``--name``, ``--threads``,
``--git-revision``, ``--config``, ``--set``). Writes ``--out`` (default
bench/results/<--name or tune_<device>[_quick]>.json) after every part (a run stopped by the
step's timeout keeps what it measured) and prints a short table last.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench import common
from foxhunt.config import Config, apply_overrides, build_config
from foxhunt.train.config import config_from_text
from foxhunt.tune.study import counts, open_study, quiet_optuna
from foxhunt.tune.worker import TrialEvaluator, result_attrs, run_worker

ROOT = common.ROOT
CACHE = ROOT / ".foxhunt-cache"
SPACE = {"dqn": {"lr": {"low": 1e-4, "high": 3e-3, "log": True}, "gamma": {"low": 0.5, "high": 0.99}}}
"""Throughput space: gamma is not a key a built trainer takes in place, so every trial builds a new
trainer (the general case; a space of dqn.lr / train.epochs alone reuses it)."""
QUICK = {"run": {"device": "cpu"}, "data": {"bars": 4000}, "folds": {"train": 1000, "val": 300, "max_folds": 5},
         "env": {"episode_length": 64},
         "dqn": {"n_envs": 32, "rollout_len": 8, "rounds_per_epoch": 4, "train_steps_per_round": 2, "batch_size": 64,
                 "hidden": [32, 32], "head_hidden": 16, "buffer_capacity": 8192, "warmup_transitions": 256,
                 "sampler": "proportional"},
         "accel": {"backend": "torch", "matmul_precision": "fp32", "acting": "auto"},  # the torch path everywhere (the
         # configuration's named fused acting needs a GPU, or Triton's interpreter: every quick trial failed without it)
         "train": {"epochs": 1}}


def base_dict(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration file (with the quick overrides and --set) as a dict, before [tune]."""
    data = config_from_text(Path(args.config).read_text(), source=args.config).to_dict()
    for section, upd in (QUICK if args.quick else {}).items():
        data.setdefault(section, {}).update(upd)
    if args.bars:
        data["data"]["bars"] = args.bars
    if args.device != "auto":
        data["run"]["device"] = args.device
    data["train"]["ensemble"] = 1  # one agent a trial (the stop 20-22 workload; --set train.ensemble=K for ensembles)
    apply_overrides(data, args.overrides)
    data["train"].update(checkpoint_every=0, tensorboard=False, progress=False, report=False)
    return data


def base_config(args: argparse.Namespace, study_dir: Path, name: str, pruner: str = "none", population: int = 1) -> Config:
    data = base_dict(args)
    data["train"]["epochs"] = args.epochs
    data["features"] = {"cache_dir": str(CACHE)}
    data["tune"] = {"study": name, "out_dir": str(study_dir.parent), "pruner": pruner, "sampler": "tpe", "seed": 0,
                    "holdout": args.holdout, "startup_trials": 3, "space": SPACE, "population": population}
    return build_config(data, source="bench")


def evaluation_times(ev: TrialEvaluator, device: torch.device) -> dict[str, Any]:
    """Part (b) (module docstring); leaves ``ev`` warm (market loaded, a trainer built). Each
    figure is the wall seconds of one call (``common.stopwatch``: ``device`` synchronised around it)."""
    cfg = ev.base

    def _clock(fn: Any) -> float:
        with common.stopwatch(device) as sw:
            fn()
        return sw.s

    values = {"dqn.lr": 1e-3, "dqn.gamma": 0.9}
    out: dict[str, Any] = {"market_load_s": _clock(lambda: ev.prepared_for(ev.trial_config(values)))}
    box: dict[str, Any] = {}
    out["first_runner_build_s"] = _clock(lambda: box.update(r=ev.runner_for(ev.trial_config(values))))
    runner = box["r"]
    folds = runner.folds

    def one_epoch(reset: bool) -> None:
        if reset:
            runner.trainer.reset_for_fold(folds[0], warm_start=False)
        runner.trainer.train_epoch()
        runner.trainer.drain()

    out["warmup_epoch_s"] = _clock(lambda: one_epoch(True))  # compilation + graph capture
    out["steady_epoch_s"] = _clock(lambda: one_epoch(False))
    times: dict[str, float] = {}
    out["trial_s"] = _clock(lambda: runner.score_folds(None, times))
    out["trial_train_s"], out["trial_eval_s"] = times["train_s"], times["eval_s"]

    def eval_all() -> None:
        for f in folds:
            runner.trainer.market.set_fold(f)
            runner.evaluate(f)

    out["eval_all_folds_s_runs"] = [_clock(eval_all) for _ in range(2)]
    out["eval_all_folds_s"] = min(out["eval_all_folds_s_runs"])
    del runner, box
    other = {"dqn.lr": 2e-3, "dqn.gamma": 0.8}  # gamma changed: a new trainer, as a trial of the search
    box2: dict[str, Any] = {}
    out["new_trainer_build_s"] = _clock(lambda: box2.update(r=ev.runner_for(ev.trial_config(other))))
    runner = box2["r"]
    out["new_trainer_first_epoch_s"] = _clock(lambda: one_epoch(True))
    out.update(n_folds=len(folds), epochs=cfg.train.epochs, val_bars_per_fold=[f.val_len for f in folds],
               train_bars_last_fold=folds[-1].train_len, stats=dict(ev.stats))
    del runner, box2
    return out


def _steady(done: list[Any], k: int) -> dict[str, Any]:
    """Steady-state rates from complete trials (see the module docstring)."""
    by_worker: dict[int, list[Any]] = {}
    for t in sorted(done, key=lambda t: t.datetime_start):
        by_worker.setdefault(result_attrs(t).get("worker", 0), []).append(t)
    out: dict[str, Any] = {"workers_with_trials": len(by_worker)}
    if len(by_worker) < k:
        return out  # a worker never finished a trial: no steady window
    t_a = max(ts[0].datetime_complete for ts in by_worker.values())
    t_b = max(t.datetime_complete for t in done)
    n = sum(1 for t in done if t.datetime_complete > t_a)
    span = (t_b - t_a).total_seconds()
    out.update(steady_window_s=span, steady_window_trials=n, trials_per_hour_window=3600 * n / span if n and span > 0 else None)
    rest = {w: [(t.datetime_complete - t.datetime_start).total_seconds() for t in ts[1:]] for w, ts in by_worker.items()}
    if all(rest.values()):
        out["trials_per_hour_from_durations"] = sum(3600 / (sum(v) / len(v)) for v in rest.values())
    gaps = [(b.datetime_start - a.datetime_complete).total_seconds() for ts in by_worker.values() for a, b in zip(ts, ts[1:])]
    out["gap_between_trials_s_mean"] = sum(gaps) / len(gaps) if gaps else None
    return out


def throughput(args: argparse.Namespace, k: int, tmp: Path, seconds: float, timeout: float, cap_s: float) -> dict[str, Any]:
    """Part (a) for K worker processes (module docstring): each asks trials for ``timeout`` seconds
    (its start-up estimate + ``seconds``); all are stopped at ``cap_s``."""
    d = tmp / f"k{k}"
    cfg = base_config(args, d, f"k{k}")
    d.mkdir(parents=True)
    cfg.write(d)
    url = f"sqlite:///{d / 'study.db'}"
    open_study(url, cfg.tune.study, cfg.tune, create=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    sw = common.stopwatch().start()  # wall seconds of the workers (processes: nothing to synchronise here)
    cap_at = time.monotonic() + cap_s
    logs = [open(d / f"worker{i}.err", "w") for i in range(k)]
    procs = [subprocess.Popen([sys.executable, "-m", "foxhunt.tune.worker", str(d), "--storage", url, "--trials", "1000000",
                               "--timeout", str(timeout), "--index", str(i)], env=env, stdout=subprocess.DEVNULL,
                              stderr=logs[i]) for i in range(k)]
    stopped = 0
    while any(p.poll() is None for p in procs):
        if time.monotonic() > cap_at:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)  # a trial still running: left RUNNING, not counted
                    stopped += 1
            break
        time.sleep(0.5)
    for p, log in zip(procs, logs):
        p.wait()
        log.close()
    wall = sw.stop()
    errs = [(d / f"worker{i}.err").read_text().strip().splitlines()[-1:] for i, p in enumerate(procs) if p.returncode not in (0, -9)]
    return _row(open_study(url, cfg.tune.study, cfg.tune, create=False), k, {
        "mode": "worker processes", "seconds": seconds, "worker_timeout_s": timeout, "wall_s": wall,
        "stopped_workers": stopped, "errors": errs})


def in_process(args: argparse.Namespace, ev: TrialEvaluator, tmp: Path, seconds: float, population: int = 1,
               warm: bool = True) -> dict[str, Any]:
    """Part (a) for K = 1: the in-process worker ``foxhunt tune --workers 1`` runs, on the warm
    evaluator of part (b) (market loaded, compiled code in this process); with ``population`` P > 1,
    that worker with ``tune.population = P`` (--population)."""
    name = "k1" if population == 1 else f"k1_pop{population}"
    d, n = tmp / name, 1
    while d.exists():  # the same P twice (--population 32 32: a cold row, then a warm one)
        n += 1
        d = tmp / f"{name}_{n}"
    cfg = base_config(args, d, name, population=population)
    d.mkdir(parents=True)
    url = f"sqlite:///{d / 'study.db'}"
    open_study(url, cfg.tune.study, cfg.tune, create=True)
    with common.stopwatch() as sw:
        run_worker(cfg, url, d, 1_000_000, seconds, 0, ev)
    # warm: part (b) or an earlier in-process row ran on ``ev`` first; cold (--no-eval, the first row): its first
    # trial or population pays the market's load and the compilation
    mode = f"in-process ({'warm' if warm else 'cold'})" + (f", population {population}" if population > 1 else "")
    return _row(open_study(url, cfg.tune.study, cfg.tune, create=False), 1,
                {"mode": mode, "population": population, "seconds": seconds, "wall_s": sw.s, "errors": []})


def _row(study: Any, k: int, row: dict[str, Any]) -> dict[str, Any]:
    """The JSON row of one K from its study's trials (module docstring)."""
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    row = {"workers": k, "trials": len(done), **row, "counts": counts(study)}
    errs, wall = row["errors"], row["wall_s"]
    if done:
        attrs = [result_attrs(t) for t in done]
        dur = [(t.datetime_complete - t.datetime_start).total_seconds() for t in done]

        def mean(key: str) -> float | None:
            v = [a[key] for a in attrs if a.get(key) is not None]
            return sum(v) / len(v) if v else None

        firsts: dict[int, float] = {}
        for t, a, x in sorted(zip(done, attrs, dur), key=lambda z: z[0].datetime_start):
            firsts.setdefault(a.get("worker", 0), x)
        row["first_trial_s"] = [firsts[w] for w in sorted(firsts)]  # per worker: start-up, market, first trainer
        row.update(trial_s_mean=sum(dur) / len(dur), train_s_mean=mean("train_s"), eval_s_mean=mean("eval_s"),
                   setup_s_mean=mean("overhead_s"), n_folds=len(attrs[0].get("fold_sharpe", [])))
        rest = [a["duration_s"] - a.get("train_s", 0.0) - a.get("eval_s", 0.0) for a in attrs]
        row["outside_folds_s_mean"] = sum(rest) / len(rest)
        span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
        row["trials_per_hour_incl_startup"] = 3600 * len(done) / span if span > 0 else None  # first start to last end
        if row.get("population", 1) == 1:  # a population's trials start together: no per-trial steady window
            row.update(_steady(done, k))
        rate = row.get("trials_per_hour_window") or row.get("trials_per_hour_from_durations") or \
            (row["trials_per_hour_incl_startup"] if row.get("population", 1) > 1 else None)
        row["trial_folds_per_hour"] = rate * row["n_folds"] if rate else None
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    if failed:  # a harness that fails every trial must say so, not report "0 trials"
        why = (failed[0].user_attrs.get("result") or {}).get("error") or "see the study"
        row["failed_first_error"] = str(why)[:300]
        print(f"K={k}: {len(failed)} trials FAILED; the first: {row['failed_first_error']}", flush=True)
    pop = f" population {row['population']}" if row.get("population", 1) > 1 else ""
    print(f"K={k}{pop}: {row['trials']} trials in {wall:.0f} s (incl. start-up {row.get('trials_per_hour_incl_startup') or 0:.0f} trials/h); steady {row.get('trials_per_hour_window') or 0:.0f} trials/h "
          f"(from durations {row.get('trials_per_hour_from_durations') or 0:.0f}); trial {row.get('trial_s_mean') or 0:.1f} s "
          f"{errs or ''}", flush=True)
    return row


def prune_compare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The same seeded study with and without the median pruner (one in-process worker each, after
    a warm-up that builds the feature cache, so that neither pays it)."""
    warm = TrialEvaluator(base_config(args, tmp / "prune-warm", "prune-warm"))
    warm.prepared_for(warm.trial_config({}))
    del warm
    out: dict[str, Any] = {}
    for pruner in ("none", "median"):
        d = tmp / f"prune-{pruner}"
        cfg = base_config(args, d, f"prune-{pruner}", pruner=pruner)
        d.mkdir(parents=True)
        url = f"sqlite:///{d / 'study.db'}"
        open_study(url, cfg.tune.study, cfg.tune, create=True)
        with common.stopwatch() as sw:
            rep = run_worker(cfg, url, d, args.prune_trials, 0.0, 0, TrialEvaluator(cfg))
        wall = sw.s
        study = open_study(url, cfg.tune.study, cfg.tune, create=False)
        folds = sum(result_attrs(t).get("folds_run", 0) for t in study.trials)
        best = max((t.value for t in study.trials if t.state.name == "COMPLETE"), default=None)
        out[pruner] = {"wall_s": wall, "folds_trained": folds, "complete": rep.finished, "pruned": rep.pruned, "best_value": best}
        print(f"pruner {pruner}: {wall:.0f} s, {folds} folds trained, {rep.pruned} pruned, best {best}", flush=True)
    out["time_saved_fraction"] = 1.0 - out["median"]["wall_s"] / out["none"]["wall_s"]
    out["folds_saved_fraction"] = 1.0 - out["median"]["folds_trained"] / max(1, out["none"]["folds_trained"])
    return out


def _plan(args: argparse.Namespace, ks: list[int], e: dict[str, Any] | None, budget: float,
          pops: list[int] | None = None) -> tuple[float, dict[str, Any]]:
    """(asking window per K, the plan) so that every K fits in ``budget`` seconds: a worker
    process first starts (imports, market, first trainer, warm-up: estimated from part (b)), then
    asks for ``seconds``, then finishes its last trial (K sharing the device slow it down)."""
    trial = (e["trial_s"] + e["new_trainer_build_s"] + e["new_trainer_first_epoch_s"]) if e else (5.0 if args.quick else 20.0)
    startup = (e["market_load_s"] + e["first_runner_build_s"] + e["warmup_epoch_s"] + 10.0) if e else (10.0 if args.quick else 60.0)
    # K workers on one device: a trial takes up to ~K times as long; the last one ends on average
    # half a trial after the window (the cap allows a whole one).
    drain = {str(k): trial * (1.0 + 0.75 * (k - 1)) + 10.0 for k in ks}
    expected = sum(0.5 * drain[str(k)] + (startup if k > 1 else 0.0) for k in ks)
    pops = pops or []
    # a population's last walk-forward runs to its end after the window (at worst P trials' time)
    expected += sum(0.5 * trial * p for p in pops)
    seconds = args.seconds or max(10.0 if args.quick else 20.0, (budget - expected) / max(1, len(ks) + len(pops)))
    return seconds, {"budget_s": budget, "trial_estimate_s": trial, "startup_s": startup, "drain_s": drain}


def _trials_run(p: dict[str, Any]) -> int:
    return int(p["median"]["complete"] + p["median"]["pruned"])


def _f(v: Any, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def table(result: dict[str, Any]) -> str:
    """The short summary printed last."""
    lines = []
    e = result.get("evaluation")
    if e:
        lines.append(f"(b) {e['n_folds']} folds x {e['val_bars_per_fold'][0]:,} validation bars, {e['epochs']} epochs a fold: "
                     f"validation backtests {_f(e['eval_all_folds_s'])} s a trial; warm trial {_f(e['trial_s'])} s "
                     f"(training {_f(e['trial_train_s'])}, backtests {_f(e['trial_eval_s'])}); new trainer "
                     f"{_f(e['new_trainer_build_s'])} s + first epoch {_f(e['new_trainer_first_epoch_s'])} s "
                     f"(steady epoch {_f(e['steady_epoch_s'], '{:.3f}')} s; warm-up epoch {_f(e['warmup_epoch_s'])} s)")
    rows = result.get("throughput", [])
    if rows:
        lines.append("(a)  K | trials | trials/h steady | incl. start-up | trials/h from durations | trial-folds/h | trial s | "
                     "train s | backtests s | outside folds s | gap s")
        for r in rows:
            lines.append(f"     {r['workers']}{' pop ' + str(r['population']) if r.get('population', 1) > 1 else ''} | {r['trials']:6d} | {_f(r.get('trials_per_hour_window'), '{:15.0f}')} | "
                         f"{_f(r.get('trials_per_hour_incl_startup'), '{:14.0f}')} | "
                         f"{_f(r.get('trials_per_hour_from_durations'), '{:23.0f}')} | {_f(r.get('trial_folds_per_hour'), '{:13.0f}')} | "
                         f"{_f(r.get('trial_s_mean'), '{:7.1f}')} | {_f(r.get('train_s_mean'), '{:7.1f}')} | "
                         f"{_f(r.get('eval_s_mean'), '{:11.2f}')} | {_f(r.get('outside_folds_s_mean'), '{:15.2f}')} | "
                         f"{_f(r.get('gap_between_trials_s_mean'), '{:5.2f}')}")
        lines.append(f"     (K=1: {rows[0]['mode']}; K>1: worker processes, first trials {[round(x) for r in rows[1:] if r.get('population', 1) == 1 for x in r.get('first_trial_s', [])]} s "
                     f"excluded from 'steady'; window {result.get('seconds_per_k', 0):.0f} s of asking per K)")
    c = result.get("scorecard")
    if c and "best" in c:
        hm = c.get("holdout_mean", {})
        u, b = hm.get("untuned", {}), hm.get("best", {})
        lines.append(f"(c) SHORTENED ({c['shortened']}): {c['scenario']}, {c['counts']['COMPLETE']} trials; search folds "
                     f"untuned {_f(c['untuned']['search_score'], '{:+.2f}')} vs best (trial {c['best']['number']}) "
                     f"{_f(c['best']['search_score'], '{:+.2f}')} (in-sample); hold-out ({c['holdout_runs']['untuned'][0]['holdout_bars']:,} bars, "
                     f"{u.get('seeds', 0)} seed(s)): Sharpe untuned {_f(u.get('sharpe'), '{:+.2f}')} vs best {_f(b.get('sharpe'), '{:+.2f}')}, "
                     f"capture {_f(u.get('capture'), '{:.0%}')} vs {_f(b.get('capture'), '{:.0%}')}"
                     + (" (best = untuned)" if c.get("best_is_untuned") else ""))
    elif c:
        lines.append(f"(c) {c.get('error') or c.get('skipped')}")
    p = result.get("pruning")
    if p:
        lines.append(f"pruning: the median pruner saved {p['time_saved_fraction']:.0%} of the unpruned study's wall time "
                     f"({p['folds_saved_fraction']:.0%} of its folds; {p['median']['pruned']} of {_trials_run(p)} trials pruned; "
                     f"best {_f(p['none']['best_value'], '{:+.3f}')} unpruned, {_f(p['median']['best_value'], '{:+.3f}')} pruned)")
    return "\n".join(lines)


def main() -> None:
    p = common.arguments(__doc__, quick="small CPU run (a smoke test of the harness)",
                         config=str(ROOT / "configs" / "h200-fast.toml"))
    p.add_argument("--workers", type=int, nargs="*", default=None, help="worker counts (default: 1 2 4; quick: 1 2)")
    p.add_argument("--seconds", type=float, default=None, help="each K's workers ask trials this long (default: fitted to --deadline)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per fold in (a)/(b) (default 2; quick 1)")
    p.add_argument("--bars", type=int, default=None, help="data.bars override")
    p.add_argument("--holdout", type=float, default=0.05, help="tune.holdout of (a)/(b) (0.05: 5 folds of h200-fast's 1 M bars)")
    p.add_argument("--deadline", type=float, default=None, help="wall-time budget of the whole run, s (default 480; quick 200)")
    p.add_argument("--population", type=int, nargs="*", default=[], help="also one in-process worker with tune.population = P, per P")
    p.add_argument("--prune-trials", type=int, default=0, help="also compare median pruning with none over N trials")
    p.add_argument("--no-eval", action="store_true", help="skip part (b)")
    p.add_argument("--no-scorecard", action="store_true", help="skip part (c)")
    p.add_argument("--scenario", default="edge_daily", help="part (c)'s scorecard scenario")
    p.add_argument("--sc-epochs", type=int, default=None, help="part (c): train.epochs on both sides (default 3; quick 1)")
    p.add_argument("--sc-seconds", type=float, default=None, help="part (c): longest study, s (default: what the deadline leaves)")
    p.add_argument("--sc-set", action="append", default=None,
                   help="part (c) overrides on both sides (default on CUDA: accel.train_step=torch, see bench/tune_scorecard.py)")
    args = common.parse(p)  # --device auto: CUDA when present and not --quick
    t_start = time.monotonic()
    quiet_optuna()
    ks = args.workers if args.workers is not None else ([1, 2] if args.quick else [1, 2, 4])
    args.epochs = args.epochs or (1 if args.quick else 2)
    deadline = args.deadline or (200.0 if args.quick else 480.0)
    device = args.dev
    stem = f"tune_{device.type}{'_quick' if args.quick else ''}"
    result: dict[str, Any] = {"machine": common.machine(device), "config": Path(args.config).name, "quick": args.quick,
                              "epochs": args.epochs, "holdout": args.holdout, "space": SPACE, "deadline_s": deadline,
                              "overrides": args.overrides}

    def left() -> float:
        return deadline - (time.monotonic() - t_start)

    def save() -> None:
        result["wall_s"] = time.monotonic() - t_start
        common.save(args, stem, result)

    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        ev = TrialEvaluator(base_config(args, Path(tmp) / "eval", "eval"))
        if not args.no_eval:
            result["evaluation"] = evaluation_times(ev, device)
            print(table({"evaluation": result["evaluation"]}), flush=True)
            save()
        # (c) gets 40 % of what is left, at most 140 s (70 s quick): a study of ~85 s and the hold-out runs
        sc = 0.0 if args.no_scorecard else min(70.0 if args.quick else 140.0, 0.4 * left())
        pops = [q for q in args.population if q > 1]
        seconds, plan = _plan(args, ks, result.get("evaluation"), left() - sc, pops)
        result["seconds_per_k"], result["plan"] = seconds, plan
        result["throughput"] = []
        warm = not args.no_eval
        for k in ks:
            if k == 1:
                result["throughput"].append(in_process(args, ev, Path(tmp), seconds, warm=warm))
                warm = True
            else:
                ev.release()  # the workers load their own market: free this process's device copy
                timeout = plan["startup_s"] + seconds
                cap = min(timeout + plan["drain_s"][str(k)], max(timeout, left() - 5.0))
                result["throughput"].append(throughput(args, k, Path(tmp), seconds, timeout, cap))
            save()
        for q in pops:  # on the warm evaluator, as K = 1 (the K > 1 rows above released its market: reloaded once)
            result["throughput"].append(in_process(args, ev, Path(tmp), seconds, population=q, warm=warm))
            warm = True
            save()
        ev.release()
        if args.prune_trials:
            result["pruning"] = prune_compare(args, Path(tmp))
            save()
        if not args.no_scorecard:
            from bench.tune_scorecard import compare

            budget = left() - 5.0
            if budget < (40.0 if args.quick else 60.0):
                result["scorecard"] = {"skipped": f"only {budget:.0f} s left of the deadline"}
            else:
                sc_epochs = args.sc_epochs or (1 if args.quick else 3)
                sc_set = args.sc_set if args.sc_set is not None else ([] if device.type == "cpu" else ["accel.train_step=torch"])
                result["scorecard"] = compare(base_dict(args), args.scenario, args.quick, sc_epochs, args.sc_seconds or 1e9,
                                              budget, Path(tmp), CACHE, overrides=sc_set)
            save()
    print(f"wrote {common.save(args, stem, {**result, 'wall_s': time.monotonic() - t_start})}")
    print(table(result))


if __name__ == "__main__":
    main()
