"""bench/rescore_gamma_grid.py: a fold trades the chosen γ group's recorded validation score only when
that group's held-back mean beats z · SE (the grid's bar raised for the choice), and the family gates
follow from the re-scored draws."""

from __future__ import annotations

import math

import pytest

from bench.rescore_gamma_grid import fold_score, rescore
from foxhunt.train.gamma_grid import adjusted_z


def group(gamma: float, inner: float, val: float, trades: float = 4.0) -> dict:
    return {"gamma": gamma, "mean_inner_sharpe": inner, "members": [0], "validation": {"sharpe": val, "trade_count": trades}}


def test_a_fold_trades_the_chosen_group_only_above_its_bar():
    groups = [group(0.5, 1.0, 0.4), group(0.9, 3.2, 2.0)]
    assert fold_score(groups, 1.0, "0.5", 0.0) == (0.4, 4.0)
    assert fold_score(groups, 1.0, "0.5", 2.0) == (0.0, 0.0)
    assert fold_score(groups, 1.0, "0.9", 3.0) == (2.0, 4.0)
    assert adjusted_z(3.0, 2) > 3.2 and fold_score(groups, 1.0, "grid", 3.0) == (0.0, 0.0)  # best of 2: bar raised
    assert fold_score(groups, 1.0, "grid", 2.0) == (2.0, 4.0)


def test_rescored_draws_give_the_family_gates():
    se = 0.5
    rows = [{"index": 0, "kind": "edge", "quant_sharpe": 2.0, "sharpe_standard_error": se, "val_bars": 1000,
             "gamma_groups": [[group(0.5, 5.0, 1.0)], [group(0.5, 5.0, 2.0)]], "abstain_se": [se, se]},
            {"index": 1, "kind": "no_edge", "quant_sharpe": 0.3, "sharpe_standard_error": se, "val_bars": 1000,
             "gamma_groups": [[group(0.5, 0.1, -9.0, 50)], [group(0.5, 0.1, -9.0, 50)]], "abstain_se": [se, se]}]
    flat = rescore(rows, "0.5", 3.0)
    assert flat["capture_vs_quant"] == pytest.approx(0.75) and flat["sharpe"][1] == 0.0
    assert not flat["below_flat"] and not flat["no_edge_not_flat"]
    loose = rescore(rows, "0.5", 0.0)  # no abstention: the no-edge draw trades its noise
    assert loose["below_flat"] == [1] and loose["no_edge_not_flat"] == [1] and math.isclose(loose["sharpe"][1], -9.0)
