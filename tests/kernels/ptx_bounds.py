"""Check the addresses of a COMPILED Triton kernel on a CPU: run the integer part of its PTX for every
thread of every program and test each memory access against the launch's tensors.

Why: the interpreter bounds checker (``tests/kernels/bounds.py``) sees Triton's semantics, not what
the compiler made of them — software-pipelined prefetches, vectorisation from divisibility hints,
shared-memory layouts, wgmma descriptors. This walks the PTX instead:

* lanes = threads × programs as numpy arrays; integer ops (add, mul, mad, shl, bfe, selp, setp …)
  are evaluated, float ops give UNKNOWN (no address of the acting kernel depends on a float);
* ``ld/st.global``, ``cp.async`` sources: [addr, addr + size) must lie in one tensor and be
  size-aligned; a ``cp.async`` lane with src-size 0 (zero fill, the masked prefetch) that points
  outside every tensor is counted apart as ``zero_fill_outside`` (the PTX ISA copies src-size bytes;
  it does not say whether the address of a 0-byte copy may be invalid);
* ``ld/st.shared``, ``cp.async`` destinations, ``stmatrix``: inside [0, dynamic shared size);
* ``wgmma`` B descriptors: the tile [start, start + (N/atom − 1)·LBO + (K/8 − 1)·SBO + 8·row) inside
  shared memory (start, LBO, SBO decoded from the 64-bit descriptor);
* a predicate that depends on a float (unknown) counts as taken (conservative); a divergent branch
  on known values raises.

Scope: the straight-line-plus-loops PTX Triton emits for kernels like ``_dueling_q_kernel`` (one
function, no calls except what ptxas adds later). ``check_ptx`` returns a ``Report``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

M32 = (1 << 32) - 1


def _s32(a):
    a = a & M32
    return np.where(a >= 1 << 31, a - (1 << 32), a)


def _num(tok: str):
    tok = tok.strip()
    if tok.startswith(("0f", "0d")):
        return None  # a float literal
    if tok.lower().startswith(("0x", "-0x")):
        return int(tok, 16)
    return int(tok)


def _split(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "{[" and 1 or (-1 if ch in "}]" else 0)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


@dataclass
class Report:
    """Findings: ``issues`` maps (kind, source location) → lanes; ``zero_fill_outside`` maps a
    source location → lanes of src-size-0 copies whose address is outside every tensor."""

    issues: dict = field(default_factory=lambda: defaultdict(int))
    examples: dict = field(default_factory=dict)
    zero_fill_outside: dict = field(default_factory=lambda: defaultdict(int))
    counts: dict = field(default_factory=lambda: defaultdict(int))

    def lines(self) -> list[str]:
        out = [f"{kind} at {loc}: {n} lanes | {self.examples[(kind, loc)][:100]}"
               for (kind, loc), n in sorted(self.issues.items(), key=lambda kv: -kv[1])]
        out += [f"zero-fill copy outside the tensors at {loc}: {n} lanes" for loc, n in self.zero_fill_outside.items()]
        return out


class _Emu:
    def __init__(self, ptx: str, n_prog: int, n_threads: int, params: dict[int, int],
                 tensors: dict[str, tuple[int, int]], smem: int):
        self.code: list[tuple[str, str | None]] = []
        self.labels: dict[str, int] = {}
        body = ptx.split("$L__func_begin0:")[1] if "$L__func_begin0:" in ptx else ptx
        body = body.split("\t.section")[0]
        loc = None
        for raw in body.splitlines():
            m = re.search(r"//\s*(\w+\.py:\d+:\d+)", raw)
            if raw.strip().startswith(".loc"):
                loc = m.group(1) if m else loc
                continue
            line = raw.split("//")[0].strip()
            if not line or line.startswith(".") or line in ("{", "}"):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.code)
                continue
            self.code.append((line.rstrip(";").strip(), loc))
        self.L = n_prog * n_threads
        lane = np.arange(self.L)
        self.tid, self.ctaid = lane % n_threads, lane // n_threads
        self.regs: dict[str, np.ndarray | None] = {}
        self.params, self.tensors, self.smem = params, tensors, smem
        self.rep = Report()

    # values ---------------------------------------------------------------------------------
    def val(self, tok: str):
        tok = tok.strip()
        if tok in self.regs:
            return self.regs[tok]
        special = {"%tid.x": self.tid, "%ctaid.x": self.ctaid}
        if tok in special:
            return special[tok].astype(np.int64)
        if tok in ("%tid.y", "%tid.z", "%ctaid.y", "%ctaid.z", "global_smem"):
            return np.zeros(self.L, np.int64)
        if tok.startswith("%") or re.match(r"^[A-Za-z_$]", tok):
            return None
        n = _num(tok)
        return None if n is None else np.full(self.L, n, dtype=np.int64)

    def issue(self, kind: str, loc, line: str, n: int) -> None:
        self.rep.issues[(kind, loc)] += int(n)
        self.rep.examples.setdefault((kind, loc), line)

    def addr(self, op: str):
        m = re.match(r"^\[\s*(%?[\w.]+)\s*(?:\+\s*(-?\w+))?\s*\]$", op.strip())
        if not m:
            raise ValueError(f"address operand {op!r}")
        base = self.val(m.group(1))
        return None if base is None else base + (_num(m.group(2)) if m.group(2) else 0)

    # checks ---------------------------------------------------------------------------------
    def global_access(self, a, size: int, active, loc, line, srcsize=None) -> None:
        if a is None:
            self.issue("global address UNKNOWN", loc, line, active.sum())
            return
        inside = np.zeros(self.L, bool)
        for base, nbytes in self.tensors.values():
            inside |= (a >= base) & (a + size <= base + nbytes)
        bad = active & ~inside
        if srcsize is not None:
            zf = bad & (srcsize == 0)
            if zf.any():
                self.rep.zero_fill_outside[loc] += int(zf.sum())
            bad &= srcsize != 0
        self.rep.counts["global"] += int(active.sum())
        if bad.any():
            i = int(np.argmax(bad))
            self.issue(f"global out of bounds (program {self.ctaid[i]}, thread {self.tid[i]})", loc, line, bad.sum())
        mis = active & (a % size != 0) if size in (2, 4, 8, 16) else None
        if mis is not None and mis.any():
            self.issue(f"global misaligned {size}-byte access", loc, line, mis.sum())

    def shared_access(self, a, size: int, active, loc, line) -> None:
        if a is None:
            self.issue("shared address UNKNOWN", loc, line, active.sum())
            return
        a = a & M32
        self.rep.counts["shared"] += int(active.sum())
        bad = active & ((a < 0) | (a + size > self.smem))
        if bad.any():
            i = int(np.argmax(bad))
            self.issue(f"shared out of bounds ({int(a[i])} + {size} > {self.smem})", loc, line, bad.sum())
        mis = active & (a % min(size, 16) != 0)
        if size > 1 and mis.any():
            self.issue(f"shared misaligned {size}-byte access", loc, line, mis.sum())

    def wgmma_b(self, desc, n: int, k: int, active, loc, line) -> None:
        if desc is None:
            self.issue("wgmma B descriptor UNKNOWN", loc, line, active.sum())
            return
        d = desc.astype(np.uint64)
        field_ = lambda lo: ((d >> np.uint64(lo)) & np.uint64(0x3FFF)).astype(np.int64) << 4  # noqa: E731
        start, lbo, sbo = field_(0), field_(16), field_(32)
        swizzle = (d >> np.uint64(62)).astype(np.int64)  # 1: 128 B, 2: 64 B, 3: 32 B, 0: none
        row = np.select([swizzle == 1, swizzle == 2, swizzle == 3], [128, 64, 32], 16)
        atoms = np.maximum(1, (2 * n) // row)  # bf16 / f16 rows of the N-major B tile
        end = start + (atoms - 1) * lbo + (k // 8 - 1) * sbo + 8 * row
        self.rep.counts["wgmma"] += 1
        bad = active & (end > self.smem)
        if bad.any():
            i = int(np.argmax(bad))
            self.issue(f"wgmma B tile past shared memory (ends {int(end[i])} > {self.smem})", loc, line, bad.sum())

    # execution ------------------------------------------------------------------------------
    def run(self, max_steps: int = 5_000_000) -> Report:
        pc = steps = 0
        while pc < len(self.code):
            steps += 1
            if steps > max_steps:
                raise RuntimeError("ptx_bounds: step limit (an unexpected loop?)")
            line, loc = self.code[pc]
            pc += 1
            pred = None
            m = re.match(r"^@(!?)(%\w+)\s+(.*)$", line)
            body = line
            if m:
                p = self.val(m.group(2))
                if p is None:
                    pred = np.ones(self.L, bool)
                    self.rep.counts["unknown_predicate"] += 1
                else:
                    pred = (p == 0) if m.group(1) else (p != 0)
                body = m.group(3)
            op, _, rest = body.partition(" ")
            args = _split(rest)
            active = np.ones(self.L, bool) if pred is None else pred
            if op.startswith("bra"):
                if active.all():
                    pc = self.labels[args[0]]
                elif active.any():
                    raise RuntimeError(f"ptx_bounds: divergent branch {line}")
                continue
            if op == "ret":
                break
            self.step(op, args, active, loc, line)
        return self.rep

    def set(self, name: str, v) -> None:
        self.regs[name.strip()] = v

    def step(self, op: str, args: list[str], active, loc, line) -> None:  # noqa: C901 - one opcode table
        o = op.split(".")
        base, typ = o[0], o[-1]
        if base == "ld" and o[1] == "param":
            idx = int(re.search(r"param_(\d+)", args[1]).group(1))
            self.set(args[0], np.full(self.L, self.params.get(idx, 0), dtype=np.int64))
            return
        if base in ("ld", "st") and o[1] in ("global", "shared"):
            vec = next((int(t[1:]) for t in o if re.fullmatch(r"v\d", t)), 1)
            size = vec * int(re.sub(r"\D", "", typ)) // 8
            a = self.addr(args[1] if base == "ld" else args[0])
            if base == "ld":
                for r in re.findall(r"%\w+", args[0]):
                    self.set(r, None)
            (self.global_access if o[1] == "global" else self.shared_access)(a, size, active, loc, line)
            return
        if base == "cp" and o[1] == "async":
            if o[2] in ("commit_group", "wait_group", "wait_all"):
                return
            cp = _num(args[2])
            src = self.val(args[3]) if len(args) > 3 else np.full(self.L, cp)
            self.shared_access(self.addr(args[0]), cp, active, loc, line)
            self.global_access(self.addr(args[1]), cp, active, loc, line, srcsize=src)
            return
        if base in ("stmatrix", "ldmatrix"):
            self.shared_access(self.addr(args[0] if base == "stmatrix" else args[1]), 16, active, loc, line)
            if base == "ldmatrix":
                for r in re.findall(r"%\w+", args[0]):
                    self.set(r, None)
            return
        if base == "wgmma":
            if o[1] == "mma_async":
                shape = next(t for t in o if t.startswith("m64"))
                n, k = int(re.search(r"n(\d+)", shape).group(1)), int(re.search(r"k(\d+)", shape).group(1))
                self.wgmma_b(self.val(args[2]), n, k, active, loc, line)
                if not args[1].startswith("{"):
                    self.issue("wgmma A from shared memory (not checked)", loc, line, 1)
                for r in re.findall(r"%\w+", args[0]):
                    self.set(r, None)
            return
        if base in ("bar", "fence", "barrier", "membar"):
            return
        if base == "shfl":
            for r in re.findall(r"%\w+", args[0]):
                self.set(r, None)
            return
        floaty = {"f32", "f16", "bf16", "bf16x2", "f16x2", "f64", "rn", "rz", "approx", "ftz", "full"}
        if base not in ("selp", "mov", "setp", "cvt") and floaty & set(o[1:]):
            self.set(args[0], None)
            return
        if base == "cvt":
            v = self.val(args[1])
            if floaty & set(o[1:]) or v is None:
                self.set(args[0], None)
                return
            v = _s32(v) if o[-1] == "s32" else (v & M32 if o[-1] in ("u32", "b32") else v)
            self.set(args[0], v & M32 if o[-2] in ("u32", "s32", "b32") else v)
            return
        if base == "setp":
            a, b = self.val(args[1]), self.val(args[2])
            t = o[2]
            if a is None or b is None or t.startswith("f"):
                self.set(args[0], None)
                return
            a, b = ((_s32(a), _s32(b)) if t == "s32" else (a & M32, b & M32) if t in ("u32", "b32")
                    else (a.astype(np.uint64), b.astype(np.uint64)) if t == "u64" else (a, b))
            r = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[o[1]]
            self.set(args[0], r.astype(np.int64))
            return
        if base == "selp":
            a, b, p = self.val(args[1]), self.val(args[2]), self.val(args[3])
            if typ.startswith("f") or a is None or b is None:
                self.set(args[0], None)
            elif p is None:
                self.set(args[0], a if np.array_equal(a, b) else None)
            else:
                self.set(args[0], np.where(p != 0, a, b))
            return
        if base == "mov":
            self.set(args[0], self.val(args[1]))
            return
        vals = [self.val(a) for a in args[1:]]
        if any(v is None for v in vals):
            self.set(args[0], None)
            return
        a = vals[0]
        if base in ("add", "sub"):
            r = a + vals[1] if base == "add" else a - vals[1]
        elif base in ("mul", "mad"):
            if o[1] == "wide":
                x, y = (_s32(a), _s32(vals[1])) if typ == "s32" else (a & M32, vals[1] & M32)
                r, typ = x * y, "b64"
            else:
                r = a * vals[1]
            r = r + vals[2] if base == "mad" else r
        elif base == "shl":
            r = a << (vals[1] & 63)
        elif base == "shr":
            r = (_s32(a) >> vals[1] if typ == "s32" else (a & M32) >> vals[1] if typ in ("u32", "b32")
                 else (a.astype(np.uint64) >> vals[1].astype(np.uint64)).astype(np.int64))
        elif base in ("and", "or", "xor"):
            r = a & vals[1] if base == "and" else a | vals[1] if base == "or" else a ^ vals[1]
        elif base in ("not", "neg"):
            r = ~a if base == "not" else -a
        elif base in ("min", "max"):
            x, y = (_s32(a), _s32(vals[1])) if typ == "s32" else (a & M32, vals[1] & M32) if typ == "u32" else (a, vals[1])
            r = np.minimum(x, y) if base == "min" else np.maximum(x, y)
        elif base == "bfe":
            pos, ln = vals[1] & 255, vals[2] & 255
            r = ((a & M32) >> pos) & ((1 << ln) - 1)
            if typ == "s32":
                r = np.where((r >> (ln - 1)) & 1 == 1, r - (1 << ln), r)
        else:
            raise NotImplementedError(f"ptx_bounds: opcode {op} ({line})")
        if typ == "pred":
            r = (r != 0).astype(np.int64)
        elif typ in ("b32", "u32", "s32"):
            r = r & M32
        self.set(args[0], r)


def check_ptx(ptx: str, n_programs: int, n_threads: int, params: dict[int, int],
              tensors: dict[str, tuple[int, int]], shared_bytes: int) -> Report:
    """Emulate ``ptx`` (one kernel) for ``n_programs`` × ``n_threads`` lanes. params: parameter
    index → value (a tensor's base address for pointers, the integer for ints); tensors: name →
    (base address, bytes); shared_bytes: the kernel's dynamic shared memory (metadata.shared)."""
    return _Emu(ptx, n_programs, n_threads, params, tensors, shared_bytes).run()


__all__ = ["Report", "check_ptx"]
