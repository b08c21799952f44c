"""One agent per symbol on a universe (``train.pool = false``, issue 47): each symbol trained alone on its
own bars through the single-file runner, on the universe's folds, then written as a universe run.

The rule, per symbol s of the universe (its order):

* **Folds.** The universe's folds (``foxhunt.universe_folds``: the same dates for every symbol) that s
  is a member of, as indices into s's own bars (``UniverseFold.symbol_range``); a symbol in no fold
  trains nothing (a console line says so).
* **Training.** ``prepare_symbol`` (the single file's features, cache and upload) and
  ``WalkForwardRunner`` (every learner, ensembles, grids, selection, abstention, ``train.mirror``)
  with the run's configuration, seeded with ``run.seed`` like a run of that file alone, except:
  ``backtest.bars_per_year`` is the universe's one factor (the user's, else inferred from the union
  calendar, as ``foxhunt backtest --data DIR``: every row on one scale); with ``foxhunt train --data
  DIR`` and no ``--config``, ``env.reward_scale`` is the interval preset's for s's own bars (as
  ``--data FILE`` sets it) unless ``--set`` gave it; curves are always saved (the universe files are
  built from them). Where the symbols share a calendar, symbol s's run is therefore the run of its file
  alone, fold for fold (tests/universe/test_per_symbol.py).
* **Run directory.** ``symbols/<SYMBOL>/`` holds s's run, a complete single-file run directory (its
  config.toml, which names the symbol in ``data.symbols`` so that ``foxhunt backtest --run`` loads its
  bars alone; folds.json, folds/fold_k/ with model.safetensors and the quant rule's oos.safetensors
  (written whatever ``train.report``), checkpoints/, metrics.jsonl, summary.json, report.html as
  configured). The universe's own ``folds/fold_k/metrics.json`` and ``curves.safetensors``
  (``foxhunt.train.universe_outputs``' layout, the pooled run's) are built from the symbols' fold files
  after the last symbol: ``agent`` and ``pooled`` the pooled row of the member symbols' validation
  returns, ``symbols`` one row per member (its run's agent and buy-and-hold metrics, selection and last
  epoch), ``pool: false``; then summary.json with the pooled run's ``portfolio`` and ``symbols`` rows
  and, with ``train.report``, its universe report (``foxhunt.train.per_symbol_oos``). symbols.json
  (``plan_json``, written with config.toml in one atomic step) records each symbol's directory and
  env.reward_scale.
* **Resume.** ``--resume RUN`` makes the symbols' run directories a kill left unmade (from symbols.json,
  as they began), continues each symbol's run from its own last checkpoint (a finished one is left as
  it is), then rebuilds the universe files; the result equals an uninterrupted run's.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from foxhunt.backtest.annualisation import Annualisation, resolve_bars_per_year
from foxhunt.backtest.timing import timing_block
from foxhunt.config import Config
from foxhunt.errors import ConfigError
from foxhunt.universe_market import PooledFold

__all__ = ["SYMBOLS_DIR", "PLAN_FILE", "PerSymbolPrepared", "PerSymbolRunner", "per_symbol_prepared", "symbol_dir_name",
           "plan_json", "read_reward_scales"]

SYMBOLS_DIR = "symbols"
PLAN_FILE = "symbols.json"


@dataclass
class PerSymbolPrepared:
    """A universe prepared for one agent per symbol: ``folds`` are the universe's folds on the union
    ``calendar`` (folds.json), ``universe_folds`` their per-symbol rows; ``reward_scales`` {symbol: the
    interval preset's env.reward_scale of its bars} or None (the configuration's for every symbol)."""

    config: Config
    universe: Any
    universe_folds: list[Any]
    folds: list[PooledFold]
    calendar: np.ndarray
    annualisation: Annualisation
    timings: dict[str, float]
    fold_note: str | None = None
    reward_scales: dict[str, float] | None = None

    def symbol_folds(self, s: int) -> list[Any]:
        """Symbol s's folds (those it is a member of) as FoldRanges into its own bars."""
        return [uf.symbol_range(s, self.universe.offsets) for uf in self.universe_folds if uf.member[s]]


