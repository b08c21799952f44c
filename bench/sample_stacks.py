"""Where a process spends its wall time: a sampling profiler for one command (the device's cold-start questions).

    python -m bench.sample_stacks --out bench/results/stacks_x.json -- -m foxhunt.cli scorecard ...

A daemon thread reads the main thread's Python stack every ``--interval`` seconds (``sys._current_frames``:
no tracing, so compiled and graph-replayed code runs at full speed, unlike cProfile) and counts the
stacks. Written at exit (also on SIGTERM, e.g. from ``timeout``): the total, the seconds spent under
each phase marker (torch.compile / Inductor, Triton's JIT, CUDA-graph capture, ...), the phases over
time (which second each began), and the most frequent stacks (innermost frames last).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import signal
import sys
import threading
import time

# A sample belongs to the first marker (outermost first) found in its frames' "file:function" labels.
PHASES = (
    ("imports", ("<frozen importlib",)),
    ("dynamo/inductor compile", ("torch/_dynamo/", "torch/_inductor/")),
    ("triton jit compile", ("triton/compiler/", "triton/runtime/build")),
    ("cuda graph capture (torch)", ("torch/cuda/graphs.py",)),
    ("sklearn / sb3 baselines", ("sklearn/", "stable_baselines3/")),
    ("epoch selection (inner)", ("foxhunt/train/selection.py",)),
    ("validation backtest", ("foxhunt/backtest/",)),
    ("training epochs", ("foxhunt/agents/", "foxhunt/accel/graphs.py")),
)


def _label(frame) -> str:
    path = frame.f_code.co_filename
    for cut in ("site-packages/", "/src/", "/bench/"):
        if cut in path:
            path = path.split(cut, 1)[1]
            break
    return f"{path}:{frame.f_code.co_name}"


def _stack(frame) -> tuple[str, ...]:
    out = []
    while frame is not None:
        out.append(_label(frame))
        frame = frame.f_back
    return tuple(reversed(out))


def _phase(stack: tuple[str, ...]) -> str:
    for name, marks in PHASES:
        if any(m in s for s in stack for m in marks):
            return name
    return "other"


class Sampler:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.main = threading.main_thread().ident
        self.counts: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.timeline: list[tuple[float, str]] = []  # (seconds since start, phase) when the phase changes
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = None
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self.main)
            if frame is None:
                continue
            st = _stack(frame)
            self.counts[st] += 1
            ph = _phase(st)
            if ph != last:
                self.timeline.append((round(time.perf_counter() - self.t0, 2), ph))
                last = ph

    def report(self, argv: list[str]) -> dict:
        self._stop.set()
        phases: collections.Counter[str] = collections.Counter()
        for st, n in self.counts.items():
            phases[_phase(st)] += n
        total = sum(self.counts.values())
        return {
            "argv": argv, "interval_s": self.interval, "wall_s": round(time.perf_counter() - self.t0, 2), "samples": total,
            "phase_s": {k: round(v * self.interval, 2) for k, v in phases.most_common()},
            "timeline": self.timeline[:4000],
            "top_stacks": [{"s": round(n * self.interval, 2), "stack": list(st[-30:])} for st, n in self.counts.most_common(60)],
        }


def main() -> None:
    if "--" not in sys.argv:
        sys.exit("usage: python -m bench.sample_stacks --out FILE [--interval S] -- -m MODULE ARGS... | SCRIPT ARGS...")
    cut = sys.argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=0.1)
    a = p.parse_args(sys.argv[1:cut])
    cmd = sys.argv[cut + 1:]
    sampler = Sampler(a.interval)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # timeout's TERM: still write the report
    sampler.thread.start()
    code = 0
    try:
        if cmd[0] == "-m":
            sys.argv = [cmd[1], *cmd[2:]]
            runpy.run_module(cmd[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = cmd
            runpy.run_path(cmd[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        rep = sampler.report(cmd)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump(rep, fh, indent=1)
        print("sample_stacks:", json.dumps(rep["phase_s"]), file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
