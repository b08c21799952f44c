"""What the compiler made of the fused acting kernel stays inside its tensors (checked on a CPU).

The interpreter bounds tests (``test_fused_acting_bounds.py``) cannot see compiled-only behaviour:
software-pipelined prefetches, vectorisation from divisibility hints, shared-memory layouts, wgmma
descriptors, register reuse by ptxas. These cross-compile the kernel for sm_90 (Triton ships
ptxas) in a subprocess with the interpreter off and check the PTX of both launch variants the
collector uses, every thread of every program (``ptx_bounds``), and the SASS for registers an
in-flight wgmma still reads or writes (``sass_hazards``); and they EXECUTE that PTX with the real
weights (``ptx_exec``, with the happens-before checker ``ptx_races``) to compare its Q with torch.
Context: the H200 "illegal memory access" and wrong bf16 Q of docs/DESIGN.md "Fused acting" and BENCHMARKS.md "Kernels under compute-sanitizer".
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

KERNEL = ROOT / "src" / "foxhunt" / "kernels" / "acting" / "kernel.py"


def kernel_line(marker: str) -> str:
    """The 1-based line of kernel.py that starts with ``marker`` (so edits above it move nothing here)."""
    lines = KERNEL.read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if line.strip().startswith(marker)]
    assert len(hits) == 1, (marker, hits)
    return str(hits[0])

SCRIPT = """
import sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {root!r} + "/src")
from tests.kernels.compile_acting_sm90 import VARIANTS, compile_acting, launch_layout, sass_of
from tests.kernels.ptx_bounds import check_ptx
from tests.kernels.sass_hazards import wgmma_register_hazards
for name, stores in VARIANTS.items():
    kern, consts = compile_acting(stores)
    ptx, shared, threads = kern.asm["ptx"], kern.metadata.shared, 32 * kern.metadata.num_warps
    for n, obs_dim, short in {cases}:
        params, tensors = launch_layout(stores, n, obs_dim, short_obs_rows=short)
        rep = check_ptx(ptx, -(-n // consts["BLOCK_M"]), threads, params, tensors, shared)
        zf = sorted(loc.split(":")[1] for loc in rep.zero_fill_outside)
        print("PTX", name, n, obs_dim, short, len(rep.issues), rep.counts["global"] > 0, ",".join(zf),
              "|".join(sorted(set(loc.split(":")[0] + ":" + loc.split(":")[1] for _, loc in rep.issues))), flush=True)
    n_hgmma, hazards = wgmma_register_hazards(sass_of(kern.asm["cubin"]))
    print("SASS", name, n_hgmma, len(hazards), flush=True)
"""


@pytest.mark.slow
def test_the_compiled_acting_kernel_touches_only_its_tensors_and_no_in_flight_wgmma_register():
    """Online (Q + argmax) and target (max) variants, N 4096 and 2000, obs 54 and 55: no global,
    shared or wgmma-B access leaves its tensor / the shared allocation; the only addresses outside
    the tensors are the pipeline's zero-fill prefetches (src-size 0) of W2, b2 and W3 chunks past
    the loop end (the wt2, b2 and wt3 loads of kernel.py). A planted bug — obs one row short — is
    caught at the obs load, so the check can fail."""
    prefetches = {kernel_line("wt2 = tl.load(w2"), kernel_line("h2c = leaky(h2c + tl.load(b2"),
                  kernel_line("wt3 = tl.load(w3")}
    obs_load = "kernel.py:" + kernel_line("x = tl.load(obs_ptr")
    cases = [(4096, 54, 0), (4096, 55, 0), (2000, 55, 0), (4096, 55, 1)]
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT), cases=cases))
    ptx = [line.split() for line in lines if line.startswith("PTX")]
    sass = [line.split() for line in lines if line.startswith("SASS")]
    assert len(ptx) == 8 and len(sass) == 2, lines
    for _, name, n, obs_dim, short, n_issues, saw, *rest in ptx:
        zero_fill, where = (rest + ["", ""])[:2]
        assert saw == "True"
        assert set(zero_fill.split(",")) <= prefetches, (name, zero_fill, prefetches)
        if short == "0":
            assert n_issues == "0", (name, n, obs_dim, where)
        else:
            assert n_issues != "0" and where == obs_load, (name, where, obs_load)
    for _, name, n_hgmma, n_hazards in sass:
        assert int(n_hgmma) == 38 and n_hazards == "0", (name, n_hgmma, n_hazards)


VALUES = """
import sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {root!r} + "/src")
import numpy as np
from tests.kernels.compile_acting_sm90 import emulate
for name, n_actions in {cases}:
    out, ref, races, first = emulate(name, 54, n_actions)
    q = out.get("q")
    dq = float(np.abs(q - ref).max()) if q is not None else -1.0
    dm = float(np.abs(out["max"] - ref.max(1)).max()) if "max" in out else -1.0
    agree = float((out["argmax"] == ref.argmax(1)).mean()) if "argmax" in out else -1.0
    bad = sorted(k for k in races if not k.startswith(("WAW of the same value", "wgmma operand written after")))
    print("VAL", name, n_actions, dq, dm, agree, ",".join(bad) or "-", flush=True)
"""


@pytest.mark.slow
def test_the_compiled_acting_ptx_computes_the_network_and_has_no_shared_memory_race():
    """The PTX of both launch variants (bf16, 5 actions: A = 16; and 45 actions: A = 64, the variant
    that is right on the H200), executed on a CPU for two 128-row programs (``ptx_exec``): Q, max
    and argmax as the float32 torch network within bf16 error (the H200 gave max|dQ| 0.29 and 70 %
    argmax agreement at A = 16, 1.3e-3 and 99.7 % at A = 64: if the PTX is right, the fault is
    below it), and the happens-before check (``ptx_races``) finds no race on shared memory, no read
    of unretired cp.async data and no write under an in-flight wgmma. Known, and shared by the A = 64
    variant that works: replicated layouts storing one value twice, and accumulator movs between
    ``wgmma.fence`` and the first wgmma (ptxas places them before WARPGROUP.ARRIVE)."""
    cases = [("online", 5), ("target", 5), ("online", 45)]
    lines = run_interpreter_off(VALUES.format(root=str(ROOT), cases=cases))
    vals = [line.split() for line in lines if line.startswith("VAL")]
    assert len(vals) == 3, lines
    for _, name, n_actions, dq, dm, agree, bad in vals:
        if name == "online":
            assert 0 <= float(dq) < 5e-3 and float(agree) > 0.98, (name, n_actions, dq, agree)
        else:
            assert 0 <= float(dm) < 5e-3, (name, n_actions, dm)
        assert bad == "-", (name, n_actions, bad)


WARPS = """
import sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {root!r} + "/src")
from foxhunt.kernels.acting.kernel import launch_warps
from tests.kernels.compile_acting_sm90 import VARIANTS, compile_acting, launch_layout
from tests.kernels.ptx_bounds import check_ptx
dims = (64, 64, 32, 32, 64)  # DuelingQNet(54, 45, [48, 32], 16) packed: the case that faulted on the H200
stores = VARIANTS["online"]
for warps in (launch_warps(64, "bf16"), 8):
    kern, consts = compile_acting(stores, n_actions=45, dims=dims, block_m=64, num_warps=warps)
    params, tensors = launch_layout(stores, 256, 54, dims=dims, n_actions=45)
    rep = check_ptx(kern.asm["ptx"], 4, 32 * kern.metadata.num_warps, params, tensors, kern.metadata.shared)
    kinds = sorted(set(text.split(" at ")[0] for text, _ in rep.issues))
    print("WARPS", warps, len(rep.issues), "|".join(kinds).replace(" ", "_") or "-", flush=True)
"""


@pytest.mark.slow
def test_a_64_row_program_launches_one_warpgroup_whose_wgmma_operands_stay_in_its_tensors():
    """BLOCK_M 64 (a 45-action net, the launch that faulted on the H200): the launcher's warps
    (``launch_warps``: 4, one warpgroup for 64 rows) compile to PTX whose every access stays inside
    its tensors; the uncapped 8 warps (two warpgroups over 64 rows) leave a wgmma B-operand
    descriptor the checker cannot place in any tensor, which is what the cap exists for."""
    lines = [line.split() for line in run_interpreter_off(WARPS.format(root=str(ROOT))) if line.startswith("WARPS")]
    assert [int(w) for _, w, *_ in lines] == [4, 8], lines
    (_, _, capped, _), (_, _, uncapped, kinds) = lines
    assert capped == "0", lines
    assert uncapped != "0" and "wgmma_B_descriptor" in kinds, lines
