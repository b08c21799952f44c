"""Where the DQN step time goes: a kernel-level profile of one train step and one collection round.

Not a benchmark of record: it explains the figures of ``bench_dqn.py``. For each program it prints
the kernels per call, the summed kernel time per call (the GPU's real work) and the top kernels, so
that "launch-bound" vs "bandwidth-bound" vs "GEMM-bound" is read from numbers, and writes
``bench/results/profile_dqn_<device>.json``.

    PYTHONPATH=src:. python -m bench.profile_dqn            # on the GPU
    PYTHONPATH=src:. python -m bench.profile_dqn --quick    # CPU smoke test
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from bench.common import arguments, build_market, machine, parse, save, timed, trainer


def kernel_table(fn, calls: int, cuda: bool) -> dict:
    """Profile ``calls`` eager calls of fn: kernels per call, kernel µs per call, top 12 kernels."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
    per_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        dev_us = getattr(ev, "device_time", None) if cuda else None
        if cuda:
            if ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = float(dev_us or 0.0)
        else:
            if ev.cpu_parent is not None:  # top-level ops only on CPU
                continue
            us = float(ev.cpu_time)
        e = per_name[ev.name[:90]]
        e[0] += 1
        e[1] += us
    total_n = sum(v[0] for v in per_name.values())
    total_us = sum(v[1] for v in per_name.values())
    top = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:12]
    return {"kernels_per_call": total_n / calls, "kernel_us_per_call": total_us / calls,
            "top": [{"name": k, "count_per_call": v[0] / calls, "us_per_call": v[1] / calls} for k, v in top]}


def graphed_us(fn, reps: int, device: torch.device) -> float:
    return timed(fn, device, reps=reps, warmup=1) * 1e6


def main() -> None:
    args = parse(arguments(__doc__))
    dev = args.dev
    cuda = dev.type == "cuda"
    market = build_market(200_000 if cuda else 5_000, 51, dev, seed=1)
    n = 65_536 if cuda else 256
    cap = 1 << 20 if cuda else 1 << 12
    batch = 4096 if cuda else 256
    out: dict = {"machine": machine(dev), "programs": []}
    variants = [("train", "proportional", False), ("train", "uniform", False), ("train", "proportional", True),
                ("round", "torch", False), ("round", "fused", False), ("round", "fused-bf16", True)]
    if not cuda:  # the fused env step needs CUDA (or the slow interpreter)
        variants = [v for v in variants if not v[1].startswith("fused")]
    for what, var, compiled in variants:
        fused = var.startswith("fused")
        cfg = dict(n_envs=n, rollout_len=16 if what == "round" else max(1, cap // n), buffer_capacity=cap,
                   batch_size=batch, sampler=var if what == "train" else "proportional", warmup_transitions=0,
                   train_step="compiled" if compiled else "torch", acting="compiled" if compiled else "torch",
                   env_step="fused" if fused else "torch", matmul_precision="bf16" if var.endswith("bf16") else "tf32")
        tr = trainer(market, graphs=False, **cfg)
        tr._round()
        step = tr._train if what == "train" else tr._round
        step()
        table = kernel_table(step, 3, cuda)
        row = {"program": what, "variant": var, "compiled": compiled, **table}
        if cuda:  # the same program graphed, for launch overhead = graphed time - kernel time
            trg = trainer(market, graphs=True, **cfg)
            trg._round()
            g = trg._train if what == "train" else trg._round
            g()
            row["graphed_us_per_call"] = graphed_us(g, 20, dev)
            del trg
        out["programs"].append(row)
        del tr
        print(f"{what:5} {var:12} compiled={compiled!s:5} kernels/call {row['kernels_per_call']:.0f} "
              f"kernel µs {row['kernel_us_per_call']:.0f} graphed µs {row.get('graphed_us_per_call', float('nan')):.0f}")
        for t in row["top"][:8]:
            print(f"      {t['us_per_call']:8.1f} µs  x{t['count_per_call']:.0f}  {t['name']}")
    print(f"wrote {save(args, f'profile_dqn_{dev.type}' + ('_quick' if args.quick else ''), out)}")


if __name__ == "__main__":
    main()
