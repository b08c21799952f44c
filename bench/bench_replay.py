"""Replay sampler throughput: sample + priority update (no observation gather), eager vs CUDA graph.

One step = ``sample(B)`` + TD errors from the sampled indices + ``update_priorities``, over a full
buffer. Numbers are measured side by side in one run; the graph column replays one captured step.
The "fused" rows run proportional PER's trees as Triton kernels (``ProportionalPER(backend="fused")``,
the same bits as the torch rows); the "wide" row runs ``WidePER`` (32-ary sum/min trees, 4 levels
at 1 M slots, Triton). They need CUDA and are skipped (and listed) elsewhere.

    PYTHONPATH=src:. python -m bench.bench_replay            # 1 M slots, batch 4096, on CUDA when present
    PYTHONPATH=src:. python -m bench.bench_replay --quick    # small CPU run (a smoke test of the harness)

Writes bench/results/replay_<device>.json (device name, torch version, git revision, results) and
prints a short table.
"""

from __future__ import annotations

import platform
from typing import Callable

import torch

from bench import common as _common
from foxhunt.accel.graphs import capture
from foxhunt.agents.replay import ProportionalPER, RankPER, ReplayStorage, Transitions, UniformSampler, WidePER
from foxhunt.agents.replay.fused import unsupported as trees_unsupported


def fill(storage: ReplayStorage, seed: int) -> torch.Tensor:
    """Fill every slot with random compact transitions; returns |δ| [C] for the initial priorities."""
    dev, cap = storage.device, storage.capacity
    g = torch.Generator(dev).manual_seed(seed)
    chunk = min(cap, 1 << 16)
    for start in range(0, cap, chunk):
        n = min(chunk, cap - start)
        bar = torch.randint(0, 100_000, (n,), device=dev, generator=g)
        pf = torch.randn(n, 3, device=dev, generator=g)
        storage.add(Transitions(bar, pf, bar % 45, torch.randn(n, device=dev, generator=g),
                                torch.zeros(n, dtype=torch.bool, device=dev), bar + 1, pf))
    return torch.rand(cap, device=dev, generator=g).mul_(3.0)


def make_step(sampler, batch: int) -> Callable[[], None]:
    counter = torch.zeros((), device=sampler.device)

    def step() -> None:
        idx, w = sampler.sample(batch)
        sampler.update_priorities(idx, torch.sin(idx.to(torch.float32) * 0.37 + counter))
        counter.add_(1.0)

    return step


def graphed(fn: Callable[[], None], generator: torch.Generator) -> Callable[[], None]:
    return capture(fn, "cuda", warmup=3, generators=[generator]).replay


FUSED = "proportional (fused Triton trees)"
WIDE = "proportional (wide 32-ary Triton tree)"


def fused_skip_reason(device: torch.device) -> str | None:
    """Why the fused rows are not measured here (None: they are). Timing the Triton interpreter
    on a CPU would measure the interpreter, so only CUDA counts."""
    if device.type != "cuda":
        return "needs CUDA (the Triton interpreter is not worth timing)"
    return trees_unsupported(device)


def cases(storage: ReplayStorage):
    """(name, sampler, what one timed call does) for every configuration benchmarked."""
    yield "uniform", UniformSampler(storage, seed=1), "step"
    default = ProportionalPER(storage, seed=1)
    yield f"proportional (default: {default.rebuild} rebuild)", default, "step"
    if fused_skip_reason(storage.device) is None:
        yield FUSED, ProportionalPER(storage, seed=1, backend="fused"), "step"
        yield f"{FUSED[:-1]}, search_level=0)", ProportionalPER(storage, search_level=0, seed=1, backend="fused"), "step"
        yield WIDE, WidePER(storage, seed=1, backend="fused"), "step"
    yield "proportional (partial rebuild)", ProportionalPER(storage, rebuild="partial", seed=1), "step"
    yield "proportional (full rebuild)", ProportionalPER(storage, rebuild="full", seed=1), "step"
    yield "proportional (search_level=0)", ProportionalPER(storage, search_level=0, seed=1), "step"
    yield "rank (no re-sort in the step)", RankPER(storage, refresh_every=0, seed=1), "step"
    yield "rank (re-sort every step, K=1)", RankPER(storage, refresh_every=1, seed=1), "step"
    yield "rank refresh() alone (one sort)", RankPER(storage, refresh_every=0, seed=1), "refresh"


