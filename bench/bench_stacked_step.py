"""Members' DQN train steps one after another against ONE stacked program (issue 44's member axis).

What it answers before the trainers are rebuilt around a member axis: on the card, what does a round of
M members' gradient steps cost when every member runs its own compiled step (today's lockstep: M programs
a step, each a few dozen small kernels) against one program over the members' parameters stacked on a
leading axis (``torch.func.vmap`` of the same step: batched GEMMs, one kernel per fused elementwise group
for all members)?

The step is the fused train step's arithmetic (``agents/dqn/manual_grad.dqn_loss_and_grad``: double-DQN
Huber loss and its hand-written gradient, gradient clipping, Adam, Polyak target) on a batch already
gathered (the replay's sample and gather are the same in both arms and left out). Each arm is compiled
(``torch.compile``, fullgraph, static shapes) and, on a GPU, captured as one CUDA graph of a round
(``--steps`` gradient steps of every member); the figure is device seconds a round (CUDA events around a
graph replay). The two arms start from the same weights and batches; the JSON records how far the stacked
members' weights end from the separate ones' (float32; batched GEMMs may sum in another order).

    PYTHONPATH=src:. python -m bench.bench_stacked_step --members 1,3,9,27      (on a GPU)
    PYTHONPATH=src:. python -m bench.bench_stacked_step --quick                 (CPU, eager: the harness)
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.nn import functional as F

from bench import common
from foxhunt.agents.dqn.manual_grad import DuelingLayout, dqn_loss_and_grad
from foxhunt.agents.networks import DuelingQNet

STATE = ("online", "target", "m", "v", "t")
BATCH = ("obs", "action", "reward", "done", "next_obs", "discount", "weights")


def member_step(lay: DuelingLayout, hp: dict[str, float], online: torch.Tensor, target: torch.Tensor, m: torch.Tensor,
                v: torch.Tensor, t: torch.Tensor, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                done: torch.Tensor, next_obs: torch.Tensor, discount: torch.Tensor, weights: torch.Tensor):
    """One member's gradient step, functional: (online, target, m, v, t) after the step, and |td| [B].

    online, target, m, v [P]; t 0-d (Adam's step count); obs, next_obs [B, obs_dim]; action [B] int64;
    reward, discount, weights [B]; done [B] bool."""
    loss, g, td, _, _ = dqn_loss_and_grad(online, target, lay, obs, action, reward, done, next_obs, discount,
                                          weights, hp["delta"])
    g = g * (hp["clip"] / (torch.linalg.vector_norm(g) + 1e-6)).clamp(max=1.0)
    n = t + 1.0
    m_new = m * hp["b1"] + g * (1.0 - hp["b1"])
    v_new = v * hp["b2"] + g * g * (1.0 - hp["b2"])
    bc1 = 1.0 - torch.pow(torch.full_like(n, hp["b1"]), n)
    bc2 = 1.0 - torch.pow(torch.full_like(n, hp["b2"]), n)
    online_new = online - (m_new / bc1) / ((v_new / bc2).sqrt() + hp["eps"]) * hp["lr"]
    target_new = target + hp["tau"] * (online_new - target)
    return online_new, target_new, m_new, v_new, n, td.abs()


def make_members(n_members: int, args: Any, dev: torch.device) -> tuple[DuelingLayout, dict[str, torch.Tensor],
                                                                         dict[str, torch.Tensor]]:
    """The layout, the members' stacked state {name: [M, ...]} and their stacked batches {name: [M, steps, B, ...]}."""
    g = torch.Generator().manual_seed(0)
    nets = [DuelingQNet(args.obs, args.actions, args.hidden, args.head_hidden) for _ in range(n_members)]
    lay = DuelingLayout.from_module(nets[0])
    online = torch.stack([torch.cat([p.detach().reshape(-1) for p in net.parameters()]) for net in nets])
    state = {"online": online, "target": online.clone(), "m": torch.zeros_like(online),
             "v": torch.zeros_like(online), "t": torch.zeros(n_members)}
    shape = (n_members, args.steps, args.batch)
    batch = {"obs": torch.randn(*shape, args.obs, generator=g), "next_obs": torch.randn(*shape, args.obs, generator=g),
             "action": torch.randint(0, args.actions, shape, generator=g), "reward": torch.randn(shape, generator=g) * 0.1,
             "done": torch.rand(shape, generator=g) < 0.01, "discount": torch.full(shape, 0.9),
             "weights": torch.rand(shape, generator=g) + 0.5}
    return lay, {k: x.to(dev) for k, x in state.items()}, {k: x.to(dev) for k, x in batch.items()}


def separate_round(step: Callable, state: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    """A round as today: for each of ``steps`` steps, every member's own program on its own row."""
    n_members, steps = batch["obs"].shape[:2]
    rows = [{k: state[k][i] for k in STATE} for i in range(n_members)]  # views: a member's own buffers

    def run() -> None:
        for s in range(steps):
            for i, row in enumerate(rows):
                out = step(*(row[k] for k in STATE), *(batch[k][i, s] for k in BATCH))
                for k, x in zip(STATE, out):
                    row[k].copy_(x)
    return run


def stacked_round(step: Callable, state: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    """A round as one program a step: the members' step vmapped over the leading member axis."""
    steps = batch["obs"].shape[1]

    def run() -> None:
        for s in range(steps):
            out = step(*(state[k] for k in STATE), *(batch[k][:, s] for k in BATCH))
            for k, x in zip(STATE, out):
                state[k].copy_(x)
    return run


def time_arm(run: Callable[[], None], dev: torch.device, reps: int) -> dict[str, float]:
    """Device seconds a round: one CUDA graph of the round, replayed (a CPU: the round eagerly, wall clock)."""
    if dev.type != "cuda":
        return {"round_s": common.timed(run, dev, reps=reps, warmup=1)}
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):  # compile and warm outside the capture
            run()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with common.stopwatch(dev) as cap, torch.cuda.graph(graph):
        run()
    return {"round_s": common.timed(graph.replay, dev, reps=reps, warmup=2), "capture_s": cap.s}


def run_members(n_members: int, args: Any) -> dict[str, Any]:
    dev = args.dev
    lay, state, batch = make_members(n_members, args, dev)
    hp = {"delta": 1.0, "clip": 10.0, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "lr": 3e-4, "tau": 0.005}

    def one(*a: torch.Tensor):
        return member_step(lay, hp, *a)

    compile_ = (lambda f: torch.compile(f, dynamic=False, fullgraph=True)) if args.compile else (lambda f: f)
    sep_state = {k: x.clone() for k, x in state.items()}
    row: dict[str, Any] = {"members": n_members}
    row["separate"] = time_arm(separate_round(compile_(one), sep_state, batch), dev, args.reps)
    row["stacked"] = time_arm(stacked_round(compile_(torch.vmap(one)), state, batch), dev, args.reps)
    # both arms ran the same number of rounds from the same start: compare where they ended
    row["max_abs_weight_diff"] = float((state["online"] - sep_state["online"]).abs().max())
    row["speedup"] = row["separate"]["round_s"] / row["stacked"]["round_s"]
    print(f"M={n_members:>3}: separate {row['separate']['round_s'] * 1e3:8.3f} ms a round, stacked "
          f"{row['stacked']['round_s'] * 1e3:8.3f} ms ({row['speedup']:.1f}x), weights differ by at most "
          f"{row['max_abs_weight_diff']:.2e}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = common.arguments(__doc__.split("\n\n")[0], quick="2 members, tiny net, eager, on the CPU")
    ap.add_argument("--members", default="1,3,9,27", help="comma-separated member counts M")
    ap.add_argument("--hidden", default="64,64")
    ap.add_argument("--head-hidden", type=int, default=32)
    ap.add_argument("--obs", type=int, default=40, help="observation width (features + portfolio)")
    ap.add_argument("--actions", type=int, default=5)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=24, help="gradient steps a round (dqn.train_steps_per_round)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    args = common.parse(ap, argv)
    if args.quick:
        args.members, args.hidden, args.head_hidden, args.batch, args.steps, args.reps = "1,2", "8,8", 4, 16, 2, 2
        args.compile = False
    args.hidden = [int(h) for h in str(args.hidden).split(",")]
    res: dict[str, Any] = {"bench": "stacked_step", "machine": common.machine(args.dev),
                           "args": common.own_args(args), "rows": [], "errors": []}
    stem = f"stacked_step_{args.dev.type}" + ("_quick" if args.quick else "")
    for m in (int(x) for x in args.members.split(",")):
        common.record_row(res, lambda a, n: run_members(n, a), args, m)
        out = common.save(args, stem, res)
    print(f"\n{'M':>4} {'separate ms':>12} {'stacked ms':>11} {'speed-up':>9}")
    for r in res["rows"]:
        print(f"{r['members']:>4} {r['separate']['round_s'] * 1e3:>12.3f} {r['stacked']['round_s'] * 1e3:>11.3f} "
              f"{r['speedup']:>8.1f}x")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
