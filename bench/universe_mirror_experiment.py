"""An experiment (issue 47), not a benchmark of a feature: pooled training on a development universe plus its
mirror (each symbol's bars reflected: foxhunt.data.mirror.mirror_bars, added as extra symbols U..M); scored on the ORIGINAL symbols' validation returns only, against the same references as
bench_universe_learning. It stands in for train.mirror, which universes refuse today; unlike train.mirror, the held-back
selection and the abstention also see the mirrored symbols. docs/LEARNING.md ("Universes") cites its results:

    PYTHONPATH=src:. python -m bench.universe_mirror_experiment --universes 0 --seeds 0,1,2 --epochs 4 \
      --set 'features.ema_horizons=[10,30,100]' --set train.train_cost_multiplier=2 \
      --out bench/results/universe_learning_dqn_cpu_dev_ema_c2_mirroruniv_exp.json
"""
import argparse, json, time, tempfile, dataclasses
from pathlib import Path
from types import SimpleNamespace
import numpy as np, torch
from bench.bench_universe_learning import run_config, train, stitched, references, portfolio_row, gates
from bench.common import machine, _write
from foxhunt.scorecard.family.universe import universe_draw, write_universe, FamilyUniverse
from foxhunt.backtest.annualisation import infer_bars_per_year
from foxhunt.data.mirror import mirror_bars
from foxhunt.agents.fold_trainer import TrainingHalted
ap = argparse.ArgumentParser()
ap.add_argument("--universes", default="0"); ap.add_argument("--seeds", default="0,1,2"); ap.add_argument("--epochs", type=int, default=4)
ap.add_argument("--agent", default="dqn"); ap.add_argument("--set", dest="overrides", action="append", default=[]); ap.add_argument("--out", required=True)
a = ap.parse_args(); torch.set_num_threads(1)
args = SimpleNamespace(device="cpu", agent=a.agent, epochs=a.epochs, overrides=a.overrides)
rows, refs, errors = [], {}, []
with tempfile.TemporaryDirectory() as tmp:
    for index in [int(i) for i in a.universes.split(",")]:
        u = universe_draw("dev", index, 6)
        mb = tuple(dataclasses.replace(mirror_bars(b), source=b.source + " (mirror)") for b in u.bars)
        u2 = FamilyUniverse(u.name, u.kind, u.form, u.symbols + tuple(s + "M" for s in u.symbols), u.bars + mb,
                            u.oracles + tuple({k: -v for k, v in o.items()} for o in u.oracles), u.env, u.params)
        data0 = write_universe(u, Path(tmp) / u.name)
        data2 = write_universe(u2, Path(tmp) / (u.name + "_mirror"))
        base = run_config(u, data0, Path(tmp) / "runs0", 0, args)
        bpy = infer_bars_per_year(np.unique(np.concatenate([b.timestamps for b in u.bars])))
        rr, rt = references(base, u, bpy)
        refs[u.name] = {"kind": u.kind, "form": u.form, **{k: portfolio_row(rt, v, bpy) for k, v in rr.items()}}
        print(f"{u.name}: quant {refs[u.name]['quant']['sharpe']:+.2f}", flush=True)
        for seed in [int(s) for s in a.seeds.split(",")]:
            cfg = run_config(u2, data2, Path(tmp) / "runs", seed, args)
            try:
                run_dir, wall = train(cfg, "pooled", f"{u.name}-mirror-{seed}")
            except TrainingHalted as exc:
                errors.append({"universe": u.name, "seed": seed, "error": str(exc)}); print("HALTED", exc); continue
            per, times, facts = stitched(run_dir, u2)
            n = len(u.symbols)
            # facts' turnover/time in market over the original symbols only
            row = {"universe": u.name, "kind": u.kind, "form": u.form, "mode": "pooled", "seed": seed, "wall_s": wall,
                   "portfolio": portfolio_row(times[:n], [p[0] for p in per[:n]], bpy),
                   "portfolio_with_mirror": portfolio_row(times, [p[0] for p in per], bpy),
                   "fold_pooled_sharpe": facts["fold_pooled_sharpe"], "flat": facts["flat"]}
            # turnover of original symbols: recompute from the run's curves
            from safetensors.numpy import load_file
            pos = {s: [] for s in u.symbols}
            for f in sorted((run_dir / "folds").glob("fold_*/metrics.json"), key=lambda p: int(p.parent.name.split("_")[1])):
                m = json.loads(f.read_text()); c = load_file(str(f.parent / "curves.safetensors"))
                for w, r in enumerate(m["symbols"]):
                    if r["symbol"] in pos:
                        pos[r["symbol"]].append(c["agent_positions"][w, :int(c["lengths"][w])].astype(np.float64))
            turn = [float(np.abs(np.diff(np.concatenate([[0.0], np.concatenate(p)]))).mean()) for p in pos.values() if p]
            row["turnover"] = float(np.mean(turn)); row["time_in_market"] = float(np.mean([np.mean(np.abs(np.concatenate(p)) > 0) for p in pos.values() if p]))
            rows.append(row)
            print(f"  seed {seed} pooled+mirror portfolio Sharpe {row['portfolio']['sharpe']:+.2f} (with mirror symbols {row['portfolio_with_mirror']['sharpe']:+.2f}) turnover {row['turnover']:.3f} flat {row['flat']} ({wall:.0f} s)", flush=True)
            _write(Path(a.out), {"experiment": "pooled on the universe + its mirror (extra symbols), scored on the original symbols",
                                 "family": "dev", "agent": a.agent, "epochs": a.epochs, "overrides": a.overrides, "references": refs,
                                 "rows": rows, "errors": errors, "gates": gates(rows, refs), "machine": machine(torch.device("cpu"))})
