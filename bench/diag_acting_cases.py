"""GPU cases for the fused acting crash, each in its own process (one line each; see ``run_all``).

    python bench/diag_fused_acting.py cases          # all cases, about a minute on the H200
    python bench/diag_acting_cases.py CASE           # one case (what run_all spawns)
    python bench/diag_acting_cases.py --sanitizer    # the failing ones under compute-sanitizer
                                                     # (bench/diag_acting_sanitizer.py)

Every child runs with CUDA_LAUNCH_BLOCKING=1 and synchronises after each launch, so a fault names
its launch; it compares the kernel with the torch network (NaN rows, argmax agreement) so that a
silent corruption shows too. A failed case prints its "FAIL at …" line or the last error message
(``fault_line``: a crash's C++ stack trace ends on a frame). The cases separate the hypotheses of
docs/LEARNING.md "On the H200" §5: which launch variant faults (online = Q + argmax; target = max
only), whether the software pipeline's zero-fill prefetches past the ends of W2 / b2 / W3 fault
when those ends border unmapped memory, whether the division slow path (NaN rows) matters, whether
the device runs the binary checked on the CPU (SASS digest, tests/kernels/compile_acting_sm90.py),
and — since that binary's PTX computes the right Q on a CPU (tests/kernels/ptx_exec.py) while the
H200 gave wrong Q only for bf16 with 5 actions (A = 16) — whether padding the head to A = 32 / 64
(``*_pad*``) or another ptxas (``other_ptxas``: Triton's ptxas-blackwell 12.9, CUDA 13.0's) makes
the wrong Q and the fault go away. DIAG_ACTING_N / DIAG_ACTING_REPS shrink a case (the sanitizer's
racecheck runs use them).
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

CUDA = __import__("torch").cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
# The CPU only smoke-tests this script (Triton interpreter, small N); DIAG_ACTING_N / _REPS shrink a
# case for the slower runs under compute-sanitizer (bench/diag_acting_sanitizer.py).
N = int(os.environ.get("DIAG_ACTING_N", 4096 if CUDA else 256))
REPS = int(os.environ.get("DIAG_ACTING_REPS", 20 if CUDA else 2))
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

# SASS digests of the CPU cross-compile with Triton 3.6.0 (bundled ptxas 12.8), this kernel source.
CPU_SASS_36 = {"online": "4a8099b7af0e", "target": "59c8c9f8054d"}


def _setup(obs_dim: int, n: int | None = None, n_actions: int = 5, precision: str = "bf16", pad: int = 0):
    """(torch net, packed weights, obs [N, obs_dim]); pad: the head's output block W4 / b4 zero-padded
    to ``pad`` columns (the kernel's A; 5 actions pack to A = 16, 45 to 64, and only A = 16 gave wrong
    Q on the H200: a padded 5-action net tells whether A alone decides it)."""
    import torch
    import torch.nn.functional as F

    from foxhunt.agents.networks import DuelingQNet
    from foxhunt.kernels.rules.packing import pack_net

    torch.manual_seed(obs_dim)
    net = DuelingQNet(obs_dim, n_actions, [256, 256], 128).to(DEV)
    pk = pack_net(net, precision)
    if pad:
        pk.w4 = F.pad(pk.w4, (0, pad - pk.w4.shape[1])).contiguous()
        pk.b4 = F.pad(pk.b4, (0, pad - pk.b4.shape[0])).contiguous()
    return net, pk, torch.randn(n or N, obs_dim, device=DEV)


def _step(label: str, fn) -> None:
    import torch

    try:
        fn()
        if CUDA:
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the line names the fault
        raise SystemExit(f"FAIL at {label}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")


def _compare(net, obs, out) -> str:
    """The kernel against the float32 torch network (rows where torch gives NaN left out of dQ)."""
    import torch

    with torch.no_grad():
        ref = net(obs)
    finite = ~ref.isnan().any(1)
    parts = []
    if out.q is not None:
        dq = float((out.q[finite] - ref[finite]).abs().nan_to_num(float("inf")).max())
        parts.append(f"NaN rows {int(out.q.isnan().any(1).sum())} (torch {int((~finite).sum())}), max|dQ| {dq:.3g}")
    if out.argmax is not None:
        a = out.argmax
        parts.append(f"argmax in range {bool(((a >= 0) & (a < ref.shape[1])).all())}, "
                     f"agrees {float((a == ref.argmax(1)).float().mean()):.4f}")
    if out.q_max is not None:
        dm = float((out.q_max[finite] - ref.amax(1)[finite]).abs().nan_to_num(float("inf")).max())
        parts.append(f"max|dmax| {dm:.3g}")
    return "; ".join(parts)


def _online(obs_dim=54, n_actions=5, precision="bf16", pad=0, **kw):
    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim, n_actions=n_actions, precision=precision, pad=pad)
    res = {}
    _step("online launch", lambda: res.setdefault("o", k.fused_dueling_q(pk, obs, precision=precision, q=True,
                                                                          argmax=True, **kw)))
    return _compare(net, obs, res["o"])


def _target(obs_dim=54):
    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim)
    res = {}
    _step("target launch", lambda: res.setdefault("o", k.fused_dueling_q(pk, obs, q=False, q_max=True)))
    return _compare(net, obs, res["o"])


def _all(obs_dim=55):
    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim)
    res = {}
    _step("q+max+argmax launch", lambda: res.setdefault("o", k.fused_dueling_q(pk, obs, q=True, q_max=True, argmax=True)))
    return _compare(net, obs, res["o"])


def _diag(obs_dim=54, reps=None, pad=0):
    """The diag's kernel phase, eager: preallocated zeros, online then target, synced between."""
    import torch

    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim, pad=pad)
    n, reps = obs.shape[0], reps or REPS
    q, g, m = torch.zeros(n, 5, device=DEV), torch.zeros(n, dtype=torch.int64, device=DEV), torch.zeros(n, device=DEV)
    for r in range(reps):
        obs.copy_(torch.randn_like(obs) * (1 + r % 7))
        _step(f"online launch {r}", lambda: k.fused_dueling_q(pk, obs, q=q, argmax=g))
        _step(f"target launch {r}", lambda: k.fused_dueling_q(pk, obs, q=False, q_max=m))
    return f"{reps} online+target pairs; " + _compare(net, obs, k.FusedQ(q, m, g))


