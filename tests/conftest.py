"""Shared test fixtures and the `gpu` marker policy (GPU tests are skipped without CUDA)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

# Keep CI's 2 cores from being oversubscribed by intra-op threads of several libraries.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture(params=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every device test runs on the CPU, and on CUDA too when present."""
    return torch.device(request.param)
