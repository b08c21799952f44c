"""What a trained DQN does on a development draw's drift, read from its Q-values rather than its Sharpe.

    PYTHONPATH=src:. python -m bench.probe_advantage --draw 20 --variant "train.select=last;dqn.gamma=0.9" \
        --keep-columns ema_mom --name advantage_cpu_d20_last

It trains the configuration walk-forward on one DEVELOPMENT draw (``foxhunt.scorecard.family``; the
held-out family is never probed) through the runner ``foxhunt scorecard`` uses, then evaluates the last
fold's network on every bar of a window (``--window val``: its validation window; ``train``: its
training window after the longest EMA's warm-up) from three portfolios, flat, fully long and fully
short (unrealised return 0, a short time in position). Per portfolio: how often each of the 5 exposures
is the greedy action, and the advantage A = Q(long) − Q(short): its mean and standard deviation over
the window, and its correlation with the draw's latent drift, with the next 100 bars' summed log return
and with each EMA trend column (``features.ema_horizons``). A learner that times the drift has an A
that follows the latent drift and varies enough, against its own position-dependent terms (the cost of
a switch), to change the greedy action; one whose A is almost constant holds one exposure.

JSON: bench/results/<--name>.json (default advantage_<device>); the last line prints a table.
"""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.bench_gamma_grid import only_columns
from bench.common import arguments, machine, parse, save
from foxhunt.env.actions import EXPOSURE_FRACTIONS
from foxhunt.scorecard.build import SIZES, prepare_scenario, scenario_config
from foxhunt.scorecard.family import Layout, draw, size_for
from foxhunt.train.config import DEFAULT_TRAIN_TOML
from foxhunt.train.run_dir import create_run_dir
from foxhunt.train.runner import WalkForwardRunner
from foxhunt.train.selection import split_fold

PORTFOLIOS = {"flat": 0.0, "long": 1.0, "short": -1.0}
FORWARD_BARS = 100


