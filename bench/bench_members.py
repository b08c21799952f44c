"""A fold's members in lockstep against one after another: walk-forward seconds and GPU utilisation with M members.

For each M of ``--members`` and each mode of ``--modes`` (``lockstep``: ``train.lockstep = true``, every
member's rounds on its own CUDA stream; ``sequential``: one member's epoch after another's), one walk-forward
of the configuration (``WalkForwardRunner.score_folds``: training, held-back selection and the validation
backtests, no files) with ``train.ensemble = M``, on one prepared market (data, features and upload are
done once and not timed). Per run: the walk-forward seconds; its training and evaluation parts; the
steady epoch seconds (the median wall time of an epoch of every member after the fold's first epoch,
which captures the graphs); GPU utilisation (``nvidia-smi`` sampled every 100 ms over the run: mean and
median of the percent of time in which any kernel ran, which small kernels keep high while most SMs idle: a
coarse figure beside the seconds); peak device memory; and every fold's validation Sharpe.

M = 1 trains the configuration's first grid point alone (``train.gamma_grid`` / ``train.decision_grid``
need at least one member per group, so they are cleared); M > 1 keeps the grids (M a multiple of the
groups gives each the same number of members).

    PYTHONPATH=src:. python -m bench.bench_members --config configs/h200-fast.toml --members 1,3,9,27 \\
        --modes lockstep,sequential --folds 1 --epochs 4 --tag dqn
    PYTHONPATH=src:. python -m bench.bench_members --quick      # tiny CPU run: checks the harness

Writes bench/results/members_<device>_<tag>.json (device name, versions, git revision); partial results
are written after every run, so a timeout keeps the runs that finished. ``--max-sequential M`` skips the
sequential runs above M members (their time is M times one member's: measured up to there).
"""

from __future__ import annotations

import gc
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any

import torch

from bench import common
from foxhunt.config import Config, load_config
from foxhunt.pipeline import prepare_market
from foxhunt.train.runner import WalkForwardRunner

ROOT = common.ROOT
QUICK = ['run.device="cpu"', "data.bars=4000", "folds.train=1500", "folds.val=500", "folds.max_folds=1",
         "dqn.n_envs=32", "dqn.batch_size=64", "dqn.buffer_capacity=8192", "dqn.warmup_transitions=128",
         "dqn.hidden=[32]", "dqn.head_hidden=16", "dqn.rounds_per_epoch=4", "env.episode_length=128",
         "train.select=\"inner\"", "train.epochs=2"]
"""--quick's overrides of configs/train-default.toml (the CPU configuration; --config is ignored with --quick)."""


class GpuSampler:
    """``nvidia-smi``'s utilisation.gpu (percent of the sample period a kernel ran), every 100 ms, on a thread."""

    def __init__(self, device: torch.device) -> None:
        self.samples: list[float] = []
        self.proc: subprocess.Popen[str] | None = None
        self.thread: threading.Thread | None = None
        if device.type != "cuda":
            return
        index = device.index if device.index is not None else torch.cuda.current_device()
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "-i", str(index), "--query-gpu=utilization.gpu",
                                          "--format=csv,noheader,nounits", "-lms", "100"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def stop(self) -> dict[str, float] | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait(timeout=5)
        if self.thread is not None:
            self.thread.join(timeout=5)
        s = self.samples
        return {"mean_pct": statistics.fmean(s), "median_pct": statistics.median(s), "samples": len(s)} if s else None


def member_config(cfg: Config, members: int, lockstep: bool) -> Config:
    """``cfg`` with ``train.ensemble = members`` and ``train.lockstep``; one member clears the grids."""
    train: dict[str, Any] = {"ensemble": members, "lockstep": lockstep}
    if members == 1:
        train.update(gamma_grid=[], decision_grid=[])
    return cfg.replace(train=train)


def top_ops(prof: Any, n: int = 25) -> list[dict[str, Any]]:
    """The ``n`` operators / kernels of a torch.profiler run with the most device time (CPU time without a GPU)."""
    rows = []
    for ev in prof.key_averages():
        dev_us = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows.append({"name": ev.key[:120], "calls": ev.count, "device_ms": dev_us / 1e3,
                     "cpu_self_ms": ev.self_cpu_time_total / 1e3})
    rows.sort(key=lambda r: (r["device_ms"], r["cpu_self_ms"]), reverse=True)
    return rows[:n]


