"""Execute the PTX of a COMPILED Triton kernel on a CPU, values included: what the GPU should compute.

``ptx_bounds`` runs only the integer part of the PTX (addresses). This runs all of it for a few
programs, with the launch's real tensors as global memory, so that the compiled kernel's OUTPUT can
be compared with the network it implements — without a GPU. If the PTX computes the right values
and the device does not, the fault is below the PTX (ptxas, the driver or the hardware); if the PTX
itself is wrong, the bug is in Triton's lowering.

Model (the straight-line-plus-uniform-loops PTX that Triton emits for ``_dueling_q_kernel``):

* lanes = programs × threads as numpy arrays; registers hold bit patterns (uint64), floats are
  reinterpreted per instruction; a predicated instruction writes only its active lanes;
* every thread runs each instruction before the next one starts (lock-step): ``bar.sync`` and the
  async fences / waits are no-ops, and ``cp.async`` copies at once (src-size bytes, zero fill to
  cp-size). So this finds a WRONG PROGRAM, never a race;
* ``wgmma.mma_async`` (A from registers, B by a shared-memory descriptor, bf16 × bf16 → f32): the
  PTX ISA's fragment layouts (A like ``mma.m16n8k16`` per warp; D in n8 blocks of
  {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}), B in the canonical MN-major swizzled layout
  ((8, S/16, m), (8, k)) : ((1, 8, LBO), (S/2, SBO)) elements, Swizzle<log2(S/16), 4, 3> on the byte
  address, where S is the swizzle width (32 / 64 / 128 B); products summed in float64, then
  rounded to float32 (the tensor cores' own summation order is not modelled: ~1 ulp);
* ``stmatrix.m8n8.x4.b16``, ``shfl.sync.bfly/idx``, ``div.rn.f32`` (numpy's IEEE division),
  ``cvt.rn.bf16x2.f32`` (round to nearest even; first source → upper half).

``run_ptx`` returns the global memory (name → numpy bytes) after the launch.
"""

from __future__ import annotations

import re

import numpy as np

from tests.kernels.ptx_bounds import _num, _split

M32 = np.uint64(0xFFFFFFFF)
REGION = 36  # tensor i lives at (i + 1) << REGION: the address's high bits name the tensor


def _f32(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint64) & M32).astype(np.uint32).view(np.float32)


def _bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)


