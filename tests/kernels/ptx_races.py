"""Happens-before check of a compiled kernel's PTX on a CPU: the races a lock-step run hides.

``ptx_exec`` runs every thread in lock step and completes async copies and wgmmas at once, so it
computes what the program means, never what a race would make of it. ``RaceExec`` runs the same
way but tracks, per shared-memory byte, who wrote and read it in which barrier epoch (a ``bar.sync``
starts a new one), which async operations are still in flight, and which wgmma operand registers
were touched after ``wgmma.fence``. It reports (kind → count, first PTX line):

* ``RAW`` / ``WAR`` / ``WAW``: two threads touch a byte in one epoch, one of them writing (a WAW
  of the value already there, as replicated layouts store, is counted apart as benign);
* ``read before cp.async retired``: a read of bytes whose ``cp.async`` no ``cp.async.wait_group``
  has retired yet (``cp.async`` data counts as written by the issuing thread when it retires);
* ``write under an in-flight wgmma``: bytes a wgmma issued and not yet waited reads;
* ``wgmma reads an unfenced generic write``: a ``st.shared`` / ``stmatrix`` byte that no
  ``fence.proxy.async`` followed before a wgmma read it (``cp.async`` counts as generic too only
  with ``cp_async_generic=True``: the PTX ISA leaves its proxy implicit);
* ``register of an in-flight wgmma written``: an A / D register rewritten before ``wgmma.wait_group``;
* ``wgmma operand written after wgmma.fence``: an A / D register written (not by a wgmma) between
  ``wgmma.fence`` and the wgmma that reads it (the PTX ISA asks for a fence in between).
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from tests.kernels.ptx_exec import PtxExec


class RaceExec(PtxExec):
    def __init__(self, *a, cp_async_generic: bool = False, **kw):
        super().__init__(*a, **kw)
        shape = self.smem.shape
        self.w_lane = np.full(shape, -1, np.int64)
        self.w_epoch = np.full(shape, -1, np.int64)
        self.r_lane = np.full(shape, -1, np.int64)
        self.r_epoch = np.full(shape, -1, np.int64)
        self.pending_cp = np.zeros(shape, bool)
        self.pending_wg = np.zeros(shape, np.int64)
        self.unfenced = np.zeros(shape, bool)
        self.epoch = 0
        self.cp_open: list = []
        self.cp_groups: list = []
        self.wg_open: list = []
        self.wg_groups: list = []
        self.wg_regs: set[str] = set()
        self.dirty: set[str] = set()
        self.cp_async_generic = cp_async_generic
        self.found: dict[str, int] = defaultdict(int)
        self.first: dict[str, str] = {}
        self.line = ""

    def flag(self, kind: str, n: int = 1) -> None:
        self.found[kind] += int(n)
        self.first.setdefault(kind, self.line)

    def step(self, op, args, active, line) -> None:
        self.line = line
        super().step(op, args, active, line)

    # shared memory ------------------------------------------------------------------------------
    def on_shared(self, write, progs, idx, lanes, async_copy=False, same=None) -> None:
        cur = self.epoch
        if write:
            other_read = (self.r_epoch[progs, idx] == cur) & (self.r_lane[progs, idx] != lanes) & (self.r_lane[progs, idx] != -1)
            other_write = (self.w_epoch[progs, idx] == cur) & (self.w_lane[progs, idx] != lanes) & (self.w_lane[progs, idx] >= 0)
            if other_read.any():
                self.flag("WAR", other_read.sum())
            if other_write.any():  # two threads storing one value (a replicated layout) is benign
                benign = other_write & (same if same is not None else False)
                if (other_write & ~benign).any():
                    self.flag("WAW", (other_write & ~benign).sum())
                if benign.any():
                    self.flag("WAW of the same value (benign)", benign.sum())
            if (self.pending_wg[progs, idx] > 0).any():
                self.flag("write under an in-flight wgmma", (self.pending_wg[progs, idx] > 0).sum())
            self.w_lane[progs, idx] = lanes
            self.w_epoch[progs, idx] = cur
            self.pending_cp[progs, idx] = async_copy
            self.unfenced[progs, idx] = self.cp_async_generic or not async_copy
            if async_copy:
                self.cp_open.append((progs.copy(), idx.copy()))
        else:
            self._read(progs, idx, lanes)

    def _read(self, progs, idx, lanes) -> None:
        cur = self.epoch
        if self.pending_cp[progs, idx].any():
            self.flag("read before cp.async retired", self.pending_cp[progs, idx].sum())
        raw = (self.w_epoch[progs, idx] == cur) & (self.w_lane[progs, idx] != lanes) & (self.w_lane[progs, idx] >= 0)
        if raw.any():
            self.flag("RAW", raw.sum())
        same = self.r_epoch[progs, idx] == cur
        prev = self.r_lane[progs, idx]
        self.r_lane[progs, idx] = np.where(same & (prev != lanes) & (prev != -1), -2, lanes)
        self.r_epoch[progs, idx] = cur

    # sync -----------------------------------------------------------------------------------
    def on_sync(self, op, args, line) -> None:
        self.line = line
        if op.startswith("bar.sync") or op.startswith("barrier.sync"):
            self.epoch += 1
        elif op.startswith("fence.proxy.async"):
            self.unfenced[:] = False
        elif op == "cp.async.commit_group":
            self.cp_groups.append(self.cp_open)
            self.cp_open = []
        elif op.startswith("cp.async.wait"):
            keep = 0 if op == "cp.async.wait_all" else int(args[0])
            retire, self.cp_groups = self.cp_groups[:len(self.cp_groups) - keep], self.cp_groups[len(self.cp_groups) - keep:]
            for group in retire:
                for progs, idx in group:
                    self.pending_cp[progs, idx] = False
                    self.w_epoch[progs, idx] = self.epoch  # visible to others after the next barrier
        elif op.startswith("wgmma.fence"):
            self.dirty.clear()
        elif op.startswith("wgmma.commit_group"):
            self.wg_groups.append(self.wg_open)
            self.wg_open = []
        elif op.startswith("wgmma.wait_group"):
            keep = int(args[0])
            retire, self.wg_groups = self.wg_groups[:len(self.wg_groups) - keep], self.wg_groups[len(self.wg_groups) - keep:]
            for group in retire:
                for progs, idx, regs in group:
                    self.pending_wg[progs, idx] -= 1
                    self.r_epoch[progs, idx] = self.epoch
                    self.r_lane[progs, idx] = -2
            self.wg_regs = {r for g in self.wg_groups + [self.wg_open] for _, _, regs in g for r in regs}

    # wgmma and registers --------------------------------------------------------------------
    def on_wgmma(self, aregs, dregs, b_bytes, line) -> None:
        self.line = line
        touched = [r for r in aregs + dregs if r in self.dirty]
        if touched:
            self.flag("wgmma operand written after wgmma.fence", len(touched))
        for prog, sel, where in b_bytes:
            progs = np.full(where.size, prog)
            if self.unfenced[progs, where].any():
                self.flag("wgmma reads an unfenced generic write", self.unfenced[progs, where].sum())
            if self.pending_cp[progs, where].any():
                self.flag("read before cp.async retired", self.pending_cp[progs, where].sum())
            raw = (self.w_epoch[progs, where] == self.epoch) & ~np.isin(self.w_lane[progs, where], sel) & (self.w_lane[progs, where] >= 0)
            if raw.any():
                self.flag("RAW", raw.sum())
            self.pending_wg[progs, where] += 1
            self.wg_open.append((progs, where, aregs + dregs))
        self.wg_regs |= set(aregs + dregs)

    def on_reg_write(self, name, by_wgmma) -> None:
        if by_wgmma:
            return
        if name in self.wg_regs:
            self.flag("register of an in-flight wgmma written")
        self.dirty.add(name)


def check_races(ptx: str, programs: list[int], n_threads: int, params: dict[int, int], tensors: dict[str, np.ndarray],
                smem: int, cp_async_generic: bool = False) -> tuple[dict[str, int], dict[str, str], dict[str, np.ndarray]]:
    """(kind → count, kind → first PTX line, memory after the run) of one lock-step run."""
    ex = RaceExec(ptx, programs, n_threads, params, tensors, smem, cp_async_generic=cp_async_generic)
    mem = ex.run()
    return dict(ex.found), {k: re.sub(r"\s+", " ", v)[:120] for k, v in ex.first.items()}, mem


__all__ = ["RaceExec", "check_races"]
