"""Fixtures for env tests: a random-walk market with a fold set (FeatureSet built directly)."""

from __future__ import annotations

import pytest
import torch

from foxhunt.market import MarketData
from tests.env.env_helpers import random_market


@pytest.fixture
def market(device: torch.device) -> MarketData:
    """1,200 random-walk bars with volume, 4 random features, fold train [10, 940), val [950, 1200)."""
    return random_market(1_200, seed=0, device=device)


@pytest.fixture
def cpu_market() -> MarketData:
    return random_market(1_200, seed=0, device="cpu")