def _bf16_bits(x) -> np.ndarray:
    """float32 → bf16 bit pattern, round to nearest even (NaN stays a quiet NaN)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return np.where(np.isnan(np.asarray(x, np.float32)), (u >> np.uint64(16)) | np.uint64(0x40), r) & np.uint64(0xFFFF)


def _bf16_to_f32(b) -> np.ndarray:
    return ((np.asarray(b, np.uint64) & np.uint64(0xFFFF)) << np.uint64(16)).astype(np.uint32).view(np.float32)


def _s(v, bits: int) -> np.ndarray:
    """Signed view of the low ``bits`` bits."""
    v = np.asarray(v, np.uint64) & np.uint64((1 << bits) - 1)
    return np.where(v >= np.uint64(1 << (bits - 1)), v.astype(np.int64) - (1 << bits), v.astype(np.int64))


class PtxExec:
    def __init__(self, ptx: str, programs: list[int], n_threads: int, params: dict[int, int],
                 tensors: dict[str, np.ndarray], smem: int):
        """params: parameter index → value (pointers: ``base_of(name)``); tensors: name → uint8
        array (the i-th is addressed at ``(i + 1) << REGION``)."""
        self.code: list[str] = []
        self.labels: dict[str, int] = {}
        body = ptx.split("$L__func_begin0:")[1].split("\t.section")[0]
        for raw in body.splitlines():
            line = raw.split("//")[0].strip()
            if not line or line.startswith(".") or line in ("{", "}"):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.code)
            else:
                self.code.append(line.rstrip(";").strip())
        self.T, self.P = n_threads, len(programs)
        self.L = self.P * n_threads
        lane = np.arange(self.L)
        self.tid = (lane % n_threads).astype(np.uint64)
        self.ctaid = np.asarray(programs, np.uint64)[lane // n_threads]
        self.prog = lane // n_threads
        self.params, self.names = params, list(tensors)
        self.mem = [t.copy() for t in tensors.values()]
        self.smem = np.zeros((self.P, smem), np.uint8)
        self.regs: dict[str, np.ndarray] = {}

    # values ---------------------------------------------------------------------------------
    def val(self, tok: str) -> np.ndarray:
        tok = tok.strip()
        if tok in self.regs:
            return self.regs[tok]
        if tok == "%tid.x":
            return self.tid
        if tok == "%ctaid.x":
            return self.ctaid
        if tok in ("%tid.y", "%tid.z", "%ctaid.y", "%ctaid.z", "global_smem"):
            return np.zeros(self.L, np.uint64)
        if tok.startswith(("0f", "0F")):
            return np.full(self.L, int(tok[2:], 16), np.uint64)
        if tok.startswith("%"):
            raise KeyError(f"ptx_exec: register {tok} read before written")
        return np.full(self.L, _num(tok) & 0xFFFFFFFFFFFFFFFF, np.uint64)

    def set(self, name: str, v, active, wgmma: bool = False) -> None:
        name = name.strip()
        self.on_reg_write(name, wgmma)
        v = np.asarray(v, np.uint64)
        if active is None or name not in self.regs:
            self.regs[name] = v.copy() if active is None else np.where(active, v, np.uint64(0))
        else:
            self.regs[name] = np.where(active, v, self.regs[name])

    def addr(self, op: str) -> np.ndarray:
        m = re.match(r"^\[\s*(%?[\w.]+)\s*(?:\+\s*(-?\w+))?\s*\]$", op.strip())
        return self.val(m.group(1)) + np.uint64((_num(m.group(2)) if m.group(2) else 0) & 0xFFFFFFFFFFFFFFFF)

    # memory ---------------------------------------------------------------------------------
    def _global(self, a: np.ndarray, size: int, active):
        region = (a >> np.uint64(REGION)).astype(np.int64) - 1
        off = (a & np.uint64((1 << REGION) - 1)).astype(np.int64)
        for i in np.unique(region[active]):
            sel = active & (region == i)
            if not 0 <= i < len(self.mem) or (off[sel] + size > self.mem[i].size).any():
                raise IndexError(f"ptx_exec: global access outside {self.names[i] if 0 <= i < len(self.mem) else '?'}")
            yield i, sel, off

    def load(self, space: str, a, size: int, active) -> np.ndarray:
        out = np.zeros((self.L, size), np.uint8)
        if space == "shared":
            a32 = (a & M32).astype(np.int64)
            idx = a32[:, None] + np.arange(size)
            ok = active[:, None] & np.ones_like(idx, bool)
            progs = np.broadcast_to(self.prog[:, None], idx.shape)[ok]
            lanes = np.broadcast_to(np.arange(self.L)[:, None], idx.shape)[ok]
            self.on_shared(False, progs, idx[ok], lanes)
            out[ok] = self.smem[progs, idx[ok]]
            return out
        for i, sel, off in self._global(a, size, active):
            out[sel] = self.mem[i][off[sel][:, None] + np.arange(size)]
        return out

    def _write_smem(self, lane: int, a: int, data: np.ndarray, async_copy: bool = False) -> None:
        p = self.prog[lane]
        self.on_shared(True, np.full(len(data), p), np.arange(a, a + len(data)), np.full(len(data), lane), async_copy,
                       same=self.smem[p, a:a + len(data)] == data)
        self.smem[p, a:a + len(data)] = data

    # hooks for a checker (tests/kernels/ptx_races.py): every shared access / sync / register write
    def on_shared(self, write: bool, progs, idx, lanes, async_copy: bool = False, same=None) -> None:
        pass

    def on_sync(self, op: str, args: list[str], line: str) -> None:
        pass

    def on_reg_write(self, name: str, by_wgmma: bool) -> None:
        pass

    def on_wgmma(self, aregs: list[str], dregs: list[str], b_bytes: list[tuple[int, np.ndarray, np.ndarray]],
                 line: str) -> None:
        pass

    def store(self, space: str, a, data: np.ndarray, active, async_copy: bool = False) -> None:
        size = data.shape[1]
        if space == "shared":
            a32 = (a & M32).astype(np.int64)
            for lane in np.nonzero(active)[0]:  # lane order: a later lane wins, as no GPU promises
                self._write_smem(lane, a32[lane], data[lane], async_copy)
            return
        for i, sel, off in self._global(a, size, active):
            for lane in np.nonzero(sel)[0]:
                self.mem[i][off[lane]:off[lane] + size] = data[lane]

    @staticmethod
    def _words(data: np.ndarray, n: int, width: int) -> list[np.ndarray]:
        w = data.reshape(data.shape[0], n, width)
        return [w[:, j, :].copy().view(np.uint32 if width == 4 else np.uint64 if width == 8 else np.uint16)[:, 0]
                .astype(np.uint64) for j in range(n)]

    @staticmethod
    def _bytes(vals: list[np.ndarray], width: int) -> np.ndarray:
        dt = {2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
        return np.stack([np.asarray(v).astype(dt) for v in vals], 1).view(np.uint8).reshape(len(vals[0]), -1)

    # execution ------------------------------------------------------------------------------
    def run(self, max_steps: int = 2_000_000) -> dict[str, np.ndarray]:
        pc = steps = 0
        while pc < len(self.code):
            steps += 1
            if steps > max_steps:
                raise RuntimeError("ptx_exec: step limit")
            line = self.code[pc]
            pc += 1
            active = None
            m = re.match(r"^@(!?)(%\w+)\s+(.*)$", line)
            if m:
                p = self.val(m.group(2)) != 0
                active = ~p if m.group(1) else p
                line = m.group(3)
            op, _, rest = line.partition(" ")
            args = _split(rest)
            if op.startswith("bra"):
                taken = np.ones(self.L, bool) if active is None else active
                if taken.all():
                    pc = self.labels[args[0]]
                elif taken.any():
                    raise RuntimeError(f"ptx_exec: divergent branch {line}")
                continue
            if op == "ret":
                break
            self.step(op, args, active, line)
        return dict(zip(self.names, self.mem))

    def step(self, op: str, args: list[str], active, line: str) -> None:  # noqa: C901 - one opcode table
        o = op.split(".")
        base, typ = o[0], o[-1]
        act = np.ones(self.L, bool) if active is None else active
        if base in ("bar", "fence", "barrier", "membar", "wgmma", "cp") and (base != "wgmma" or o[1] != "mma_async") \
                and (base != "cp" or o[2] in ("commit_group", "wait_group", "wait_all")):
            self.on_sync(op, args, line)
            return
        if base == "ld" and o[1] == "param":
            idx = int(re.search(r"param_(\d+)", args[1]).group(1))
            self.set(args[0], np.full(self.L, self.params[idx] & 0xFFFFFFFFFFFFFFFF, np.uint64), active)
        elif base in ("ld", "st") and o[1] in ("global", "shared"):
            vec = next((int(t[1:]) for t in o if re.fullmatch(r"v\d", t)), 1)
            width = int(re.sub(r"\D", "", typ)) // 8
            if base == "ld":
                regs = re.findall(r"%\w+", args[0])
                data = self.load(o[1], self.addr(args[1]), vec * width, act)
                for r, v in zip(regs, self._words(data, vec, width)):
                    if typ == "s32" and r.startswith("%rd"):
                        v = _s(v, 32).astype(np.uint64)
                    self.set(r, v, act)
            else:
                regs = re.findall(r"%\w+|0f\w+|\b\d+\b", args[1])
                self.store(o[1], self.addr(args[0]), self._bytes([self.val(r) for r in regs], width), act)
        elif base == "cp" and o[1] == "async":
            cp = _num(args[2])
            src = self.val(args[3]).astype(np.int64) if len(args) > 3 else np.full(self.L, cp)
            data = self.load("global", self.addr(args[1]), cp, act & (src > 0))
            data[np.arange(cp)[None, :] >= src[:, None]] = 0
            self.store("shared", self.addr(args[0]), data, act, async_copy=True)
        elif base == "stmatrix":
            self.stmatrix(self.addr(args[0]), [self.val(r) for r in re.findall(r"%\w+", args[1])], act)
        elif base == "wgmma":
            self.wgmma(o, args, line)
        elif base == "shfl":
            self.shfl(o, args, active)
        else:
            self.set(args[0].split("|")[0], self.alu(o, base, typ, args, line), active)

    # warp / warpgroup operations ------------------------------------------------------------
    def shfl(self, o, args, active) -> None:
        a, b = self.val(args[1]), self.val(args[2]).astype(np.int64)
        lane = np.arange(self.L)
        wbase = lane - lane % 32
        src = wbase + ((lane % 32) ^ (b & 31) if o[2] == "bfly" else b & 31) if o[2] in ("bfly", "idx") else None
        if src is None:
            raise NotImplementedError(f"ptx_exec: shfl mode {o[2]}")
        self.set(args[0].split("|")[0], a[src], active)

    def stmatrix(self, addr, regs, act) -> None:
        assert len(regs) == 4 and act.all()
        lane = np.arange(self.L)
        wbase = lane - lane % 32
        for i, r in enumerate(regs):  # matrix i: row addresses from lanes 8i..8i+7, data from all lanes
            for row in range(8):
                row_lane = wbase[::32][:, None] + 8 * i + row  # one per warp
                src = wbase[::32][:, None] + 4 * row + np.arange(4)  # lanes holding that row
                data = self._bytes([r[src[:, j]] for j in range(4)], 4)
                a = (addr[row_lane[:, 0]] & M32).astype(np.int64)
                for w in range(len(a)):
                    self._write_smem(row_lane[w, 0], a[w], data[w])

    def wgmma(self, o, args, line: str = "") -> None:
        shape = next(t for t in o if t.startswith("m64"))
        n, k = int(re.search(r"n(\d+)", shape).group(1)), int(re.search(r"k(\d+)", shape).group(1))
        if "bf16" not in o or k != 16 or not args[1].startswith("{"):
            raise NotImplementedError(f"ptx_exec: wgmma {'.'.join(o)} (bf16 k16, A in registers only)")
        dregs, aregs = re.findall(r"%\w+", args[0]), re.findall(r"%\w+", args[1])
        desc, scale_d = self.val(args[2]), self.val(args[3]) != 0
        if _num(args[6]) != 1:
            raise NotImplementedError("ptx_exec: K-major B (imm-trans-b 0)")
        d = np.stack([_f32(self.val(r)) for r in dregs], 1).astype(np.float64)  # [L, n/2]
        a = np.stack([self.val(r) for r in aregs], 1)  # [L, 4] packed bf16 pairs
        lane = np.arange(self.L)
        warp, ln = (lane % self.T) // 32, lane % 32
        g, t, w4 = ln // 4, ln % 4, warp % 4
        out, b_bytes = d.copy(), []
        for wg_first in np.nonzero(lane % 128 == 0)[0]:
            sel = np.arange(wg_first, wg_first + 128)
            A = np.zeros((64, 16))
            for j, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
                rows, cols = 16 * w4[sel] + g[sel] + dr, 2 * t[sel] + dc
                A[rows, cols] = _bf16_to_f32(a[sel, j])
                A[rows, cols + 1] = _bf16_to_f32(a[sel, j] >> np.uint64(16))
            B, where = self.b_tile(int(desc[wg_first]), n, self.prog[wg_first])
            b_bytes.append((self.prog[wg_first], sel, where))
            C = A @ B  # [64, n] float64
            for i in range(n // 2):
                blk, q = i // 4, i % 4
                rows, cols = 16 * w4[sel] + g[sel] + (8 if q >= 2 else 0), 8 * blk + 2 * t[sel] + q % 2
                prod = C[rows, cols]
                out[sel, i] = np.where(scale_d[sel], d[sel, i] + prod, prod)
        self.on_wgmma(aregs, dregs, b_bytes, line)
        for i, r in enumerate(dregs):
            self.set(r, _bits(out[:, i].astype(np.float32)), None, wgmma=True)

    def b_tile(self, desc: int, n: int, prog: int) -> tuple[np.ndarray, np.ndarray]:
        """B [16, n] from the MN-major swizzled canonical layout the descriptor names, and the
        shared-memory bytes it reads."""
        start, lbo, sbo = (((desc >> s) & 0x3FFF) << 4 for s in (0, 16, 32))
        width = {1: 128, 2: 64, 3: 32}.get(desc >> 62)
        if width is None:
            raise NotImplementedError("ptx_exec: wgmma B without swizzle")
        kk, nn = np.meshgrid(np.arange(16), np.arange(n), indexing="ij")
        per_row = width // 2  # elements of one swizzle row
        lin = start + (nn // per_row) * lbo + (kk // 8) * sbo + (kk % 8) * width + (nn % per_row) * 2
        bits = int(np.log2(width // 16))
        swz = lin ^ (((lin >> 7) & ((1 << bits) - 1)) << 4)
        raw = self.smem[prog][swz[..., None] + np.arange(2)].copy().view(np.uint16)[..., 0]
        return _bf16_to_f32(raw.astype(np.uint64)).astype(np.float64), (swz[..., None] + np.arange(2)).ravel()

    # scalar ALU -----------------------------------------------------------------------------
    def alu(self, o, base, typ, args, line):  # noqa: C901
        v = lambda i: self.val(args[i])  # noqa: E731
        if base == "mov":
            return v(1)
        if base == "cvt":
            x = v(1)
            dst, src = o[-2], o[-1]
            if dst == "bf16x2" and src == "f32":  # cvt.rn.bf16x2.f32 d, hi, lo
                return (_bf16_bits(_f32(x)) << np.uint64(16)) | _bf16_bits(_f32(v(2)))
            if src in ("s32",):
                x = _s(x, 32).astype(np.uint64)
            elif src in ("u32", "b32"):
                x = x & M32
            elif src in ("u16",):
                x = x & np.uint64(0xFFFF)
            return x & (M32 if dst in ("u32", "s32", "b32") else np.uint64(0xFFFF) if dst == "u16" else ~np.uint64(0))
        if typ == "f32" or (base in ("setp", "selp") and o[-1] == "f32"):
            if base == "setp":
                a, b = _f32(v(1)), _f32(v(2))
                cmp = o[1]
                r = {"gt": a > b, "lt": a < b, "ge": a >= b, "le": a <= b, "eq": a == b, "ne": a != b,
                     "nan": np.isnan(a) | np.isnan(b), "num": ~(np.isnan(a) | np.isnan(b)),
                     "gtu": ~(a <= b), "ltu": ~(a >= b), "neu": ~(a == b)}[cmp]
                return r.astype(np.uint64)
            if base == "selp":
                return np.where(v(3) != 0, v(1), v(2))
            a = _f32(v(1))
            with np.errstate(all="ignore"):
                if base == "add":
                    r = a + _f32(v(2))
                elif base == "sub":
                    r = a - _f32(v(2))
                elif base == "mul":
                    r = a * _f32(v(2))
                elif base == "fma":
                    r = (a.astype(np.float64) * _f32(v(2)) + _f32(v(3))).astype(np.float32)
                elif base == "div":
                    r = a / _f32(v(2))
                elif base in ("max", "min"):
                    r = (np.fmax if base == "max" else np.fmin)(a, _f32(v(2)))
                elif base == "neg":
                    r = -a
                elif base == "abs":
                    r = np.abs(a)
                else:
                    raise NotImplementedError(f"ptx_exec: {line}")
            return _bits(r.astype(np.float32))
        bits = 1 if typ == "pred" else 64 if typ in ("u64", "s64", "b64") else 16 if typ in ("u16", "s16", "b16") else 32
        mask = np.uint64((1 << bits) - 1) if bits < 64 else ~np.uint64(0)
        signed = typ.startswith("s")
        if base == "setp":
            a, b = v(1), v(2)
            if signed:
                a, b = _s(a, bits), _s(b, bits)
            else:
                a, b = a & mask, b & mask
            return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[o[1]].astype(np.uint64)
        if base == "selp":
            return np.where(v(3) != 0, v(1), v(2))
        if base in ("add", "sub"):
            r = v(1) + v(2) if base == "add" else v(1) - v(2)
        elif base in ("mul", "mad"):
            if o[1] == "wide":
                x, y = (_s(v(1), 32), _s(v(2), 32)) if signed else ((v(1) & M32).astype(np.int64), (v(2) & M32).astype(np.int64))
                r, mask = (x * y).astype(np.uint64), ~np.uint64(0)
            else:
                r = v(1) * v(2)
            r = r + v(3) if base == "mad" else r
        elif base == "shl":
            r = v(1) << (v(2) & np.uint64(63))
        elif base == "shr":
            r = (_s(v(1), bits) >> (v(2) & np.uint64(63)).astype(np.int64)).astype(np.uint64) if signed else (v(1) & mask) >> v(2)
        elif base in ("and", "or", "xor"):
            a, b = v(1), v(2)
            r = a & b if base == "and" else a | b if base == "or" else a ^ b
        elif base == "not":
            r = ~v(1)
        elif base == "neg":
            r = np.uint64(0) - v(1)
        elif base in ("min", "max"):
            a, b = (_s(v(1), bits), _s(v(2), bits)) if signed else (v(1) & mask, v(2) & mask)
            r = (np.minimum(a, b) if base == "min" else np.maximum(a, b)).astype(np.uint64)
        elif base == "bfe":
            pos, ln = int(v(2)[0]) & 255, int(v(3)[0]) & 255
            r = ((v(1) & mask) >> np.uint64(pos)) & np.uint64((1 << ln) - 1)
            if signed:
                r = np.where((r >> np.uint64(ln - 1)) & np.uint64(1) == 1, r - np.uint64(1 << ln), r)
        else:
            raise NotImplementedError(f"ptx_exec: {line}")
        return np.asarray(r, np.uint64) & mask


def run_ptx(ptx: str, programs: list[int], n_threads: int, params: dict[int, int],
            tensors: dict[str, np.ndarray], smem: int) -> dict[str, np.ndarray]:
    """Run ``ptx`` for the given program ids; tensors: name → uint8 array, the i-th (in dict order)
    at address ``(i + 1) << REGION`` (see ``base_of``). Returns the tensors after the launch."""
    return PtxExec(ptx, programs, n_threads, params, tensors, smem).run()


def base_of(i: int) -> int:
    return (i + 1) << REGION


__all__ = ["REGION", "base_of", "run_ptx"]
