"""Learning curves on scorecard scenarios: validation Sharpe after every epoch, next to the Sharpe on a
held-back tail of the training window (the "inner" window: the selection signal ``train.select``
uses), so one run shows whether more epochs over-fit and whether the inner window predicts the
validation window.

    PYTHONPATH=src:. python -m bench.bench_learning --config configs/h200.toml --size gpu \
        --scenarios edge_daily,regime --epochs 20 --device cuda

Per scenario and fold it trains on [train_start, train_end - inner - purge), and after each epoch
backtests the greedy policy on the inner window [train_end - inner, train_end) and on the
validation window (one lockstep run of two windows). JSON: bench/results/learning_<device>.json;
the last lines print, per scenario, the fold-mean validation Sharpe after each epoch, the one the
best inner epoch would select, and the best reference's (oracle) Sharpe.

--seeds K (K > 1) trains K agents side by side on every fold (run.seed, run.seed + 1, …: member 0 is
the run without --seeds, so the two are paired) and scores after each epoch, besides member 0's
--eval networks, each other member alone (key suffix ``_m<k>``) and the mean-Q (PPO: mean-logit)
ensemble of the K members' networks of that epoch (``_seeds<K>``, selected by its own inner Sharpe):
does averaging independently trained agents remove the seed-to-seed spread that one agent's selected
Sharpe carries? Per fold it also scores ``selens<K>``: each member keeps the epoch its own inner
Sharpe picks (what K separate runs would keep) and the K kept networks are merged (what an ensemble
of K trained models would trade). Ensembles run as one wide network (``agents.networks.merge_mean``),
so they take the same backtest backend as one agent (the fused kernel on a GPU).
"""

from __future__ import annotations

import copy
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bench.common import arguments, machine, parse, save
from foxhunt.agents.networks import merge_mean
from foxhunt.backtest.policies import GreedyPolicy
from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
from foxhunt.scorecard.markets import make_scenario, SPACING
from foxhunt.scorecard.policies import score_exposures
from foxhunt.train.agent import policy_net
from foxhunt.train.selection import split_fold


