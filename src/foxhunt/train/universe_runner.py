"""Pooled walk-forward training on a universe of several symbols (issue 47): one agent a fold, trained on
the pooled training bars of the fold's member symbols, selected and evaluated per symbol and pooled.

``UniverseRunner`` is the walk-forward runner (``foxhunt.train.runner``: its fold loop, ensembles and
grids, checkpoints, resume, logs) over a ``UniverseMarket`` whose folds are ``PooledFold``s:

* **Training.** Each env episode (DQN, PPO) or window (direct) draws a member symbol, in proportion to its
  training bars (``train.symbol_weighting = "bars"``) or equally (``"equal"``), then a start inside that
  symbol's training rows (``foxhunt.env.pooled``); observations are normalised with the symbol's own
  training statistics (``foxhunt.universe_market``). Nothing crosses a symbol's offset.
* **Inner selection and abstention** (``train.select = "inner"``): per member symbol, the last
  ``floor(inner_fraction × its training bars)`` bars are held back, the training rows end ``folds.purge``
  before them (bars, or a duration on the symbol's own timestamps). Each epoch's greedy policy is
  backtested on every symbol's held-back window at once (sub-windows of at most ``SUB_WINDOW`` bars),
  scored by the Sharpe of all those bar returns pooled; the abstention bar is z × sqrt(bars_per_year / N),
  N the pooled held-back steps (``abstain.noise_bar``). The pooled window needs > ``MIN_INNER_BARS`` steps;
  one symbol's may be as short as one step.
* **Evaluation.** The fold's model on every member symbol's validation window in one backtest call
  (W = symbols), buy-and-hold likewise; the files are ``foxhunt.train.universe_outputs``'.

* **Mirror** (``train.mirror``): half of the training draws land in the drawn symbol's mirrored rows
  (``foxhunt.universe_market``); selection and evaluation read the real rows only.

* **Forecast learner** (``train.agent = "forecast"``): its training bars are drawn as episode starts are (a
  symbol, then a bar of its training rows less the target's h), each target in its own symbol's volatility
  (``agents.forecast.target``); the risk term's error is measured on every member symbol's held-back window,
  and the fold's ``learner_eval`` (IC, hit rate) pools every member symbol's validation bars. The execution
  band prices the costs in the members' pooled median volatility (one packed network trades every symbol).

Refused in one line (``check_universe``): the direct learner's and the forecast's attention policies (their
history would reach before a symbol's first row). ``train.pool = false`` (one agent
per symbol, each a file's run, where all of these work) is ``foxhunt.train.per_symbol``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.backtest.timing import timing_block, timing_returns
from foxhunt.config import Config
from foxhunt.errors import ConfigError
from foxhunt.folds import parse_span
from foxhunt.market import NormStats
from foxhunt.agents import registry
from foxhunt.train import abstain, gamma_grid
from foxhunt.train.outputs import write_json, write_summary, write_trades
from foxhunt.train.runner import WalkForwardRunner
from foxhunt.train.selection import MIN_INNER_BARS, SUB_WINDOW, pooled_sharpe, sub_windows
from foxhunt.train.team import ensemble_net
from foxhunt.train.universe_outputs import pooled_row, symbol_rows, write_universe_curves
from foxhunt.universe_market import PooledFold

__all__ = ["PooledPrepared", "UniverseRunner", "check_universe", "pooled_prepared"]


@dataclass
class PooledPrepared:
    """A prepared universe as the runner and run directory read it: ``folds`` are PooledFolds (each member's
    whole training rows), ``universe_folds`` the UniverseFolds they come from, ``parts`` the rows each fold
    trains on and ``inner`` each fold's held-back windows [(start, steps)] (empty without inner selection)."""

    config: Config
    market: Any
    folds: list[PooledFold]
    universe_folds: list[Any]
    parts: list[PooledFold]
    inner: list[list[tuple[int, int]]]
    timings: dict[str, float]
    universe: Any = None
    fold_note: str | None = None
    calendar: Any = None
    features: Any = None
    cache_built: bool = False


