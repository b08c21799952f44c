"""Name the fault behind the fused acting crash (docs/LEARNING.md, "On the H200" §5) on the GPU.

Three phases, each printing one line per result (no files written):

* ``kernel``: the acting kernel alone at the scorecard's shapes (N = 4096 envs, obs 54 and 55,
  256/256 trunk, 128 head, 5 actions, bf16), both launch variants the collector uses (online: Q +
  argmax; target: max only), eager and replayed ``--replays`` times from one CUDA graph with fresh
  observations copied in before each replay. Every replay must equal the eager launch on the same
  input bit for bit (the kernel is deterministic), have no NaN and keep argmax in [0, 5): a racy
  software pipeline shows up as mismatches, a bad address as the first CUDA error.
* ``scenario``: the scorecard's no_edge market shrunk (as tests/agents/test_dqn_checks.py's GPU
  repro), configs/h200-fast.toml with ``accel.acting = --acting``, ``accel.graphs = --graphs``,
  check mode on. Run it with CUDA_LAUNCH_BLOCKING=1 so that the Python traceback names the launch
  that faults (with graphs off: the exact op; on: which graph, round or train step). ``--stages``
  overrides the kernel's software-pipelining depth (1: no pipelining) to test the compiler.

* ``cases``: ``bench/diag_acting_cases.py`` — each risky case of the kernel in its own process
  (launch variants alone and in the diag's order, pipelining depth 1, 45 actions, tf32, weights
  padded or ending at unmapped memory, NaN rows, a CUDA graph, the head padded to A = 32 / 64, other
  ptxas builds, and the SASS digest against the CPU cross-compile), one line per case, about a
  minute on the H200. ``--case NAME`` (repeatable) runs a subset; ``--sanitizer`` runs the failing
  cases under compute-sanitizer instead (memcheck, racecheck, synccheck, initcheck; the first
  error of each with its kernel offset and SASS instruction, < 2 min; bench/diag_acting_sanitizer.py).

  CUDA_LAUNCH_BLOCKING=1 python bench/diag_fused_acting.py kernel
  CUDA_LAUNCH_BLOCKING=1 python bench/diag_fused_acting.py scenario --graphs off
  python bench/diag_fused_acting.py cases
  python bench/diag_fused_acting.py cases --sanitizer
On a CPU both run tiny under the Triton interpreter (a smoke test of the script itself).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


def kernel_phase(n: int, replays: int, stages: int | None) -> bool:
    from foxhunt.agents.networks import DuelingQNet
    from foxhunt.kernels.acting import kernel as k
    from foxhunt.kernels.rules.packing import pack_net

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    ok = True
    for obs_dim in (54, 55):
        torch.manual_seed(obs_dim)
        net = DuelingQNet(obs_dim, 5, [256, 256], 128).to(dev)
        pk = pack_net(net, "bf16")
        obs = torch.randn(n, obs_dim, device=dev)
        q, g, m = (torch.zeros(n, 5, device=dev), torch.zeros(n, dtype=torch.int64, device=dev),
                   torch.zeros(n, device=dev))
        kw = dict(precision="bf16", stages=stages)

        def launch() -> None:
            k.fused_dueling_q(pk, obs, q=q, argmax=g, **kw)
            k.fused_dueling_q(pk, obs, q=False, q_max=m, **kw)

        launch()
        graph = None
        if cuda:
            from foxhunt.accel.graphs import capture

            torch.cuda.synchronize()
            graph = capture(launch, dev)  # the project's one capture helper (side-stream warm-up, then capture)
        bad = nan = out_of_range = 0
        t0 = time.perf_counter()
        for r in range(replays):
            obs.copy_(torch.randn(n, obs_dim, device=dev) * (1 + r % 7))
            if graph is not None:
                graph.replay()
            else:
                launch()
            got = (q.clone(), g.clone(), m.clone())
            launch()  # eager, same input
            bad += int(not all(torch.equal(a, b) for a, b in zip(got, (q, g, m))))
            nan += int(got[0].isnan().any())
            out_of_range += int((got[1] < 0).any() or (got[1] >= 5).any())
        if cuda:
            torch.cuda.synchronize()
        good = bad == nan == out_of_range == 0
        ok &= good
        print(f"kernel obs {obs_dim} N {n}: {replays} replays, {bad} differ from eager, {nan} with NaN Q, "
              f"{out_of_range} with argmax outside [0, 5): {'ok' if good else 'FAIL'} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    return ok


def scenario_phase(acting: str, graphs: str, stages: int | None, tiny: bool, extra: list[str]) -> None:
    import tomllib

    from foxhunt.kernels.acting import kernel as k
    from foxhunt.kernels.rules.packing import pack_net
    from foxhunt.scorecard.build import Size
    from foxhunt.scorecard.markets import SPACING, make_scenario
    from foxhunt.scorecard.run import run_scenario

    if stages is not None:
        for cfg in k.DEFAULTS.values():
            cfg["stages"] = stages
    base = tomllib.loads((ROOT / "configs" / "h200-fast.toml").read_text())
    base.setdefault("train", {})["ensemble"] = 1  # the repro is one trainer's collection
    cuda = torch.cuda.is_available()
    if tiny:
        size = Size("diag-tiny", bars=4_000, train=1_200, val=300, max_folds=1, real_train=500, real_val=100, epochs=1)
        over = ["run.device=\"cpu\"", "accel.backend=\"torch\"", "accel.env_step=\"fused\"", "accel.replay=\"fused\"",
                "dqn.n_envs=32", "dqn.rounds_per_epoch=2", "dqn.train_steps_per_round=1", "dqn.batch_size=32",
                "dqn.buffer_capacity=4096", "dqn.warmup_transitions=512", "dqn.hidden=[32, 32]", "dqn.head_hidden=16",
                "env.episode_length=128", "accel.matmul_precision=\"fp32\"", "accel.eval=\"torch\"",
                "accel.train_step=\"torch\""]
    else:
        size = Size("diag", bars=120_000, train=40_000, val=10_000, max_folds=2, real_train=2_500, real_val=500, epochs=2)
        over = ["run.device=\"cuda\"", "dqn.n_envs=1024", "dqn.rounds_per_epoch=6", "dqn.train_steps_per_round=6",
                "dqn.batch_size=512", "dqn.buffer_capacity=131072", "dqn.warmup_transitions=16384",
                "env.episode_length=512"]
    over += [f"accel.acting=\"{acting}\"", "accel.check=true", *extra]
    if cuda:
        over.append(f"accel.graphs=\"{graphs}\"")
    sc = make_scenario("no_edge", size.n_bars(SPACING["no_edge"]))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        r = run_scenario(sc, base, size, over, Path(tmp), "configs/h200-fast.toml", baselines=())
    if cuda:
        torch.cuda.synchronize()
    print(f"scenario no_edge acting={acting} graphs={graphs} stages={stages}: {r.n_folds} folds, agent Sharpe "
          f"{r.agent.summary()['sharpe']:+.2f}, clean ({time.perf_counter() - t0:.1f} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("phase", choices=["kernel", "scenario", "cases"])
    ap.add_argument("--replays", type=int, default=2000)
    ap.add_argument("--acting", default="fused", choices=["fused", "torch"])
    ap.add_argument("--graphs", default="on", choices=["on", "off"])
    ap.add_argument("--set", action="append", default=[], help="one more config override (repeatable)")
    ap.add_argument("--stages", type=int, default=None, help="the acting kernel's pipelining depth (default: DEFAULTS)")
    ap.add_argument("--case", action="append", default=None, help="cases phase: run only this case (repeatable)")
    ap.add_argument("--sanitizer", action="store_true",
                    help="cases phase: the failing cases under compute-sanitizer instead (bench/diag_acting_sanitizer.py)")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if a.phase == "cases" and a.sanitizer:
        from bench.diag_acting_sanitizer import run_sanitizer

        return run_sanitizer()
    if a.phase == "cases":
        from bench.diag_acting_cases import run_all

        return 1 if run_all(cases=a.case) else 0
    if a.phase == "kernel":
        return 0 if kernel_phase(4096 if cuda else 64, a.replays if cuda else 2, a.stages) else 1
    scenario_phase(a.acting, a.graphs, a.stages, tiny=not cuda, extra=a.set)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
