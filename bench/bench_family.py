"""One configuration on chosen draws of the procedural family (development or HELD-OUT), split over
processes: the rows of ``foxhunt scorecard --family`` (with each fold's selection), the family's
gates over whatever rows the file holds, written after every draw.

``foxhunt scorecard --family heldout --draws 12`` scores the same draws in one process; this script
lets ``scripts/gpu.sh`` (step ``heldout``) run them as several processes on one GPU and pool the parts
(``bench/merge_parts.py`` recomputes the gates from the merged rows).

HELD-OUT draws are reported, never optimised: no setting of any configuration may be chosen on this
script's held-out output. Development draws are for tuning.

    PYTHONPATH=src:. python -m bench.bench_family --family heldout --config configs/h200-fast.toml \\
        --device cuda --size gpu --draws 0,4,8 --tag fast --set features.ema_horizons=[10,30]

JSON: bench/results/family_<family>_<device>_<tag>.json (``--name`` for a part's file).
"""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path

import torch

from bench.bench_gamma_grid import score
from bench.common import arguments, machine, parse, save
from foxhunt.scorecard.family import FAMILIES
from foxhunt.scorecard.family.gates import block_from_rows
from foxhunt.train.config import DEFAULT_TRAIN_TOML


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--family", required=True, choices=sorted(FAMILIES), help="dev (tuning allowed) | heldout (report only)")
    ap.add_argument("--draws", default="0", help="draw indices (comma-separated)")
    ap.add_argument("--size", default="cpu", help="the family's layouts of this scorecard size (tiny | cpu | gpu)")
    ap.add_argument("--tag", default="run", help="names the configuration under test in the file name")
    args = parse(ap, argv)
    if args.quick:
        args.size = "tiny"
        args.overrides = [*args.overrides, "train.epochs=1", "dqn.rounds_per_epoch=2"]
    if args.threads:
        torch.set_num_threads(args.threads)
    base = tomllib.loads(Path(args.config).read_text() if args.config else DEFAULT_TRAIN_TOML)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in [int(i) for i in args.draws.split(",")]:
            rows.append(score(index, args.tag, [], base, None, args, Path(tmp) / f"d{index}", family=args.family))
            r = rows[-1]
            print(f"{r['scenario']:<20} {r['interval']:<6} agent {r['agent_sharpe'] or 0:+6.2f} quant {r['quant_sharpe'] or 0:+6.2f} "
                  f"oracle {r['oracle_sharpe'] or 0:+6.2f} trades/1k {r['trades_per_1000']:6.1f} flat {r['flat']} "
                  f"({r['walk_forward_s']:.0f} s)", flush=True)
            block = block_from_rows(rows, args.family, args.size)
            # written after every draw: a run stopped early keeps what it measured
            save(args, f"family_{args.family}_{dev}_{args.tag}" + ("_quick" if args.quick else ""),
                 {"config": args.config or "<built-in train defaults>", "overrides": args.overrides, "family_set": args.family,
                  "size": args.size, "draws": args.draws, "rule": block["rule"], "family_gates": block["gates"],
                  "rows": rows, "machine": machine(torch.device(dev))})
    for line in (f"{g['name']}: {g['rule']}" for g in block["gates"]):
        print(line)


if __name__ == "__main__":
    main()