def _graph(obs_dim=54, replays=200):
    import torch

    if not CUDA:
        return "skipped (no CUDA)"

    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim)
    n = obs.shape[0]
    q, g, m = torch.zeros(n, 5, device=DEV), torch.zeros(n, dtype=torch.int64, device=DEV), torch.zeros(n, device=DEV)

    def launch():
        k.fused_dueling_q(pk, obs, q=q, argmax=g)
        k.fused_dueling_q(pk, obs, q=False, q_max=m)

    _step("eager pair", launch)
    from foxhunt.accel.graphs import capture

    graph = capture(launch, DEV)  # the project's one capture helper: side-stream warm-up, then capture
    for r in range(replays):
        obs.copy_(torch.randn_like(obs))
        _step(f"replay {r}", graph.replay)
    return f"{replays} replays; " + _compare(net, obs, k.FusedQ(q, m, g))


def _rehome_padded(pk, slack_rows: int = 96) -> None:
    """W2, b2, W3 moved into storage with room past their ends: the zero-fill prefetches then
    point inside their own allocations."""
    import torch

    for name, extra in (("w2", slack_rows), ("b2", slack_rows), ("w3", slack_rows * pk.w3.shape[1])):
        t = getattr(pk, name)
        buf = torch.zeros(t.numel() + extra, dtype=t.dtype, device=t.device)
        buf[: t.numel()].copy_(t.flatten())
        setattr(pk, name, buf[: t.numel()].view_as(t))


