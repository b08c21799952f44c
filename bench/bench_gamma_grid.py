"""One discount against a discount grid chosen per fold (``train.gamma_grid``), on development-family
draws: does choosing γ on the held-back window let the learner take an edge at a horizon its single γ
cannot see, without losing the short-horizon edges or trading the no-edge draws?

    PYTHONPATH=src:. python -m bench.bench_gamma_grid --draws 0,1,4,8,10 --bars 40000 --train 20000 --val 5000
    PYTHONPATH=src:. python -m bench.bench_gamma_grid --config configs/h200-fast.toml --device cuda \
        --size gpu --ensemble 4 --grid "0.5, 0.95" --draws 0,1,4,8,10      (scripts/gpu.sh, step ggrid)

Every variant is the configuration under test plus its own overrides (``--variant NAME=k=v;k=v``,
repeatable; default: ``single`` = train.ensemble K with the config's γ, and ``grid`` = the same K
members over ``--grid``), so both spend the same agents on each fold and differ only in γ. Draws are
the DEVELOPMENT family's (``foxhunt.scorecard.family``), at one layout for every interval
(``--bars/--train/--val/--folds``, or ``--size``: the family's own layouts of that scorecard size); the
held-out family is never run here. Per draw and variant: the
agent's mean validation Sharpe, the quant rule's (chosen on each fold's training window) and the
oracle's, capture vs both, trades a 1,000 bars, each fold's chosen γ and whether it abstained, and the
walk-forward seconds. JSON: bench/results/gamma_grid_<device>.json; the last lines print the table.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.common import arguments, machine, parse, save
from foxhunt.scorecard.build import SIZES
from foxhunt.scorecard.family import Layout, draw, size_for
from foxhunt.scorecard.family.gates import capture_vs_oracle, draw_row
from foxhunt.scorecard.run import run_scenario
from foxhunt.train.config import DEFAULT_TRAIN_TOML


def variants(args: Any) -> dict[str, list[str]]:
    """NAME -> overrides: the --variant flags, or single vs grid at --ensemble members."""
    if args.variant:
        return {v.split("=", 1)[0]: [s for s in v.split("=", 1)[1].split(";") if s] for v in args.variant}
    common = ["train.select=inner", f"train.ensemble={args.ensemble}"]
    return {"single": common, "grid": common + [f"train.gamma_grid=[{args.grid}]"]}


def score(index: int, name: str, overrides: list[str], base: dict[str, Any], layout: Layout | None, args: Any,
          out: Path, family: str = "dev") -> dict[str, Any]:
    """Draw ``index`` of ``family`` walk-forward under the configuration + ``overrides``: the family row
    (``draw_row``) with each fold's selection (γ, abstention, held-back scores) and the fold Sharpes."""
    sc = draw(family, index, args.size or "cpu", layout=layout)
    size = size_for(SIZES[args.size or "cpu"], sc)
    size = type(size)(**{**size.__dict__, "epochs": None})  # the configuration's own epochs
    dev = [f'run.device="{args.device}"'] if args.device != "auto" else []
    r = run_scenario(sc, base, size, [*overrides, *args.overrides, *dev], out / name, args.config or "<built-in train defaults>",
                     baselines=("quant",))
    row = draw_row(r)
    run = out / name / "runs" / sc.name
    folds = sorted(run.glob("folds/fold_*/metrics.json"))
    sel = [json.loads(p.read_text()).get("selection") or {} for p in folds]
    row.update(variant=name, overrides=overrides, gamma=[s.get("gamma") for s in sel],
               flat=[bool((s.get("abstain") or {}).get("flat")) for s in sel],
               gamma_groups=[s.get("gamma_groups") for s in sel],
               member_inner_sharpes=[[m.get("inner_sharpe") for m in s.get("members", [])] or [s.get("inner_sharpe")] for s in sel],
               abstain_bar=[(s.get("abstain") or {}).get("bar") for s in sel],
               abstain_se=[(s.get("abstain") or {}).get("standard_error") for s in sel],
               quant_fold_sharpes=[f.sharpe for f in r.baselines["quant"].folds] if "quant" in r.baselines else None,
               oracle_fold_sharpes={k: [f.sharpe for f in v.folds] for k, v in r.references.items()},
               flat_alternative_sharpe=[((s.get("abstain") or {}).get("all_members") or {}).get("sharpe") for s in sel],
               agent_fold_sharpes=[f.sharpe for f in r.agent.folds], capture_vs_oracle=capture_vs_oracle(r),
               inner_curves=inner_curves(run / "metrics.jsonl"))
    return row


