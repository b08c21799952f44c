"""The wide PER tree kernels compile for Hopper (sm_90) on any machine (Triton ships ptxas).

The interpreter tests cannot see compile errors; this cross-compiles every kernel variant the
launchers use in a subprocess with the interpreter off (it must be off when the module is imported).
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from foxhunt.kernels.replay import wide as wt
from tests.kernels.compile_backtest_sm90 import resource_usage

def build(fn, sig, consts, num_warps=4):
    assert type(fn).__name__ == "JITFunction", "imported with TRITON_INTERPRET=1"
    full = {{n: "constexpr" if n in consts else sig[n] for n in fn.arg_names}}
    attrs = {{(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items() if t.startswith("*")}}
    k = triton.compile(ASTSource(fn, full, consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=num_warps, num_stages=1, enable_fp_fusion=False))
    print(fn.__name__, consts, resource_usage(k.asm["cubin"]), flush=True)

build(wt._descend_kernel, dict(tree_p="*fp32", u_p="*fp64", out_p="*i64", val_p="*fp64", n="i32"),
      dict(B=32, DEPTH=4, LEAF0=wt.level_start(32, 4), BLOCK=128))
for phase in (0, 1):
    build(wt._scatter_kernel, dict(s_p="*fp32", m_p="*fp32", idx_p="*i64", val_p="*fp32", max_p="*fp32", n="i32",
                                   idx_stride="i32", val_stride="i32", LEAF0="i32"),
          dict(PHASE=phase, HAS_MAX=True, BLOCK=1024))
for full, idx in ((False, "*i64"), (True, "*fp32")):
    build(wt._level_kernel, dict(s_p="*fp32", m_p="*fp32", idx_p=idx, n="i32", idx_stride="i32", shift="i32",
                                 parent0="i32", child0="i32"), dict(FULL=full, B=32, BLOCK=128))
"""


@pytest.mark.slow
def test_wide_tree_kernels_compile_for_sm90_without_spills():
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT)))
    assert len(lines) == 5, lines
    for line in lines:
        if "STACK:" in line:
            assert "STACK:0 " in line, line  # no register spills
