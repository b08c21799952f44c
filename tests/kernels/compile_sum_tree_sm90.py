"""Cross-compile the replay sum-tree kernels for Hopper (sm_90) on a machine without a GPU.

    TRITON_INTERPRET=0 python tests/kernels/compile_sum_tree_sm90.py

Triton ships ptxas, so TTIR → PTX → cubin runs on a CPU: a kernel edit only the interpreter has
seen is checked to compile, and the PTX is checked for what the GPU semantics rest on (the
rebuild's CTA barriers between levels, its float atomic max, no cp.async prefetch that could
hoist a load above a barrier) and the cubin for resources. Must run with the interpreter off.
"""

from __future__ import annotations

import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from foxhunt.kernels.replay import binary as sf
from tests.kernels.compile_backtest_sm90 import resource_usage


def _compile(fn, sig: dict, consts: dict, num_warps: int):
    if type(fn).__name__ != "JITFunction":
        raise RuntimeError("the kernel module was imported with TRITON_INTERPRET=1; run with it unset or 0")
    full = {n: "constexpr" if n in consts else sig[n] for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items() if t.startswith("*")}
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, full, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=num_warps, num_stages=1, enable_fp_fusion=False))
    return kernel, time.perf_counter() - t0


def compile_find_prefix(dtype: str = "fp32", s: int = 16, depth: int = 20, block: int = 128, num_warps: int = 4):
    """The descent kernel as ``find_prefix`` launches it; returns (kernel, seconds)."""
    sig = dict(tree_p=f"*{dtype}", incl_p="*fp64", next_p="*i64", prefix_p="*fp64", out_p="*i64", value_p="*fp64", n="i32")
    return _compile(sf._find_prefix_kernel, sig, dict(S=s, DEPTH=depth, HAS_VALUE=True, BLOCK=block), num_warps)


def compile_write_rebuild(dtype: str = "fp32", depth: int = 20, block: int = 4096, pair: bool = True):
    """The rebuild kernel as ``write_rebuild`` launches it for ProportionalPER; returns (kernel, seconds)."""
    sig = dict(a_p=f"*{dtype}", b_p=f"*{dtype}", idx_p="*i64", val_p=f"*{dtype}", max_p=f"*{dtype}", n="i32",
               idx_stride="i32", val_stride="i32")
    consts = dict(DEPTH=depth, OP_A=0, OP_B=1, HAS_B=pair, HAS_MAX=pair, BLOCK=block)
    return _compile(sf._write_rebuild_kernel, sig, consts, max(4, min(32, block // 128)))


def main() -> None:
    for dtype in ("fp32", "fp64"):
        for s in (0, 16):
            kernel, secs = compile_find_prefix(dtype, s)
            ptx = kernel.asm["ptx"]
            print(f"find_prefix {dtype} s={s}: {secs:.1f} s, {resource_usage(kernel.asm['cubin'])}, "
                  f"fma {ptx.count('fma.')}, cp.async {ptx.count('cp.async')}")
        for block in (128, 4096):
            kernel, secs = compile_write_rebuild(dtype, block=block)
            ptx = kernel.asm["ptx"]
            print(f"write_rebuild {dtype} block={block}: {secs:.1f} s, {resource_usage(kernel.asm['cubin'])}, "
                  f"bar.sync {ptx.count('bar.sync')}, atom.max {ptx.count('atom.') }, cp.async {ptx.count('cp.async')}")


if __name__ == "__main__":
    main()
