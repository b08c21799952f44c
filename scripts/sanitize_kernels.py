"""Every Triton kernel of foxhunt once under NVIDIA compute-sanitizer, on a CUDA machine.

    python scripts/sanitize_kernels.py [--tools memcheck,racecheck] [--out results.json] [--workers 6]

Each kernel's own test file (tests/kernels/…, the small-shape tests: ``-m "not gpu"``, which run on
CUDA when a GPU is present) runs under ``compute-sanitizer --tool TOOL --kernel-name kns=KERNEL``,
so only that kernel is instrumented (torch's kernels run at full speed) and a finding names it.
Prints one line per (kernel, tool): errors, the first report (what, where) and the tests' result;
writes them as JSON with ``--out``. Exit status 1 when any run reports an error or its tests fail.
compute-sanitizer is looked for in $COMPUTE_SANITIZER_BIN, on PATH and in /usr/local/cuda*/bin;
without it (or without CUDA) the script says so in one line and exits 0. BENCHMARKS.md records the
H200 table ("Kernels under compute-sanitizer").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# label -> (the @triton.jit entry point's name, the test files that launch it at small shapes)
KERNELS: dict[str, tuple[str, list[str]]] = {
    "acting": ("_dueling_q_kernel", ["tests/kernels/test_fused_acting_head.py"]),  # the collector's packing (A >= MIN_HEAD)
    "acting_all": ("_dueling_q_kernel", ["tests/kernels/test_dueling_mlp_fused.py", "tests/kernels/test_fused_argmax_nan.py"]),
    "backtest": ("_backtest_kernel", ["tests/kernels/test_backtest_fused.py", "tests/kernels/test_backtest_fused_adv.py",
                                      "tests/kernels/test_backtest_fused_barriers.py", "tests/kernels/test_backtest_fused_ensemble.py",
                                      "tests/kernels/test_backtest_fused_members.py"]),
    "env_step": ("_env_step_kernel", ["tests/kernels/test_env_step_fused.py"]),
    "sum_tree_find": ("_find_prefix_kernel", ["tests/kernels/test_sum_tree_fused.py"]),
    "sum_tree_write": ("_write_rebuild_kernel", ["tests/kernels/test_sum_tree_fused.py"]),
    "wide_descend": ("_descend_kernel", ["tests/kernels/test_wide_tree_fused.py"]),
    "wide_level": ("_level_kernel", ["tests/kernels/test_wide_tree_fused.py"]),
    "wide_scatter": ("_scatter_kernel", ["tests/kernels/test_wide_tree_fused.py"]),
}
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PREFIX = "========= "


def find_sanitizer() -> str | None:
    env = os.environ.get("COMPUTE_SANITIZER_BIN")
    if env and os.access(env, os.X_OK):
        return env
    found = [p for p in (shutil.which("compute-sanitizer"), *sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")),
                         *sorted(glob.glob("/opt/nvidia/*/compute-sanitizer/compute-sanitizer"))) if p]
    return found[-1] if found else None


def summarise(text: str) -> tuple[int | None, list[str]]:
    """(the ERROR SUMMARY count or None, the first two distinct reports as one line each)."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    count = int(m.group(1)) if m else None
    reports, cur = [], []
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            continue
        body = line[len(PREFIX):].strip()
        if re.match(r"(Invalid|Program hit|Race|Barrier|Uninitialized|Warp|Misaligned|Error|.*hazard)", body):
            if cur:
                reports.append(" | ".join(cur))
            cur = [body]
        elif cur and (body.startswith("at ") or "Address" in body or "by thread" in body) and len(cur) < 4:
            cur.append(body)
    if cur:
        reports.append(" | ".join(cur))
    distinct = []
    for r in reports:
        if r not in distinct:
            distinct.append(r)
    return count, distinct[:2]


def run_one(sanitizer: str, label: str, tool: str, timeout: float) -> dict:
    kernel, files = KERNELS[label]
    cmd = [sanitizer, "--tool", tool, "--kernel-name", f"kns={kernel}", "--print-limit", "20", "--error-exitcode", "86",
           sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not gpu", *files]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}:{os.environ.get('PYTHONPATH', '')}", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = None
    count, reports = summarise(out)
    tests = next((ln.strip(" =") for ln in reversed(out.splitlines())
                  if not ln.startswith(PREFIX) and re.search(r"\d+ (passed|failed)\b.* in [\d.]+s", ln)), "")
    return {"label": label, "kernel": kernel, "files": files, "tool": tool, "errors": count, "first_reports": reports, "tests": tests, "returncode": rc,
            "seconds": round(time.perf_counter() - t0, 1), "timed_out": rc is None,
            "log_tail": "\n".join(out.splitlines()[-15:]) if (rc not in (0,) or count) else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", default="memcheck", help=f"comma-separated, of {', '.join(TOOLS)}")
    ap.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {', '.join(KERNELS)}")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    a = ap.parse_args()
    sanitizer = find_sanitizer()
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if sanitizer is None or not cuda:
        print(f"compute-sanitizer not run: {'no CUDA device' if not cuda else 'compute-sanitizer not found'}")
        return 0
    jobs = [(k, t) for k in a.kernels.split(",") for t in a.tools.split(",")]
    with ThreadPoolExecutor(a.workers) as pool:
        rows = list(pool.map(lambda j: run_one(sanitizer, j[0], j[1], a.timeout), jobs))
    version = subprocess.run([sanitizer, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    if a.out is not None:
        from foxhunt.provenance import git_revision

        a.out.write_text(json.dumps({"sanitizer": version[-1] if version else sanitizer, "git_revision": git_revision(ROOT),
                                     "runs": rows}, indent=1) + "\n")
    bad = False
    print(f"{'kernel (label)':24s} {'tool':10s} {'errors':>6s} {'s':>6s}  tests / first report")
    for r in rows:
        ok = r["errors"] == 0 and r["returncode"] == 0
        bad |= not ok
        what = r["first_reports"][0] if r["first_reports"] else (r["tests"] or ("TIMEOUT" if r["timed_out"] else f"rc {r['returncode']}"))
        print(f"{r['label']:24s} {r['tool']:10s} {str(r['errors']):>6s} {r['seconds']:6.1f}  {'ok' if ok else 'FAIL'}: {what[:160]}")
        if not ok and r["log_tail"]:
            print("    " + r["log_tail"].replace("\n", "\n    ")[:1500])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
