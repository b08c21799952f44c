"""Shared test fixtures and the `gpu` marker policy (GPU tests are skipped without CUDA)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

# Keep CI's 2 cores from being oversubscribed by intra-op threads of several libraries. Under
# pytest-xdist (scripts/test.sh runs 2 workers) each worker gets its share of the cores: two workers
# of two threads each on two cores made busy-waiting OpenMP threads slow small-op tests 10-16x.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Once the Triton interpreter is loaded: skip its redundant nested language patching
    (tests/triton_interp.py; values unchanged, ~40 % of an interpreted kernel's time)."""
    if "triton.runtime.interpreter" in sys.modules:
        from tests import triton_interp

        triton_interp.install()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(params=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every device test runs on the CPU, and on CUDA too when present."""
    return torch.device(request.param)
