"""DQN throughput on the device, side by side in one run.

(a) collection env-steps/s (env step + online and target forward passes, ε-greedy, TD priority,
    replay write, monitor) at N = 128, 4K, 16K, 64K: one captured round per replay vs the same
    round run eagerly (plain PyTorch); variants with the env step compiled and with bf16 acting.
(b) train updates/s at batch 4096 (--batches: any, e.g. 512,4096) over a 1 M-transition buffer, proportional PER and uniform: eager,
    graphed, graphed + compile_learner, graphed + fused_train_step (one compiled program, no autograd).
(c) host synchronisations per epoch: implicit ones counted with torch's sync debug mode, explicit
    event waits counted by construction (1 per epoch; 0 blocking waits in lagged mode).
(d) Stable-Baselines3 DQN trained through the Gymnasium wrapper on the same data for the same number
    of env steps as ours: env-steps/s and out-of-sample Sharpe of both (our backtester evaluates both).
(e) ``dqn.overlap_collection`` (not in the default --only): whole epochs (train_epoch: one readback
    each) of one trainer per mode of --streams, in this process: off (collection and updates take
    turns), one (the one-round policy lag on one stream), two (collection on a second CUDA stream);
    env-steps/s and updates/s, at configs/h200.toml's [dqn] sizes on the torch backend in CUDA graphs,
    and with the fused backend (configs/h200-fast.toml's plan) beside it.

    PYTHONPATH=src:. python -m bench.bench_dqn            # on the GPU
    PYTHONPATH=src:. python -m bench.bench_dqn --quick    # tiny CPU smoke test of the harness
    PYTHONPATH=src:. python -m bench.bench_dqn --only e --streams two,off,one,two --name dqn_streams_cuda
"""

from __future__ import annotations

import re
import warnings

import torch

from bench.common import arguments, build_market, machine, parse, save, signal_market, stopwatch, timed, trainer

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.backtest.evaluator import Backtester
from foxhunt.backtest.policies import ExposurePolicy, GreedyPolicy
from foxhunt.env import EnvParams
from foxhunt.market import MarketData


def collection(market: MarketData, n: int, variant: str, rollout: int) -> dict:
    """One collection variant (per-part plan choices). "compiled": env_step compiled; "fused*": env_step
    fused; "fusedc*": + acting compiled; "fusedmlp*": + acting fused (the acting MLP as one Triton
    kernel); "*bf16": matmul_precision bf16; "eager": no CUDA graphs. A suffix
    "@m<block_m>w<num_warps>b<bn>s<stages>" overrides the fused MLP's launch parameters."""
    base, _, tune = variant.partition("@")
    plan = dict(env_step="compiled" if base == "compiled" else "fused" if base.startswith("fused") else "torch",
                acting="compiled" if base.startswith("fusedc") else "fused" if base.startswith("fusedmlp") else "torch",
                matmul_precision="bf16" if base.endswith("bf16") else "tf32", graphs=base != "eager")
    cfg = dict(n_envs=n, rollout_len=rollout, buffer_capacity=max(n * rollout * 2, 1 << 16), warmup_transitions=1 << 34)  # the bound: never trains
    saved = None
    if tune:  # the launcher reads DEFAULTS at every launch: capture (first round) and replays use these
        from foxhunt.kernels.acting import kernel as dmf

        keys = {"m": "block_m", "w": "num_warps", "b": "bn", "s": "stages"}
        prec = "bf16" if base.endswith("bf16") else "tf32"
        saved = dict(dmf.DEFAULTS[prec])
        dmf.DEFAULTS[prec].update({keys[k]: int(v) for k, v in re.findall(r"([mwbs])(\d+)", tune)})
    try:
        tr = trainer(market, **cfg, **plan)
        with stopwatch(market.device) as setup:
            tr._round()  # eager warm-up + capture (and compile)
        reps = 3 if variant == "eager" and n >= 16384 else 10
        sec = timed(tr._round, market.device, reps=reps, warmup=1)
    finally:
        if saved is not None:
            dmf.DEFAULTS[prec].clear()
            dmf.DEFAULTS[prec].update(saved)
    return {"n_envs": n, "variant": variant, "rollout_len": rollout, "round_s": sec,
            "env_steps_per_s": n * rollout / sec, "setup_s": setup.s}


