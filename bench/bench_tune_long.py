"""Issue 16's "30-minute study's best trial against the untuned configuration on the scorecard",
in chunks that fit the device tool (10 minutes a call): bench_tune's part (c) study, made long and
resumable. The study lives in one directory (``--storage``, default ``.tune_long/``: Optuna's
journal file storage, text, carried into each call and returned from it); bench/tune_long.sh is
the device recipe.

``study``: resume the study in --storage (create it on the first call: the untuned configuration is
    trial 0) and run one chunk with --workers worker processes (``foxhunt tune``'s worker loop,
    ``run_worker``, on the scenario's market) until the chunk's length, min(--chunk-s, --total-s −
    the study's accumulated seconds), is used; the accumulated seconds are the sum of the chunks'
    wall times, kept in the study (bench/tune_long_study.py: the accounting, the graceful stop and
    the stale-trial handling). Nothing runs when less than --min-chunk-s remains.
``compare``: the untuned configuration and the best trial's, both at the study's train.epochs:
    (1) retrained before the scenario's hold-out and evaluated once on it (seeds 0, 1, … while
    --deadline allows; capture against the scenario's references, as bench/tune_scorecard.py);
    (2) the scorecard's walk-forward on --scenarios (on the searched scenario some validation
    windows are the search's, in-sample for the best config: the JSON counts them; the other
    scenarios are markets the search never saw).
    Writes trials.csv and best.toml into --storage, and bench/results/tune_long_<device>[_quick].json
    (after each part), then prints a short table.
``status``: one line for the device script: remaining_s, accumulated_s, chunks, trials, done.

    PYTHONPATH=src:. python -m bench.bench_tune_long study --chunk-s 500 --total-s 1800    # one chunk (CUDA)
    PYTHONPATH=src:. python -m bench.bench_tune_long compare
    PYTHONPATH=src:. python -m bench.bench_tune_long study --quick --total-s 40 --chunk-s 15 --storage /tmp/tl   # CPU check

The shared flags of bench/common.py apply (--quick, --device, --out, --name, --git-revision;
--config / --set define the study's base configuration, default configs/h200-fast.toml).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.tune_long_study import (ROOT, Settings, accumulated_s, chunk_lock, chunks, fail_stale, journal_storage, open_dir,
                                   run_chunk, size_of, study_config)
from foxhunt.errors import ConfigError, FoxhuntError

SCENARIOS = "edge_daily,regime,leak"


def settings(args: Any) -> Settings:
    """The study's defining settings from the command line (ConfigError on a bad one)."""
    from foxhunt.scorecard.markets import SCENARIOS as KNOWN

    if args.scenario not in KNOWN:
        raise ConfigError(f"--scenario {args.scenario!r}: unknown (known: {', '.join(KNOWN)})")
    if args.epochs is not None and args.epochs < 1 or not 0.0 < args.holdout < 1.0:
        raise ConfigError(f"--epochs {args.epochs} / --holdout {args.holdout}: need epochs >= 1 and 0 < holdout < 1")
    cfg = Path(args.config).resolve()
    if not cfg.is_file():
        raise ConfigError(f"--config {args.config}: no such file")
    rel = str(cfg.relative_to(ROOT)) if cfg.is_relative_to(ROOT) else str(cfg)
    sc_set = args.sc_set if args.sc_set is not None else ([] if args.dev.type == "cpu" else ["accel.train_step=torch"])
    return Settings(scenario=args.scenario, quick=args.quick, device=args.dev.type, config=rel,
                    epochs=args.epochs or (1 if args.quick else 3), sets=tuple(args.overrides), sc_set=tuple(sc_set),
                    pruner=args.pruner, holdout=args.holdout)


def status(d: Path, total_s: float, min_chunk_s: float) -> str:
    """``key=value`` pairs of the study in ``d`` (read only)."""
    import optuna

    from bench.tune_long_study import STUDY
    from foxhunt.tune.study import counts, quiet_optuna

    quiet_optuna()
    if not (d / "journal.log").is_file():
        return f"exists=0 remaining_s={total_s:.1f} accumulated_s=0.0 chunks=0 complete=0 done=0"
    study = optuna.load_study(study_name=STUDY, storage=journal_storage(d))
    acc, c = accumulated_s(study), counts(study)
    rem = max(0.0, total_s - acc)
    return (f"exists=1 remaining_s={rem:.1f} accumulated_s={acc:.1f} chunks={len(chunks(study))} complete={c['COMPLETE']} "
            f"pruned={c['PRUNED']} failed={c['FAIL']} running={c['RUNNING']} done={int(total_s - acc < min_chunk_s)}")


def _side(t: Any) -> dict[str, Any]:
    from foxhunt.tune.worker import result_attrs

    r = result_attrs(t)
    return {"number": t.number, "params": t.params, "search_score": t.value, "fold_sharpe": r.get("fold_sharpe"),
            "fold_trades": r.get("fold_trades"), "duration_s": r.get("duration_s")}