def _mapped(addr: int) -> bool:
    """Whether a device address belongs to an allocation (cuPointerGetAttribute, MEMORY_TYPE)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    out = ctypes.c_uint(0)
    return cuda.cuPointerGetAttribute(ctypes.byref(out), 2, ctypes.c_uint64(addr)) == 0


def _rehome_at_edge(pk) -> str:
    """W2, b2, W3 each moved to the very end of a 2 MiB allocation whose following 2 MiB was freed
    (PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is its own cudaMalloc): a zero-fill prefetch
    past their ends then points at memory that is (most likely) unmapped."""
    import torch

    notes, keep = [], []
    for name in ("w2", "b2", "w3"):
        t = getattr(pk, name)
        nbytes = t.numel() * t.element_size()
        region = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
        after = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
        adjacent = after.data_ptr() == region.data_ptr() + (2 << 20)
        del after
        torch.cuda.synchronize()
        view = region[(2 << 20) - nbytes:].view(t.dtype).view_as(t)
        view.copy_(t)
        setattr(pk, name, view)
        keep.append(region)
        end = region.data_ptr() + (2 << 20)
        notes.append(f"{name} end+0 mapped {_mapped(end)} (follower was adjacent {adjacent})")
    pk._keep = keep  # noqa: SLF001 - keep the regions alive
    return ", ".join(notes)


def _layout(kind: str):
    from foxhunt.kernels.acting import kernel as k

    if kind == "edge" and not CUDA:
        return "skipped (no CUDA)"

    net, pk, obs = _setup(54)
    note = _rehome_at_edge(pk) if kind == "edge" else (_rehome_padded(pk) or "padded")
    res = {}
    _step("online launch", lambda: res.setdefault("o", k.fused_dueling_q(pk, obs, q=True, argmax=True)))
    _step("target launch", lambda: k.fused_dueling_q(pk, obs, q=False, q_max=True))
    return note + "; " + _compare(net, obs, res["o"])


def _nan(obs_dim=55):
    from foxhunt.kernels.acting import kernel as k

    net, pk, obs = _setup(obs_dim)
    obs[::97, 11] = float("nan")  # NaN advantage sums: div.rn's slow-path subroutine runs for these rows
    res = {}
    _step("online launch", lambda: res.setdefault("o", k.fused_dueling_q(pk, obs, q=True, argmax=True)))
    _step("target launch", lambda: k.fused_dueling_q(pk, obs, q=False, q_max=True))
    return _compare(net, obs, res["o"])


def _sass():
    """Compile (no launch) both variants through fused_dueling_q and digest their SASS."""
    import triton

    if not CUDA:
        return "skipped (no CUDA)"

    from foxhunt.kernels.acting import kernel as k
    from tests.kernels.compile_acting_sm90 import sass_digest, sass_of

    _, pk, obs = _setup(54)
    fn, got = k._dueling_q_kernel, {}
    orig = fn.run

    def compile_only(*a, **kw):
        kw["warmup"] = True
        got["k"] = orig(*a, **kw)
        return got["k"]

    fn.run = compile_only
    out = []
    for name, kw in (("online", dict(q=True, argmax=True)), ("target", dict(q=False, q_max=True))):
        k.fused_dueling_q(pk, obs, **kw)
        d = sass_digest(sass_of(got["k"].asm["cubin"]))
        out.append(f"{name} {d} (CPU 3.6.0: {CPU_SASS_36[name]}, {'same' if d == CPU_SASS_36[name] else 'DIFFERENT'})")
    fn.run = orig
    return f"triton {triton.__version__}: " + ", ".join(out)


def _ptxas_candidates() -> list[tuple[str, str]]:
    """(release, path) of every ptxas found: Triton's bundled ones, CUDA toolkits, pip's nvidia-cuda-nvcc."""
    import glob
    import re
    import shutil

    import triton

    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    paths = [str(bin_dir / "ptxas"), str(bin_dir / "ptxas-blackwell"), shutil.which("ptxas") or "",
             *glob.glob("/usr/local/cuda*/bin/ptxas"), *glob.glob(str(ROOT / ".whl" / "ptxas*")),
             *glob.glob(sys.prefix + "/lib/python3*/site-packages/nvidia/cu*/bin/ptxas")]
    found = {}
    for path in filter(None, paths):
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.search(r"release (\d+\.\d+)", out)
        if m:
            found[os.path.realpath(path)] = m.group(1)
    return sorted(((v, p) for p, v in found.items()), key=lambda vp: tuple(map(int, vp[0].split("."))))


def _other_ptxas():
    """The faulting pair (diag54) and the wrong-Q launch (online54) recompiled with every ptxas other
    than Triton's bundled one (TRITON_PTXAS_PATH, in grandchildren so that Triton reads it at import;
    the ptxas version is part of Triton's cache key): the PTX itself computes the right Q on a CPU
    (tests/kernels/ptx_exec.py), so a right answer and no fault with another assembler names ptxas
    12.8. The H200 image has Triton's ptxas-blackwell (12.9) and CUDA 13.0's ptxas."""
    import triton

    if not CUDA:
        return "skipped (no CUDA)"
    bundled = os.path.realpath(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")
    others = [(v, p) for v, p in _ptxas_candidates() if p != bundled][-2:]
    if not others:
        return f"skipped (no ptxas besides the bundled {bundled})"
    procs = {}
    for ver, path in others:
        env = {**os.environ, "TRITON_PTXAS_PATH": path, "CUDA_LAUNCH_BLOCKING": "1"}
        for case in ("online54", "diag54"):
            procs[(ver, case)] = subprocess.Popen([sys.executable, __file__, case], env=env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)
    outs = []
    for (ver, case), p in procs.items():
        try:
            out, err = p.communicate(timeout=80)
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(f"{ver} {case} TIMEOUT")
            continue
        lines = (out + ("" if p.returncode == 0 else err)).strip().splitlines() or ["no output"]
        outs.append(f"ptxas {ver} {case} {'ok' if p.returncode == 0 else 'FAIL'}: {lines[-1][:110]}")
    return " | ".join(outs)


CASES = {
    "sass": (_sass, {}),
    "online54": (_online, {}),
    "target54": (_target, {}),
    "online55": (lambda: _online(55), {}),
    "target55": (lambda: _target(55), {}),
    "all55": (_all, {}),
    "diag54": (_diag, {}),
    "diag55": (lambda: _diag(55), {}),
    "online54_stages1": (lambda: _online(54, stages=1), {}),
    "online54_a64": (lambda: _online(54, n_actions=45), {}),
    "online54_tf32": (lambda: _online(54, precision="tf32"), {}),
    "padded54": (lambda: _layout("padded"), {}),
    "edge54": (lambda: _layout("edge"), {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
    "nan55": (_nan, {}),
    "graph54": (_graph, {}),
    "online54_pad32": (lambda: _online(54, pad=32), {}),
    "online54_pad64": (lambda: _online(54, pad=64), {}),
    "diag54_pad64": (lambda: _diag(54, pad=64), {}),
    "other_ptxas": (_other_ptxas, {}),
}


TIMEOUTS = {"other_ptxas": 100.0}  # it recompiles the kernel in grandchildren


def fault_line(lines: list[str]) -> str:
    """The line that names a failure: this script's "FAIL at …", else the last error message (a
    crash's C++ stack trace ends on a frame, not on the error), else the last line."""
    for line in lines:
        if line.startswith("FAIL at"):
            return line
    errors = [ln for ln in lines if re.search(r"(Error|error|illegal|ERROR)\b", ln) and not ln.lstrip().startswith("frame #")]
    return (errors or lines or ["no output"])[-1].strip()


