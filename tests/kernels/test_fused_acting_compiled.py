"""What the compiler made of the fused acting kernel stays inside its tensors (checked on a CPU).

The interpreter bounds tests (``test_fused_acting_bounds.py``) cannot see compiled-only behaviour:
software-pipelined prefetches, vectorisation from divisibility hints, shared-memory layouts, wgmma
descriptors, register reuse by ptxas. These cross-compile the kernel for sm_90 (Triton ships
ptxas) in a subprocess with the interpreter off and check the PTX of both launch variants the
collector uses, every thread of every program (``ptx_bounds``), and the SASS for registers an
in-flight wgmma still reads or writes (``sass_hazards``). Context: the H200 "illegal memory access"
of docs/LEARNING.md, "On the H200" §5.
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

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
    the loop end (kernel.py lines 149, 151, 152). A planted bug — obs one row short — is caught at
    the obs load (line 140), so the check can fail."""
    cases = [(4096, 54, 0), (4096, 55, 0), (2000, 55, 0), (4096, 55, 1)]
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT), cases=cases))
    ptx = [line.split() for line in lines if line.startswith("PTX")]
    sass = [line.split() for line in lines if line.startswith("SASS")]
    assert len(ptx) == 8 and len(sass) == 2, lines
    for _, name, n, obs_dim, short, n_issues, saw, *rest in ptx:
        zero_fill, where = (rest + ["", ""])[:2]
        assert saw == "True"
        assert set(zero_fill.split(",")) <= {"149", "151", "152"}, (name, zero_fill)
        if short == "0":
            assert n_issues == "0", (name, n, obs_dim, where)
        else:
            assert n_issues != "0" and where == "kernel.py:140", (name, where)
    for _, name, n_hgmma, n_hazards in sass:
        assert int(n_hgmma) == 38 and n_hazards == "0", (name, n_hgmma, n_hazards)
