"""Cross-compile the fused acting kernel for Hopper (sm_90) on a CPU and check what the compiler made.

    TRITON_INTERPRET=0 python tests/kernels/compile_acting_sm90.py [OUT_DIR]

For each launch variant the collector uses (online pass: Q + argmax; target pass: max only) at the
scorecard's shapes (N 4096, obs 54 / 55, 256/256/128, 5 actions, bf16, the GPU's 128-row programs)
it prints one line: shared memory, registers, the PTX address check (``ptx_bounds``: every global /
shared / wgmma-B access of every thread of every program against the launch's tensors) and the SASS
wgmma register-hazard check (``sass_hazards``). The signature is the one ``fused_dueling_q`` passes
(16-byte-aligned tensors, n divisible by 16; obs_dim and the row stride are NOT specialised, so obs
54 and 55 share one binary). OUT_DIR: also write each variant's PTX and SASS there.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from foxhunt.kernels.acting import kernel as k
from tests.kernels.compile_backtest_sm90 import resource_usage
from tests.kernels.ptx_bounds import check_ptx
from tests.kernels.sass_hazards import wgmma_register_hazards

DIMS = (64, 256, 256, 256, 16)  # D, H1, H2, H3, A of DuelingQNet(54|55, 5, [256, 256], 128)
VARIANTS = {"online": (True, False, True), "target": (False, True, False)}


def compile_acting(stores: tuple[bool, bool, bool], precision: str = "bf16", n_actions: int = 5, dims=DIMS,
                   block_m: int | None = None, bn: int | None = None, stages: int | None = None,
                   n_div16: bool = True, num_warps: int | None = None):
    """The CompiledKernel ``fused_dueling_q`` would launch for these outputs (STORE_Q, STORE_MAX, STORE_ARG)."""
    fn = k._dueling_q_kernel
    if type(fn).__name__ != "JITFunction":
        raise RuntimeError("the kernel module was imported with TRITON_INTERPRET=1; run with it unset or 0")
    cfg = k.DEFAULTS[precision]
    D, H1, H2, H3, A = dims
    w = "bf16" if precision == "bf16" else "fp32"
    consts = dict(N_ACTIONS=n_actions, D=D, H1=H1, H2=H2, H3=H3, A=A,
                  BLOCK_M=block_m or max(16, cfg["block_m"] * 256 // max(256, H1, H3)), BN=min(bn or cfg["bn"], H2),
                  STAGES=stages or cfg["stages"], PREC="ieee" if precision == "bf16" else precision,
                  F32_DOT=precision != "bf16", ROUND=precision == "bf16",
                  STORE_Q=stores[0], STORE_MAX=stores[1], STORE_ARG=stores[2], MEMBERS=False)
    ptrs = dict(obs_ptr="*fp32", w1=f"*{w}", w2=f"*{w}", w3=f"*{w}", w4=f"*{w}", b1="*fp32", b2="*fp32", b3="*fp32",
                b4="*fp32", q_ptr="*fp32", max_ptr="*fp32", arg_ptr="*i64" if stores[2] else "*fp32")  # dummies: obs
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "fp32" if n == "slope" else "i32") for n in fn.arg_names}
    aligned = list(ptrs) + (["n_rows"] if n_div16 else [])
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=num_warps or cfg["num_warps"])), consts


def launch_layout(stores, n: int, obs_dim: int, dims=DIMS, n_actions: int = 5, wbytes: int = 2, short_obs_rows: int = 0):
    """(params, tensors) of a launch on N rows: parameter index → base address / integer, and
    name → (base, bytes) for ``check_ptx``; 64 GiB apart so that no overrun lands in a neighbour.
    short_obs_rows: make obs that many rows shorter than N (a planted bug for the checker's test)."""
    D, H1, H2, H3, A = dims
    G = 1 << 36
    tensors: dict[str, tuple[int, int]] = {}
    params: dict[int, int] = {}
    sizes = [("obs", 0, (n - short_obs_rows) * obs_dim * 4), ("w1", 4, D * H1 * wbytes), ("b1", 5, H1 * 4),
             ("w2", 6, H1 * H2 * wbytes), ("b2", 7, H2 * 4), ("w3", 8, H2 * H3 * wbytes), ("b3", 9, H3 * 4),
             ("w4", 10, H3 * A * wbytes), ("b4", 11, A * 4)]
    for i, (name, idx, nbytes) in enumerate(sizes):
        tensors[name] = ((i + 1) * G, nbytes)
        params[idx] = (i + 1) * G
    params.update({1: obs_dim, 2: n, 3: obs_dim, 12: 0})
    for j, (name, idx, per_row, on) in enumerate((("q", 13, n_actions * 4, stores[0]), ("max", 14, 4, stores[1]),
                                                  ("argmax", 15, 8, stores[2]))):
        if on:
            tensors[name] = ((20 + j) * G, n * per_row)
        params[idx] = tensors[name][0] if on else params[0]
    return params, tensors


def sass_of(cubin: bytes) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"acting_{os.getpid()}.cubin"
    path.write_bytes(cubin)
    try:
        return subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True).stdout
    finally:
        path.unlink(missing_ok=True)


