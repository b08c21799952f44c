"""Cross-compile the fused backtest kernel for Hopper (sm_90) on a machine without a GPU.

    TRITON_INTERPRET=0 python tests/kernels/compile_backtest_sm90.py [OUT_DIR]

Triton ships ptxas, so the whole pipeline (TTIR → TTGIR → PTX → cubin) runs on a CPU: a kernel
edit that only the interpreter has seen is checked to compile, and the resource use is read from
the cubin (registers, stack = spills, shared memory) with the bundled cuobjdump. Must run with the
interpreter off (the kernel has to be a JITFunction when its module is imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from foxhunt.kernels.backtest import kernel as bf

INTS = ("n_windows", "n_bars", "n_steps", "n_feat", "decide_every", "kelly_min_trades", "given_cols", "max_holding_bars", "n_members")


def compile_sm90(prec: str = "tf32", num_warps: int = 4, block_w: int = 16, dims=(64, 256, 256, 256, 64),
                 n_actions: int = 45, exposure: bool = False, has_volume: bool = True, kelly: bool = False,
                 debug: bool = False, trades: bool = False, stages: int = 3, bn: int = 64, given: bool = False,
                 pre: bool = False, adv: bool = True, l1keep: bool = False, barriers: bool = False,
                 ensemble: bool = False, members: bool = False, wmed: bool = False):
    """Compile one configuration (the launcher's constexpr choices); returns (compiled kernel, seconds).

    block_w 1 is the row path (bn: its column chunk; pre: layer 1 precomputed; adv: advantage head
    alone with its fallback; l1keep: cache hints); given: fixed actions; barriers: triple-barrier
    labels (with trades); ensemble: K members voting (row path); members: each window its own network
    (MemberGreedyPolicy, row path); wmed: [W] medians, each window's own (a pooled universe)."""
    D, H1, H2, H3, A = dims
    wdt = "bf16" if prec == "bf16" else "fp32"
    bk = 64 if prec == "bf16" else 32
    bkh = min(bk, H1, H2, H3)
    stages = max(1, min(stages, (160 * 1024) // (bkh * max(H1, H2, H3, A) * (2 if prec == "bf16" else 4))))
    ptrs = {n: "*fp32" for n in ("feat_ptr", "ohlc_ptr", "volume_ptr", "logret_ptr", "range_ptr", "med_range_ptr",
                                 "med_absret_ptr", "mean_ptr", "inv_ptr", "b1", "b2", "b3", "b4", "ret_ptr", "pos_ptr",
                                 "tret_ptr", "final_ptr", "act_ptr", "status_ptr", "tside_ptr", "tsize_ptr",
                                 "tcost_ptr", "tentry_ptr", "pre_ptr", "vb_ptr", "traded_ptr", "tbar_ptr",
                                 "ens_mean_ptr", "ens_inv_ptr", "ens_w_ptr")}
    ptrs.update(start_ptr="*i64", len_ptr="*i64", tclosed_ptr="*i8", w1=f"*{wdt}", w2=f"*{wdt}", w3=f"*{wdt}",
                w4=f"*{wdt}", scratch_ptr=f"*{wdt}", given_ptr="*i64", member_ptr="*i32")
    if debug:
        ptrs.update(act_ptr="*i32", status_ptr="*i8")
    if trades:
        ptrs.update(tside_ptr="*i8", tentry_ptr="*i64", tbar_ptr="*i8")
    consts = dict(N_ACTIONS=n_actions, D=D, H1=H1, H2=H2, H3=H3, A=A, HMAX=max(D, H1, H2, H3), BLOCK_W=block_w,
                  BK1=min(bk, D), BK=bkh, STAGES=stages, PREC="ieee" if prec == "bf16" else prec,
                  F32_DOT=prec != "bf16", EXPOSURE=exposure, HAS_VOLUME=has_volume, KELLY=kelly,
                  STORE_DEBUG=debug, STORE_TRADES=trades, ROW=block_w == 1, BN=min(bn, H2), ROUND=prec == "bf16",
                  GIVEN=given, PRE=pre, ADV=adv and not given and (block_w == 1 or H3 // 2 >= 16), L1KEEP=l1keep,
                  BKH=min(bkh, max(16, H3 // 2)), BARRIERS=barriers and trades, ENS=ensemble,
                  MEMBERS=members, WMED=wmed)
    fn = bf._backtest_kernel
    if type(fn).__name__ != "JITFunction":
        raise RuntimeError("the kernel module was imported with TRITON_INTERPRET=1; run with it unset or 0")
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32" if n in INTS else "fp32") for n in fn.arg_names}
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptrs}
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=num_warps, enable_fp_fusion=False))
    return kernel, time.perf_counter() - t0


def resource_usage(cubin: bytes) -> str:
    """cuobjdump's REG / STACK / SHARED line of a cubin ('' if cuobjdump is missing)."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return ""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"backtest_fused_{os.getpid()}.cubin"
    path.write_bytes(cubin)
    try:
        out = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True).stdout
    finally:
        path.unlink(missing_ok=True)
    return next((line.strip() for line in out.splitlines() if "REG:" in line), "")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    configs = [dict(prec="tf32"), dict(prec="tf32", num_warps=8), dict(prec="bf16"), dict(prec="bf16", num_warps=8),
               dict(prec="ieee"), dict(prec="tf32", block_w=32, num_warps=8), dict(prec="tf32", block_w=1),
               dict(prec="tf32", block_w=1, pre=True), dict(prec="bf16", block_w=1), dict(prec="tf32", given=True)]
    for cfg in configs:
        kernel, secs = compile_sm90(**cfg)
        ptx = kernel.asm["ptx"]
        print(f"{cfg}: {secs:.1f} s, shared {kernel.metadata.shared} B, {resource_usage(kernel.asm['cubin'])}, "
              f"mma.sync {ptx.count('mma.sync')}, cp.async {ptx.count('cp.async.cg') + ptx.count('cp.async.ca')}")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            name = "_".join(f"{k}{v}" for k, v in cfg.items())
            (out / f"backtest_{name}.ptx").write_text(ptx)
            (out / f"backtest_{name}.cubin").write_bytes(kernel.asm["cubin"])


if __name__ == "__main__":
    main()