def _corr(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson correlation; None where either side is constant."""
    if a.std() == 0 or b.std() == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def forward_sums(log_return: np.ndarray, bars: np.ndarray, n: int = FORWARD_BARS) -> np.ndarray:
    """Sum of the log returns of bars t+1 … t+n for each t in ``bars`` (fewer at the series' end)."""
    c = np.concatenate([[0.0], np.cumsum(log_return, dtype=np.float64)])
    hi = np.minimum(bars + n + 1, len(log_return))
    return c[hi] - c[np.minimum(bars + 1, len(log_return))]


def advantage_rows(q: np.ndarray, latent: np.ndarray, fwd: np.ndarray, ema: dict[str, np.ndarray]) -> dict[str, Any]:
    """Greedy counts and A = Q(long) − Q(short) statistics for Q-values ``q`` [T, 5] of one portfolio."""
    adv = q[:, -1] - q[:, 0]
    return {"greedy_counts": np.bincount(q.argmax(1), minlength=q.shape[1]).tolist(),
            "advantage_mean": float(adv.mean()), "advantage_sd": float(adv.std()),
            "q_spread_mean": float((q.max(1) - q.min(1)).mean()),
            "corr_latent": _corr(adv, latent), "corr_forward": _corr(adv, fwd),
            "corr_ema": {k: _corr(adv, v) for k, v in ema.items()}}


def probe(args: Any) -> dict[str, Any]:
    sc = draw("dev", args.draw, "cpu", layout=Layout(args.bars, args.train, args.val, args.folds))
    if "m" not in sc.latent:
        raise SystemExit(f"probe_advantage: draw {args.draw} ({sc.name}) has no latent drift 'm'; probe a drift draw")
    size = size_for(SIZES["cpu"], sc)
    size = type(size)(**{**size.__dict__, "epochs": None})  # the configuration's own epochs
    base = tomllib.loads(Path(args.config).read_text() if args.config else DEFAULT_TRAIN_TOML)
    overrides = [s for s in args.variant.split(";") if s]
    keep = tuple(p for p in args.keep_columns.split(",") if p)
    with tempfile.TemporaryDirectory() as tmp, only_columns(keep):
        cfg = scenario_config(base, sc, size, [f'run.out_dir="{Path(tmp) / "runs"}"', f'run.device="{args.device}"',
                                               *overrides, *args.overrides])
        if cfg.train.agent != "dqn":
            raise SystemExit("probe_advantage: reads Q-values, so train.agent must be dqn")
        prepared = prepare_scenario(cfg, sc)
        runner = WalkForwardRunner(prepared)
        run_dir, resolved = create_run_dir(cfg, prepared, sc.name)
        runner.use_config(resolved)
        results = runner.run(run_dir)
        market, fold = prepared.market, prepared.folds[-1]
        # the normalisation the network trained and was validated with: its training part's (the fold less
        # the held-back window with select = inner), which the runner leaves on the market after the last fold
        trained_on = split_fold(fold, cfg.train.inner_fraction, cfg.folds.purge)[0] if cfg.train.select == "inner" else fold
        left = market.norm_mean.clone(), market.norm_inv_std.clone()
        market.set_fold(trained_on)  # (with the --keep-columns mask)
        if not (torch.equal(left[0], market.norm_mean) and torch.equal(left[1], market.norm_inv_std)):
            raise RuntimeError("probe_advantage: the network's normalisation is not its training part's")
        net = runner.fold_net()
        warm = max([*cfg.features.ema_horizons, 0])
        lo, hi = (fold.val_start, fold.val_end - 1) if args.window == "val" else (fold.train_start + warm, fold.train_end)
        bars = torch.arange(lo, hi, device=market.device)
        qs = {}
        for name, exposure in PORTFOLIOS.items():
            port = torch.zeros(len(bars), 3, device=market.device)
            port[:, 0] = exposure
            port[:, 2] = 0.0 if exposure == 0 else 0.05
            obs = torch.empty(len(bars), market.obs_dim, device=market.device)
            with torch.no_grad():
                qs[name] = net(market.observe(bars, port, obs)).double().cpu().numpy()
        idx = bars.cpu().numpy()
        raw = market.features[bars].double().cpu().numpy()
        ema = {n: raw[:, j] for j, n in enumerate(market.names) if n.startswith("ema_mom_")}
        fwd = forward_sums(market.log_return.double().cpu().numpy()[: market.n_bars], idx)
        latent = np.asarray(sc.latent["m"], dtype=np.float64)[idx]
    return {"draw": sc.name, "index": args.draw, "interval": sc.params["interval"], "horizon": sc.params["horizon"],
            "layout": {"bars": args.bars, "train": args.train, "val": args.val, "folds": args.folds},
            "overrides": overrides, "keep_columns": list(keep), "window": args.window, "fold": fold.fold, "bars": int(len(idx)),
            "exposures": list(EXPOSURE_FRACTIONS), "forward_bars": FORWARD_BARS,
            "validation": [{"fold": int(r["fold"]["fold"]), "sharpe": r["agent"].get("sharpe"), "trade_count": r["agent"].get("trade_count"),
                            "buy_and_hold_sharpe": (r.get("buy_and_hold") or {}).get("sharpe")} for r in results],
            "portfolios": {k: advantage_rows(q, latent, fwd, ema) for k, q in qs.items()},
            "corr_latent_ema": {k: _corr(latent, v) for k, v in ema.items()},
            "corr_forward_ema": {k: _corr(fwd, v) for k, v in ema.items()}, "corr_latent_forward": _corr(latent, fwd)}


def main(argv: list[str] | None = None) -> None:
    ap = arguments(__doc__, device="cpu", config="")
    ap.add_argument("--draw", type=int, default=20, help="development draw index (a drift draw)")
    ap.add_argument("--bars", type=int, default=40_000)
    ap.add_argument("--train", type=int, default=20_000)
    ap.add_argument("--val", type=int, default=5_000)
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--variant", default="", help="section.key=v;section.key=v on top of the configuration")
    ap.add_argument("--keep-columns", default="", help="the learner sees only the feature columns with these prefixes")
    ap.add_argument("--window", choices=("val", "train"), default="val")
    args = parse(ap, argv)
    if args.quick:
        args.bars, args.train, args.val, args.draw = 2_600, 1_200, 400, 0
        args.overrides = [*args.overrides, "train.epochs=2", "dqn.rounds_per_epoch=2", "train.abstain=false",
                          "features.ema_horizons=[10,30]"]
    if args.threads:
        torch.set_num_threads(args.threads)
    row = probe(args)
    dev = "cuda" if args.device.startswith("cuda") else "cpu"
    save(args, f"advantage_{dev}" + ("_quick" if args.quick else ""), {**row, "machine": machine(torch.device(dev))})
    print("validation: " + "  ".join(f"fold {v['fold']} Sharpe {v['sharpe'] or 0:+.2f} ({v['trade_count'] or 0:.0f} trades, "
                                      f"B&H {v['buy_and_hold_sharpe'] or 0:+.2f})" for v in row["validation"]))
    for name, p in row["portfolios"].items():
        ema = " ".join(f"{k[8:]} {v:+.2f}" for k, v in p["corr_ema"].items() if v is not None)
        print(f"{row['draw']} from {name:<5} greedy {p['greedy_counts']}  A {p['advantage_mean']:+.3f} ± {p['advantage_sd']:.3f}"
              f"  corr: latent {p['corr_latent'] or 0:+.2f} next {FORWARD_BARS} bars {p['corr_forward'] or 0:+.2f}  ema {ema}")


if __name__ == "__main__":
    main()