def sass_digest(sass: str) -> str:
    """sha256 (12 hex) of the instruction text alone (no addresses, encodings or line info), so a
    GPU session can tell whether it runs the binary checked here."""
    ins = [re.sub(r"/\*[0-9a-f]{4,}\*/|/\* 0x[0-9a-f]+ \*/", "", s).strip() for s in sass.splitlines()]
    ins = [s for s in ins if s and not s.startswith(("code for", "Function", "Fatbin", "arch", "host", "compile",
                                                   "identifier", "ptxas", "--", "..", "//"))]
    return hashlib.sha256("\n".join(ins).encode()).hexdigest()[:12]


def check(name: str, obs_dim: int, n: int = 4096, out: Path | None = None, **kw) -> str:
    stores = VARIANTS[name]
    kern, consts = compile_acting(stores, **kw)
    params, tensors = launch_layout(stores, n, obs_dim)
    rep = check_ptx(kern.asm["ptx"], -(-n // consts["BLOCK_M"]), 32 * kern.metadata.num_warps, params, tensors,
                    kern.metadata.shared)
    sass = sass_of(kern.asm["cubin"])
    n_hgmma, hazards = wgmma_register_hazards(sass) if sass else (0, ["no cuobjdump"])
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"acting_{name}.ptx").write_text(kern.asm["ptx"])
        (out / f"acting_{name}.sass").write_text(sass)
    zf = ", ".join(f"{loc} ({lanes})" for loc, lanes in rep.zero_fill_outside.items()) or "none"
    return (f"{name} obs {obs_dim} N {n}: shared {kern.metadata.shared} B, {resource_usage(kern.asm['cubin'])}, "
            f"ptx accesses {rep.counts['global']} global / {rep.counts['shared']} shared / {rep.counts['wgmma']} wgmma, "
            f"issues {len(rep.issues)} {rep.lines()[:3]}, zero-fill outside: {zf}, "
            f"hgmma {n_hgmma} hazards {len(hazards)} {hazards[:2]}, sass {sass_digest(sass)}")


def emulate(name: str, obs_dim: int = 54, n_actions: int = 5, n: int = 256, programs=(0, 1), races: bool = True):
    """Run the compiled PTX of variant ``name`` on a seeded DuelingQNet(obs_dim, n_actions, [256, 256], 128)
    (bf16) for ``programs`` (``ptx_exec``; with ``ptx_races`` when races): (outputs, torch reference
    [rows, n_actions], race kinds → count, kind → first line). outputs: "q" [rows, n_actions],
    "max" [rows], "argmax" [rows] for the variant's stores (rows: those of ``programs``)."""
    import numpy as np
    import torch

    from foxhunt.agents.networks import DuelingQNet
    from foxhunt.kernels.rules.packing import pack_net
    from tests.kernels.ptx_exec import base_of, run_ptx
    from tests.kernels.ptx_races import check_races

    stores = VARIANTS[name]
    torch.manual_seed(obs_dim)
    net = DuelingQNet(obs_dim, n_actions, [256, 256], 128)
    pk = pack_net(net, "bf16")
    obs = torch.randn(n, obs_dim)
    kern, consts = compile_acting(stores, n_actions=n_actions, dims=pk.dims)
    u8 = lambda t: t.contiguous().view(-1).view(torch.uint8).numpy().copy()  # noqa: E731
    mem = {"obs": u8(obs), **{w: u8(getattr(pk, w)) for w in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4")},
           "q": np.full(n * n_actions * 4, 0xFF, np.uint8), "max": np.full(n * 4, 0xFF, np.uint8),
           "argmax": np.full(n * 8, 0xFF, np.uint8)}
    at = {k: base_of(i) for i, k in enumerate(mem)}
    params = {0: at["obs"], 1: obs_dim, 2: n, 3: obs_dim, 4: at["w1"], 5: at["b1"], 6: at["w2"], 7: at["b2"],
              8: at["w3"], 9: at["b3"], 10: at["w4"], 11: at["b4"], 12: int(np.float32(pk.slope).view(np.uint32)),
              13: at["q"] if stores[0] else at["obs"], 14: at["max"] if stores[1] else at["obs"],
              15: at["argmax"] if stores[2] else at["obs"], 16: 0, 17: 0}  # 16, 17: Triton's scratch pointers
    args = (kern.asm["ptx"], list(programs), 32 * kern.metadata.num_warps, params, mem, kern.metadata.shared)
    found, first = {}, {}
    if races:
        found, first, out = check_races(*args)
    else:
        out = run_ptx(*args)
    rows = np.concatenate([np.arange(p * consts["BLOCK_M"], min(n, (p + 1) * consts["BLOCK_M"])) for p in programs])
    with torch.no_grad():
        ref = net(obs).numpy()[rows]
    res = {"q": out["q"].view(np.float32).reshape(n, n_actions)[rows], "max": out["max"].view(np.float32)[rows],
           "argmax": out["argmax"].view(np.int64)[rows]}
    return {k: v for k, v, on in zip(("q", "max", "argmax"), res.values(), stores) if on}, ref, found, first


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"triton {triton.__version__}", flush=True)
    for name in VARIANTS:
        for obs_dim in (54, 55):
            print(check(name, obs_dim, out=out), flush=True)


if __name__ == "__main__":
    main()