def check_universe(cfg: Config) -> None:
    """ConfigError (one line) for what pooled training does not do (module docstring)."""
    t = cfg.train
    if not t.pool:  # one agent per symbol: each symbol's run is a file's (foxhunt.train.per_symbol), nothing refused here
        return
    if t.agent == "forecast" and cfg.forecast.policy == "attention":
        raise ConfigError("forecast.policy = attention reads bars before each training bar and could reach another symbol's "
                          "rows: not available on a universe (forecast.policy = mlp)")
    if t.agent == "direct" and cfg.direct.policy == "attention":
        raise ConfigError("direct.policy = attention reads bars before each window and could reach another symbol's rows: "
                          "not available on a universe (direct.policy = mlp)")


def _parts(cfg: Config, market: Any, uf: Any) -> tuple[PooledFold, list[tuple[int, int]]]:
    """(the rows fold ``uf`` trains on, its held-back windows) for ``cfg`` (module docstring)."""
    t = cfg.train
    if t.select != "inner":
        part = PooledFold.of(uf, t.symbol_weighting)
        windows: list[tuple[int, int]] = []
    else:
        kind, purge = parse_span(cfg.folds.purge, allow_zero=True)
        ends = uf.bounds[:, 1].copy()
        windows = []
        ts = market.timestamps_host
        for s in np.flatnonzero(uf.member):
            a, b = int(uf.bounds[s, 0]), int(uf.bounds[s, 1])
            inner = int((b - a) * t.inner_fraction)
            if inner < 2:
                continue  # too short to score one step here; its training rows are all trained on
            first = b - inner
            end = first - purge if kind == "bars" else a + int(np.searchsorted(ts[a:first], ts[first] - purge, side="left"))
            ends[s] = end
            windows.append((first, inner - 1))
        steps = sum(n for _, n in windows)
        if steps < MIN_INNER_BARS:
            raise ConfigError(f"fold {uf.fold}: train.inner_fraction = {t.inner_fraction:g} holds back {steps} steps across "
                              f"the member symbols (need >= {MIN_INNER_BARS}); raise it or lengthen folds.train")
        part = PooledFold.of(uf, t.symbol_weighting, train_end=ends)
    need = cfg.env.episode_length + 1 if t.agent != "direct" else cfg.direct.window + 2
    what = "env.episode_length" if t.agent != "direct" else "direct.window"
    for s in part.members:
        n = int(part.bounds[s, 1] - part.bounds[s, 0])
        if n < need:
            raise ConfigError(f"fold {uf.fold}: symbol {market.symbols[s]} trains on {n} bars; {what} needs >= {need} "
                              f"(lower {what}, or raise data.min_train_bars so that short symbols sit the fold out)")
    return part, windows


def pooled_prepared(cfg: Config, prepared: Any) -> PooledPrepared:
    """The runner's view of ``prepare_universe``'s result, after ``check_universe`` and every fold's parts
    (ConfigError before anything is allocated or written)."""
    check_universe(cfg)
    if not cfg.train.pool:
        raise ConfigError("train.pool = false trains one agent per symbol (foxhunt.train.per_symbol), not a pooled one")
    folds = [PooledFold.of(uf, cfg.train.symbol_weighting) for uf in prepared.folds]
    split = [_parts(cfg, prepared.market, uf) for uf in prepared.folds]
    # prepared.config: ``cfg`` with the fold layout the universe's data fitted (saved in config.toml, so that
    # --resume and `foxhunt backtest --run` lay the same folds out again)
    return PooledPrepared(prepared.config, prepared.market, folds, list(prepared.folds), [p for p, _ in split], [w for _, w in split],
                          prepared.timings, prepared.universe, prepared.fold_note, prepared.calendar, prepared.features,
                          bool(any(prepared.features.built)))


