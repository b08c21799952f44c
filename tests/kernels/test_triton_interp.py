"""tests/triton_interp.py (the test process's Triton-interpreter speed-up) changes no value: a fused
backtest launch on every MLP path gives bitwise the same outputs with it and with Triton as
shipped, the nested patches it skips are skipped, and the language is left as Triton leaves it."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

pytest.importorskip("triton")

from tests.kernels.test_backtest_fused import (  # noqa: F401  (sets TRITON_INTERPRET first)
    DEV, PARAMS, PATHS, STARTS, small_market, varied_net,
)
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.fused import check_windows, launch  # noqa: E402
from foxhunt.kernels.backtest.kernel import is_interpreted  # noqa: E402
from tests import triton_interp  # noqa: E402

pytestmark = pytest.mark.skipif(not is_interpreted(), reason="the speed-up wraps the Triton interpreter")


def _owners() -> dict[str, object]:
    import triton.language as tl

    return {"tl": tl, "tl.core": tl.core, "tl.tensor": tl.tensor, "tl.math": tl.math,
            "tensor_descriptor_base": tl.core.tensor_descriptor_base}


def _language() -> dict[tuple[str, str], object]:
    """Every attribute of the language modules and classes the interpreter patches (not the
    class namespaces themselves, which follow their attributes)."""
    return {(k, name): value for k, owner in _owners().items() for name, value in inspect.getmembers(owner)
            if name != "__dict__"}


def _changed(since: dict) -> set[tuple[str, str]]:
    now = _language()
    return {k for k in since.keys() | now.keys() if k not in since or k not in now or since[k] != now[k]}


def _reset(to: dict) -> None:
    """Put the language back to a snapshot (what a launch left changed)."""
    owners = _owners()
    for key in _changed(to):
        owner, name = owners[key[0]], key[1]
        if key in to:
            setattr(owner, name, to[key])
        else:
            delattr(owner, name)


def _outputs() -> dict[str, list[torch.Tensor]]:
    market = small_market(0)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    net = varied_net(market.obs_dim, PARAMS.n_actions)
    st, ln = check_windows(market, STARTS, [9, 5, 7])
    out = {}
    for name, path in PATHS.items():
        r = launch(bt, st, ln, net, precision="ieee", store_debug=True, store_trades=True, **path)
        out[name] = [r.actions, r.returns, r.positions, r.fill_status, r.final_equity, r.trade_return, r.trade_closed]
    return out


def test_the_interpreter_speed_up_changes_no_output_and_leaves_the_language_as_triton_does():
    """Triton as shipped leaves some patches in place after a launch (a device function whose module
    sees ``tl.core`` patches it in a scope never restored); with the speed-up the same attributes
    stay changed, no more."""
    assert triton_interp.supported(), "the interpreter changed shape: tests/triton_interp.py needs a look"
    was = triton_interp.installed()
    start = _language()
    try:
        triton_interp.uninstall()
        shipped = _outputs()
        left_by_triton = _changed(start)
        _reset(start)
        assert not _changed(start)
        assert triton_interp.install()
        n = triton_interp.skipped[0]
        fast = _outputs()
        assert triton_interp.skipped[0] > n  # nested patches were skipped
        assert _changed(start) == left_by_triton
    finally:
        triton_interp.uninstall()
        if was:
            triton_interp.install()
    for name in PATHS:
        for a, b in zip(shipped[name], fast[name]):
            assert torch.equal(a, b), name