def per_symbol_prepared(cfg: Config, universe: Any, layout: str = "config",
                        reward_scales: dict[str, float] | None = None) -> PerSymbolPrepared:
    """The universe's folds laid out and every symbol's folds checked against the configuration
    (ConfigError / FoldError before any feature is built or anything written)."""
    from foxhunt.agents import registry
    from foxhunt.features import spec
    from foxhunt.features.cache import require_formed_rows
    from foxhunt.train.preflight import check_folds
    from foxhunt.train.selection import split_fold
    from foxhunt.universe_folds import universe_folds

    t0 = time.perf_counter()
    for bars in universe.bars:
        require_formed_rows(bars)
    cfg, ufolds, note, calendar = universe_folds(cfg, universe, spec.WARMUP, layout=layout)
    p = PerSymbolPrepared(cfg, universe, ufolds, [PooledFold.of(uf) for uf in ufolds], calendar,
                          resolve_bars_per_year(calendar, cfg.backtest.bars_per_year), {}, note, reward_scales)
    learner = registry.of(cfg)
    inner = cfg.train.select == "inner"
    for s, sym in enumerate(universe.symbols):
        folds = p.symbol_folds(s)
        try:
            check_folds(cfg, folds)
            if learner.check is not None:
                learner.check(cfg, [split_fold(f, cfg.train.inner_fraction, cfg.folds.purge)[0] if inner else f for f in folds])
        except ConfigError as exc:  # the file run's one line, naming the symbol
            raise ConfigError(f"symbol {sym}: {exc}") from None
    p.timings = {"load_s": time.perf_counter() - t0, "features_s": 0.0, "upload_s": 0.0}
    return p


def plan_json(prepared: PerSymbolPrepared) -> str:
    """symbols.json of the universe run (written with config.toml, atomically, before any symbol's run
    directory): per symbol its directory under ``symbols/`` and its env.reward_scale (None: the
    configuration's), so that a run killed before its symbols' directories were made resumes them as begun."""
    u, scales = prepared.universe, prepared.reward_scales or {}
    return json.dumps({"symbols": [{"symbol": sym, "dir": f"{SYMBOLS_DIR}/{symbol_dir_name(sym, s)}", "reward_scale": scales.get(sym)}
                                   for s, sym in enumerate(u.symbols)]}, indent=1) + "\n"


def read_reward_scales(run_dir: Path) -> dict[str, float] | None:
    """The per-symbol env.reward_scale symbols.json records, or None (the configuration's; no file)."""
    path = run_dir / PLAN_FILE
    if not path.is_file():
        return None
    scales = {r["symbol"]: r["reward_scale"] for r in json.loads(path.read_text())["symbols"]}
    return None if any(v is None for v in scales.values()) else {k: float(v) for k, v in scales.items()}


def symbol_dir_name(symbol: str, s: int) -> str:
    """The directory of symbol s's run under ``symbols/``: the symbol itself where it is a plain file
    name (letters, digits, ``._-=^``, not starting with a dot), else ``s<index>-`` and it made one."""
    if re.fullmatch(r"[A-Za-z0-9_=^-][A-Za-z0-9._=^-]*", symbol):
        return symbol
    return f"s{s:04d}-" + re.sub(r"[^A-Za-z0-9._=^-]", "_", symbol).lstrip(".")