def training(market: MarketData, graphs: bool, capacity: int, batch: int, sampler: str, compiled: bool = False,
             fused: bool = False, over: dict | None = None) -> dict:
    """Train-step throughput. compiled: torch.compile of loss and update around autograd
    (train_step "compiled", acting "compiled"); fused: the whole step as one compiled program with a
    hand-written backward (train_step "fused"); over: further DQNConfig / ExecutionPlan fields.
    setup_s: first call (warm-up, compile, capture)."""
    n = 65_536 if market.device.type == "cuda" else 256
    rollout = max(1, capacity // n)
    step = "fused" if fused else "compiled" if compiled else "torch"
    per_round = 16  # the round graph below: 16 updates a replay (the trainer's _train_round)
    tr = trainer(market, n_envs=n, rollout_len=rollout, buffer_capacity=capacity, batch_size=batch, sampler=sampler,
                 warmup_transitions=0, graphs=graphs, train_step=step, acting="compiled" if compiled else "torch",
                 train_steps_per_round=per_round, **(over or {}))
    tr._round()
    with stopwatch(market.device) as setup:
        tr._train()
    per = timed(lambda: [tr._train() for _ in range(20)], market.device, reps=5, warmup=1) / 20
    row = {"graphs": graphs, "compiled": compiled, "fused": fused, "over": over or {}, "batch": batch,
           "capacity": tr.replay.storage.capacity, "sampler": sampler, "update_s": per, "updates_per_s": 1.0 / per,
           "setup_s": setup.s}
    if graphs:  # the same updates, 16 to a captured graph (one host launch a round, as training runs them)
        tr._train_round()
        per_r = timed(lambda: [tr._train_round() for _ in range(2)], market.device, reps=5, warmup=1) / (2 * per_round)
        row.update(round_graph_update_s=per_r, round_graph_updates_per_s=1.0 / per_r)
    return row


def syncs_per_epoch(market: MarketData, lagged: bool) -> dict:
    tr = trainer(market, n_envs=4096, rollout_len=16, rounds_per_epoch=8, train_steps_per_round=8, batch_size=1024,
                 warmup_transitions=0, readback="lagged" if lagged else "sync", graphs=market.device.type == "cuda")
    tr.train_epoch()  # capture
    waits = {"n": 0}
    real = torch.cuda.Event.synchronize

    def counting(self):  # explicit event waits (the epoch readback)
        waits["n"] += 1 if not self.query() else 0  # a wait that actually blocks
        return real(self)

    epochs = 5
    per_epoch: list[int] = []  # implicit syncs of each epoch (a one-off shows where it happens)
    sources: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        torch.cuda.Event.synchronize = counting
        try:
            with stopwatch() as wall:  # no device sync: it would count as one
                for _ in range(epochs):
                    before = len(caught)
                    tr.train_epoch()
                    new = [w for w in caught[before:] if "synchroniz" in str(w.message).lower()]
                    per_epoch.append(len(new))
                    sources += [f"{w.filename}:{w.lineno}" for w in new]
                loop_waits = waits["n"]
        finally:
            torch.cuda.Event.synchronize = real
            torch.cuda.set_sync_debug_mode("default")
    tr.drain()  # the end of training: outside the epoch loop and outside the count
    return {"lagged": lagged, "epochs": epochs, "implicit_syncs_per_epoch": sum(per_epoch) / epochs,
            "implicit_syncs_by_epoch": per_epoch, "implicit_sync_sources": sources,
            "blocking_event_waits_per_epoch": loop_waits / epochs, "epoch_s": wall.s / epochs}


STREAM_MODES = {"off": (False, None), "one": (True, 1), "two": (True, 2)}
"""(e) mode -> (dqn.overlap_collection, streams of the lagged order)."""


def streams(market: MarketData, mode: str, plan: str, epochs: int, quick: bool) -> dict:
    """(e) ``epochs`` timed epochs of a fresh trainer in ``mode`` after two untimed ones (capture,
    compile); plan: "torch" (graphs on CUDA, tf32) or "fused" (h200-fast.toml's parts, CUDA only)."""
    on, n = STREAM_MODES[mode]
    sizes = (dict(n_envs=64, rounds_per_epoch=4, train_steps_per_round=4, batch_size=64, buffer_capacity=8192, hidden=(16, 16),
                  head_hidden=8) if quick else
             dict(n_envs=4096, rounds_per_epoch=12, train_steps_per_round=24, batch_size=512, buffer_capacity=1 << 20,
                  hidden=(64, 64), head_hidden=32))
    parts = (dict(env_step="fused", acting="fused", train_step="fused", replay="fused", matmul_precision="bf16")
             if plan == "fused" else dict(matmul_precision="tf32"))
    tr = trainer(market, rollout_len=16, warmup_transitions=0, gamma=0.5, lr=1e-4, overlap_collection=on, **sizes, **parts)
    if n is not None:
        tr.lag.set_streams(n)  # ValueError: two streams on a CPU
    with stopwatch(market.device) as setup:
        tr.train_epoch()
        tr.train_epoch()
    steps = updates = 0.0
    with stopwatch(market.device) as sw:
        for _ in range(epochs):
            s = tr.train_epoch()
            steps += s["transitions"]
            updates += s["updates"]
    return {"mode": mode, "plan": plan, "overlap_collection": on, "streams": n or 1, "epochs": epochs, "seconds": sw.s,
            "epoch_s": sw.s / epochs, "env_steps_per_s": steps / sw.s, "updates_per_s": updates / sw.s,
            "setup_s": setup.s, "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()}}


def sb3_comparison(device: torch.device, steps: int, quick: bool) -> dict:
    """Ours vs SB3 DQN on a planted-signal synthetic market, same env steps, same evaluation."""
    from foxhunt.env.gym_wrapper import TradingEnv

    m = signal_market(20_000 if quick else 60_000, device, seed=11, signal=0.3)
    fold = m.fold
    params = EnvParams(episode_length=256, reward_scale=100.0, action_mode="exposure", cost_bps=0.5, spread_bps=0.5)
    bt = Backtester(m, params)
    val = ([fold.val_start], [fold.val_end - fold.val_start - 1])
    out: dict = {"env_steps": steps}
    # ours
    cfg = DQNConfig(n_envs=256 if not quick else 32, rollout_len=8, train_steps_per_round=8, batch_size=256,
                    rounds_per_epoch=max(1, steps // ((256 if not quick else 32) * 8)), warmup_transitions=2048,
                    hidden=(64, 64), head_hidden=32, gamma=0.5, lr=1e-3, eps_decay_steps=100)
    tr = DQNTrainer(m, params, cfg, seed=0)
    with stopwatch() as sw:
        tr.train_epoch()
    ours_s = sw.s
    ours = bt.run(*val, GreedyPolicy(tr.learner.online)).metrics[0]
    out["ours"] = {"seconds": ours_s, "env_steps_per_s": cfg.n_envs * cfg.rollout_len * cfg.rounds_per_epoch / ours_s,
                   "val_sharpe": ours["sharpe"], "val_return": ours["total_return"]}
    out["buy_and_hold"] = bt.run(*val, ExposurePolicy(torch.ones(1, val[1][0]), 5)).metrics[0]["sharpe"]
    try:
        from stable_baselines3 import DQN
    except ImportError as exc:  # pragma: no cover
        out["sb3"] = {"error": f"stable-baselines3 not installed: {exc}"}
        return out
    env = TradingEnv(m, params, seed=0)
    model = DQN("MlpPolicy", env, learning_starts=1000, buffer_size=100_000, batch_size=256, gamma=0.5,
                learning_rate=1e-3, exploration_fraction=0.2, policy_kwargs={"net_arch": [64, 64]}, device="cpu",
                seed=0, verbose=0)
    from foxhunt.scorecard.baselines import silence_logger

    silence_logger(model)
    with stopwatch() as sw:
        model.learn(total_timesteps=steps)
    sb3_s = sw.s
    qnet = model.q_net.to(device).eval()
    sb3 = bt.run(*val, GreedyPolicy(qnet)).metrics[0]
    out["sb3"] = {"seconds": sb3_s, "env_steps_per_s": steps / sb3_s, "val_sharpe": sb3["sharpe"],
                  "val_return": sb3["total_return"]}
    return out


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--sb3-steps", type=int, default=20_000)
    ap.add_argument("--only", default="abcd")
    ap.add_argument("--sizes", default="", help="comma-separated N for (a), e.g. 65536")
    ap.add_argument("--variants", default="", help="comma-separated collection variants to run")
    ap.add_argument("--train-variants", default="", help="comma-separated labels of (b) rows, e.g. "
                    "graph-fused-proportional_wide,graph-fused-uniform")
    ap.add_argument("--repeat", type=int, default=1, help="run the (b) rows this many times (fresh trainers)")
    ap.add_argument("--streams", default="two,off,one,two", help="(e): comma-separated modes off | one | two, run in "
                    "this order (a repeat brackets the first run's one-off compilation)")
    ap.add_argument("--stream-epochs", type=int, default=10, help="(e): timed epochs per mode")
    ap.add_argument("--batches", default="", help="comma-separated batch sizes for (b) (default 4096 on CUDA, 256 on the CPU), "
                                                  "e.g. 512,4096: the learning configurations' batch beside the throughput one")
    args = parse(ap)  # --name: a partial run (--only) beside the full one
    dev = args.dev
    torch.backends.cuda.matmul.allow_tf32 = True
    res: dict = {"machine": machine(dev), "collection": [], "training": [], "syncs": [], "streams": [], "errors": []}
    market = build_market(20_000 if args.quick else 400_000, 51, dev, seed=1)
    sizes = [128, 1024] if args.quick else [128, 4096, 16_384, 65_536]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]

    name = f"dqn_{dev.type}{'_quick' if args.quick else ''}"

    def guarded(section: str, fn, *a):
        try:
            r = fn(*a)
            print(section, r, flush=True)
            return r
        except Exception as exc:  # a failed variant is recorded, the run goes on
            res["errors"].append(f"{section} {a[1:]}: {type(exc).__name__}: {exc}")
            print("ERROR", res["errors"][-1], flush=True)
            return None

    if "a" in args.only:
        for n in sizes:
            extra = (["fused"] if dev.type == "cuda" and n >= 16_384 else []) + (["compiled"] if dev.type == "cuda" and n >= 65_536 else [])
            variants = ["eager", "graph"] + extra + (["fused-bf16", "fusedc-bf16"] if dev.type == "cuda" and n >= 65_536 else [])
            # The fused acting MLP (CUDA only: --quick on the CPU skips it); at 64 K also launch-parameter variants.
            variants += ["fusedmlp-bf16", "fusedmlp-tf32"] if dev.type == "cuda" and n >= 16_384 else []
            variants += (["fusedmlp-bf16@m64w8b64s2", "fusedmlp-bf16@m128w8b64s2", "fusedmlp-tf32@m64w4b16s2"]
                         if dev.type == "cuda" and n >= 65_536 else [])
            if args.variants:
                variants = [v for v in variants if v in args.variants.split(",")]
            for variant in variants:
                r = guarded("collection", collection, market, n, variant, 16)
                if r:
                    res["collection"].append(r)
                    save(args, name, res)  # partial results survive a timeout
    if "b" in args.only:
        cap = (1 << 20) if dev.type == "cuda" else 4096
        batches = [int(b) for b in args.batches.split(",")] if args.batches else ([4096] if dev.type == "cuda" else [256])
        # (label, graphs, compiled, fused, sampler, extra config); on the CPU (--quick) the fused
        # uniform row smoke-tests the compiled program.
        rows = [(f"{'graph' if g else 'eager'}{'-compiled' if c else ''}{'-fused' if f else ''}-{smp}", g, c, f, smp, None)
                for g, c, f in ([(False, False, False), (True, False, False), (True, True, False), (True, False, True)]
                                if dev.type == "cuda" else [(False, False, False), (False, False, True)])
                for smp in ("proportional", "uniform")
                if not (c and smp == "uniform") and not (f and dev.type != "cuda" and smp == "proportional")]
        if dev.type == "cuda":
            rows.append(("graph-fused-proportional-fused_replay", True, False, True, "proportional", {"replay": "fused"}))
            rows.append(("graph-fused-proportional_wide", True, False, True, "proportional",
                         {"tree_arity": 32, "replay": "fused"}))
        if args.train_variants:
            rows = [r for r in rows if r[0] in args.train_variants.split(",")]
        for rep, batch in ((r, b) for r in range(args.repeat) for b in batches):
            for label, graphs, compiled, fused, sampler, over in rows:
                r = guarded("training", training, market, graphs, cap, batch, sampler, compiled, fused, over)
                if r:
                    r.update(label=label, repeat=rep)
                    res["training"].append(r)
                    save(args, name, res)
    if "c" in args.only and dev.type == "cuda":
        for lagged in (False, True):
            r = guarded("syncs", syncs_per_epoch, market, lagged)
            if r:
                res["syncs"].append(r)
    if "e" in args.only:
        for plan in ("torch", "fused") if dev.type == "cuda" else ("torch",):
            for mode in args.streams.split(","):
                if mode not in STREAM_MODES:
                    raise SystemExit(f"error: --streams: {mode!r} is not one of {', '.join(STREAM_MODES)}")
                r = guarded("streams", streams, market, mode, plan, 2 if args.quick else args.stream_epochs, args.quick)
                if r:
                    res["streams"].append(r)
                    save(args, name, res)
    if "d" in args.only:
        r = guarded("sb3", sb3_comparison, dev, 2_000 if args.quick else args.sb3_steps, args.quick)
        res["sb3"] = r
    path = save(args, name, res)
    print(f"\nDQN benchmark on {res['machine'].get('gpu', dev.type)} -> {path}")
    print(f"{'N envs':>8} {'variant':>9} {'env-steps/s':>14}")
    for r in res["collection"]:
        print(f"{r['n_envs']:>8} {r['variant']:>9} {r['env_steps_per_s']:>14,.0f}")
    for r in res["training"]:
        print(f"train batch {r['batch']} cap {r['capacity']} {r['sampler']:>12} graphs={r['graphs']} compiled={r['compiled']} "
              f"fused={r['fused']}{''.join(f' {k}={v}' for k, v in r['over'].items())}: {r['updates_per_s']:,.0f} updates/s"
              + (f", {r['round_graph_updates_per_s']:,.0f} with 16 a graph" if "round_graph_updates_per_s" in r else "")
              + f" (setup {r['setup_s']:.1f} s)")
    for r in res["syncs"]:
        print(f"syncs/epoch lagged={r['lagged']}: implicit {r['implicit_syncs_per_epoch']} (by epoch {r.get('implicit_syncs_by_epoch')}, from {r.get('implicit_sync_sources')}), blocking waits {r['blocking_event_waits_per_epoch']}")
    for r in res["streams"]:
        print(f"streams {r['plan']:>5} {r['mode']:>3}: {r['env_steps_per_s']:,.0f} env-steps/s, "
              f"{r['updates_per_s']:,.0f} updates/s ({r['epoch_s']:.4f} s an epoch)")
    if res.get("sb3"):
        print("sb3 comparison:", res["sb3"])
    if res["errors"]:
        print("errors:", *res["errors"], sep="\n  ")


if __name__ == "__main__":
    main()