class UniverseRunner(WalkForwardRunner):
    """The walk-forward runner on a pooled universe (module docstring)."""

    def __init__(self, prepared: PooledPrepared, console: Any = None) -> None:
        prepared.market.set_fold(prepared.parts[0])  # the trainers are built on a fold
        self._parts = {f.fold: p for f, p in zip(prepared.folds, prepared.parts)}
        self._inner_of = {f.fold: w for f, w in zip(prepared.folds, prepared.inner)}
        self._inner: tuple[list[int], list[int]] = ([], [])  # the current fold's held-back sub-windows
        self._inner_bh: np.ndarray | None = None
        super().__init__(prepared, console)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ folds
    def _begin_fold(self, fold: Any, warm_start: bool) -> float:
        part, windows = self._parts[fold.fold], self._inner_of[fold.fold]
        if self.selectors:
            starts: list[int] = []
            lengths: list[int] = []
            for a, n in windows:
                st, ln = sub_windows(a, n, SUB_WINDOW)
                starts += st
                lengths += ln
            self._inner, self._inner_bh = (starts, lengths), None
            for sel in self.selectors:
                sel.begin_fold(windows[0][0], sum(n for _, n in windows))
        held_back = [(a, a + n + 1) for a, n in windows] if self.selectors else None  # each to its training end
        for t in self.members:  # a learner that measures on the held-back windows (the forecast's risk term)
            if hasattr(t, "set_held_back"):
                t.set_held_back(held_back)
        self._train_part[fold.fold] = part
        return sum(t.reset_for_fold(part, warm_start=warm_start) for t in self.members)

    def _window_sharpe(self, start: int, steps: int, policy: Any) -> float:
        """The pooled held-back Sharpe of ``policy`` (every member symbol's window; module docstring)."""
        starts, lengths = self._inner
        return self._pooled_score(self._held_back._returns(starts, lengths, policy))

    def _members_sharpes(self, start: int, steps: int, nets: list[Any], decision_interval: int) -> list[float]:
        """The pooled held-back Sharpes of several members' networks, from one backtest of every member
        symbol's window per network (``HeldBackScore.member_returns``)."""
        starts, lengths = self._inner
        return [self._pooled_score(r) for r in self._held_back.member_returns(starts, lengths, nets, decision_interval)]

    def _pooled_score(self, r: np.ndarray) -> float:
        """The score of pooled held-back returns (``train.select_score``: their Sharpe, or their timing's)."""
        starts, lengths = self._inner
        if self._held_back.score == "timing":
            if self._inner_bh is None:
                ones = torch.ones((len(starts), max(lengths)), dtype=torch.float32, device=self.market.device)
                self._inner_bh = self._held_back._returns(starts, lengths, ExposurePolicy(ones))
            r = timing_returns(r, self._inner_bh)
        return pooled_sharpe(r, self.bars_per_year)

    # ------------------------------------------------------------------ evaluation
    @staticmethod
    def _windows(fold: PooledFold) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(member symbols [W], validation starts [W], steps [W]) of ``fold``."""
        mem = fold.members
        return mem, fold.bounds[mem, 2], fold.bounds[mem, 3] - fold.bounds[mem, 2] - 1

    def evaluate(self, fold: Any) -> tuple[Any, Any]:
        """The fold's model on every member symbol's validation window, in one backtest (W = symbols)."""
        _, starts, steps = self._windows(fold)
        agent = self.backtester.run(starts, steps, GreedyPolicy(self.fold_net(), self.fold_interval()),
                                    backend=self.plan.model_eval, keep_curves=True, keep_trades=self.tcfg.save_trades,
                                    barriers=self.cfg.backtest.barriers)
        return agent, self.buy_and_hold().get(fold.fold)

    def buy_and_hold(self) -> dict[int, Any]:
        """Buy-and-hold on every fold's member windows, all in one backtest, cached: fold -> (metrics [W],
        returns [W, T], positions [W, T]). Computed first, under the first fold's statistics (as the file run)."""
        if self._bh is None:
            self._bh = {}
            if self.tcfg.eval_buy_and_hold:
                spans = [self._windows(f)[1:] for f in self.folds]
                starts, steps = np.concatenate([s for s, _ in spans]), np.concatenate([n for _, n in spans])
                ones = torch.ones((len(starts), int(steps.max())), dtype=torch.float32, device=self.market.device)
                res = self.backtester.run(starts, steps, ExposurePolicy(ones, self.trainer.env.n_actions), keep_curves=True,
                                          backend=self.plan.eval)
                assert res.returns is not None and res.positions is not None
                i = 0
                for f, (s, _) in zip(self.folds, spans):
                    j = i + len(s)
                    self._bh[f.fold] = (res.metrics[i:j], res.returns[i:j], res.positions[i:j])
                    i = j
        return self._bh

    def fold_score(self, fold: Any, agent: Any) -> tuple[dict[str, float], np.ndarray | None]:
        """``foxhunt tune``'s score of a universe fold: the metrics and per-date returns of the portfolio of
        the member symbols' validation returns (``tune.universe_weights``: inverse-volatility with each
        symbol's training volatility of the fold, or equal-weight; ``foxhunt.backtest.universe_walk``);
        its trade_count is the members' round trips summed (the ``tune.min_trades`` constraint)."""
        from foxhunt.backtest.universe_walk import FoldWindows, fold_portfolios, fold_training_vols

        mem, starts, steps = self._windows(fold)
        ts, m = self.market.timestamps_host, self.market
        fw = FoldWindows(fold.fold, mem, [ts[a: a + n + 1] for a, n in zip(starts, steps)],
                         {"agent": [agent.returns[w, : int(n)].astype(np.float64) for w, n in enumerate(steps)]},
                         {"agent": agent.metrics},
                         fold_training_vols([b.close for b in self.prepared.universe.bars], m.offsets_host, fold.bounds, mem))
        _, ports = fold_portfolios(m.n_symbols, fw, float(self.bars_per_year))
        p = ports[("agent", self.cfg.tune.universe_weights)]
        trades = float(sum(float(x.get("trade_count", 0.0)) for x in agent.metrics))
        return {**p.metrics, "trade_count": trades}, p.returns

    def _alternative(self, fold: Any, selection: dict[str, Any] | None, agent: Any) -> None:
        """As the file run's (reporting only), with pooled rows over the fold's member windows."""
        _, starts, steps = self._windows(fold)
        team = tuple(self._active or range(len(self.members)))
        done: dict[tuple[int, ...], dict[str, Any]] = {} if self._flat else {team: self._pooled(agent)}

        def validate(idx: Any) -> dict[str, Any]:
            key = tuple(idx)
            if key not in done:
                net = ensemble_net([self.members[i] for i in key])
                res = self.backtester.run(starts, steps, GreedyPolicy(net, self.intervals[key[0]]), backend=self.plan.model_eval,
                                          keep_curves=True)
                done[key] = self._pooled(res)
            return done[key]

        record = (selection or {}).get("abstain")
        if record is not None:
            abstain.add_alternative(record, lambda: validate(team))
        if (selection or {}).get("gamma_groups"):
            gamma_grid.add_group_validations(selection["gamma_groups"], validate, abstain.ALTERNATIVE_METRICS)

    def _pooled(self, res: Any) -> dict[str, Any]:
        return pooled_row(res.metrics, [res.returns[w, : int(n)] for w, n in enumerate(res.lengths)], self.bars_per_year)

    # ------------------------------------------------------------------ outputs
    def _write_fold(self, run_dir: Path, fold: Any, agent: Any, bh: Any, last: dict[str, Any] | None,
                    selection: dict[str, Any] | None = None) -> dict[str, Any]:
        """folds/fold_k/: metrics.json, model.safetensors + norm.safetensors, curves and trades as configured
        (``foxhunt.train.universe_outputs``)."""
        from safetensors.torch import save_file

        from foxhunt.agents.model_io import save_model

        d = run_dir / "folds" / f"fold_{fold.fold}"
        d.mkdir(parents=True, exist_ok=True)
        mem, starts, steps = self._windows(fold)
        m, ts, bpy = self.market, self.market.timestamps_host, self.bars_per_year
        a_ret = [agent.returns[w, : int(n)] for w, n in enumerate(steps)]
        pooled = pooled_row(agent.metrics, a_ret, bpy)
        bh_rows = None
        bh_pooled = timing = None
        if bh is not None:
            bh_rows, bh_r, bh_p = bh
            bh_ret = [bh_r[w, : int(n)] for w, n in enumerate(steps)]
            bh_pooled = pooled_row(bh_rows, bh_ret, bpy)
        pos = np.concatenate([agent.positions[w, : int(n)] for w, n in enumerate(steps)])
        trades = pooled.get("trade_count")
        timing = timing_block(np.concatenate(a_ret), pos, np.concatenate(bh_ret) if bh is not None else None, bpy,
                              trades if trades == trades else None)
        result = {
            "fold": {**fold.to_dict(), "universe": True},
            "val_first_time": str(np.datetime64(int(ts[starts.min()]), "ns")) + "Z",
            "val_last_time": str(np.datetime64(int(ts[(starts + steps).max()]), "ns")) + "Z",
            "epochs": self.tcfg.epochs, "seed": self.cfg.run.seed,
            "agent": pooled, "buy_and_hold": bh_pooled, "timing": timing, "last_epoch": last,
            "pooled": pooled,
            "symbols": symbol_rows([m.symbols[s] for s in mem], ts, starts, steps, agent.metrics, bh_rows),
        }
        if selection is not None:
            result["selection"] = selection
        report = registry.of(self.cfg).fold_report
        if report is not None:  # the learner's own out-of-sample evaluation, pooled over the member symbols
            result["learner_eval"] = report(self._team(), m, fold)
        write_json(d / "metrics.json", result)
        part = self._train_part.get(fold.fold, self._parts[fold.fold])
        f = m.n_features
        extra = {"universe": {"symbols": list(m.symbols), "members": [m.symbols[s] for s in mem],
                              "normalisation": "per symbol (norm.safetensors: mean, std [S, F] of each symbol's training "
                                               "rows); the network reads features already normalised"},
                 "medians": {"abs_return": m.median_abs_return.item(), "range": m.median_range.item(),
                             "volume": m.median_volume.item()},
                 "data_sha256": self.data_hash, "fold": fold.to_dict(), "run": self.cfg.run.name, "agent": self.cfg.train.agent}
        identity = NormStats(torch.zeros(f, dtype=torch.float64), torch.ones(f, dtype=torch.float64))
        env = self.cfg.env.model_copy(update={"decision_interval": int(self.fold_interval())})
        more = registry.of(self.cfg).model_extra
        if more is not None:  # what the learner's own evaluation of the model needs (the forecast's horizon)
            extra.update(more(self.cfg, env.decision_interval))
        save_model(d / "model.safetensors", self.fold_net(), identity, feature_names=tuple(m.names),
                   spec_version=m.spec_version, env=env.model_dump(mode="json"), extra=extra)
        stats = m.norm_stats_per_symbol(part)
        save_file({"mean": stats.mean.cpu().contiguous(), "std": stats.std.cpu().contiguous(),
                   "train_bounds": torch.as_tensor(part.bounds[:, :2]).contiguous()}, str(d / "norm.safetensors"))
        if self.tcfg.save_curves:
            write_universe_curves(d / "curves.safetensors", agent, bh[1] if bh is not None else None,
                                  bh[2] if bh is not None else None, mem)
        if self.tcfg.save_trades and agent.trades is not None:
            write_trades(d / "trades.csv", agent.trades, self.cfg.backtest.barriers)
        return result

    def finish(self, run_dir: Path, wall_s: float | None) -> list[dict[str, Any]]:
        """summary.json from the fold files (pooled rows, plus the portfolio and per-symbol rows) and, with
        ``train.report``, report.html: the universe's out-of-sample record (``foxhunt.train.universe_oos``:
        the quant rule beside the agent, the per-fold and stitched portfolios, the per-symbol sections).
        Both need ``train.save_curves`` and buy-and-hold (``train.eval_buy_and_hold``); without them
        summary.json has the pooled rows alone and no report is written."""
        from foxhunt.train.report import load_fold_results
        from foxhunt.train.universe_oos import read_walk_forward, summary_rows, write_universe_oos, write_universe_run_report

        write_universe_oos(run_dir, self)
        walk = read_walk_forward(run_dir, load_fold_results(run_dir), list(self.market.symbols), float(self.bars_per_year))
        extra = summary_rows(walk) if walk is not None else {"report": "none: the universe report needs train.save_curves "
                                                                      "and train.eval_buy_and_hold"}
        notes = (f"run {run_dir.name}: {self.market.n_symbols} symbols, {len(self.folds)} folds; one pooled {self.cfg.train.agent} "
                 f"agent a fold, each fold's model on its member symbols' validation windows; quant rule: per symbol and fold, "
                 f"the best causal rule on the symbol's training rows; portfolios: equal-weight and inverse-volatility "
                 f"(each fold's weights from the symbols' training rows), the folds joined in time order; annualisation: "
                 f"{float(self.bars_per_year):,.1f} bars per year")
        return write_summary(run_dir, wall_s, self.folds, market=self.market, cfg=self.cfg, epochs=self.tcfg.epochs,
                             bars_per_year=self.bars_per_year, annualisation=self.backtester.annualisation.describe(),
                             prepare_timings=self.prepared.timings, buy_and_hold_s=self.buy_and_hold_s,
                             data_hash=self.data_hash, report=self.tcfg.report and walk is not None, extra=extra,
                             write_report=lambda d: write_universe_run_report(d, walk, f"foxhunt train — universe run {d.name}",
                                                                              notes))
