"""Static check of a Hopper SASS listing (``cuobjdump -sass``): while an HGMMA (wgmma) is in flight —
issued and not yet waited for by ``WARPGROUP.DEPBAR`` — no other instruction may write its A
fragment registers or read / write its accumulator registers.

Why: wgmma reads register A operands and writes accumulators asynchronously; an assembler that
reuses those registers early corrupts results silently (Triton PR 11781: ptxas 12.9 did so for
register-input wgmma) or, if the reused register held an address, faults. The acting kernel keeps
h1 in registers as the A operand of every layer-2 wgmma. The loop back edge is followed once.
"""

from __future__ import annotations

import re

_NO_DEST = {"ST", "STS", "STG", "LDGSTS", "BAR", "BRA", "EXIT", "WARPGROUP", "HGMMA", "DEPBAR", "LDGDEPBAR", "RED",
            "ATOM", "STSM", "NOP", "MEMBAR", "FENCE", "BSSY", "BSYNC", "CALL", "RET", "FCHK", "WARPSYNC"}


def _regs(tok: str, width: int = 1) -> set[int]:
    m = re.match(r"^-?\|?R(\d+)", tok.strip())
    if not m:
        return set()
    width = max(width, 2) if ".64" in tok else width
    return set(range(int(m.group(1)), int(m.group(1)) + width))


def _parse(sass: str):
    code, labels = [], {}
    for raw in sass.splitlines():
        line = re.sub(r"/\*[0-9a-f]{4,}\*/|/\* 0x[0-9a-f]+ \*/", "", raw).strip()
        if re.match(r"^\.L_x_\d+:", line):
            labels[line[:-1]] = len(code)
            continue
        if not line or line.startswith((".", "//", "Function", "code for", "$", "-", "Fatbin", "=", "arch", "host",
                                        "compile", "identifier", "ptxas", "{", "}")):
            continue
        line = line.rstrip(";").strip()
        line = re.sub(r"^@!?U?P\w+\s+", "", line)
        op, _, rest = line.partition(" ")
        code.append((op, [a.strip() for a in re.split(r",(?![^\[]*\])", rest)] if rest else [], line))
    return code, labels


def _dests(op: str, args: list[str]) -> set[int]:
    base = op.split(".")[0]
    if base in _NO_DEST or base.startswith("U") or not args:
        return set()
    if base.endswith("SETP") or base in ("PLOP3", "P2R"):
        return _regs(args[0]) if base == "P2R" else set()
    if base == "SHFL":  # SHFL.BFLY Pd, Rd, ...
        return _regs(args[1])
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    return _regs(args[0], width)


def _sources(op: str, args: list[str]) -> set[int]:
    base = op.split(".")[0]
    toks = args if base in ("STS", "STG", "ST", "LDGSTS", "STSM", "RED", "ATOM") else args[1:]
    out: set[int] = set()
    for t in toks:
        for r, w in re.findall(r"(?<![A-Z_])R(\d+)(\.64)?", t):
            out |= set(range(int(r), int(r) + (2 if w else 1)))
    return out


def wgmma_register_hazards(sass: str) -> tuple[int, list[str]]:
    """(number of HGMMA instructions, hazards as text lines) of a SASS listing."""
    code, labels = _parse(sass)
    found: list[str] = []

    def walk(start: int, inflight: list, stop: int | None, edges: frozenset) -> None:
        i = start
        while i < len(code):
            op, args, line = code[i]
            base = op.split(".")[0]
            if base == "HGMMA":
                n = int(re.search(r"x(\d+)x", op).group(1))
                inflight.append((_regs(args[0], n // 2), _regs(args[1], 4) if args[1].startswith("R") else set(), line))
            elif base == "WARPGROUP" and "DEPBAR" in op:
                inflight.clear()
            else:
                dst, src = _dests(op, args), _sources(op, args)
                for acc, a, hl in inflight:
                    if dst & (acc | a):
                        found.append(f"writes R{sorted(dst & (acc | a))} while in flight: {hl[:60]} | {line[:70]}")
                    if src & acc:
                        found.append(f"reads accumulator R{sorted(src & acc)} while in flight: {hl[:60]} | {line[:70]}")
            if base == "BRA":
                tgt = re.search(r"(\.L_x_\d+)", line)
                t = labels.get(tgt.group(1)) if tgt else None
                if t is not None and t < i and (i, t) not in edges and inflight:
                    walk(t, list(inflight), i, edges | {(i, t)})
            if (base == "EXIT" and not line.startswith("@")) or (stop is not None and i == stop):
                return
            i += 1

    walk(0, [], None, frozenset())
    return sum(1 for op, _, _ in code if op.startswith("HGMMA")), sorted(set(found))


__all__ = ["wgmma_register_hazards"]