def main(argv: list[str] | None = None) -> dict:
    ap = _common.arguments(__doc__, quick="small CPU run: 64 K slots, batch 512")
    ap.add_argument("--capacity", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--iters", type=int, default=None)
    args = _common.parse(ap, argv)  # --threads: default 1 on a CPU (below)
    dev = args.dev
    cap = args.capacity or (65_536 if args.quick else 1_000_000)
    batch = args.batch or (512 if args.quick else 4096)
    iters = args.iters or (20 if args.quick else 200)
    torch.manual_seed(0)
    if dev.type == "cpu" and not args.threads:
        torch.set_num_threads(1)  # shared 2-core machines: oversubscription swamps the numbers

    storage = ReplayStorage(cap, device=dev)
    td0 = fill(storage, seed=0)
    slots = torch.arange(cap, device=dev)
    rows = []
    for name, sampler, what in cases(storage):
        sampler.on_add(slots, td0)
        if isinstance(sampler, RankPER):
            sampler.refresh()
        fn = sampler.refresh if what == "refresh" else make_step(sampler, batch)
        for _ in range(3):
            fn()
        eager = _common.timed(fn, dev, reps=1, warmup=0, inner=iters)
        graph = _common.timed(graphed(fn, sampler.generator), dev, reps=1, warmup=0, inner=iters) if dev.type == "cuda" else None
        best = graph if graph is not None else eager
        rows.append({
            "name": name,
            "eager_us": eager * 1e6,
            "graph_us": None if graph is None else graph * 1e6,
            "graph_speedup": None if graph is None else eager / graph,
            "samples_per_s": batch / best if what == "step" else None,
        })
        del sampler

    skip = fused_skip_reason(dev)
    best = {r["name"]: r["graph_us"] if r["graph_us"] is not None else r["eager_us"] for r in rows}
    default_row = next(k for k in best if k.startswith("proportional (default"))
    fused_ratio = best[default_row] / best[FUSED] if FUSED in best else None  # the ratio the fused trees are for
    wide_ratio = best[default_row] / best[WIDE] if WIDE in best else None
    result = {
        "bench": "replay",
        "device": dev.type,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "git_revision": _common.git_revision(),
        "quick": bool(args.quick),
        "capacity": cap,
        "batch": batch,
        "iters": iters,
        "cpu_threads": torch.get_num_threads(),
        "step": "sample(B) + update_priorities(B), no gather",
        "results": rows,
        "skipped": [] if skip is None else [f"{FUSED}: {skip}", f"{WIDE}: {skip}"],
        "fused_speedup_vs_default": fused_ratio,
        "wide_speedup_vs_default": wide_ratio,
    }
    out = _common.save(args, f"replay_{dev.type}", result)

    print(f"replay bench: {result['device_name']} | torch {result['torch']} | rev {result['git_revision'][:10]}"
          f" | capacity {cap:,} | batch {batch} | {iters} iters")
    print(f"{'configuration':40s} {'eager µs':>10s} {'graph µs':>10s} {'speedup':>8s} {'samples/s':>12s}")
    for r in rows:
        g = "-" if r["graph_us"] is None else f"{r['graph_us']:10.1f}"
        sp = "-" if r["graph_speedup"] is None else f"{r['graph_speedup']:7.2f}x"
        sps = "-" if r["samples_per_s"] is None else f"{r['samples_per_s']:12.3e}"
        print(f"{r['name']:40s} {r['eager_us']:10.1f} {g:>10s} {sp:>8s} {sps:>12s}")
    if fused_ratio is not None:
        print(f"fused trees vs the default torch trees: {fused_ratio:.2f}x per step (best of eager / graph)")
    if wide_ratio is not None:
        print(f"wide 32-ary trees vs the default torch trees: {wide_ratio:.2f}x per step (best of eager / graph)")
    for line in result["skipped"]:
        print(f"skipped {line}")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
