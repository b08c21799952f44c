"""The fused env-step kernel compiles for Hopper (sm_90) on any machine (Triton ships ptxas).

The interpreter tests cannot see compile errors; this cross-compiles the launcher's constexpr
variants in a subprocess with the interpreter off and checks the PTX for what the float32 parity
rests on: IEEE division and square root only (no ``div.full`` / ``sqrt.approx``), no contracted
``fma`` in the kernel's own arithmetic (libdevice's log2 / pow use ``fma.rn.ftz``, as torch's do),
no register spills; a pooled universe's variant (per-env medians, given starts) and the per-env k of a stack of
members at different decision intervals too.
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.kernels.compile_env_step_sm90 import compile_sm90, resource_usage
for cfg in (dict(), dict(mode=2, exposure=True, curiosity=False), dict(mode=1, has_volume=False), dict(k_bars=8),
            dict(pooled=True, exposure=True), dict(k_bars=32, per_env_k=True)):
    kernel, secs = compile_sm90(**cfg)
    ptx = kernel.asm["ptx"]
    counts = [ptx.count(s) for s in ("div.full", "div.approx", "sqrt.approx", "fma.rn.f32 ", "div.rn.f32")]
    print(cfg, "|", *counts, "|", resource_usage(kernel.asm["cubin"]), flush=True)
"""


@pytest.mark.slow
def test_env_step_kernel_compiles_for_sm90_with_ieee_division_and_no_fma_contraction():
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT)))
    assert len(lines) == 6, lines
    for line in lines:
        _, counts, usage = line.split("|")
        div_full, div_approx, sqrt_approx, fma, div_rn = map(int, counts.split())
        assert div_full == div_approx == sqrt_approx == fma == 0 and div_rn >= 10, line
        if usage.strip():
            assert "STACK:0" in usage, f"register spills: {line}"
