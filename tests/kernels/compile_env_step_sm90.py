"""Cross-compile the fused env-step kernel for Hopper (sm_90) on a machine without a GPU.

    TRITON_INTERPRET=0 python tests/kernels/compile_env_step_sm90.py

Triton ships ptxas: the whole pipeline (TTIR → PTX → cubin) runs on a CPU, so a kernel edit that
only the interpreter has seen is checked to compile, and its resource use (registers, spill stack)
is read from the cubin. Must run with the interpreter off.
"""

from __future__ import annotations

import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from foxhunt.kernels.env_step import kernel as ef
from tests.kernels.compile_backtest_sm90 import resource_usage

_I64 = {"ebar_p", "bar_p", "estart_p", "step_p", "level_p", "bexp_p", "kc_p", "rfill_p", "rhead_p", "max_hold_p",
        "kmin_trades_p", "ep_len_p", "fold_p", "act_p", "starts_p", "kbars_p", "o_next_bar", "o_tentry", "o_texit"}
_I8 = {"bact_p", "ring_p", "eob_p", "kelly_p", "o_done", "o_trunc", "o_fill", "o_hit", "o_label", "o_closed",
       "o_tside", "o_stepped"}


def compile_sm90(mode: int = 0, exposure: bool = False, has_volume: bool = True, curiosity: bool = True,
                 block: int = 128, num_warps: int = 4, k_bars: int = 1, pooled: bool = False, per_env_k: bool = False):
    """Compile one configuration of the launcher's constexpr choices (pooled: a pooled universe's per-env
    medians and given starts; per_env_k: each env's own k up to k_bars); returns (kernel, seconds)."""
    fn = ef._env_step_kernel
    if type(fn).__name__ != "JITFunction":
        raise RuntimeError("the kernel module was imported with TRITON_INTERPRET=1; run with it unset or 0")
    consts = dict(K_BARS=k_bars, WINDOW=100, MODE=mode, EXPOSURE=exposure, HAS_VOLUME=has_volume, HAS_CURIOSITY=curiosity,
                  RECIP_DIV=True, LIBDEVICE=True, BLOCK=block, MED_STRIDE=1 if pooled else 0, GIVEN_STARTS=pooled,
                  PER_ENV_K=per_env_k)
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ("n_envs", "n_bars", "mirror_off"):
            sig[name] = "i32"
        elif name == "unif_p":
            sig[name] = "*fp64"
        else:
            sig[name] = "*i64" if name in _I64 else "*i8" if name in _I8 else "*fp32"
    ptrs = [n for n, t in sig.items() if t.startswith("*")]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptrs}
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=num_warps, enable_fp_fusion=False))
    return kernel, time.perf_counter() - t0


def main() -> None:
    for cfg in (dict(), dict(mode=2, exposure=True), dict(mode=1, has_volume=False, curiosity=False),
                dict(block=256, num_warps=8), dict(k_bars=8), dict(pooled=True, k_bars=4), dict(k_bars=32, per_env_k=True)):
        kernel, secs = compile_sm90(**cfg)
        ptx = kernel.asm["ptx"]
        ops = ("fma.rn.f32 ", "div.rn.f32", "div.full", "sqrt.rn.f32", "sqrt.approx", "lg2.approx")
        print(f"{cfg}: {secs:.1f} s, {resource_usage(kernel.asm['cubin'])}, "
              + ", ".join(f"{op.strip()} {ptx.count(op)}" for op in ops))


if __name__ == "__main__":
    main()
