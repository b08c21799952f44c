"""The replay sum-tree kernels compile for Hopper (sm_90) on any machine (Triton ships ptxas).

The interpreter tests cannot see compile errors nor the GPU-only semantics; this cross-compiles the
launchers' variants in a subprocess with the interpreter off and checks the PTX for what the
rebuild's correctness on a GPU rests on: CTA barriers between the phases and levels, the leaf
writes' float atomic max (as integer max / min reductions), no cp.async prefetch (a pipelined
load could be hoisted above a barrier), no contracted fma in the descent, no register spills.
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.kernels.compile_sum_tree_sm90 import compile_find_prefix, compile_write_rebuild, resource_usage
for dtype in ("fp32", "fp64"):
    for kernel, _ in (compile_find_prefix(dtype, 16), compile_find_prefix(dtype, 0)):
        ptx = kernel.asm["ptx"]
        print("find", ptx.count("fma."), ptx.count("cp.async"), "|", resource_usage(kernel.asm["cubin"]), flush=True)
    for kernel, _ in (compile_write_rebuild(dtype, block=4096), compile_write_rebuild(dtype, block=128, pair=False)):
        ptx = kernel.asm["ptx"]
        red = ptx.count("red.global.gpu.relaxed.max.s") + ptx.count("atom.global.gpu.relaxed.max.s")
        print("rebuild", ptx.count("bar.sync"), red, ptx.count("cp.async"), "|", resource_usage(kernel.asm["cubin"]),
              flush=True)
"""


@pytest.mark.slow
def test_sum_tree_kernels_compile_for_sm90_with_barriers_atomic_max_and_no_prefetch():
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT)))
    assert len(lines) == 8, lines
    for line in lines:
        head, usage = line.split("|")
        kind, *counts = head.split()
        if kind == "find":
            fma, cp_async = map(int, counts)
            assert fma == 0 and cp_async == 0, line
        else:
            bars, red, cp_async = map(int, counts)
            assert bars >= 3 and red >= 1 and cp_async == 0, line
        if usage.strip():
            assert "STACK:0" in usage, f"register spills: {line}"