def overlap(search: list[Any], card: list[Any], cut: int) -> dict[str, int]:
    """How the scorecard's validation windows on the searched scenario lie: equal to or overlapping
    a search fold's validation window (in-sample for the best config), wholly in the hold-out, or
    neither."""
    inside = sum(1 for f in card if any(f.val_start < g.val_end and g.val_start < f.val_end for g in search))
    held = sum(1 for f in card if f.val_start >= cut)
    return {"folds": len(card), "overlap_search_validation": inside, "in_holdout": held}


def _row(r: Any, in_sample: Any) -> dict[str, Any]:
    d = r.to_dict()
    a = d["agent"]
    return {"sharpe": a.get("sharpe"), "capture": a.get("capture"), "turnover": a.get("turnover"),
            "fold_sharpe": a.get("fold_sharpes"), "trades_per_1000": a.get("trades_per_1000"),
            "best_reference": d["best_reference"], "best_reference_sharpe": d["best_reference_sharpe"],
            "gate": d["gate"], "wall_s": d["wall_s"], "train_s": d["train_s"], "folds": d["folds"],
            "val_bars_per_fold": d["val_bars_per_fold"], "overlaps_search": in_sample}


def compare(args: Any, d: Path) -> dict[str, Any]:
    """The ``compare`` command (module docstring); returns the result (also saved)."""
    import optuna

    from bench.tune_scorecard import ScenarioEvaluator, holdout_score
    from foxhunt.scorecard.build import prepare_scenario
    from foxhunt.scorecard.markets import SCENARIOS as KNOWN, SPACING, make_scenario
    from foxhunt.scorecard.run import run_scenario
    from foxhunt.tune.outputs import _atomic, best_toml, best_trial, overfitting_stats, write_trials_csv
    from foxhunt.tune.space import decode
    from foxhunt.tune.study import counts, quiet_optuna
    from foxhunt.tune.worker import result_attrs

    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in names if s not in KNOWN]
    if bad:
        raise ConfigError(f"--scenarios: unknown scenario {bad[0]!r} (known: {', '.join(KNOWN)})")
    quiet_optuna()
    t_begin = time.monotonic()
    lock = chunk_lock(d) if d.is_dir() else None
    if lock is None:
        raise ConfigError(f"{d}: no study there")
    try:
        cfg, study, st = open_dir(d, None)
        stale = fail_stale(study, journal_storage(d), cfg.tune.max_retry)
        import torch

        device = torch.device(st.device)
        stem = f"tune_long_{st.device}{'_quick' if st.quick else ''}"
        res: dict[str, Any] = {"machine": common.machine(device), "settings": st.to_attr(), "space": cfg.to_dict()["tune"].get("space"),
                               "storage": d.name}

        def save() -> Path:
            res["compare_wall_s"] = time.monotonic() - t_begin
            return common.save(args, stem, res)

        def left() -> float:
            return args.deadline - (time.monotonic() - t_begin)

        _, scenario = study_config(st, d)
        ev = ScenarioEvaluator(cfg, prepare_scenario(cfg, scenario))
        folds = ev.prepared_for(ev.trial_config({})).folds
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        durations = [result_attrs(t).get("duration_s") for t in done if result_attrs(t).get("duration_s")]
        acc, cs = accumulated_s(study), chunks(study)
        c = counts(study)
        retried = sum(1 for t in study.trials if "failed_trial" in t.system_attrs)
        res["study"] = {"trials": len(study.trials), "counts": c, "complete": c["COMPLETE"], "pruned": c["PRUNED"],
                        "failed": c["FAIL"], "retries_queued": retried, "stale_failed_by_compare": stale,
                        "accumulated_s": acc, "chunks": len(cs), "chunk_wall_s": [ch["wall_s"] for ch in cs],
                        "chunk_log": cs, "trials_per_hour": 3600 * (c["COMPLETE"] + c["PRUNED"]) / acc if acc > 0 else None,
                        "trial_s_mean": float(np.mean(durations)) if durations else None,
                        "worker_busy_fraction": _busy(cs), "search_folds": len(folds),
                        "val_bars_per_fold": [f.val_len for f in folds], "hold_out_from_bar": ev.cut,
                        "created": study.user_attrs.get("created")}
        untuned = study.user_attrs["untuned"]
        first = next((t for t in done if t.params == untuned), None)
        best = best_trial(study)
        write_trials_csv(d / "trials.csv", study, list(cfg.tune.entries()), len(folds))
        if best is None or first is None:
            res["error"] = "no complete trial" if best is None else "the untuned trial did not complete"
            save()
            return res
        _atomic(d / "best.toml", best_toml(cfg, best))
        same = best.number == first.number
        res.update(untuned=_side(first), best=_side(best), best_is_untuned=same)
        if len(done) >= 2:
            res["overfitting"] = overfitting_stats(study, best)
        best_values = decode(ev.entries, best.params)
        save()
        # (1) hold-out: seeds while the time allows (at least one pair)
        rows: dict[str, list[dict[str, Any]]] = {"untuned": [], "best": []}
        pair_s = 0.0
        for seed in range(args.seeds):
            if seed > 0 and left() < 1.3 * pair_s + args.reserve_s:
                break
            t1 = time.monotonic()
            rows["untuned"].append(holdout_score(ev, dict(untuned), seed, scenario))
            if not same:
                rows["best"].append(holdout_score(ev, best_values, seed, scenario))
            pair_s = time.monotonic() - t1
        if same:
            rows["best"] = rows["untuned"]
        ev.release()
        res["holdout_runs"] = rows
        res["holdout_mean"] = {k: {"sharpe": float(np.mean([r["sharpe"] for r in v])), "capture": _mean([r["capture"] for r in v]),
                                   "seeds": len(v)} for k, v in rows.items()}
        save()
        # (2) the scorecard's walk-forward on each scenario, both sides
        from bench.bench_tune import CACHE

        size = size_of(st)
        base = study_base(st)
        common_over = [f"features.cache_dir={_q(str(CACHE))}", f"train.epochs={st.epochs}", *st.sc_set]
        sides = {"untuned": [], "best": [f"{k}={_toml(v)}" for k, v in best_values.items()]}
        res["scorecard"] = {}
        res["scorecard_skipped"] = []
        pair_s = 0.0
        with tempfile.TemporaryDirectory(prefix="tune-long-sc-") as tmp:
            for name in names:
                if left() < max(1.3 * pair_s, args.reserve_s):
                    res["scorecard_skipped"].append(name)
                    continue
                t1 = time.monotonic()
                sc = make_scenario(name, size.n_bars(SPACING[name]))
                out: dict[str, Any] = {}
                for side, over in sides.items():
                    if side == "best" and same:
                        out[side] = out["untuned"]
                        continue
                    r = run_scenario(sc, base, size, [*common_over, *over], Path(tmp) / side, st.config, baselines=())
                    out[side] = _row(r, overlap(folds, ev.full.folds, ev.cut) if name == st.scenario else None)
                res["scorecard"][name] = out
                pair_s = time.monotonic() - t1
                save()
        path = save()
        print(f"wrote {path}")
        return res
    finally:
        lock.release()


