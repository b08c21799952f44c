"""Which network shapes and launch parameters does the compiled acting kernel get right? For a grid
of (obs_dim, n_actions, hidden, head_hidden, min_head) × (stages, bn, num_warps), the bf16 and tf32
kernels' Q against a torch emulation (bf16 weights and layer inputs, float32 sums; tf32: the float32
net), relative max error and argmax agreement, over 4,096 random rows. Runs on the GPU (a diagnostic
for scripts/gpu.sh step ``acting``); with TRITON_INTERPRET=1 it checks the harness on the CPU.

    PYTHONPATH=src:. python scripts/acting_shape_sweep.py --workers 12 --out bench/results/acting_shapes_cuda.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "src")]

SHAPES = {  # name: (obs_dim, n_actions, hidden, head_hidden, min_head)
    "test_case1": (54, 45, (48, 32), 16, 16),
    "case1_h2_64": (54, 45, (48, 64), 16, 16),
    "case1_head32": (54, 45, (48, 32), 32, 16),
    "case1_obs7": (7, 45, (48, 32), 16, 16),
    "case1_h1_32": (54, 45, (32, 32), 16, 16),
    "case1_act5": (54, 5, (48, 32), 16, 64),
    "test_case0": (7, 5, (32, 48), 24, 16),
    "test_case2": (54, 5, (32, 32), 24, 64),
    "h200_fast": (54, 5, (64, 64), 32, 64),
    "h200_fast_ema": (66, 5, (64, 64), 32, 64),
    "h64_head16": (54, 5, (64, 64), 16, 64),
    "h64_32": (54, 5, (64, 32), 32, 64),
    "default_256": (54, 45, (256, 256), 128, 64),
}
LAUNCHES = [None, dict(min_width=64), dict(min_width=64, bn=64)] + [
    dict(stages=s, bn=b, num_warps=w) for s, b, w in itertools.product((1, 3), (16, 32), (4, 8))]


def one(job: tuple[str, str, dict | None]) -> dict:
    import torch

    from foxhunt.kernels.acting import kernel as dmf
    from foxhunt.kernels.rules import packing as pk
    from tests.kernels.test_dueling_mlp_fused import bf16_q, varied_net

    name, precision, launch = job
    obs_dim, n_act, hidden, head, min_head = SHAPES[name]
    launch = dict(launch or {})
    min_width = launch.pop("min_width", 16)  # a packing choice, not a launch parameter
    if min_width != 16:
        min_head = max(min_head, min_width)
    dev = torch.device("cpu" if dmf.is_interpreted() else "cuda")
    net = varied_net(obs_dim, n_act, hidden, head, seed=11)
    n = 256 if dmf.is_interpreted() else 4096
    obs = torch.randn(n, obs_dim, generator=torch.Generator().manual_seed(11)).to(dev)
    packed = pk.pack_net(net, precision, min_head, min_width)
    row = {"shape": name, "dims": list(packed.dims), "precision": precision, "min_width": min_width, "launch": launch or "default"}
    try:
        out = dmf.fused_dueling_q(packed, obs, precision=precision, argmax=True, **launch)
        with torch.no_grad():
            ref = bf16_q(net, obs) if precision == "bf16" else net(obs)
        torch.cuda.synchronize() if dev.type == "cuda" else None
        scale = float(ref.abs().max())
        row.update(rel_err=float((out.q - ref).abs().max()) / scale,
                   argmax_agree=float((out.argmax == ref.argmax(1)).float().mean()))
        row["ok"] = row["rel_err"] < (5e-3 if precision == "bf16" else 2e-2)
    except Exception as exc:  # noqa: BLE001 - a refusal or a fault is a row of the table
        row.update(ok=None, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    probe = ("test_case1", "h200_fast")  # every launch variant only for these (the failing test and the shipped net)
    jobs = [(s, p, l) for s in SHAPES for p in ("bf16", "tf32")
            for l in (LAUNCHES if p == "bf16" and s in probe else LAUNCHES[:3] if p == "bf16" else LAUNCHES[:2])]
    import multiprocessing as mp

    # one process per job: a launch that faults (illegal address) poisons its CUDA context, not the next job's
    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as ex:
        rows = list(ex.map(one, jobs))
    for r in rows:
        l = r["launch"] if isinstance(r["launch"], str) else " ".join(f"{k}{v}" for k, v in r["launch"].items())
        l = (f"w{r['min_width']} " if r["min_width"] != 16 else "") + l
        print(f"{r['shape']:<14} {str(r['dims']):<24} {r['precision']:<5} {l:<14} "
              + (f"rel {r['rel_err']:.2e} argmax {r['argmax_agree']:.3f} {'ok' if r['ok'] else 'WRONG'}" if r["ok"] is not None
                 else r["error"]))
    if args.out:
        import torch

        from foxhunt.provenance import machine

        args.out.write_text(json.dumps({"bench": "acting_shapes", "rows": rows,
                                        "machine": machine(torch.device("cuda" if torch.cuda.is_available() else "cpu"))},
                                       indent=1) + "\n")
    print(f"{sum(r['ok'] is False for r in rows)} wrong, {sum(r['ok'] is None for r in rows)} refused / failed, of {len(rows)}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
