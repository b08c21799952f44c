"""Pooled training against one agent per symbol against the in-sample quant rule, on universes of the
procedural family (``foxhunt.scorecard.family.universe``): S symbols sharing an edge form (each its own
noise and latent path), and universes with no edge.

Per universe and seed, the same configuration is trained twice through the library's runners: pooled
(``train.pool = true``: one agent a fold on every symbol's training bars) and one agent per symbol
(``train.pool = false``). Each run's per-symbol validation returns (folds/fold_k/curves.safetensors)
are stitched over the folds and held together as the equal-weight portfolio on the union calendar
(``backtest.portfolio``); the quant rule (chosen per symbol and fold on that fold's training bars only),
buy-and-hold and each symbol's best oracle rule are backtested on the same windows with the same costs
and made into the same portfolios. Sharpe standard error: sqrt(bars_per_year / T), T portfolio dates.

A run the learner's guard halts (``TrainingHalted``: e.g. Q-value divergence) is listed under ``errors``
and not scored. Gates (reported, never tuned toward; HELD-OUT universes by default, as the family's rule asks):

* pooled >= per-symbol: on each edge universe, the mean over seeds of the pooled portfolio's Sharpe is
  at least the per-symbol agents' portfolio's;
* pooled >= 100 % of the quant rule: on each edge universe whose quant portfolio's Sharpe beats 2 SE;
* no-edge flat: on each no-edge universe, every run's portfolio Sharpe >= -2 SE and its mean turnover
  <= 0.02 (the scorecard's no-edge rule: at most one round trip a 100 bars).

    PYTHONPATH=src:. python -m bench.bench_universe_learning --universes 0,1,2 --symbols 6 --seeds 0,1,2 --epochs 4

JSON: bench/results/universe_learning_<agent>_<device>.json, written after every run. Universes run as
separate processes (``--name <stem>_part_a`` …) are pooled by ``--merge <stem>`` (gates over every row).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import arguments, machine, parse, save
from foxhunt.backtest.annualisation import infer_bars_per_year
from foxhunt.backtest.portfolio import portfolios, union_axis
from foxhunt.agents.fold_trainer import TrainingHalted
from foxhunt.config import apply_overrides, build_config
from foxhunt.scorecard.family import FAMILIES
from foxhunt.scorecard.family.universe import FamilyUniverse, universe_draw, write_universe
from foxhunt.scorecard.run import MAX_NO_EDGE_TURNOVER
from foxhunt.train.config import DEFAULT_TRAIN_TOML
from foxhunt.train.interval_presets import sets_reward_scale, symbol_reward_scales, universe_preset

MODES = ("pooled", "per_symbol")


def run_config(u: FamilyUniverse, data_dir: Path, out: Path, seed: int, args: Any) -> Any:
    """The built-in daily train settings with the data-fitted values ``foxhunt train --data DIR`` sets (the
    universe's interval preset: env.reward_scale from the median symbol's volatility), the universe's folds
    and costs, train.select = inner, ``--set``."""
    d = tomllib.loads(DEFAULT_TRAIN_TOML)
    for section, values in universe_preset(list(u.bars)).as_sections().items():
        d[section] = {**d.get(section, {}), **values}
    lay = u.params["layout"]
    d["data"] = {"source": "file", "path": str(data_dir)}
    d["folds"] = {**d.get("folds", {}), "train": lay["train"], "val": lay["val"], "max_folds": lay["folds"], "mode": "expanding"}
    d["env"] = {**d.get("env", {}), **u.env}
    d["run"] = {"seed": seed, "device": args.device if args.device != "auto" else "cpu", "out_dir": str(out)}
    d["features"] = {"cache_dir": str(out / "cache")}
    d["train"] = {**d.get("train", {}), "agent": args.agent, "epochs": args.epochs, "select": "inner", "tensorboard": False,
                  "report": False, "progress": False, "checkpoint_every": 0, "save_trades": False}
    apply_overrides(d, list(args.overrides))
    return build_config(d, source="<bench universe_learning>")


def train(cfg: Any, mode: str, name: str, own_scales: bool = True) -> tuple[Path, float]:
    """One universe run (``mode``: pooled | per_symbol) through the runners ``foxhunt train`` uses; own_scales: each
    symbol of a per-symbol run gets its own preset reward scale (False: ``--set env.reward_scale`` gave one)."""
    from foxhunt.data.universe import config_sources, load_universe
    from foxhunt.train.run_dir import create_run_dir

    t0 = time.perf_counter()
    universe = load_universe(config_sources(cfg.data), cfg.data)
    if mode == "pooled":
        from foxhunt.pipeline import prepare_universe
        from foxhunt.train.universe_runner import UniverseRunner, pooled_prepared

        prepared: Any = pooled_prepared(cfg, prepare_universe(cfg, universe=universe))
        runner: Any = UniverseRunner(prepared)
    else:
        from foxhunt.train.per_symbol import PerSymbolRunner, per_symbol_prepared

        cfg = cfg.replace(train={"pool": False})
        # each symbol's own reward scale, as `foxhunt train --data DIR --set train.pool=false` sets it
        scales = symbol_reward_scales(universe.symbols, universe.bars) if own_scales else None
        prepared = per_symbol_prepared(cfg, universe, reward_scales=scales)
        runner = PerSymbolRunner(prepared)
    run_dir, resolved = create_run_dir(prepared.config, prepared, name)
    runner.use_config(resolved)
    if mode != "pooled":
        runner.create_symbol_dirs(run_dir)
    runner.run(run_dir)
    return run_dir, time.perf_counter() - t0


def stitched(run_dir: Path, u: FamilyUniverse, subset: bool = False
             ) -> tuple[list[list[np.ndarray]], list[np.ndarray], dict[str, Any]]:
    """Per symbol (S), its validation returns over the run's folds and their bar times, from the universe
    fold files; and the run's facts (per-fold pooled Sharpe, flat folds, turnover). subset: ``u`` holds
    some of the run's symbols (bench/universe_mirror_experiment.py: the originals, not their mirrors); the
    others' windows are left out of the returns, turnover and time in market."""
    from safetensors.numpy import load_file

    rets: list[list[np.ndarray]] = [[] for _ in u.symbols]
    pos: list[list[np.ndarray]] = [[] for _ in u.symbols]
    times: list[list[np.ndarray]] = [[] for _ in u.symbols]
    ts = [b.timestamps for b in u.bars]
    facts: dict[str, Any] = {"fold_pooled_sharpe": [], "flat": [], "unabstained_sharpe": []}
    for f in sorted((run_dir / "folds").glob("fold_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        m = json.loads(f.read_text())
        c = load_file(str(f.parent / "curves.safetensors"))
        facts["fold_pooled_sharpe"].append(m["pooled"]["sharpe"])
        # an abstained fold's record holds what its agent would have scored on the window (abstain.all_members)
        if m.get("pool") is False:
            recs = [((r.get("selection") or {}).get("abstain") or {}) for r in m["symbols"]]
        else:
            recs = [((m.get("selection") or {}).get("abstain") or {})]
        facts["flat"].append([bool(r.get("flat")) for r in recs])
        facts["unabstained_sharpe"].append([(r.get("all_members") or {}).get("sharpe") for r in recs])
        for w, row in enumerate(m["symbols"]):
            if subset and row["symbol"] not in u.symbols:
                continue
            s = u.symbols.index(row["symbol"])
            n = int(c["lengths"][w])
            start = int(np.searchsorted(ts[s], np.datetime64(row["val_first_time"].rstrip("Z"), "ns").astype(np.int64)))
            rets[s].append(c["agent_returns"][w, :n].astype(np.float64))
            pos[s].append(c["agent_positions"][w, :n].astype(np.float64))
            times[s].append(ts[s][start + 1: start + 1 + n])
    turn = [float(np.abs(np.diff(np.concatenate([[0.0], np.concatenate(p)]))).mean()) for p in pos if p]
    facts["turnover"] = float(np.mean(turn)) if turn else 0.0
    facts["time_in_market"] = float(np.mean([np.mean(np.abs(np.concatenate(p)) > 0) for p in pos if p]))
    return [[np.concatenate(r)] for r in rets], [np.concatenate(t) for t in times], facts


def references(cfg: Any, u: FamilyUniverse, bpy: float) -> tuple[dict[str, list[np.ndarray]], list[np.ndarray]]:
    """{buy_and_hold, quant, oracle: S stitched validation returns} and S time arrays, on the universe's folds."""
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.quant_rules import quant_exposures
    from foxhunt.data.universe import config_sources, load_universe
    from foxhunt.pipeline import prepare_symbol
    from foxhunt.scorecard.policies import score_exposures
    from foxhunt.train.per_symbol import per_symbol_prepared

    universe = load_universe(config_sources(cfg.data), cfg.data)
    p = per_symbol_prepared(cfg.replace(train={"pool": False}), universe)
    out: dict[str, list[np.ndarray]] = {"buy_and_hold": [], "quant": [], "oracle": []}
    times = []
    for s, sym in enumerate(universe.symbols):
        j = u.symbols.index(sym)
        folds = p.symbol_folds(s)
        prep = prepare_symbol(cfg, universe.bars[s], folds)
        bt = Backtester(prep.market, cfg.env, cuda_graphs=False, bars_per_year=bpy)
        qx, _ = quant_exposures(prep.bars.close, prep.bars.volume, folds, cfg.env, bpy)
        best = u.params["symbols"][j]["best_oracle"]
        rules = {"buy_and_hold": np.ones(len(prep.bars)), "quant": lambda f: qx[f.fold], "oracle": u.oracles[j][best]}
        scores = score_exposures(prep.market, bt, folds, rules, int(cfg.env.n_actions), float(cfg.env.capital))
        for k in out:
            out[k].append(np.concatenate([f.returns.astype(np.float64) for f in scores[k].folds]))
        ts = prep.bars.timestamps
        times.append(np.concatenate([ts[f.val_start + 1: f.val_end] for f in folds]))
    return out, times


def portfolio_row(times: list[np.ndarray], returns: list[np.ndarray], bpy: float) -> dict[str, float]:
    """The equal-weight portfolio of S symbols' returns on the union of their times: Sharpe, its SE, dates."""
    axis, grids = union_axis(times, {"x": returns})
    port = portfolios(grids, np.ones(len(times)), bars_per_year=bpy, rules=("equal",))[("x", "equal")]
    t = int(axis.shape[0])
    sharpe = float(port.metrics["sharpe"])
    return {"sharpe": sharpe if math.isfinite(sharpe) else 0.0, "se": math.sqrt(bpy / t), "dates": t,
            "total_return": float(port.metrics["total_return"])}


def gates(rows: list[dict[str, Any]], refs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The module docstring's gates over the rows measured so far."""
    out = []
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["universe"], r["mode"]), []).append(r)
    for name, ref in refs.items():
        pooled, per = by.get((name, "pooled"), []), by.get((name, "per_symbol"), [])
        if ref["kind"] == "edge" and pooled and per:
            a, b = np.mean([r["portfolio"]["sharpe"] for r in pooled]), np.mean([r["portfolio"]["sharpe"] for r in per])
            out.append({"name": "pooled >= per-symbol", "universe": name, "pooled": a, "per_symbol": b, "passed": bool(a >= b)})
            q = ref["quant"]
            if q["sharpe"] > 2 * q["se"]:
                out.append({"name": "pooled >= 100 % of the quant rule", "universe": name, "pooled": a, "quant": q["sharpe"],
                            "quant_se": q["se"], "capture": a / q["sharpe"], "passed": bool(a >= q["sharpe"])})
            else:
                out.append({"name": "pooled >= 100 % of the quant rule", "universe": name, "quant": q["sharpe"], "quant_se": q["se"],
                            "passed": None, "why": "the quant rule's portfolio does not beat 2 SE: not gated"})
        elif ref["kind"] == "no_edge":
            for mode, rs in (("pooled", pooled), ("per_symbol", per)):
                if rs:
                    ok = all(r["portfolio"]["sharpe"] >= -2 * r["portfolio"]["se"] and r["turnover"] <= MAX_NO_EDGE_TURNOVER for r in rs)
                    out.append({"name": "no-edge flat", "universe": name, "mode": mode, "sharpes": [r["portfolio"]["sharpe"] for r in rs],
                                "turnovers": [r["turnover"] for r in rs], "passed": bool(ok)})
    return out


def merge(stem: str, results: Path | None = None) -> Path:
    """``<stem>_part_*.json`` (universes run as separate processes) into ``<stem>.json``: their rows, references
    and universes together and the gates over all of them; the parts are removed."""
    import bench.common

    root = results or bench.common.RESULTS
    parts = sorted(root.glob(f"{stem}_part_*.json"))
    if not parts:
        raise FileNotFoundError(f"no {stem}_part_*.json in {root}")
    docs = [json.loads(p.read_text()) for p in parts]
    doc = {**docs[0], "rows": [r for d in docs for r in d["rows"]], "parts": [p.name for p in parts],
           "errors": [e for d in docs for e in d.get("errors", [])],
           "references": {k: v for d in docs for k, v in d["references"].items()},
           "universes": {k: v for d in docs for k, v in d["universes"].items()}}
    doc["gates"] = gates(doc["rows"], doc["references"])
    out = bench.common._write(root / f"{stem}.json", doc)
    for p in parts:
        p.unlink()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--family", default="heldout", choices=sorted(FAMILIES), help="heldout (report only; default) | dev")
    ap.add_argument("--universes", default="0,1,2", help="universe indices (comma-separated; the form is PATTERN[i %% 12])")
    ap.add_argument("--symbols", type=int, default=6)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--agent", default="dqn", choices=("dqn", "ppo", "direct", "forecast"))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--size", default="tiny", help="the family's layouts of this size (tiny: 2,600 bars, 2 folds of 400)")
    ap.add_argument("--merge", default=None, help="merge bench/results/<STEM>_part_*.json into <STEM>.json and exit")
    args = parse(ap, argv)
    if args.merge:
        print(merge(args.merge))
        return
    if args.quick:
        args.universes, args.symbols, args.seeds, args.epochs, args.size = "1", 2, "0", 1, "tiny"
        args.overrides = [*args.overrides, "dqn.rounds_per_epoch=2", "dqn.warmup_transitions=64", "dqn.n_envs=16",
                          "dqn.batch_size=32", "dqn.hidden=[16]", "dqn.head_hidden=8", "dqn.buffer_capacity=2048"]
    torch.set_num_threads(args.threads or 1)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    stem = f"universe_learning_{args.agent}_{dev}" + ("_quick" if args.quick else "")
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    refs: dict[str, dict[str, Any]] = {}
    modes = [m for m in args.modes.split(",") if m]

    def persist() -> None:  # written after every run: a run stopped early keeps what it measured
        save(args, stem, {"family": args.family, "agent": args.agent, "symbols": args.symbols, "size": args.size,
                          "epochs": args.epochs, "overrides": args.overrides, "config": "built-in daily train "
                          "settings (configs/train-default.toml) + the interval preset of foxhunt train --data DIR (reward "
                          "scale from the median symbol's volatility; per symbol its own) + the universe's folds and costs "
                          "+ train.select=inner",
                          "bars_per_year": bpy, "references": {k: {kk: vv for kk, vv in v.items() if kk != "params"}
                                                               for k, v in refs.items()},
                          "universes": {k: v["params"] for k, v in refs.items()},
                          "rows": rows, "errors": errors, "gates": gates(rows, refs),
                          "machine": machine(torch.device(dev))})

    with tempfile.TemporaryDirectory() as tmp:
        for index in [int(i) for i in args.universes.split(",")]:
            u = universe_draw(args.family, index, args.symbols, size=args.size)
            data = write_universe(u, Path(tmp) / u.name)
            base = run_config(u, data, Path(tmp) / "runs", 0, args)
            bpy = infer_bars_per_year(np.unique(np.concatenate([b.timestamps for b in u.bars])))
            ref_ret, ref_t = references(base, u, bpy)
            refs[u.name] = {"kind": u.kind, "form": u.form, "params": u.params,
                            **{k: portfolio_row(ref_t, v, bpy) for k, v in ref_ret.items()}}
            print(f"{u.name}: quant {refs[u.name]['quant']['sharpe']:+.2f} oracle {refs[u.name]['oracle']['sharpe']:+.2f} "
                  f"buy&hold {refs[u.name]['buy_and_hold']['sharpe']:+.2f} (SE {refs[u.name]['quant']['se']:.2f})", flush=True)
            for seed in [int(s) for s in args.seeds.split(",")]:
                for mode in modes:
                    cfg = run_config(u, data, Path(tmp) / "runs", seed, args)
                    try:
                        run_dir, wall = train(cfg, mode, f"{u.name}-{mode}-{seed}",
                                               not sets_reward_scale(args.overrides))
                    except TrainingHalted as exc:  # the guard stopped a learner: recorded, not scored, the run goes on
                        errors.append({"universe": u.name, "mode": mode, "seed": seed, "error": str(exc)})
                        print(f"  seed {seed} {mode:<10} HALTED: {exc}", flush=True)
                        persist()
                        continue
                    per, times, facts = stitched(run_dir, u)
                    row = {"universe": u.name, "kind": u.kind, "form": u.form, "mode": mode, "seed": seed, "wall_s": wall,
                           "portfolio": portfolio_row(times, [p[0] for p in per], bpy), **facts}
                    rows.append(row)
                    print(f"  seed {seed} {mode:<10} portfolio Sharpe {row['portfolio']['sharpe']:+.2f} turnover "
                          f"{row['turnover']:.3f} flat {row['flat']} ({wall:.0f} s)", flush=True)
                    persist()
    for g in gates(rows, refs):
        print(json.dumps(g, default=float))


if __name__ == "__main__":
    main()
