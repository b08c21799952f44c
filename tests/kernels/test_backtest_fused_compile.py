"""The fused backtest kernel compiles for Hopper (sm_90) on any machine (Triton ships ptxas).

The interpreter tests cannot see compile errors; this cross-compiles the default configurations in
a subprocess with the interpreter off (it must be off when the kernel module is imported).
"""

from __future__ import annotations

import pytest

from tests.kernels.cross_compile import ROOT, run_interpreter_off

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.kernels.compile_backtest_sm90 import compile_sm90, resource_usage
for cfg in ({cfgs}):
    kernel, secs = compile_sm90(**cfg)
    print(cfg, "shared", kernel.metadata.shared, resource_usage(kernel.asm["cubin"]), flush=True)
"""


@pytest.mark.slow
def test_backtest_kernel_compiles_for_sm90_in_tf32_bf16_row_adv_l1keep_given_exposure_kelly_barrier_ensemble_member_universe_variants():
    cfgs = ("dict(prec='tf32'), dict(prec='bf16'), "
            "dict(prec='tf32', exposure=True, kelly=True, debug=True, trades=True, n_actions=5, dims=(64, 256, 256, 256, 16)), "
            "dict(prec='tf32', block_w=1, pre=True), dict(prec='bf16', block_w=1), dict(prec='tf32', given=True), "
            "dict(prec='tf32', block_w=1, pre=True, adv=False), dict(prec='tf32', block_w=1, pre=True, l1keep=True), "
            "dict(prec='tf32', adv=False), dict(prec='tf32', block_w=1, trades=True, barriers=True), "
            "dict(prec='tf32', block_w=1, ensemble=True, l1keep=True), dict(prec='tf32', trades=True, barriers=True), "
            "dict(prec='tf32', block_w=1, members=True, l1keep=True), dict(prec='tf32', trades=True, wmed=True)")
    lines = run_interpreter_off(SCRIPT.format(root=str(ROOT), cfgs=cfgs))
    assert len(lines) == 14, lines
    for line in lines:
        assert "shared" in line and int(line.split("shared")[1].split()[0]) <= 227 * 1024, line