class PerSymbolRunner:
    """One agent per symbol over a universe (module docstring)."""

    def __init__(self, prepared: PerSymbolPrepared, console: Any = None) -> None:
        self.prepared = prepared
        self.cfg = prepared.config
        self.console = console
        self.bars_per_year = prepared.annualisation.bars_per_year
        self.timings = dict(prepared.timings)

    def use_config(self, resolved: Config) -> None:
        """Adopt the resolved config written into the run directory (run.name filled in)."""
        self.cfg = resolved

    def symbol_config(self, run_dir: Path, s: int) -> Config:
        """Symbol s's run configuration (module docstring: what differs from the universe run's)."""
        sym = self.prepared.universe.symbols[s]
        env = {"reward_scale": self.prepared.reward_scales[sym]} if self.prepared.reward_scales else {}
        # data.symbols names the one symbol: the run's config.toml loads its bars alone (foxhunt backtest --run)
        return self.cfg.replace(run={"name": symbol_dir_name(sym, s), "out_dir": str(run_dir / SYMBOLS_DIR)},
                                data={"symbols": [sym]},
                                backtest={"bars_per_year": self.bars_per_year}, train={"save_curves": True},
                                **({"env": env} if env else {}))

    def create_symbol_dirs(self, run_dir: Path) -> None:
        """Every training symbol's run directory not made yet (config.toml, folds.json: ``create_run_dir``,
        atomic), made when the universe run starts, so that a resumed run reads each symbol's configuration
        as it began; a resumed run makes those a kill left unmade (and drops a half-made one's temporary)."""
        import shutil

        from foxhunt.train.run_dir import create_run_dir

        u = self.prepared.universe
        for s, sym in enumerate(u.symbols):
            folds = self.prepared.symbol_folds(s)
            name = symbol_dir_name(sym, s)
            if folds and not (run_dir / SYMBOLS_DIR / name).exists():
                for tmp in (run_dir / SYMBOLS_DIR).glob(f".tmp-{name}-*"):  # create_run_dir's, left by a kill
                    shutil.rmtree(tmp, ignore_errors=True)
                cfg = self.symbol_config(run_dir, s)
                create_run_dir(cfg, SimpleNamespace(folds=folds, calendar=u.bars[s].timestamps), cfg.run.name)  # type: ignore[arg-type]

    def run(self, run_dir: Path) -> list[dict[str, Any]]:
        """Train every symbol from its run directory (``create_symbol_dirs``; a finished one is left as it
        is, a started one continues from its last checkpoint), then write the universe files."""
        from foxhunt.pipeline import prepare_symbol
        from foxhunt.train.oos import OOS_FILE, write_oos
        from foxhunt.train.run_dir import check_resume, is_complete, read_run_dir
        from foxhunt.train.runner import WalkForwardRunner

        t_run = time.perf_counter()
        u = self.prepared.universe
        self.create_symbol_dirs(run_dir)  # a run killed while making them: the rest now
        for s, sym in enumerate(u.symbols):
            folds = self.prepared.symbol_folds(s)
            head = f"symbol {sym} ({s + 1}/{len(u)})"
            if not folds:
                self._say(f"{head}: a member of no fold (data.min_train_bars); nothing to train")
                continue
            sub = run_dir / SYMBOLS_DIR / symbol_dir_name(sym, s)
            cfg, point = read_run_dir(sub)
            prepared = prepare_symbol(cfg, u.bars[s], folds)
            check_resume(sub, cfg, prepared, point)
            for key in ("features_s", "upload_s"):
                self.timings[key] += prepared.timings[key]
            runner = None
            if is_complete(point, len(folds)):
                self._say(f"{head}: complete ({SYMBOLS_DIR}/{sub.name})")
            else:
                where = "" if point.path is None else f", resuming from {point.path.name}"
                self._say(f"{head}: {len(folds)} folds, {len(u.bars[s])} bars; run {SYMBOLS_DIR}/{sub.name}{where}")
                runner = WalkForwardRunner(prepared, self.console)
                runner.run(sub, point if point.path is not None else None)
            if not all((sub / "folds" / f"fold_{f.fold}" / OOS_FILE).is_file() for f in folds):
                # the quant rule of the universe's portfolios (the symbol's run writes it with train.report)
                write_oos(sub, runner or WalkForwardRunner(prepared, None))
        return self.finish(run_dir, time.perf_counter() - t_run)

    def _say(self, line: str) -> None:
        if self.console is not None:
            self.console.print(line, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------------ the universe files
    def finish(self, run_dir: Path, wall_s: float | None) -> list[dict[str, Any]]:
        """The universe's fold files from the symbols' runs, then summary.json (with the portfolio and
        per-symbol rows: ``foxhunt.train.per_symbol_oos``) and, with ``train.report``, report.html (the
        pooled run's universe report); returns the fold results."""
        from foxhunt.features.universe import universe_sha256
        from foxhunt.train.outputs import write_json, write_summary
        from foxhunt.train.per_symbol_oos import read_walk_forward
        from foxhunt.train.universe_oos import summary_rows, write_universe_run_report

        p, u = self.prepared, self.prepared.universe
        for fold, uf in zip(p.folds, p.universe_folds):
            d = run_dir / "folds" / f"fold_{fold.fold}"
            d.mkdir(parents=True, exist_ok=True)
            result, timings = self._fold_files(run_dir, d, fold, uf)
            write_json(d / "metrics.json", result)
            write_json(d / "timings.json", timings)
        data_hash = universe_sha256(u.symbols, [b.content_hash() for b in u.bars])
        market = SimpleNamespace(device=self.cfg.run.device, n_bars=u.n_bars)
        walk = read_walk_forward([run_dir / SYMBOLS_DIR / symbol_dir_name(sym, k) for k, sym in enumerate(u.symbols)], p)
        extra = summary_rows(walk) if walk is not None else {"report": "none: the universe report needs train.eval_buy_and_hold"}
        notes = (f"run {run_dir.name}: {len(u)} symbols, {len(p.folds)} folds; one {self.cfg.train.agent} agent per symbol "
                 f"(train.pool = false), each symbol's run ({SYMBOLS_DIR}/<symbol>) on its own bars; each fold's models on "
                 "their validation windows; quant rule: per symbol and fold, the best causal rule on the symbol's training "
                 "rows; portfolios: equal-weight and inverse-volatility-weighted (each fold's weights from the symbols' "
                 f"training rows), the folds joined in time order; annualisation: {p.annualisation.describe()}")
        return write_summary(run_dir, wall_s, p.folds, market=market, cfg=self.cfg, epochs=self.cfg.train.epochs,  # type: ignore[arg-type]
                             bars_per_year=self.bars_per_year, annualisation=p.annualisation.describe(),
                             prepare_timings=self.timings, buy_and_hold_s=0.0, data_hash=data_hash,
                             report=self.cfg.train.report and walk is not None, extra=extra,
                             write_report=lambda d: write_universe_run_report(d, walk, f"foxhunt train — universe run {d.name} "
                                                                              "(one agent per symbol)", notes))

    def _fold_files(self, run_dir: Path, d: Path, fold: PooledFold, uf: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(folds/fold_k/metrics.json, timings.json) of the universe from its member symbols' fold files,
        and curves.safetensors (``train.save_curves``)."""
        from safetensors.numpy import load_file

        from foxhunt.train.universe_outputs import pooled_row, symbol_rows, write_universe_curves

        u, bpy = self.prepared.universe, self.bars_per_year
        mem = np.flatnonzero(uf.member)
        names = [u.symbols[s] for s in mem]
        rows, curves, timings = [], [], {"transition_s": 0.0, "train_s": 0.0, "eval_s": 0.0, "symbols": {}}
        for s in mem:
            sd = run_dir / SYMBOLS_DIR / symbol_dir_name(u.symbols[s], s) / "folds" / f"fold_{fold.fold}"
            rows.append(json.loads((sd / "metrics.json").read_text()))
            curves.append(load_file(str(sd / "curves.safetensors")))
            t = json.loads((sd / "timings.json").read_text())
            for key in ("transition_s", "train_s", "eval_s"):
                timings[key] += float(t.get(key) or 0.0)
            timings["symbols"][u.symbols[s]] = t
        starts, steps = uf.bounds[mem, 2], uf.bounds[mem, 3] - uf.bounds[mem, 2] - 1
        a_ret = [c["agent_returns"].astype(np.float64) for c in curves]
        a_pos = [c["agent_positions"].astype(np.float64) for c in curves]
        agent = [r["agent"] for r in rows]
        bh = [r["buy_and_hold"] for r in rows] if all(r.get("buy_and_hold") for r in rows) else None
        pooled = pooled_row(agent, a_ret, bpy)
        bh_ret = [c["bh_returns"].astype(np.float64) for c in curves] if bh is not None else None
        trades = pooled.get("trade_count")
        timing = timing_block(np.concatenate(a_ret), np.concatenate(a_pos), np.concatenate(bh_ret) if bh_ret else None, bpy,
                              trades if trades == trades else None)
        per = symbol_rows(names, u.timestamps, starts, steps, agent, bh)
        for row, r, s in zip(per, rows, mem):
            row.update(run=f"{SYMBOLS_DIR}/{symbol_dir_name(u.symbols[s], s)}", timing=r.get("timing"),
                       last_epoch=r.get("last_epoch"), **({"selection": r["selection"]} if "selection" in r else {}))
        ts = u.timestamps
        result = {
            "fold": {**fold.to_dict(), "universe": True}, "pool": False,
            "val_first_time": str(np.datetime64(int(ts[starts].min()), "ns")) + "Z",
            "val_last_time": str(np.datetime64(int(ts[starts + steps].max()), "ns")) + "Z",
            "epochs": self.cfg.train.epochs, "seed": self.cfg.run.seed,
            "agent": pooled, "buy_and_hold": pooled_row(bh, bh_ret, bpy) if bh is not None and bh_ret is not None else None,
            "timing": timing, "last_epoch": None, "pooled": pooled, "symbols": per,
        }
        if self.cfg.train.save_curves:
            n = int(steps.max())

            def pad(xs: list[np.ndarray]) -> np.ndarray:
                out = np.zeros((len(xs), n), dtype=np.float64)
                for w, x in enumerate(xs):
                    out[w, : x.shape[0]] = x
                return out

            res = SimpleNamespace(lengths=steps, returns=pad(a_ret), positions=pad(a_pos))
            have_bh = bh_ret is not None
            write_universe_curves(d / "curves.safetensors", res, pad(bh_ret) if have_bh else None,  # type: ignore[arg-type]
                                  pad([c["bh_positions"].astype(np.float64) for c in curves]) if have_bh else None, mem)
        return result, timings