def phased_epoch(runner: WalkForwardRunner, phases: list[dict[str, float]], kernels: list[dict[str, Any]]) -> Any:
    """``runner._train_epoch`` with a synchronisation between its phases, each phase's seconds appended to
    ``phases``: ``enqueue`` (the host's time to enqueue every member's rounds), ``drain`` (the device's
    time left after that), ``finish`` (the members' summary readbacks) and ``select`` (the held-back
    scoring of every member). The synchronisations cost a little overlap: a profile, not a timing."""
    dev = runner.market.device

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def epoch(e: int) -> Any:
        runner._epoch_costs(e)
        sync()
        prof = None
        if e == 2 and not kernels:  # one steady epoch under torch.profiler: where its device time goes
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        t = [time.perf_counter()]
        runner.lockstep.run_epoch()
        t.append(time.perf_counter())
        sync()
        t.append(time.perf_counter())
        summaries = runner.lockstep.finish()
        t.append(time.perf_counter())
        inner = runner._observe(e)
        sync()
        t.append(time.perf_counter())
        if prof is not None:
            prof.__exit__(None, None, None)
            kernels.extend(top_ops(prof))
        elif e > 0:
            phases.append({k: t[i + 1] - t[i] for i, k in enumerate(("enqueue", "drain", "finish", "select"))})
        return summaries[0], summaries[1:], inner

    return epoch