def run_all(timeout: float = 50.0, workers: int = 6, cases: list[str] | None = None) -> int:
    """Each case in its own process (a fault cannot hide the next); ``sass`` first (it compiles the
    two main variants into Triton's cache for the others). Prints one line per case; returns the
    number of failed cases."""
    names = cases or list(CASES)
    print(f"# {len(names)} cases, each in its own process with CUDA_LAUNCH_BLOCKING=1 (device {DEV})", flush=True)

    def one(name: str) -> tuple[bool, str]:
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", **CASES[name][1]}
        t0 = time.perf_counter()
        limit = TIMEOUTS.get(name, timeout)
        try:
            p = subprocess.run([sys.executable, __file__, name], env=env, capture_output=True, text=True, timeout=limit)
            lines = (p.stdout if p.returncode == 0 else p.stdout + p.stderr).strip().splitlines()
            ok = p.returncode == 0
            tail = (lines or ["no output"])[-1] if ok else fault_line(lines)[:200]
        except subprocess.TimeoutExpired:
            ok, tail = False, f"TIMEOUT after {limit:.0f} s"
        return ok, f"case {name}: {'ok' if ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s) {tail}"

    results = [one("sass")] if "sass" in names else []
    if results:
        print(results[-1][1], flush=True)
    with ThreadPoolExecutor(workers) as pool:
        for res in pool.map(one, [c for c in names if c != "sass"]):
            print(res[1], flush=True)
            results.append(res)
    return sum(not ok for ok, _ in results)


def main() -> int:
    if sys.argv[1:] == ["--sanitizer"]:
        from bench.diag_acting_sanitizer import run_sanitizer

        return run_sanitizer()
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: {sys.argv[0]} CASE | --sanitizer  (CASE: one of {', '.join(CASES)})")
        return 2
    fn, _ = CASES[sys.argv[1]]
    print(fn(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