def _busy(cs: list[dict[str, Any]]) -> float | None:
    """Seconds the workers spent in trials / (chunk wall seconds × workers): what start-up, the
    drain at a chunk's end and the asks left of the chunks' time."""
    busy = sum(r.get("trial_s_sum") or 0.0 for c in cs for r in c.get("reports") or [])
    span = sum(c["wall_s"] * c["workers"] for c in cs)
    return busy / span if span > 0 else None


def study_base(st: Settings) -> dict[str, Any]:
    from bench.tune_long_study import base_dict

    return base_dict(st)


def _q(s: str) -> str:
    import json

    return json.dumps(s)


def _toml(v: Any) -> str:
    import json

    return json.dumps(v)  # numbers, strings and lists of them are the same in JSON and TOML


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def _f(v: Any, fmt: str = "{:+.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def table(res: dict[str, Any]) -> str:
    """The short summary ``compare`` prints."""
    st, s = res["settings"], res["study"]
    lines = [f"tune_long: {st['scenario']} ({'quick' if st['quick'] else 'gpu'} size), train.epochs={st['epochs']}, "
             f"{s['search_folds']} search folds; study {s['accumulated_s']:.0f} s over {s['chunks']} chunk(s) "
             f"({', '.join(f'{w:.0f}' for w in s['chunk_wall_s'])} s): {s['complete']} complete, {s['pruned']} pruned, "
             f"{s['failed']} failed ({s['retries_queued']} re-queued); {_f(s['trials_per_hour'], '{:.0f}')} trials/h; "
             f"mean trial {_f(s['trial_s_mean'], '{:.1f}')} s; workers in trials {_f(s['worker_busy_fraction'], '{:.0%}')} of the time"]
    if "best" not in res:
        return "\n".join(lines + [res.get("error", "")])
    u, b = res["untuned"], res["best"]
    lines.append(f"search folds (in-sample): untuned (trial {u['number']}) {_f(u['search_score'])} vs best (trial {b['number']}) "
                 f"{_f(b['search_score'])}; best params {b['params']}" + (" (best = untuned)" if res["best_is_untuned"] else ""))
    ov = res.get("overfitting", {})
    if ov:
        lines.append(f"deflated Sharpe ratio {_f(ov.get('deflated_sharpe', {}).get('dsr'), '{:.3f}')}; "
                     f"PBO {_f(ov.get('pbo', {}).get('pbo'), '{:.2f}')} over {ov.get('n_trials')} trials")
    hm = res.get("holdout_mean")
    if hm:
        hu, hb = hm["untuned"], hm["best"]
        bars = res["holdout_runs"]["untuned"][0]["holdout_bars"]
        lines.append(f"hold-out ({bars:,} bars, {hu['seeds']} seed(s)): Sharpe untuned {_f(hu['sharpe'])} vs best {_f(hb['sharpe'])}; "
                     f"capture {_f(hu['capture'], '{:.0%}')} vs {_f(hb['capture'], '{:.0%}')}")
    for name, row in res.get("scorecard", {}).items():
        u, b = row["untuned"], row["best"]
        o = u["overlaps_search"]
        note = (f" ({o['overlap_search_validation']} of {o['folds']} validation windows are the search's, "
                f"{o['in_holdout']} in the hold-out)") if o else ""
        lines.append(f"scorecard {name}{note}: untuned Sharpe {_f(u['sharpe'])}, capture {_f(u['capture'], '{:.1%}')}, "
                     f"{_gate(u)} | best {_f(b['sharpe'])}, {_f(b['capture'], '{:.1%}')}, {_gate(b)}")
    if res.get("scorecard_skipped"):
        lines.append(f"scorecard skipped (deadline): {', '.join(res['scorecard_skipped'])}")
    return "\n".join(lines)


def _gate(r: dict[str, Any]) -> str:
    p = r["gate"].get("passed")
    return {True: "PASS", False: "FAIL", None: "not gated"}[p]


def parser() -> Any:
    p = common.arguments(__doc__, quick="tiny CPU sizes (a check of the harness)", config=str(ROOT / "configs" / "h200-fast.toml"))
    p.add_argument("command", choices=["study", "compare", "status"])
    p.add_argument("--storage", type=Path, default=ROOT / ".tune_long", help="the study directory (default .tune_long/)")
    p.add_argument("--total-s", type=float, default=1800.0, help="the study's length: accumulated chunk seconds (default 1800)")
    p.add_argument("--chunk-s", type=float, default=500.0, help="study: this chunk's longest wall time, s (default 500)")
    p.add_argument("--min-chunk-s", type=float, default=None, help="no chunk when less than this remains (default 30; quick 2)")
    p.add_argument("--workers", type=int, default=None, help="study: worker processes on the device (default 4; quick 1)")
    p.add_argument("--scenario", default="edge_daily", help="the scorecard scenario searched (created studies only)")
    p.add_argument("--epochs", type=int, default=None, help="train.epochs of every trial and of compare (default 3; quick 1)")
    p.add_argument("--sc-set", action="append", default=None, help="scenario overrides (default on CUDA: accel.train_step=torch)")
    p.add_argument("--pruner", default="none", choices=["none", "median", "wilcoxon"], help="tune.pruner (default none)")
    p.add_argument("--holdout", type=float, default=0.2, help="tune.holdout: the scenario's last fraction (default 0.2)")
    p.add_argument("--scenarios", default=SCENARIOS, help=f"compare: scorecard scenarios (default {SCENARIOS})")
    p.add_argument("--seeds", type=int, default=3, help="compare: hold-out seeds at most (default 3)")
    p.add_argument("--deadline", type=float, default=None, help="compare: wall-time budget, s (default 420; quick 300)")
    p.add_argument("--reserve-s", type=float, default=None, help="compare: start a part only with this much left (default 40; quick 5)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = common.parse(parser(), argv)
    d = args.storage.resolve()
    min_chunk = args.min_chunk_s if args.min_chunk_s is not None else (2.0 if args.quick else 30.0)
    try:
        if args.command == "status":
            print(status(d, args.total_s, min_chunk))
        elif args.command == "study":
            workers = args.workers or (1 if args.quick else 4)
            if args.chunk_s <= 0 or args.total_s <= 0 or workers < 1:
                raise ConfigError(f"--chunk-s {args.chunk_s}, --total-s {args.total_s}, --workers {workers}: must be > 0")
            entry = run_chunk(d, settings(args), args.chunk_s, args.total_s, workers, min_chunk)
            if entry.get("done") and "index" not in entry:
                print(f"study done: {entry['accumulated_s']:.0f} of {args.total_s:.0f} s accumulated (run compare)")
            elif entry.get("state") != "done":
                return 1  # a worker failed or was stopped (the chunk's log lines and logs/ say which)
        else:
            args.deadline = args.deadline or (300.0 if args.quick else 420.0)
            args.reserve_s = args.reserve_s if args.reserve_s is not None else (5.0 if args.quick else 40.0)
            print(table(compare(args, d)))
    except FoxhuntError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
