"""The full walk-forward of `foxhunt train`, timed by phase, with host synchronisations counted.

One run of the real runner (``WalkForwardRunner``: one trainer over every fold, checkpoints,
metrics.jsonl) into a temporary run directory, and a breakdown of its wall time:

    data load · feature build · upload · fold transition (per fold) · collection · training ·
    evaluation (greedy agent per fold; buy-and-hold once for all folds) · checkpoints

plus host synchronisations per epoch (explicit ``torch.cuda.synchronize`` / event / stream
synchronisations counted by wrapping them, and implicit ones counted as the warnings of
``torch.cuda.set_sync_debug_mode("warn")``; the first epoch, which captures the CUDA graphs, is
reported apart), the extra device memory a fold transition allocates, and the peak device memory.

    PYTHONPATH=src:. python -m bench.bench_train            # CUDA: configs/h200.toml (1 M bars, 5 folds, 10 epochs)
    PYTHONPATH=src:. python -m bench.bench_train --bars 200000 --folds 3 --epochs 4
    PYTHONPATH=src:. python -m bench.bench_train --quick    # small CPU run (a smoke test of the harness)
    PYTHONPATH=src:. python -m bench.bench_train --streams off,one,two   # dqn.overlap_collection, see below

Writes bench/results/train_<device>[_quick].json (device name, torch version, git revision).

``--streams MODES`` runs the walk-forward once per mode, in this process and in the order given (a
mode may repeat: the first run pays the one-off compilation, so ``two,off,one,two`` brackets it):
``off`` (``dqn.overlap_collection = false``: collection and updates take turns), ``one`` (the option on,
the lagged order on one stream), ``two`` (the option on, collection on a second CUDA stream; refused on
a CPU). Per mode: the walk-forward seconds, and env-steps/s and updates/s over every epoch but the
run's first (the graph capture), from the runner's epoch wall times (which hold what an epoch of
``foxhunt train`` holds, held-back selection included); every fold's validation Sharpe beside them.
Writes bench/results/train_streams_<device>[_quick].json.
"""

from __future__ import annotations

import contextlib
import json
import platform
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from bench import common
from foxhunt.config import load_config
from foxhunt.pipeline import prepare_market
from foxhunt.train import checkpoint as ckpt
from foxhunt.train.run_dir import create_run_dir
from foxhunt.train.runner import WalkForwardRunner

ROOT = common.ROOT

QUICK = [
    "run.device=\"cpu\"", "data.bars=6000", "dqn.n_envs=64", "dqn.batch_size=128", "dqn.buffer_capacity=16384",
    "dqn.warmup_transitions=512", "dqn.hidden=[64,64]", "dqn.head_hidden=32", "dqn.rounds_per_epoch=8",
    "env.episode_length=256", "env.reward_scale=100.0", "accel.eval=\"auto\"",  # h200.toml pins eval to fused (CUDA)
]


