"""accel.triton answers how Triton runs here (and why not); accel.graphs runs eagerly off CUDA."""

from __future__ import annotations

import pytest
import torch

from foxhunt.accel import triton as accel_triton
from foxhunt.accel.graphs import GraphedStep, capture


def test_status_is_interpreted_or_names_the_missing_interpreter(monkeypatch):
    st = accel_triton.status("cpu")
    if accel_triton.is_interpreted():
        assert st.mode == "interpreted" and st.usable and accel_triton.unavailable("cpu") is None
    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: False)
    st = accel_triton.status("cpu")
    assert st.mode == "unavailable" and not st.usable and "TRITON_INTERPRET=1" in st.reason
    assert accel_triton.status("cuda").mode == "compiled"  # Triton imports: CUDA compiles the kernels


def test_status_names_a_triton_that_does_not_import(monkeypatch):
    monkeypatch.setattr(accel_triton, "_IMPORT_ERROR", ["triton is not available (No module named 'triton')"])
    for dev in ("cpu", "cuda"):
        st = accel_triton.status(dev)
        assert st.mode == "unavailable" and st.reason.startswith("triton is not available")


def test_graphed_step_runs_eagerly_on_the_cpu_and_capture_refuses_it():
    counter = torch.zeros(())
    step = GraphedStep(lambda: counter.add_(1), torch.device("cpu"), enabled=True)
    for _ in range(3):
        step()
    assert int(counter) == 3 and step.graph is None and step.calls == 3
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        capture(lambda: None, "cpu")


@pytest.mark.gpu
def test_gpu_graphed_step_does_one_step_of_work_per_call_and_restores_host_state():
    counter = torch.zeros((), device="cuda")
    host = {"pos": 0}

    def fn() -> None:
        counter.add_(1)
        host["pos"] += 1

    step = GraphedStep(fn, torch.device("cuda"), host_state=(lambda: host["pos"], lambda p: host.update(pos=p)),
                       after_replay=lambda: host.update(pos=host["pos"] + 1))
    for _ in range(4):
        step()
    torch.cuda.synchronize()
    assert step.graph is not None and int(counter) == 4 and host["pos"] == 4


def test_sections_come_from_an_explicit_registry_and_a_missing_module_is_not_swallowed(monkeypatch):
    from foxhunt import config

    assert {"foxhunt.accel.config", "foxhunt.backtest.config", "foxhunt.tune.config"} <= set(config.SECTION_MODULES)
    assert {"accel", "dqn", "env", "train"} <= set(config.build_config({}).sections())
    monkeypatch.setattr(config, "SECTION_MODULES", (*config.SECTION_MODULES, "foxhunt.no_such_layer.config"))
    with pytest.raises(ModuleNotFoundError, match="foxhunt.no_such_layer"):
        config.build_config({})


@pytest.mark.gpu
def test_gpu_capture_survives_an_older_graph_becoming_garbage_during_capture():
    """A finished trainer's graph left in a reference cycle (a tune trial's) must not be freed by an automatic
    collection in the middle of another capture: its reset would invalidate that capture."""
    import gc

    dev = torch.device("cuda")
    x = torch.zeros(8, device=dev)

    def step():
        x.add_(1.0)

    class Holder:  # a cycle, so only the collector frees it
        def __init__(self):
            self.graph = capture(step, dev, warmup=1)
            self.me = self

    holders = [Holder()]
    calls = []

    def allocating_step():
        calls.append(1)
        if len(calls) == 2:  # the captured call (the first is the warm-up): the old graph becomes garbage now
            holders.clear()
            for _ in range(300):  # container allocations that trigger collections of every generation
                [[] for _ in range(5)]
        x.add_(1.0)

    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        graph = capture(allocating_step, dev, warmup=1)
    finally:
        gc.set_threshold(*thresholds)
    before = x.clone()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(x, before + 1.0)
    assert gc.isenabled()