def run_one(prepared: Any, cfg: Config, profile: bool = False) -> dict[str, Any]:
    """One walk-forward of ``cfg`` on the prepared market: seconds, steady epoch seconds, GPU use, memory;
    ``profile``: each steady epoch's phases (``phased_epoch``) instead of its plain wall time."""
    dev = prepared.market.device
    runner = WalkForwardRunner(replace(prepared, config=cfg))
    epoch_walls: list[float] = []
    every_epoch: list[float] = []  # every epoch's wall time, the folds' first epochs (captures, warm-up rounds) included
    phases: list[dict[str, float]] = []
    kernels: list[dict[str, Any]] = []
    train_epoch = phased_epoch(runner, phases, kernels) if profile else runner._train_epoch

    def timed_epoch(e: int) -> Any:  # the wall time of one epoch of every member (held-back scoring included)
        t0 = time.perf_counter()
        out = train_epoch(e)
        every_epoch.append(time.perf_counter() - t0)
        if e > 0:
            epoch_walls.append(every_epoch[-1])
        return out

    runner._train_epoch = timed_epoch  # type: ignore[method-assign]
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    sampler = GpuSampler(dev)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    agents = runner.score_folds(times=times)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - t0
    util = sampler.stop()
    row = {"walk_forward_s": wall, **times, "steady_epoch_s": statistics.median(epoch_walls) if epoch_walls else None,
           "epoch_walls_s": every_epoch,
           "gpu_util": util, "peak_memory_gb": torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None,
           "validation_sharpe": [a.metrics[0]["sharpe"] for a in agents],
           "selected_epochs": [s.best_epoch for s in runner.selectors], "accel": runner.plan.to_dict()}
    if profile:
        row["phases_s"] = {k: statistics.median(p[k] for p in phases) for k in phases[0]} if phases else None
        row["top_ops"] = kernels
    del runner, agents
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = common.arguments(__doc__, quick="tiny CPU run: checks the harness", config=str(ROOT / "configs" / "h200-fast.toml"))
    ap.add_argument("--members", default="1,3,9,27", help="comma-separated member counts M (train.ensemble)")
    ap.add_argument("--modes", default="lockstep,sequential", help="comma-separated: lockstep | sequential")
    ap.add_argument("--max-sequential", type=int, default=1_000, help="skip sequential runs above this many members")
    ap.add_argument("--folds", type=int, default=None, help="keep this many folds (folds.max_folds; default: the config's)")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per fold (default: the config's)")
    ap.add_argument("--warmup-each", action="store_true", help="an untimed walk-forward for every member count "
                    "(dqn.stack_members: its program's shapes carry the member count, so each count compiles once)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first walk-forward (1 epoch a fold, "
                    "the smallest M in lockstep) that pays the one-off Triton / torch.compile compilation")
    ap.add_argument("--profile", action="store_true", help="time each steady epoch's phases (enqueue, drain, "
                    "finish, select) with a synchronisation between them (phases_s in each row)")
    ap.add_argument("--tag", default="dqn", help="result file suffix (members_<device>_<tag>.json)")
    args = common.parse(ap)
    members = [int(m) for m in args.members.split(",") if m.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not members or any(m < 1 for m in members) or not modes or any(m not in ("lockstep", "sequential") for m in modes):
        raise SystemExit(f"error: --members {args.members!r} / --modes {args.modes!r}: positive counts; lockstep | sequential")
    if args.quick:
        args.config = str(ROOT / "configs" / "train-default.toml")
    ov = (QUICK if args.quick else []) + ["train.tensorboard=false", "train.report=false", "train.progress=false"]
    if args.folds:
        ov.append(f"folds.max_folds={args.folds}")
    if args.epochs:
        ov.append(f"train.epochs={args.epochs}")
    if args.device != "auto" or not args.quick:
        ov.append(f'run.device="{args.device if args.device != "auto" else args.dev.type}"')
    res: dict[str, Any] = {"bench": "members", "config": args.config, "overrides": ov + args.overrides, "runs": [], "errors": []}
    with tempfile.TemporaryDirectory(prefix="foxhunt-bench-") as tmp:
        base = load_config(args.config, ov + [f'run.out_dir="{tmp}"', f'features.cache_dir="{tmp}/cache"'] + args.overrides)
        prepared = prepare_market(base)
        dev = prepared.market.device
        res.update(machine=common.machine(dev), device=dev.type, folds=len(prepared.folds), epochs=base.train.epochs,
                   agent=base.train.agent, bars=prepared.market.n_bars)
        out = None
        stem = f"members_{dev.type}_{args.tag}{'_quick' if args.quick else ''}"
        if not args.no_warmup:  # compile once, so that no timed run pays it (the first of them would)
            # dqn.stack_members compiles one program per member count (its shapes carry M): warm each count up
            for m in (members if args.warmup_each else [min(members)]):
                print(f"M={m:>3} warm-up (1 epoch a fold, untimed)", flush=True)  # a run cut by a timeout shows where
                run_one(prepared, member_config(base.replace(train={"epochs": 1}), m, True))
        for m in members:
            for mode in modes:
                if mode == "sequential" and m > args.max_sequential:
                    continue
                print(f"M={m:>3} {mode:>10}: timing", flush=True)
                try:
                    row = run_one(prepared, member_config(base, m, mode == "lockstep"), profile=args.profile)
                except Exception as exc:  # a failed run is recorded, the others go on
                    res["errors"].append(f"M={m} {mode}: {type(exc).__name__}: {exc}")
                    print("ERROR", res["errors"][-1], flush=True)
                    continue
                res["runs"].append({"members": m, "mode": mode, **row})
                util = row["gpu_util"]["mean_pct"] if row["gpu_util"] else float("nan")
                print(f"M={m:>3} {mode:>10}: walk-forward {row['walk_forward_s']:8.2f} s, steady epoch "
                      f"{row['steady_epoch_s'] or float('nan'):.3f} s, GPU {util:5.1f} %"
                      + (f", phases {row['phases_s']}" if row.get("phases_s") else ""), flush=True)
                out = common.save(args, stem, res)  # partial results survive a timeout
    print_table(res)
    print(f"wrote {out}")


def print_table(res: dict[str, Any]) -> None:
    runs = res["runs"]
    print(f"\n{res['agent']} on {res['machine'].get('gpu') or res['device']}: {res['folds']} folds x {res['epochs']} epochs, "
          f"{res['bars']:,} bars")
    print(f"{'M':>4} {'mode':>10} {'walk-forward s':>15} {'epoch s':>8} {'GPU %':>6} {'peak GB':>8}")
    for r in runs:
        util = r["gpu_util"]["mean_pct"] if r["gpu_util"] else float("nan")
        print(f"{r['members']:>4} {r['mode']:>10} {r['walk_forward_s']:>15.2f} {r['steady_epoch_s'] or float('nan'):>8.3f} "
              f"{util:>6.1f} {r['peak_memory_gb'] or 0.0:>8.2f}")


if __name__ == "__main__":
    main()