class SyncCounter:
    """Counts host synchronisations while ``active``: wrapped explicit calls + sync-debug warnings."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.active = False
        self.explicit = 0
        self._patched: list[tuple[Any, str, Any]] = []

    def _wrap(self, owner: Any, name: str) -> None:
        orig = getattr(owner, name)

        def counted(*a: Any, **k: Any) -> Any:
            if self.active:
                self.explicit += 1
            return orig(*a, **k)

        setattr(owner, name, counted)
        self._patched.append((owner, name, orig))

    def install(self) -> None:
        if self.cuda:
            self._wrap(torch.cuda, "synchronize")
            self._wrap(torch.cuda.Event, "synchronize")
            self._wrap(torch.cuda.Stream, "synchronize")

    def uninstall(self) -> None:
        for owner, name, orig in reversed(self._patched):
            setattr(owner, name, orig)

    @contextlib.contextmanager
    def counting(self) -> Iterator[dict[str, int]]:
        """Inside: count. Yields a dict filled with explicit / implicit counts on exit."""
        out: dict[str, int] = {}
        before = self.explicit
        self.active = True
        prev = torch.cuda.get_sync_debug_mode() if self.cuda else 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if self.cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                yield out
            finally:
                if self.cuda:
                    torch.cuda.set_sync_debug_mode(prev)
                self.active = False
        out["explicit"] = self.explicit - before
        out["implicit"] = sum("synchroniz" in str(w.message).lower() for w in caught)


def _wrap_method(obj: Any, name: str, around: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    setattr(obj, name, around(getattr(obj, name)))


def fold_spans(n_bars: int, folds: int, warmup: int = 303, purge: int = 60) -> tuple[int, int]:
    """(train, val) bar counts that give exactly ``folds`` expanding folds over ``n_bars``."""
    usable = n_bars - warmup - purge - 1
    val = usable // (folds + 4)
    return usable - folds * val, val


def main() -> None:
    ap = common.arguments(__doc__, quick="small CPU run: checks the harness",
                          config=str(ROOT / "configs" / "h200.toml"))
    ap.add_argument("--bars", type=int, default=None, help="synthetic bars (default: 1,000,000; --quick 6,000)")
    ap.add_argument("--folds", type=int, default=None, help="walk-forward folds (default 5; --quick 2)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per fold (default 10; --quick 2)")
    ap.add_argument("--streams", default="", help="comma-separated modes off | one | two: the walk-forward once "
                    "per mode (dqn.overlap_collection off; on with one stream; on with two CUDA streams)")
    args = common.parse(ap)  # --device: the run's (auto: the config's run.device with --quick)
    bars = args.bars or (6_000 if args.quick else 1_000_000)
    folds = args.folds or (2 if args.quick else 5)
    epochs = args.epochs or (2 if args.quick else 10)
    train, val = fold_spans(bars, folds)
    ov = (QUICK if args.quick else []) + [
        f"data.bars={bars}", f"folds.train={train}", f"folds.val={val}", f"folds.max_folds={folds}",
        f"train.epochs={epochs}", "train.tensorboard=false", "train.report=false", "train.progress=false",
        "train.ensemble=1",  # one trainer's walk-forward (the workload measured since stop 12; ensembles are K of it)
    ]
    if args.device != "auto" or not args.quick:
        ov.append(f'run.device="{args.device}"')
    if args.streams:
        compare_streams(args, ov, [m.strip() for m in args.streams.split(",") if m.strip()])
        return
    with tempfile.TemporaryDirectory(prefix="foxhunt-bench-") as tmp:
        ov += [f'run.out_dir="{tmp}"', f'features.cache_dir="{tmp}/cache"']
        result = run_bench(load_config(args.config, ov + args.overrides), args.quick)
    out = common.save(args, f"train_{result['device']}{'_quick' if args.quick else ''}", result)
    print_summary(result)
    print(f"wrote {out}")


STREAMS = {"off": (False, None), "one": (True, 1), "two": (True, 2)}
"""--streams mode -> (dqn.overlap_collection, streams of the lagged order)."""


def compare_streams(args: Any, ov: list[str], modes: list[str]) -> None:
    """The walk-forward once per ``--streams`` mode (module docstring); one JSON for all."""
    bad = [m for m in modes if m not in STREAMS]
    if bad or not modes:
        raise SystemExit(f"error: --streams {args.streams!r}: each mode is one of {', '.join(STREAMS)}")
    res: dict[str, Any] = {"bench": "train_streams", "modes": modes, "runs": [], "errors": []}
    name = None
    with tempfile.TemporaryDirectory(prefix="foxhunt-bench-") as tmp:
        for i, mode in enumerate(modes):
            on, streams = STREAMS[mode]
            cfg = load_config(args.config, ov + [f'run.out_dir="{tmp}/run{i}"', f'features.cache_dir="{tmp}/cache"']
                              + args.overrides + [f"dqn.overlap_collection={'true' if on else 'false'}"])
            try:
                r = run_bench(cfg, args.quick, streams=streams)
            except ValueError as exc:  # two streams on a CPU
                res["errors"].append(f"{mode}: {exc}")
                print("ERROR", res["errors"][-1], flush=True)
                continue
            res["machine"], res["git_revision"], res["device"] = r["machine"], r["git_revision"], r["device"]
            res["runs"].append({"mode": mode, "overlap_collection": on, "streams": streams or 1, **_rates(r),
                                "walk_forward_s": r["wall_s"]["run"], "wall_s": r["wall_s"],
                                "validation": r["validation"], "dqn": r["dqn"], "accel": r["accel"]})
            name = f"train_streams_{r['device']}{'_quick' if args.quick else ''}"
            out = common.save(args, name, res)  # partial results survive a timeout
            print(f"{mode:>4}: walk-forward {r['wall_s']['run']:.2f} s, {res['runs'][-1]['env_steps_per_s']:,.0f} env-steps/s, "
                  f"{res['runs'][-1]['updates_per_s']:,.0f} updates/s", flush=True)
    if name is None:
        raise SystemExit("error: --streams: no mode ran (" + "; ".join(res["errors"]) + ")")
    print(f"wrote {out}")


def _rates(r: dict[str, Any]) -> dict[str, Any]:
    """env-steps/s and updates/s over every epoch but the run's first (its graph capture)."""
    rows = r["epoch_rows"][1:] or r["epoch_rows"]
    secs = sum(x["epoch_s"] for x in rows)
    steps, updates = sum(x["transitions"] for x in rows), sum(x["updates"] for x in rows)
    return {"steady_epochs": len(rows), "steady_epoch_s": secs, "env_steps": steps, "updates": updates,
            "env_steps_per_s": steps / secs if secs else None, "updates_per_s": updates / secs if secs else None}