def curves(name: str, base: dict[str, Any], size_name: str, epochs: int, inner_frac: float,
           overrides: list[str], evals: tuple[str, ...] = ("online",), seeds: int = 1) -> dict[str, Any]:
    from foxhunt.train.runner import WalkForwardRunner

    size = SIZES[size_name]
    scenario = make_scenario(name, size.n_bars(SPACING[name]))
    # one trainer a runner (train.ensemble = 1): --seeds builds the members itself, and scores each of them
    cfg = scenario_config(base, scenario, size, [f"train.epochs={epochs}", "train.ensemble=1", *overrides])
    prepared = prepare_scenario(cfg, scenario)
    runner = WalkForwardRunner(prepared)
    trainer, bt, backend = runner.trainer, runner.backtester, runner.plan.eval
    # --seeds: members 1..K-1, the same configuration with the next seeds (own trainers, same bars)
    members = [WalkForwardRunner(prepare_scenario(scenario_config(
        base, scenario, size, [f"train.epochs={epochs}", "train.ensemble=1", *overrides, f"run.seed={int(cfg.run.seed) + k}"]),
        scenario)).trainer
        for k in range(1, seeds)]
    kinds = scored_kinds(evals, seeds)
    keep = max([int(k[3:]) for k in evals if k[:3] in ("swa", "ens")], default=0)  # snapshots swaK / ensK need
    purge = int(cfg.folds.purge)
    rows = []
    selens: list[dict[str, Any]] = []  # --seeds: per fold, the merge of each member's own selected epoch
    t0 = time.perf_counter()
    for f in prepared.folds:
        short, inner_start, inner_steps = split_fold(f, inner_frac, purge)  # as train.select = "inner"
        trainer.reset_for_fold(short)
        for m in members:
            m.reset_for_fold(short)
        fold_rows = []
        snaps: list[nn.Module] = []  # the last `keep` epoch-end networks (swaK / ensK only)
        history: list[list[nn.Module]] = [[] for _ in range(seeds if seeds > 1 else 0)]  # [member][epoch] copies
        for e in range(epochs):
            trainer.train_epoch()
            trainer.drain()
            net = policy_net(trainer)
            if keep:
                snaps = [*snaps[-(keep - 1):], copy.deepcopy(net)] if keep > 1 else [copy.deepcopy(net)]
            for m in members:
                m.train_epoch()
                m.drain()
            team = [net, *(policy_net(m) for m in members)]
            for k, member_net in enumerate(team[:len(history)]):
                history[k].append(copy.deepcopy(member_net))
            row: dict[str, Any] = {"epoch": e + 1}
            for kind in kinds:
                # the seeds ensemble as one wide network (merge_mean): the same backend as one agent's
                policy = (GreedyPolicy(team[int(kind[1:])]) if kind[0] == "m" else GreedyPolicy(merge_mean(team))
                          if kind.startswith("seeds") else eval_policy(kind, net, trainer, snaps))
                res = bt.run([inner_start, f.val_start], [inner_steps, f.val_len - 1], policy,
                             backend=backend if isinstance(policy, GreedyPolicy) else "torch")
                sfx = _suffix(kind)
                row.update({f"inner_sharpe{sfx}": res.metrics[0]["sharpe"], f"val_sharpe{sfx}": res.metrics[1]["sharpe"],
                            f"inner_turnover{sfx}": res.metrics[0]["turnover"], f"val_turnover{sfx}": res.metrics[1]["turnover"]})
            fold_rows.append(row)
        if history:  # each member keeps its own inner-selected epoch (as a run of its seed would); merged
            picks = [_inner_pick([r[f"inner_sharpe{_suffix(kind)}"] for r in fold_rows])
                     for kind in ["online", *(f"m{k}" for k in range(1, seeds))]]
            res = bt.run([f.val_start], [f.val_len - 1], GreedyPolicy(merge_mean([h[p] for h, p in zip(history, picks)])),
                         backend=backend)
            selens.append({"picks": [p + 1 for p in picks], "val_sharpe": res.metrics[0]["sharpe"],
                           "val_turnover": res.metrics[0]["turnover"]})
        rows.append(fold_rows)
        print(f"  fold {len(rows)}/{len(prepared.folds)} {name}: val by epoch "
              + " ".join(f"{r['val_sharpe']:+.2f}" for r in fold_rows) + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    wall = time.perf_counter() - t0
    refs = score_exposures(prepared.market, bt, prepared.folds, {"buy_and_hold": np.ones(len(scenario.bars)),
                                                                   **scenario.oracles},
                           trainer.env.n_actions, float(cfg.env.capital), backend)
    ref_sharpe = {k: float(v.summary()["sharpe"]) for k, v in refs.items()}
    out = {"scenario": name, "epochs": epochs, "inner_frac": inner_frac, "overrides": overrides, "wall_s": wall,
           "folds": rows, "references": ref_sharpe, "best_reference": max(0.0, *ref_sharpe.values())}
    for kind in kinds:
        sfx = _suffix(kind)
        val = np.array([[r[f"val_sharpe{sfx}"] for r in fr] for fr in rows])  # [folds, epochs]
        inner_s = np.array([[r[f"inner_sharpe{sfx}"] for r in fr] for fr in rows])
        pick = np.array([_inner_pick(row) for row in inner_s])
        selected = val[np.arange(val.shape[0]), pick]
        turn = np.array([[r[f"val_turnover{sfx}"] for r in fr] for fr in rows])
        out.update({f"val_mean_by_epoch{sfx}": val.mean(0).tolist(), f"selected_epochs{sfx}": (pick + 1).tolist(),
                    f"val_selected_mean{sfx}": float(selected.mean()), f"val_turnover_by_epoch{sfx}": turn.mean(0).tolist()})
    if selens:
        out.update({f"selens{seeds}_by_fold": selens,
                    f"val_selected_mean_selens{seeds}": float(np.mean([x["val_sharpe"] for x in selens]))})
    return out


def _inner_pick(inner_by_epoch: Any) -> int:
    """The epoch index ``train.select = "inner"`` keeps: the best finite inner Sharpe (the first on ties)."""
    x = np.asarray(inner_by_epoch, dtype=np.float64)
    return int(np.argmax(np.where(np.isfinite(x), x, -np.inf)))


EVALS = ("online", "target", "swa4", "swa8", "ens4")
"""What --eval can score after each epoch, all from the same training run (a paired comparison):
online: the greedy policy of the trained network (what the runner keeps); target: DQN's Polyak-averaged
target network; swaK: the parameter average of the last K epoch-end networks; ensK: the mean Q-values
(PPO: logits) of the last K epoch-end networks."""


def scored_kinds(evals: tuple[str, ...], seeds: int) -> list[str]:
    """What one run scores after each epoch: member 0's --eval networks, then (--seeds K > 1) members
    1..K-1 alone ("m<k>") and the K members' ensemble ("seeds<K>")."""
    return [*evals, *(f"m{k}" for k in range(1, seeds)), *([f"seeds{seeds}"] if seeds > 1 else [])]


def eval_policy(kind: str, net: nn.Module, trainer: Any, snaps: list[nn.Module]) -> Any:
    if kind == "online":
        return GreedyPolicy(net)
    if kind == "target":
        target = getattr(trainer.learner, "target", None)
        return GreedyPolicy(target if target is not None else net)
    k = int(kind[3:])
    last = snaps[-k:]
    if kind.startswith("ens"):
        return GreedyPolicy(merge_mean(last))
    avg = copy.deepcopy(last[-1])
    members = [dict(m.named_parameters()) for m in last]
    with torch.no_grad():
        for name, p in avg.named_parameters():
            p.copy_(torch.stack([m[name] for m in members]).mean(0))
    return GreedyPolicy(avg)


def _suffix(kind: str) -> str:
    """Key suffix of an --eval kind in the rows and the JSON ("" for the online network)."""
    return "" if kind == "online" else f"_{kind}"


def main() -> None:
    p = arguments(__doc__.splitlines()[0], quick="the tiny scorecard size, 3 epochs, edge_daily, on the CPU", config="")
    p.add_argument("--size", default="cpu", choices=sorted(SIZES))
    p.add_argument("--scenarios", default="edge_daily,regime")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--inner", type=float, default=0.2, help="held-back tail of each training window")
    p.add_argument("--eval", default="online", help=f"comma list of {', '.join(EVALS)} (EVALS)")
    p.add_argument("--seeds", type=int, default=1, help="K > 1: K agents a fold; scores each and their ensemble (docstring)")
    p.add_argument("--longmom", default="", help="comma list of horizons: features.long_momentum (extra vol-adjusted momentum columns)")
    p.add_argument("--variant", action="append", default=[],
                   help="extra runs: 'label:key=value;key=value' (each scenario once more per variant)")
    a = parse(p)
    if a.quick:
        a.size, a.epochs, a.scenarios = "tiny", 3, "edge_daily"
    base = tomllib.loads(Path(a.config).read_text()) if a.config else {}
    overrides = list(a.overrides) + [f"run.device={a.dev.type}"]
    evals = tuple(a.eval.split(","))
    if any(k not in EVALS for k in evals):
        p.error(f"--eval {a.eval}: each entry must be one of {', '.join(EVALS)}")
    if a.seeds < 1:
        p.error(f"--seeds {a.seeds}: must be >= 1")
    if a.seeds > 1 and "online" not in evals:
        p.error("--seeds K > 1 needs 'online' in --eval (member 0's own selection)")
    if a.longmom:  # shorthand for --set features.long_momentum=[...]
        overrides.append(f"features.long_momentum=[{a.longmom}]")
    variants = [("base", [])] + [(v.split(":", 1)[0], v.split(":", 1)[1].split(";")) for v in a.variant]
    out = []
    for label, extra in variants:
        for name in a.scenarios.split(","):
            r = curves(name, base, a.size, a.epochs, a.inner, overrides + extra, evals, a.seeds)
            r["variant"] = label
            out.append(r)
            for kind in scored_kinds(evals, a.seeds):
                sfx = _suffix(kind)
                by_epoch = " ".join(f"{x:+.2f}" for x in r[f"val_mean_by_epoch{sfx}"])
                print(f"{label + sfx:>14} {name:<12} best ref {r['best_reference']:+.2f} | val by epoch {by_epoch} | "
                      f"selected {r[f'val_selected_mean{sfx}']:+.2f} (epochs {r[f'selected_epochs{sfx}']}) | "
                      f"turnover {np.mean(r[f'val_turnover_by_epoch{sfx}']):.3f} | {r['wall_s']:.0f} s", flush=True)
            if a.seeds > 1:
                sel = r[f"selens{a.seeds}_by_fold"]
                folds = " ".join(f"{x['val_sharpe']:+.2f}" for x in sel)
                tag = f"{label}_selens{a.seeds}"
                print(f"{tag:>14} {name:<12} each member's own selected epoch, merged: selected "
                      f"{r[f'val_selected_mean_selens{a.seeds}']:+.2f} (folds {folds}; "
                      f"epochs {[x['picks'] for x in sel]})", flush=True)
            # Saved after every run: a call cut short by its time limit still returns what it measured.
            path = save(a, f"learning_{a.dev.type}{'_quick' if a.quick else ''}",
                        {"machine": machine(a.dev), "config": a.config or None, "size": a.size, "runs": out,
                         "complete": len(out) == len(variants) * len(a.scenarios.split(","))})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
