"""The walk-forward runner: one trainer (DQN or PPO: ``train.agent``) over every fold, evaluation,
checkpoints, logs (the trainer's interface: ``foxhunt.train.agent``).

Data is loaded, featurised and uploaded once (``prepare_market``); folds are index ranges into it;
the trainer (env, replay, networks, captured graphs) is built once. Per fold:

    reset_for_fold (timed: the fold transition) → E epochs (one summary readback each; a
    checkpoint every ``checkpoint_every`` epochs) → greedy policy and buy-and-hold backtested on
    the validation window → folds/fold_k/{metrics.json, curves.safetensors, trades.csv} →
    fold-end checkpoint.

Run directory (``runs/<name>/``)::

    config.toml  folds.json  metrics.jsonl  summary.json  report.html
    folds/fold_k/metrics.json   deterministic: same seed ⇒ same bytes (no timings in it)
    folds/fold_k/timings.json   fold transition, training, evaluation seconds
    checkpoints/f{fold}-e{epoch}-{epoch|end}/   see foxhunt.train.checkpoint
    tb/                          TensorBoard event files

Nothing is written before every input has been validated: ``WalkForwardRunner(prepared)``
checks the folds and builds the trainer; ``create_run_dir`` / ``open_resume`` come after.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from foxhunt.accel.backend import resolve_config
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.config import Config, load_config
from foxhunt.env.params import check_episode_length
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange, folds_to_json
from foxhunt.pipeline import Prepared
from foxhunt.train import checkpoint as ckpt
from foxhunt.train.manifest import RunDirError, check_manifest, read_folds_json
from foxhunt.train.agent import build_trainer, policy_net, trained_module, training_env  # noqa: F401 (training_env: re-exported)
from foxhunt.train.selection import SUB_WINDOW, EpochSelector, WithSelection, pooled_sharpe, split_fold, sub_windows
from foxhunt.train.logs import MetricsLog, PhaseTimer, Progress, TensorBoardLog, clean_floats


@dataclass
class BuyHold:
    """Buy-and-hold on one validation window: metrics, and [T] returns / positions per bar."""

    metrics: dict[str, float]
    returns: np.ndarray
    positions: np.ndarray


@dataclass
class ResumePoint:
    """A verified checkpoint to continue from (None path: the run never reached a checkpoint)."""

    path: Path | None
    manifest: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- small file helpers
def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temporary name, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(clean_floats(obj) if isinstance(obj, dict) else obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def default_run_name() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def check_run_name(name: str | None) -> str | None:
    """A run name (``--name`` / ``run.name``) is one plain path component; RunDirError if not."""
    if name is not None and (not name or "/" in name or "\0" in name or name.startswith(".")):
        raise RunDirError(f"run name {name!r}: must be non-empty, without '/' or NUL, not starting with '.'")
    return name


def create_run_dir(config: Config, prepared: Prepared, name: str | None) -> tuple[Path, Config]:
    """Make ``<out_dir>/<name>/`` with config.toml (run.name resolved) and folds.json, atomically.

    Returns (run directory, resolved config). Raises RunDirError if an explicit name exists.
    """
    out_dir = Path(config.run.out_dir)
    explicit = check_run_name(name or config.run.name)
    base = explicit or default_run_name()
    final = out_dir / base
    if final.exists():
        if explicit is not None:
            raise RunDirError(f"run directory {final} already exists (continue it with --resume {final}, or pick another --name)")
        i = 2
        while (out_dir / f"{base}-{i}").exists():
            i += 1
        final = out_dir / f"{base}-{i}"
    resolved = config.replace(run={"name": final.name})
    made: list[Path] = []
    tmp = out_dir / f".tmp-{final.name}-{os.getpid()}"
    try:
        made = [d for d in (out_dir, *out_dir.parents) if not d.exists()]  # what mkdir creates, deepest first
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        resolved.write(tmp)
        (tmp / "folds.json").write_text(folds_to_json(prepared.folds, prepared.market.timestamps_host) + "\n")
        os.replace(tmp, final)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        shutil.rmtree(tmp, ignore_errors=True)
        for d in made:  # nothing left behind: the directories this call created, if still empty
            try:
                d.rmdir()
            except OSError:
                break
        raise RunDirError(f"cannot create the run directory {final}: {getattr(exc, 'strerror', None) or exc}") from None
    return final, resolved


RUN_DIR_ENTRIES = {"checkpoints": True, "folds": True, "tb": True, "metrics.jsonl": False, "summary.json": False,
                   "report.html": False}
"""Entries of a run directory that a run writes (name -> is a directory)."""


def read_run_dir(run_dir: Path) -> tuple[Config, ResumePoint]:
    """Validate a run directory for --resume (writes nothing): its config and last checkpoint."""
    if not run_dir.is_dir():
        raise RunDirError(f"--resume {run_dir}: no such run directory")
    for need in ("config.toml", "folds.json"):
        if not (run_dir / need).is_file():
            raise RunDirError(f"--resume {run_dir}: {need} is missing (not a foxhunt train run directory)")
    # Entries the run writes into: one of the wrong type would fail mid-run (after metrics.jsonl
    # was already truncated to the checkpoint), so it is refused now, before anything is touched.
    for entry, want_dir in RUN_DIR_ENTRIES.items():
        p = run_dir / entry
        if (p.exists() or p.is_symlink()) and (p.is_dir() != want_dir or not (p.is_dir() or p.is_file())):
            raise RunDirError(f"--resume {run_dir}: {entry} is not a {'directory' if want_dir else 'regular file'}")
    last = ckpt.latest(run_dir / "checkpoints")
    if last is not None:
        ckpt.refuse_old_format(last)  # before the config: an older run's config has removed keys too
    try:
        config = load_config(run_dir / "config.toml")
    except ConfigError as exc:
        raise RunDirError(f"--resume {run_dir}: {exc}") from None
    folds = read_folds_json(run_dir)  # schema-checked before anything is built
    if last is None:
        return config, ResumePoint(None)
    manifest = ckpt.read_manifest(last)  # schema + every file's length and sha256
    check_manifest(last, manifest, config, len(folds), run_dir / "metrics.jsonl")
    return config, ResumePoint(last, manifest)


def check_resume(run_dir: Path, config: Config, prepared: Prepared, point: ResumePoint) -> None:
    """The data and folds are those the run started with (RunDirError / CheckpointError)."""
    import hashlib

    saved = read_folds_json(run_dir)
    now = [f.to_dict() for f in prepared.folds]
    if saved != now:
        raise RunDirError(f"--resume {run_dir}: the folds differ from folds.json (the data changed since the run started)")
    if point.path is not None:
        # Checkpoints written before the canonical config hash carry sha256(config.toml's bytes).
        legacy = hashlib.sha256((run_dir / "config.toml").read_bytes()).hexdigest()
        ckpt.check_identity(point.path, point.manifest, (config.hash(), legacy), prepared.market.source_sha256)


# --------------------------------------------------------------------------- the runner
class WalkForwardRunner:
    """Walk-forward training over ``prepared.folds`` (see the module docstring).

    Construction validates the folds against the config and builds the trainer and backtester
    (device allocations only, no files).
    """

    def __init__(self, prepared: Prepared, console: Any = None) -> None:
        cfg = prepared.config
        self.prepared = prepared
        self.cfg = cfg
        self.tcfg = cfg.train
        self.console = console
        self.market = prepared.market
        self.folds = prepared.folds
        for f in self.folds:
            if f.val_len < 2:
                raise ConfigError(f"fold {f.fold}: the validation window has {f.val_len} bar(s); it needs >= 2")
            part = split_fold(f, cfg.train.inner_fraction, cfg.folds.purge)[0] if cfg.train.select == "inner" else f
            check_episode_length(cfg.env.episode_length, part.train_start, part.train_end)
        if self.tcfg.threads:
            torch.set_num_threads(self.tcfg.threads)
        # ConfigError on a contradiction; the network checked is the agent's (DQN's or PPO's actor)
        self.plan = resolve_config(cfg, self.market.device, obs_dim=self.market.obs_dim)
        if cfg.train.agent == "dqn":
            from foxhunt.budget import check_trainer_fits

            check_trainer_fits(cfg.dqn, self.market.n_features, cfg.env.n_actions, self.market.device)  # before allocating
        self.trainer = build_trainer(self.market, cfg, self.plan)
        self.backtester = Backtester(self.market, cfg.env, chunk=self.tcfg.eval_chunk, cuda_graphs=self.plan.graphs,
                                     bars_per_year=cfg.backtest.bars_per_year)  # None: inferred from the data
        self.bars_per_year = self.backtester.bars_per_year
        self.selector: EpochSelector | None = None
        if self.tcfg.select == "inner":  # early stopping on a held-back tail of each training window
            self.selector = EpochSelector(trained_module(self.trainer), lambda: policy_net(self.trainer), self._window_sharpe)
        self._train_part: dict[int, FoldRange] = {}  # fold -> the bars the trainer trains on
        self._bh: dict[int, BuyHold] | None = None
        self.buy_and_hold_s = 0.0
        self.timer = PhaseTimer(self.market.device)
        self.timer.install(self.trainer)
        self.config_hash = cfg.hash()
        self.data_hash = self.market.source_sha256

    def use_config(self, resolved: Config) -> None:
        """Adopt the resolved config written into the run directory (run.name filled in)."""
        self.cfg = resolved
        self.config_hash = resolved.hash()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, fold: FoldRange) -> tuple[Any, BuyHold | None]:
        """Greedy agent (and buy-and-hold) on the validation window: bars val_start+1 … val_end-1."""
        n = fold.val_len - 1
        agent = self.backtester.run([fold.val_start], [n], GreedyPolicy(policy_net(self.trainer)), backend=self.plan.eval,
                                    keep_curves=self.tcfg.save_curves, keep_trades=self.tcfg.save_trades,
                                    barriers=self.cfg.backtest.barriers)  # triple-barrier labels on the trades
        return agent, self.buy_and_hold().get(fold.fold)

    def _window_sharpe(self, start: int, steps: int, policy: Any) -> float:
        """Sharpe of ``policy`` on the held-back window (the epoch selector's score; one readback).

        The window is stepped as lockstep sub-windows of at most ``SUB_WINDOW`` bars (each from a
        flat portfolio), so its serial length, hence its time, stays short on minute data (80 K
        held-back bars: 40 windows of 2 K); the score is the Sharpe of their pooled bar returns."""
        starts, lengths = sub_windows(start, steps, SUB_WINDOW)
        res = self.backtester.run(starts, lengths, policy, backend=self.plan.eval, keep_curves=True)
        assert res.returns is not None
        return pooled_sharpe(np.concatenate([res.returns[i, :n] for i, n in enumerate(lengths)]), self.bars_per_year)

    def _begin_fold(self, fold: FoldRange, warm_start: bool) -> float:
        """Make ``fold`` current: the trainer on its training bars (all of them, or the part before
        the held-back window with ``train.select = "inner"``); returns the transition seconds."""
        if self.selector is None:
            part = fold
        else:
            part, start, steps = split_fold(fold, self.tcfg.inner_fraction, self.cfg.folds.purge)
            self.selector.begin_fold(start, steps)
        self._train_part[fold.fold] = part
        return self.trainer.reset_for_fold(part, warm_start=warm_start)

    def _end_fold(self) -> dict[str, Any] | None:
        """The selected epoch's network becomes the fold's (``train.select = "inner"``)."""
        return self.selector.finish() if self.selector is not None else None

    def _checkpointed(self) -> Any:
        """What checkpoints save and restore: the trainer (+ the epoch selector's state)."""
        return WithSelection(self.trainer, self.selector) if self.selector is not None else self.trainer

    def buy_and_hold(self) -> dict[int, BuyHold]:
        """Buy-and-hold on every fold's validation window, computed once and cached: all windows
        step in one lockstep backtest (it does not depend on training: one W-window run instead of
        a long single-window run per fold). ``run`` calls it first, while the market holds the first
        fold's statistics (its spread / volatility medians price buy-and-hold's one opening trade),
        so that a resumed run gets the same numbers as an uninterrupted one."""
        if self._bh is None:
            self._bh = {}
            if self.tcfg.eval_buy_and_hold:
                starts = [f.val_start for f in self.folds]
                lengths = [f.val_len - 1 for f in self.folds]
                ones = torch.ones((len(self.folds), max(lengths)), dtype=torch.float32, device=self.market.device)
                res = self.backtester.run(starts, lengths, ExposurePolicy(ones, self.trainer.env.n_actions), keep_curves=True,
                                          backend=self.plan.eval)
                for i, f in enumerate(self.folds):
                    assert res.returns is not None and res.positions is not None
                    self._bh[f.fold] = BuyHold(res.metrics[i], res.returns[i, : lengths[i]], res.positions[i, : lengths[i]])
        return self._bh

    def _write_fold(self, run_dir: Path, fold: FoldRange, agent: Any, bh: BuyHold | None,
                    last: dict[str, Any] | None, selection: dict[str, Any] | None = None) -> dict[str, Any]:
        d = run_dir / "folds" / f"fold_{fold.fold}"
        d.mkdir(parents=True, exist_ok=True)
        ts = self.market.timestamps_host
        result = {
            "fold": fold.to_dict(),
            "val_first_time": str(np.datetime64(int(ts[fold.val_start]), "ns")) + "Z",
            "val_last_time": str(np.datetime64(int(ts[fold.val_end - 1]), "ns")) + "Z",
            "epochs": self.tcfg.epochs,
            "seed": self.cfg.run.seed,
            "agent": agent.metrics[0],
            "buy_and_hold": bh.metrics if bh is not None else None,
            "last_epoch": last,
        }
        if selection is not None:
            result["selection"] = selection
        write_json(d / "metrics.json", result)
        self._write_model(d / "model.safetensors", fold)
        if self.tcfg.save_curves:
            from safetensors.numpy import save

            arrays = {"agent_returns": agent.returns[0], "agent_positions": agent.positions[0]}
            if bh is not None:
                arrays.update(bh_returns=bh.returns, bh_positions=bh.positions)
            data = save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()})
            tmp = d / "curves.safetensors.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, d / "curves.safetensors")
        if self.tcfg.save_trades and agent.trades is not None:
            tmp = d / "trades.csv.tmp"
            with open(tmp, "w", newline="") as fh:
                cols = ["window", "entry_bar", "exit_bar", "side", "size", "return", "costs"]
                cols += ["barrier"] if self.cfg.backtest.barriers else []
                w = csv.DictWriter(fh, fieldnames=cols)
                w.writeheader()
                w.writerows(agent.trades)
            os.replace(tmp, d / "trades.csv")
        return result

    def _write_model(self, path: Path, fold: FoldRange) -> None:
        """The fold's greedy network (DQN: the Q-network; PPO: the actor packed as a DuelingQNet whose
        argmax and softmax are the policy's) + its training-slice normalisation, for ``foxhunt
        backtest --model``."""
        from foxhunt.agents.model_io import save_model

        m = self.market
        extra = {
            "medians": {"abs_return": m.median_abs_return.item(), "range": m.median_range.item(), "volume": m.median_volume.item()},
            "data_sha256": self.data_hash, "fold": fold.to_dict(), "run": self.cfg.run.name,
            "agent": self.cfg.train.agent,
        }
        part = self._train_part.get(fold.fold, fold)  # the bars the network was trained on
        save_model(path, policy_net(self.trainer), m.norm_stats(part.train_start, part.train_end),
                   feature_names=tuple(m.names), spec_version=m.spec_version,
                   env=self.cfg.env.model_dump(mode="json"), extra=extra)

    def score_folds(self, on_fold: Callable[[int, FoldRange, Any], None] | None = None,
                    times: dict[str, float] | None = None) -> list[Any]:
        """Train and evaluate every fold without writing files (``foxhunt tune``'s trials): per fold
        reset_for_fold → E epochs → the greedy validation backtest, then ``on_fold(k, fold, agent
        result)``, which may raise (e.g. ``optuna.TrialPruned``) to stop early. Returns the results.
        times: if given, "train_s" (reset + epochs, drained) and "eval_s" (the validation backtest,
        whose metrics are read on the host) are added to it, in seconds."""
        out = []
        for k, fold in enumerate(self.folds):
            t0 = time.perf_counter()
            self._begin_fold(fold, warm_start=self.tcfg.warm_start and k > 0)
            for e in range(self.tcfg.epochs):
                self.trainer.train_epoch()
                if self.selector is not None:
                    self.selector.observe(e + 1)
            self.trainer.drain()
            self._end_fold()
            if times is not None and self.market.device.type == "cuda":
                torch.cuda.synchronize(self.market.device)  # training's last kernels count as training
            t1 = time.perf_counter()
            agent, _ = self.evaluate(fold)
            if times is not None:
                times["train_s"] = times.get("train_s", 0.0) + t1 - t0
                times["eval_s"] = times.get("eval_s", 0.0) + time.perf_counter() - t1
            out.append(agent)
            if on_fold is not None:
                on_fold(k, fold, agent)
        return out

    # ------------------------------------------------------------------ checkpoints
    def _save(self, run_dir: Path, log: MetricsLog, k: int, epoch: int, done: bool) -> float:
        t0 = time.perf_counter()
        extra = {"metrics_bytes": log.sync(), "global_epoch": k * self.tcfg.epochs + epoch}
        ckpt.save(run_dir / "checkpoints", self._checkpointed(), fold=k, epoch=epoch, fold_done=done,
                  config_hash=self.config_hash, data_hash=self.data_hash, extra=extra)
        ckpt.prune(run_dir / "checkpoints", self.tcfg.keep_checkpoints)
        return time.perf_counter() - t0

    def _restore(self, point: ResumePoint) -> tuple[int, int]:
        """Load the checkpoint into the trainer; returns (first fold to run, first epoch in it)."""
        m = point.manifest
        k, epoch, done = int(m["fold"]), int(m["epoch"]), bool(m["fold_done"])
        if not 0 <= k < len(self.folds):
            raise ckpt.CheckpointError(f"checkpoint {point.path}: fold {k} is not in this run's {len(self.folds)} folds")
        self._begin_fold(self.folds[k], warm_start=False)
        assert point.path is not None
        ckpt.restore(point.path, self._checkpointed(), m)
        return (k + 1, 0) if done else (k, epoch)

    # ------------------------------------------------------------------ the run
    def run(self, run_dir: Path, resume: ResumePoint | None = None) -> list[dict[str, Any]]:
        """Train every fold (from ``resume`` when given) and write the run directory's outputs.

        Returns the per-fold results (the content of each folds/fold_k/metrics.json).
        """
        t_run = time.perf_counter()
        tcfg, trainer, folds = self.tcfg, self.trainer, self.folds
        ckpt_dir = run_dir / "checkpoints"
        write_json(run_dir / "accel.json", self.plan.to_dict())  # what ran, per component
        if self.console is not None:
            self.console.print(self.plan.summary(), highlight=False, soft_wrap=True)
        t0 = time.perf_counter()
        self.buy_and_hold()  # before any restore: always under the first fold's market statistics
        self.buy_and_hold_s = time.perf_counter() - t0
        first_fold, first_epoch, resumed_mid = 0, 0, False
        if resume is not None and resume.path is not None:
            first_fold, first_epoch = self._restore(resume)  # verified before anything is written
            resumed_mid = first_epoch > 0 or not resume.manifest["fold_done"]
        ckpt.clean_temporaries(ckpt_dir)
        metrics_bytes = int(resume.manifest.get("run", {}).get("metrics_bytes", 0)) if resume is not None else 0
        log = MetricsLog(run_dir / "metrics.jsonl")
        log.truncate(metrics_bytes)
        purge = first_fold * tcfg.epochs + first_epoch
        tb = TensorBoardLog(run_dir / "tb", purge_step=purge if resume is not None else None) if tcfg.tensorboard else None
        try:
            with Progress(len(folds), tcfg.epochs, tcfg.progress, self.console) as bar:
                for k in range(first_fold, len(folds)):
                    fold = folds[k]
                    if k == first_fold and resumed_mid:
                        transition = 0.0  # continuing inside the fold: the trainer holds its state
                        start_epoch = first_epoch
                    else:
                        transition = self._begin_fold(fold, warm_start=tcfg.warm_start and k > 0)
                        start_epoch = 0
                    bar.start_fold(k, fold.fold, start_epoch)
                    last, train_s, ckpt_s = self._train_fold(run_dir, k, start_epoch, log, tb, bar)
                    selection = self._end_fold()
                    t0 = time.perf_counter()
                    agent, bh = self.evaluate(fold)
                    eval_s = time.perf_counter() - t0
                    timings = {"transition_s": transition, "train_s": train_s, "eval_s": eval_s, "mid_fold_checkpoint_s": ckpt_s,
                               "resumed_at_epoch": start_epoch if k == first_fold and resumed_mid else None}
                    result = self._write_fold(run_dir, fold, agent, bh, last, selection)
                    write_json(run_dir / "folds" / f"fold_{fold.fold}" / "timings.json", timings)
                    if tb is not None:
                        tb.fold(fold.fold, result["agent"], result["buy_and_hold"])
                    self._save(run_dir, log, k, tcfg.epochs, True)
                    bar.end_fold(k + 1, _fold_line(result))
                    if self.console is not None:
                        self.console.print(f"fold {fold.fold}: {_fold_line(result)}; transition {transition * 1e3:.1f} ms", highlight=False)
        finally:
            log.close()
            if tb is not None:
                tb.close()
        results = self.finish(run_dir, time.perf_counter() - t_run)
        return results

    def _train_fold(self, run_dir: Path, k: int, start_epoch: int, log: MetricsLog, tb: TensorBoardLog | None,
                    bar: Progress) -> tuple[dict[str, Any] | None, float, float]:
        """Epochs start_epoch … E-1 of fold k; returns (last summary row, training s, checkpoint s)."""
        tcfg, trainer = self.tcfg, self.trainer
        last: dict[str, Any] | None = None
        train_s = ckpt_s = 0.0
        walls: dict[int, float] = {}
        inner: dict[int, float] = {}  # epoch -> held-back Sharpe (train.select = "inner")

        def emit(s: Any) -> None:
            nonlocal last
            row = {"fold": self.folds[k].fold, "global_epoch": k * tcfg.epochs + s.epoch, **s.to_dict(),
                   "sharpe_estimate": s.sharpe_estimate(self.bars_per_year), "epoch_s": walls.pop(s.epoch, float("nan")),
                   **self.timer.take(s.epoch)}
            if self.selector is not None:
                row["inner_sharpe"] = inner.pop(s.epoch, float("nan"))
            log.write(row)
            if tb is not None:
                tb.epoch(row["global_epoch"], row["fold"], row)
            bar.epoch(row)
            last = {key: v for key, v in row.items() if not key.endswith("_s")}

        for e in range(start_epoch, tcfg.epochs):
            t0 = time.perf_counter()
            self.timer.begin_epoch(trainer.epoch)
            s = trainer.train_epoch()
            if self.selector is not None:
                inner[e] = self.selector.observe(e + 1)  # before the summary is emitted (lagged mode too)
            walls[e] = time.perf_counter() - t0
            train_s += walls[e]
            if s is not None:
                emit(s)
            done = e + 1
            if tcfg.checkpoint_every and done % tcfg.checkpoint_every == 0 and done < tcfg.epochs:
                for s in trainer.drain():  # lagged mode: pending summaries are read before saving
                    emit(s)
                ckpt_s += self._save(run_dir, log, k, done, False)
        for s in trainer.drain():
            emit(s)
        return last, train_s, ckpt_s

    def finish(self, run_dir: Path, wall_s: float | None) -> list[dict[str, Any]]:
        """summary.json and report.html from the run directory's files; returns the fold results.

        wall_s: this session's run time (None: keep the recorded one, e.g. re-finishing a run)."""
        from foxhunt.train.report import load_fold_results, write_report

        results = load_fold_results(run_dir)
        if wall_s is None:
            old = run_dir / "summary.json"
            wall_s = float(json.loads(old.read_text()).get("wall_s", 0.0)) if old.is_file() else 0.0
        fold_t = [json.loads((run_dir / "folds" / f"fold_{f.fold}" / "timings.json").read_text())
                  for f in self.folds if (run_dir / "folds" / f"fold_{f.fold}" / "timings.json").is_file()]
        summary = {
            "device": str(self.market.device),
            "data": f"{self.cfg.data.source} ({self.market.n_bars} bars, sha256 {self.data_hash[:12]}…)",
            "n_folds": len(self.folds),
            "epochs": self.tcfg.epochs,
            "bars_per_year": self.bars_per_year,
            "annualisation": self.backtester.annualisation.describe(),
            "episode_rules": "validation: triple-barrier labels on the round trips (backtest.barriers)"
                             if self.cfg.backtest.barriers else "validation: plain windows, no barriers",
            "wall_s": wall_s,
            "prepare_timings": self.prepared.timings,
            "buy_and_hold_s": self.buy_and_hold_s,
            "transition_ms": [t["transition_s"] * 1e3 for t in fold_t],
            "folds": [{"fold": r["fold"]["fold"], "agent_sharpe": r["agent"]["sharpe"],
                       "buy_and_hold_sharpe": (r["buy_and_hold"] or {}).get("sharpe")} for r in results],
        }
        write_json(run_dir / "summary.json", summary)
        if self.tcfg.report:
            write_report(run_dir)
        return results


def _fold_line(r: dict[str, Any]) -> str:
    a, b = r["agent"], r.get("buy_and_hold")
    s = f"agent Sharpe {a['sharpe']:+.2f} return {a['total_return']:+.2%}"
    if b:
        s += f" | buy&hold Sharpe {b['sharpe']:+.2f} return {b['total_return']:+.2%}"
    return s


def is_complete(point: ResumePoint, n_folds: int) -> bool:
    """The checkpoint is the last fold's end: nothing is left to train."""
    return point.path is not None and bool(point.manifest.get("fold_done")) and int(point.manifest.get("fold", -1)) == n_folds - 1