def run_bench(cfg: Any, quick: bool, streams: int | None = None) -> dict[str, Any]:
    """streams: with dqn.overlap_collection, the lagged order on 1 or 2 streams (None: the trainer's own)."""
    total = common.stopwatch().start()  # no device: this bench counts synchronisations
    prepared = prepare_market(cfg)
    device = prepared.market.device
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        data_bytes = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    with common.stopwatch() as build:
        runner = WalkForwardRunner(prepared)
        if cuda:
            torch.cuda.synchronize()
    build_s = build.s
    run_dir, resolved = create_run_dir(cfg, prepared, "bench")
    runner.use_config(resolved)
    trainer = runner.trainer
    if streams is not None:
        for t in runner.members:
            t.lag.set_streams(streams)  # ValueError: two streams on a CPU
    syncs = SyncCounter(cuda)
    syncs.install()
    epoch_syncs: list[dict[str, int]] = []
    transitions: list[dict[str, float]] = []
    evals: list[dict[str, Any]] = []
    saves: list[float] = []
    peak = [0]

    def counted_epoch(fn: Callable[[], Any]) -> Callable[[], Any]:
        def wrapped() -> Any:
            with syncs.counting() as c:
                s = fn()
            epoch_syncs.append(c)
            return s
        return wrapped

    def measured_reset(fn: Callable[..., float]) -> Callable[..., float]:
        def wrapped(fold: Any, warm_start: bool = False) -> float:
            if cuda:
                peak[0] = max(peak[0], torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
                m0 = torch.cuda.memory_allocated()
            with syncs.counting() as c:
                sec = fn(fold, warm_start)
            row = {"fold": fold.fold, "ms": sec * 1e3, "syncs": c["explicit"] + c["implicit"]}
            if cuda:
                row["extra_peak_bytes"] = torch.cuda.max_memory_allocated() - m0
                row["extra_kept_bytes"] = torch.cuda.memory_allocated() - m0
            transitions.append(row)
            return sec
        return wrapped

    def counted_eval(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(fold: Any) -> Any:
            with syncs.counting() as c:
                out = fn(fold)
            evals.append({"fold": fold.fold, "syncs": c["explicit"] + c["implicit"]})
            return out
        return wrapped

    real_save = ckpt.save

    def timed_save(*a: Any, **k: Any) -> Path:
        with common.stopwatch() as sw:
            p = real_save(*a, **k)
        saves.append(sw.s)
        return p

    def counted_drain(fn: Callable[[], Any]) -> Callable[[], Any]:
        def wrapped() -> Any:  # lagged readback's last summaries: their waits belong to the last epoch
            with syncs.counting() as c:
                out = fn()
            if epoch_syncs and (c["explicit"] or c["implicit"]):
                for k in ("explicit", "implicit"):
                    epoch_syncs[-1][k] += c[k]
            return out
        return wrapped

    _wrap_method(trainer, "train_epoch", counted_epoch)
    _wrap_method(trainer, "drain", counted_drain)
    _wrap_method(trainer, "reset_for_fold", measured_reset)
    _wrap_method(runner, "evaluate", counted_eval)
    ckpt.save = timed_save
    try:
        with common.stopwatch() as run:
            runner.run(run_dir)
        run_s = run.s
    finally:
        ckpt.save = real_save
        syncs.uninstall()
    if cuda:
        peak[0] = max(peak[0], torch.cuda.max_memory_allocated())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    fold_t = [json.loads(p.read_text()) for p in sorted((run_dir / "folds").glob("fold_*/timings.json"))]
    per_epoch = [c["explicit"] + c["implicit"] for c in epoch_syncs]
    steady = per_epoch[1:] or per_epoch
    p = prepared.timings
    return {
        "bench": "train",
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "git_revision": common.git_revision(),
        "accel": runner.plan.to_dict(),  # what ran, per component
        "machine": common.machine(device),
        "quick": quick,
        "cpu_threads": torch.get_num_threads(),
        "bars": prepared.market.n_bars,
        "features": prepared.market.n_features,
        "folds": len(prepared.folds),
        "epochs_per_fold": cfg.train.epochs,
        "dqn": {k: getattr(cfg.dqn, k) for k in ("n_envs", "rollout_len", "rounds_per_epoch", "train_steps_per_round", "batch_size", "buffer_capacity", "hidden")},
        "transitions_per_epoch": cfg.dqn.n_envs * cfg.dqn.rollout_len * cfg.dqn.rounds_per_epoch,
        "wall_s": {
            "total": total.stop(),
            "data_load": p["load_s"],
            "feature_build": p["features_s"],
            "upload": p["upload_s"],
            "trainer_build": build_s,
            "fold_transitions": sum(t["ms"] for t in transitions) / 1e3,
            "collection": sum(r.get("collect_s", 0.0) for r in rows),
            "training": sum(r.get("train_s", 0.0) for r in rows),
            "curiosity": sum(r.get("curiosity_s", 0.0) for r in rows),
            "epochs": sum(r.get("epoch_s", 0.0) or 0.0 for r in rows),
            "evaluation": sum(t["eval_s"] for t in fold_t),
            "buy_and_hold": runner.buy_and_hold_s,
            "checkpoints": sum(saves),
            "run": run_s,
        },
        "fold_transition": transitions,
        "epoch_s_first": rows[0].get("epoch_s") if rows else None,
        "epoch_s_steady_mean": (sum(r["epoch_s"] for r in rows[1:]) / max(1, len(rows) - 1)) if len(rows) > 1 else None,
        "host_syncs_per_epoch": {
            "first_epoch_graph_capture": per_epoch[0] if per_epoch else None,
            "steady_max": max(steady) if steady else None,
            "steady_mean": sum(steady) / len(steady) if steady else None,
            "counted_by": "wrapped torch.cuda/Event/Stream.synchronize + set_sync_debug_mode('warn') warnings" if cuda else "n/a on CPU (no device)",
            "per_epoch": epoch_syncs,
        },
        "evaluation_syncs": evals,
        "memory_bytes": {"after_upload": data_bytes, "peak_allocated": peak[0],
                         "replay": trainer.replay.storage.nbytes} if cuda else None,
        "epoch_rows": [{k: row.get(k) for k in ("fold", "epoch", "epoch_s", "transitions", "updates", "collect_s", "train_s")}
                       for row in rows],
        "validation": [{"fold": r["fold"]["fold"], "agent_sharpe": r["agent"]["sharpe"],
                        "buy_and_hold_sharpe": (r["buy_and_hold"] or {}).get("sharpe")} for r in _fold_results(run_dir)],
    }


def _fold_results(run_dir: Path) -> list[dict[str, Any]]:
    from foxhunt.train.report import load_fold_results

    return load_fold_results(run_dir)


def print_summary(r: dict[str, Any]) -> None:
    w = r["wall_s"]
    print(f"{r['device_name']} | torch {r['torch']} | {r['bars']} bars, {r['folds']} folds × {r['epochs_per_fold']} epochs")
    for k in ("data_load", "feature_build", "upload", "trainer_build", "fold_transitions", "collection", "training",
              "evaluation", "buy_and_hold", "checkpoints", "run", "total"):
        print(f"  {k:<17} {w[k]:9.3f} s")
    print("  fold transitions (ms): " + ", ".join(f"{t['ms']:.1f}" for t in r["fold_transition"]))
    s = r["host_syncs_per_epoch"]
    print(f"  host syncs per epoch: first {s['first_epoch_graph_capture']}, steady max {s['steady_max']} ({s['counted_by']})")
    if r["memory_bytes"]:
        m = r["memory_bytes"]
        print(f"  device memory: after upload {m['after_upload'] / 2**20:.1f} MiB, peak {m['peak_allocated'] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
