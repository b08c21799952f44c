"""The walk-forward runner: one trainer (``train.agent``'s, ``foxhunt.agents.registry``) over every fold, evaluation,
checkpoints, logs (the trainer's interface: ``foxhunt.train.agent``).

Data is loaded, featurised and uploaded once (``prepare_market``); folds are index ranges into it;
the trainer (env, replay, networks, captured graphs) is built once (``train.ensemble = K``: K trainers,
seeds run.seed … run.seed + K − 1, trained epoch by epoch side by side, each with its own epoch
selection; the fold's network is their merged mean-Q network: ``foxhunt.train.team``). Per fold:

    reset_for_fold (timed: the fold transition) → E epochs (one summary readback each; a
    checkpoint every ``checkpoint_every`` epochs) → greedy policy and buy-and-hold backtested on
    the validation window → folds/fold_k/{metrics.json, model.safetensors, curves.safetensors,
    trades.csv, timings.json} → fold-end checkpoint.

This module owns that loop and the fold's lifecycle around it (which bars the trainer trains on,
epoch selection, the discount choice, what a checkpoint holds, where a resumed run continues). The
run directory is ``foxhunt.train.run_dir``, the files' contents ``foxhunt.train.outputs``.

Nothing is written before every input has been validated: ``WalkForwardRunner(prepared)``
checks the folds and builds the trainer; ``create_run_dir`` comes after (``read_run_dir`` /
``check_resume``, for --resume, write nothing).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from foxhunt.accel.backend import resolve_config
from foxhunt.agents import registry
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.config import Config
from foxhunt.folds import FoldRange
from foxhunt.pipeline import Prepared
from foxhunt.train import abstain
from foxhunt.train import checkpoint as ckpt
from foxhunt.train import gamma_grid
from foxhunt.train.agent import build_trainer, cost_multiplier, policy_net, trained_module, training_env
from foxhunt.train.lockstep import Lockstep
from foxhunt.train.logs import MetricsLog, PhaseTimer, Progress, TensorBoardLog, run_banner
from foxhunt.train.oos import write_oos
from foxhunt.train.outputs import BuyHold, fold_line, fold_result, write_curves, write_json, write_model, write_summary, write_trades
from foxhunt.train.preflight import check_prepared
from foxhunt.train.run_dir import ResumePoint
from foxhunt.train.selection import EpochSelector, HeldBackScore, WithSelection, observe_members, split_fold
from foxhunt.train.team import Team, ensemble_net, member_config, member_label



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
        check_prepared(prepared)  # ConfigError before anything is allocated
        if self.tcfg.threads:
            torch.set_num_threads(self.tcfg.threads)
        learner = registry.of(cfg)  # the learner's entry: its rules, its network for the plan, its memory check
        if learner.check is not None:  # on the bars each fold trains on (less the held-back tail with inner selection)
            inner = self.tcfg.select == "inner"
            learner.check(cfg, [split_fold(f, self.tcfg.inner_fraction, cfg.folds.purge)[0] if inner else f for f in self.folds])
        # ConfigError on a contradiction; the network checked is the agent's (its section's widths)
        self.plan = resolve_config(cfg, self.market.device, obs_dim=self.market.obs_dim,
                                   learner=learner.plan_learner(cfg))
        if learner.check_fits is not None:
            learner.check_fits(cfg, self.market)  # before allocating
        # train.ensemble = K: member k is the trainer a run with run.seed + k builds (foxhunt.train.team)
        self._member_cfgs = [member_config(cfg, k) for k in range(self.tcfg.ensemble)]
        self.members = [build_trainer(self.market, c, self.plan) for c in self._member_cfgs]
        self.trainer = self.members[0]
        # The members as one program: round by round, each on its own CUDA stream (foxhunt.train.lockstep)
        self.lockstep = Lockstep(self.members, self.market.device, self.tcfg.lockstep,
                                 labels=[member_label(c, k) for k, c in enumerate(self._member_cfgs)])
        self.backtester = Backtester(self.market, cfg.env, chunk=self.tcfg.eval_chunk, cuda_graphs=self.plan.graphs,
                                     bars_per_year=cfg.backtest.bars_per_year)  # None: inferred from the data
        self.bars_per_year = self.backtester.bars_per_year
        self.selectors: list[EpochSelector] = []
        if self.tcfg.select == "inner":  # early stopping on a held-back tail of each training window (per member)
            self._held_back = HeldBackScore(self.backtester, self.plan.eval, self.bars_per_year, self.tcfg.select_score)
            self.selectors = [EpochSelector(trained_module(t), lambda t=t: policy_net(t), self._window_sharpe,
                                            decision_interval=t.env.decision_interval) for t in self.members]
        self.selector = self.selectors[0] if self.selectors else None
        self._flat = False  # train.abstain: this fold's model is the flat network
        self._net: Any = None  # this fold's greedy network, built once per fold (``fold_net``)
        self._active: list[int] = []  # train.gamma_grid: the members of the fold's chosen discount ([]: all)
        self.labels = [gamma_grid.member_label(cfg, k) for k in range(self.tcfg.ensemble)]  # grid groups
        self.intervals = [c.env.decision_interval for c in self._member_cfgs]  # each member's k
        self._train_part: dict[int, FoldRange] = {}  # fold -> the bars the trainer trains on
        self._bh: dict[int, BuyHold] | None = None
        self.buy_and_hold_s = 0.0
        self.timer = PhaseTimer(self.market.device)
        self.timer.install(self.trainer)
        self.timer.install_stacks(self.lockstep)  # stacked members: the stacks' steps, not member 0's (never called)
        self.config_hash = cfg.hash()
        self.data_hash = self.market.source_sha256

    def use_config(self, resolved: Config) -> None:
        """Adopt the resolved config written into the run directory (run.name filled in)."""
        self.cfg = resolved
        self.config_hash = resolved.hash()

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, fold: FoldRange) -> tuple[Any, BuyHold | None]:
        """Greedy agent (and buy-and-hold) on the validation window: bars val_start+1 … val_end-1; its
        curves are kept (one host copy a fold) whatever ``save_curves`` says: ``timing`` needs them."""
        n = fold.val_len - 1
        agent = self.backtester.run([fold.val_start], [n], GreedyPolicy(self.fold_net(), self.fold_interval()),
                                    backend=self.plan.model_eval,
                                    keep_curves=True, keep_trades=self.tcfg.save_trades,
                                    barriers=self.cfg.backtest.barriers)  # triple-barrier labels on the trades
        return agent, self.buy_and_hold().get(fold.fold)

    def fold_net(self) -> Any:
        """The fold's greedy network: the members' (mean-Q) network, or the flat network where
        ``train.abstain`` found no edge above the held-back window's noise."""
        if self._net is None:
            self._net = abstain.flat_net(policy_net(self.members[0])) if self._flat else ensemble_net(self._team())
        return self._net

    def fold_interval(self) -> int:
        """The decision interval of the fold's model: its members' (one per grid group)."""
        return self.intervals[self._active[0] if self._active else 0]

    def _team(self) -> list[Any]:
        """The members whose ensemble is the fold's model: all, or the chosen discount's (``train.gamma_grid``)."""
        return [self.members[i] for i in self._active] if self._active else self.members

    def _alternative(self, fold: FoldRange, selection: dict[str, Any] | None, agent: Any) -> None:
        """Reporting only: a flat fold's record gets the members' ensemble's validation score
        (``abstain.add_alternative``); with ``train.gamma_grid`` every discount group's row gets its own.
        Each ensemble is backtested once: a trading fold's model is the chosen group's, already in ``agent``."""
        n = fold.val_len - 1
        team = tuple(self._active or range(len(self.members)))  # the fold's members (``_team``), as indices
        done: dict[tuple[int, ...], dict[str, float]] = {} if self._flat else {team: agent.metrics[0]}

        def validate(idx: Any) -> dict[str, float]:
            key = tuple(idx)
            if key not in done:
                net = ensemble_net([self.members[i] for i in key])
                policy = GreedyPolicy(net, self.intervals[key[0]])
                done[key] = self.backtester.run([fold.val_start], [n], policy, backend=self.plan.model_eval).metrics[0]
            return done[key]

        record = (selection or {}).get("abstain")
        if record is not None:
            abstain.add_alternative(record, lambda: validate(team))
        if (selection or {}).get("gamma_groups"):
            gamma_grid.add_group_validations(selection["gamma_groups"], validate, abstain.ALTERNATIVE_METRICS)

    def _members_sharpes(self, start: int, steps: int, nets: list[Any], decision_interval: int) -> list[float]:
        """The held-back Sharpes of several members' networks from one backtest (``HeldBackScore.score_members``)."""
        return self._held_back.score_members(start, steps, nets, decision_interval)

    def _window_sharpe(self, start: int, steps: int, policy: Any) -> float:
        """The epoch selector's score of ``policy`` on the held-back window (``selection.HeldBackScore``)."""
        return self._held_back(start, steps, policy)

    def _begin_fold(self, fold: FoldRange, warm_start: bool) -> float:
        """Make ``fold`` current: the trainer on its training bars (all of them, or the part before
        the held-back window with ``train.select = "inner"``); returns the transition seconds."""
        held_back = None
        if self.selector is None:
            part = fold
        else:
            part, start, steps = split_fold(fold, self.tcfg.inner_fraction, self.cfg.folds.purge)
            for sel in self.selectors:
                sel.begin_fold(start, steps)
            held_back = (start, start + steps + 1)  # bars start … train_end − 1
        for t in self.members:  # a learner that measures on the held-back window (the forecast's risk term)
            if hasattr(t, "set_held_back"):
                t.set_held_back(held_back)
        self._train_part[fold.fold] = part
        return sum(t.reset_for_fold(part, warm_start=warm_start) for t in self.members)

    def _end_fold(self) -> dict[str, Any] | None:
        """Each member's selected epoch's network becomes its own (``train.select = "inner"``) and,
        with ``train.abstain``, the fold's model is flat when their held-back Sharpes are within noise
        (``foxhunt.train.abstain``); returns member 0's selection (+ every member's and
        their seeds with ``train.ensemble``, + the abstention record)."""
        picks = [sel.finish() for sel in self.selectors]
        self._flat, self._net, self._active = False, None, []
        record: dict[str, Any] = {}
        judged, z = picks, float(self.tcfg.abstain_z)
        if picks and (self.tcfg.gamma_grid or self.tcfg.decision_grid):  # the best (γ, k) group on the held-back window
            label, self._active, rows = gamma_grid.choose(picks, self.labels)
            record.update(label, gamma_groups=rows)
            judged, z = [picks[i] for i in self._active], gamma_grid.adjusted_z(z, len(rows))
        if picks and self.tcfg.abstain:
            record["abstain"] = abstain.describe(judged, z, self.bars_per_year)
            self._flat = bool(record["abstain"]["flat"])
        if len(self.members) == 1:
            return {**picks[0], **record} if picks else None
        seeds = [int(self.cfg.run.seed) + k for k in range(len(self.members))]
        return {**(picks[0] if picks else {}), "ensemble_seeds": seeds, **({"members": picks} if picks else {}), **record}

    def _train_epoch(self, e: int) -> tuple[Any, list[Any], list[float]]:
        """Epoch e (0-based) of every member: (member 0's summary or None, the others' summaries from the
        same call (lagged mode: the previous epoch's, as member 0's), each member's held-back Sharpe)."""
        self._epoch_costs(e)
        summaries = self.lockstep.train_epoch()
        inner = self._observe(e)  # before the summaries are emitted
        return summaries[0], summaries[1:], inner

    def _epoch_costs(self, e: int) -> None:
        """Epoch e's training costs (``train.cost_curriculum``), set in place in every member's env
        (captured graphs stay valid); constant after the curriculum."""
        if self.tcfg.cost_curriculum > 0 and e <= self.tcfg.cost_curriculum:
            for t, c in zip(self.members, self._member_cfgs):
                t.env.set_params(training_env(c, cost_multiplier(c, e)))

    def _observe(self, e: int) -> list[float]:
        """After epoch e (0-based) of every member: each member's held-back Sharpe (``train.select =
        "inner"``; [] otherwise), its selector keeping its best epoch's network."""
        return observe_members(self.selectors, e + 1, self._members_sharpes) if self.selectors else []

    def _drain(self) -> list[tuple[Any, list[Any]]]:
        """Every member's pending summaries, paired by epoch (member 0's first)."""
        pending = [t.drain() for t in self.members]
        return [(s, [p[i] for p in pending[1:] if i < len(p)]) for i, s in enumerate(pending[0])]

    def _checkpointed(self) -> Any:
        """What checkpoints save and restore: the trainer (+ the epoch selector's state); with
        ``train.ensemble`` every member, as one ``Team``."""
        wrapped = [WithSelection(t, sel) for t, sel in zip(self.members, self.selectors)] if self.selectors else self.members
        return wrapped[0] if len(wrapped) == 1 else Team(wrapped)

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
        """folds/fold_k/: metrics.json, model.safetensors, then (as configured) curves and trades;
        returns the metrics.json content. The formats are ``foxhunt.train.outputs``'."""
        d = run_dir / "folds" / f"fold_{fold.fold}"
        d.mkdir(parents=True, exist_ok=True)
        result = fold_result(fold, self.market.timestamps_host, agent, bh, last, selection, epochs=self.tcfg.epochs,
                             seed=self.cfg.run.seed)
        report = registry.of(self.cfg).fold_report
        if report is not None:  # the learner's own out-of-sample evaluation (the forecast's IC and hit rate)
            result["learner_eval"] = report(self._team(), self.market, fold)
        write_json(d / "metrics.json", result)
        part = self._train_part.get(fold.fold, fold)  # the bars the network was trained on
        write_model(d / "model.safetensors", self.fold_net(), self.market, part, fold, self.cfg, self.data_hash,
                    decision_interval=self.fold_interval())
        if self.tcfg.save_curves:
            write_curves(d / "curves.safetensors", agent, bh)
        if self.tcfg.save_trades and agent.trades is not None:
            write_trades(d / "trades.csv", agent.trades, self.cfg.backtest.barriers)
        return result

    def fold_score(self, fold: FoldRange, agent: Any) -> tuple[dict[str, float], Any]:
        """What ``foxhunt tune`` scores a fold by: (metrics, per-bar returns [n] or None) of the fold's
        validation backtest ``agent`` (one window here; a universe's portfolio in ``UniverseRunner``)."""
        n = fold.val_len - 1
        return agent.metrics[0], None if agent.returns is None else agent.returns[0, :n]

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
                self._train_epoch(e)
            self._drain()
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
        tcfg, folds = self.tcfg, self.folds
        ckpt_dir = run_dir / "checkpoints"
        write_json(run_dir / "accel.json", self.plan.to_dict())  # what ran, per component
        if self.console is not None:
            for line in run_banner(self.plan, self.cfg, len(self.members), bool(self.selectors)):
                self.console.print(line, highlight=False, soft_wrap=True)
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
                    self._alternative(fold, selection, agent)
                    eval_s = time.perf_counter() - t0
                    timings = {"transition_s": transition, "train_s": train_s, "eval_s": eval_s, "mid_fold_checkpoint_s": ckpt_s,
                               "resumed_at_epoch": start_epoch if k == first_fold and resumed_mid else None}
                    result = self._write_fold(run_dir, fold, agent, bh, last, selection)
                    write_json(run_dir / "folds" / f"fold_{fold.fold}" / "timings.json", timings)
                    if tb is not None:
                        tb.fold(fold.fold, result["agent"], result["buy_and_hold"])
                    self._save(run_dir, log, k, tcfg.epochs, True)
                    bar.end_fold(k + 1, fold_line(result))
                    if self.console is not None:
                        self.console.print(f"fold {fold.fold}: {fold_line(result)}; transition {transition * 1e3:.1f} ms", highlight=False)
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
        inner: dict[int, list[float]] = {}  # epoch -> each member's held-back Sharpe (train.select = "inner")

        def emit(s: Any, others: list[Any]) -> None:
            nonlocal last
            row = {"fold": self.folds[k].fold, "global_epoch": k * tcfg.epochs + s.epoch, **s.to_dict(),
                   "sharpe_estimate": s.sharpe_estimate(self.bars_per_year), "epoch_s": walls.pop(s.epoch, float("nan")),
                   **self.timer.take(s.epoch)}
            scores = inner.pop(s.epoch, [])
            if self.selector is not None:
                row["inner_sharpe"] = scores[0] if scores else float("nan")
            if others:  # train.ensemble: members 1…K-1 of the same epoch (the columns above are member 0's)
                row["members"] = [{"member": i + 1, **o.to_dict(), **({"inner_sharpe": scores[i + 1]} if len(scores) > i + 1 else {})}
                                  for i, o in enumerate(others)]
            log.write(row)
            if tb is not None:
                tb.epoch(row["global_epoch"], row["fold"], row)
            bar.epoch(row)
            last = {key: v for key, v in row.items() if not key.endswith("_s")}

        for e in range(start_epoch, tcfg.epochs):
            t0 = time.perf_counter()
            self.timer.begin_epoch(trainer.epoch)
            s, others, inner[e] = self._train_epoch(e)  # held-back Sharpes before the summary is emitted (lagged mode too)
            walls[e] = time.perf_counter() - t0
            train_s += walls[e]
            if s is not None:
                emit(s, others)
            done = e + 1
            if tcfg.checkpoint_every and done % tcfg.checkpoint_every == 0 and done < tcfg.epochs:
                for s, others in self._drain():  # lagged mode: pending summaries are read before saving
                    emit(s, others)
                ckpt_s += self._save(run_dir, log, k, done, False)
        for s, others in self._drain():
            emit(s, others)
        return last, train_s, ckpt_s

    def finish(self, run_dir: Path, wall_s: float | None) -> list[dict[str, Any]]:
        """summary.json and report.html from the run directory's files; returns the fold results.

        wall_s: this session's run time (None: keep the recorded one, e.g. re-finishing a run)."""
        if self.tcfg.report:  # the report's data line and out-of-sample inputs (foxhunt.train.oos)
            write_oos(run_dir, self)
        return write_summary(run_dir, wall_s, self.folds, market=self.market, cfg=self.cfg, epochs=self.tcfg.epochs,
                             bars_per_year=self.bars_per_year, annualisation=self.backtester.annualisation.describe(),
                             prepare_timings=self.prepared.timings, buy_and_hold_s=self.buy_and_hold_s,
                             data_hash=self.data_hash, report=self.tcfg.report)
