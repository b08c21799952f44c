"""The failing fused-acting cases under compute-sanitizer: one line per run naming the first error.

    python bench/diag_fused_acting.py cases --sanitizer
    python bench/diag_acting_cases.py --sanitizer

Each run is ``compute-sanitizer --tool TOOL python bench/diag_acting_cases.py CASE`` (RUNS below),
all at once, each bounded by ``LIMIT_S`` (well under two minutes in all on the H200). Per run it
prints the tool, the case, its ERROR SUMMARY and the first two distinct reports, each as one line:
what (e.g. "Invalid __global__ read of size 16 bytes", "Warp Illegal Address", a race), where
(kernel+PC offset and file:line), by which thread / block, the address and how far it is from the
nearest allocation. A PC inside ``_dueling_q_kernel`` is then looked up in the SASS of both launch
variants (compiled here through tests/kernels/compile_acting_sm90.py and disassembled with Triton's
cuobjdump), so the line shows the faulting instruction too — the CPU holds the same SASS (digest
checked by the ``sass`` case), so the offset can be read against the PTX / SASS analysis there.

memcheck runs the cases that fault (diag54: online then target; nan55; edge54: weights at the end
of a mapped region); racecheck, synccheck and initcheck run one online + target pair on 256 rows
(DIAG_ACTING_N / _REPS), the wrong-Q variant (bf16, 5 actions) whose PTX computes the right Q on a
CPU: a shared-memory race or a barrier misuse in the real SASS would show there.

compute-sanitizer is looked for in $COMPUTE_SANITIZER_BIN, on PATH and in /usr/local/cuda*/bin; when
absent (or on a CPU) the script says so in one line and exits 0. On a gVisor runtime (kernel 4.4.0)
it refuses the device ("Device not supported": docs of this workplace); that line is printed as is.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES_PY = ROOT / "bench" / "diag_acting_cases.py"
LIMIT_S = 100.0
SMALL = {"DIAG_ACTING_N": "256", "DIAG_ACTING_REPS": "2"}
RUNS = [  # (tool, case, extra environment)
    ("memcheck", "diag54", {}),
    ("memcheck", "nan55", {}),
    ("memcheck", "edge54", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
    ("racecheck", "diag54", SMALL),
    ("synccheck", "diag54", SMALL),
    ("initcheck", "diag54", SMALL),
]
PREFIX = "========= "


def find_sanitizer() -> str | None:
    """The newest compute-sanitizer: $COMPUTE_SANITIZER_BIN, PATH, /usr/local/cuda*/bin."""
    env = os.environ.get("COMPUTE_SANITIZER_BIN")
    if env and os.access(env, os.X_OK):
        return env
    found = [p for p in (shutil.which("compute-sanitizer"), *sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")),
                         *sorted(glob.glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer"))) if p]
    return found[-1] if found else None


def reports(text: str) -> tuple[list[dict[str, str]], str]:
    """(error reports, summary line) of a compute-sanitizer log: a report is a header line after the
    prefix and its indented detail lines (at / by thread / Address / and is …); host backtraces dropped."""
    out: list[dict[str, str]] = []
    summary = ""
    cur: dict[str, str] | None = None
    for raw in text.splitlines():
        if not raw.startswith(PREFIX.strip()):
            continue
        body = raw[len(PREFIX):] if raw.startswith(PREFIX) else raw.lstrip("= ")
        if re.match(r"(ERROR|RACECHECK|LEAK) SUMMARY", body.strip()):
            summary = body.strip()
            cur = None
        elif body.strip() and not body.startswith(" ") and not body.startswith(("COMPUTE-SANITIZER", "Saved host", "Host Frame")):
            cur = {"what": body.strip()}
            out.append(cur)
        elif cur is not None and body.startswith(" "):
            line = body.strip()
            if line.startswith("at ") and "at" not in cur:
                cur["at"] = line[3:]
            elif line.startswith("by thread"):
                cur["thread"] = line[3:]
            elif line.startswith("Address") or line.startswith("and is"):
                cur["address"] = (cur.get("address", "") + " " + line).strip()
            elif line.startswith("and ") and "race" in cur["what"].lower():
                cur["with"] = line[4:]
            elif line.startswith(("Saved host", "Host Frame", "Device Frame")):
                cur["done"] = "1"
    device = [r for r in out if "at" in r or "_dueling_q_kernel+" in r["what"]]  # reports with a device PC first
    return device + [r for r in out if r not in device and not r["what"].startswith("Target application returned")], summary


def one_line(r: dict[str, str]) -> str:
    return " | ".join(x for x in (r["what"], r.get("at", ""), r.get("with", ""), r.get("thread", ""),
                                   r.get("address", "")) if x)


def sass_at(pcs: set[int]) -> dict[int, str]:
    """pc → "online: INS / target: INS" from the SASS of both variants (compiled here, not launched)."""
    if not pcs:
        return {}
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    from tests.kernels.compile_acting_sm90 import VARIANTS, compile_acting, sass_of

    found: dict[int, list[str]] = {pc: [] for pc in pcs}
    for name, stores in VARIANTS.items():
        sass = sass_of(compile_acting(stores)[0].asm["cubin"])
        for line in sass.splitlines():
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m and int(m.group(1), 16) in found:
                found[int(m.group(1), 16)].append(f"{name}: {m.group(2)}")
    return {pc: " / ".join(v) or "not in either variant's SASS" for pc, v in found.items()}


def run_sanitizer(runs=RUNS, limit_s: float = LIMIT_S) -> int:
    """Run ``runs`` under compute-sanitizer at once; print one line per run (two for its first
    reports) and the SASS of each reported PC. Returns 0 (a diagnostic, not a test)."""
    import torch

    tool = find_sanitizer()
    if not torch.cuda.is_available():
        print("sanitizer: skipped (no CUDA device)" + (f"; found {tool}" if tool else ""), flush=True)
        return 0
    if tool is None:
        print("sanitizer: skipped (no compute-sanitizer in $COMPUTE_SANITIZER_BIN, on PATH or in /usr/local/cuda*/bin)",
              flush=True)
        return 0
    ver = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    print(f"# sanitizer {tool} ({ver[-1] if ver else '?'}), kernel {platform.release()}, {len(runs)} runs at once, "
          f"{limit_s:.0f} s each at most", flush=True)

    def one(run) -> tuple[str, str, list[dict[str, str]], str, str, float]:
        name, case, extra = run
        cmd = [tool, "--tool", name, "--print-limit", "20", "--show-backtrace", "no", sys.executable, str(CASES_PY), case]
        env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", **extra}
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit_s)
            text, code = p.stdout + "\n" + p.stderr, str(p.returncode)
        except subprocess.TimeoutExpired as e:
            text = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")) + \
                   ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
            code = f"TIMEOUT after {limit_s:.0f} s"
        reps, summary = reports(text)
        own = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("=")]
        return name, case, reps, summary, f"exit {code}; case says: {(own or ['nothing'])[-1][:120]}", time.perf_counter() - t0

    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(one, runs))
    pcs: set[int] = set()
    for name, case, reps, summary, tail, sec in results:
        print(f"sanitizer {name} {case} ({sec:.0f} s): {summary or 'no summary'}; {tail}", flush=True)
        seen: set[str] = set()
        for r in reps:
            key = r["what"] + r.get("at", "").split(" in ")[0]
            if key in seen:
                continue
            seen.add(key)
            print(f"    {one_line(r)}", flush=True)
            pcs |= {int(m, 16) for m in re.findall(r"_dueling_q_kernel\+0x([0-9a-f]+)", " ".join(r.values()))}
            if len(seen) == 2:
                break
    try:
        for pc, ins in sorted(sass_at(pcs).items()):
            print(f"sass _dueling_q_kernel+{pc:#x}: {ins}", flush=True)
    except Exception as e:  # noqa: BLE001 - the lookup is a convenience; the offsets above stand
        print(f"sass lookup failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_sanitizer())