@contextlib.contextmanager
def only_columns(prefixes: tuple[str, ...]) -> Iterator[None]:
    """Diagnostic (``--keep-columns``): inside the block, every market the runner builds shows the
    learner only the feature columns whose names start with one of ``prefixes``; the others are 0
    after normalisation (their 1/std is zeroed at every ``set_fold``), in training, held-back selection
    and validation alike. Empty ``prefixes``: nothing changes."""
    from foxhunt.market import MarketData

    if not prefixes:
        yield
        return
    original = MarketData.set_fold

    def set_fold(self: MarketData, fold: object) -> None:
        original(self, fold)  # type: ignore[arg-type]
        keep = torch.tensor([n.startswith(prefixes) for n in self.names], device=self.norm_inv_std.device)
        if not bool(keep.any()):
            raise ValueError(f"--keep-columns {','.join(prefixes)}: no feature column starts with these ({self.names[:3]} …)")
        self.norm_inv_std.mul_(keep.to(self.norm_inv_std.dtype))

    MarketData.set_fold = set_fold  # type: ignore[method-assign]
    try:
        yield
    finally:
        MarketData.set_fold = original  # type: ignore[method-assign]


def inner_curves(metrics: Path) -> list[list[list[float | None]]]:
    """Every member's held-back Sharpe after every epoch, [fold][epoch][member], from the run's
    metrics.jsonl (None: the network never traded on the window; [] without train.select = "inner")."""
    from foxhunt.train.logs import read_metrics

    out: dict[int, list[list[float | None]]] = {}
    for row in read_metrics(metrics) if metrics.is_file() else []:
        if "inner_sharpe" not in row:
            continue
        vals = [row["inner_sharpe"], *(m.get("inner_sharpe") for m in row.get("members", []))]
        out.setdefault(int(row["fold"]), []).append([v if isinstance(v, (int, float)) and v == v else None for v in vals])
    return [out[k] for k in sorted(out)]


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--draws", default="0,1,4,8,10", help="development draw indices (comma-separated)")
    ap.add_argument("--size", default=None, help="the family's own layouts of this scorecard size (tiny | cpu | gpu) "
                    "instead of --bars/--train/--val/--folds")
    ap.add_argument("--bars", type=int, default=40_000)
    ap.add_argument("--train", type=int, default=20_000)
    ap.add_argument("--val", type=int, default=5_000)
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--ensemble", type=int, default=3)
    ap.add_argument("--grid", default="0.5, 0.9, 0.98")
    ap.add_argument("--variant", action="append", default=[], help="NAME=section.key=v;section.key=v (repeatable)")
    ap.add_argument("--keep-columns", default="", help="diagnostic: the learner sees only the market feature columns "
                    "whose names start with one of these comma-separated prefixes (e.g. ema_mom); the rest are zero")
    args = parse(ap, argv)
    if args.quick:
        args.bars, args.train, args.val, args.folds, args.draws = 2_600, 1_200, 400, 2, "0"
        args.overrides = [*args.overrides, "train.epochs=2", "dqn.rounds_per_epoch=2", "train.abstain=false"]
    if args.threads:
        torch.set_num_threads(args.threads)
    base = tomllib.loads(Path(args.config).read_text() if args.config else DEFAULT_TRAIN_TOML)
    layout = None if args.size else Layout(args.bars, args.train, args.val, args.folds)
    rows = []
    keep = tuple(p for p in args.keep_columns.split(",") if p)
    with tempfile.TemporaryDirectory() as tmp, only_columns(keep):
        for index in [int(i) for i in args.draws.split(",")]:
            for name, ov in variants(args).items():
                rows.append(score(index, name, ov, base, layout, args, Path(tmp) / f"d{index}"))
                r = rows[-1]
                print(f"draw {index} {r['form']:<11} {r['interval']:<6} h {r['horizon'] or 0:>7.0f} {name:<8} agent {r['agent_sharpe']:+6.2f} "
                      f"quant {r['quant_sharpe']:+6.2f} oracle {r['oracle_sharpe'] or 0:+6.2f} trades/1k {r['trades_per_1000']:6.1f} "
                      f"gamma {r['gamma']} flat {r['flat']} ({r['walk_forward_s']:.0f} s)", flush=True)
                dev = "cuda" if args.device.startswith("cuda") else "cpu"
                # written after every row: a run stopped early keeps what it measured
                save(args, f"gamma_grid_{dev}" + ("_quick" if args.quick else ""),
                     {"config": args.config or "<built-in train defaults>", "overrides": args.overrides,
                      "keep_columns": list(keep),
                      "layout": layout.__dict__ if layout else f"family {args.size}", "variants": variants(args),
                      "draws": args.draws, "rows": rows, "machine": machine(torch.device(dev))})


if __name__ == "__main__":
    main()
