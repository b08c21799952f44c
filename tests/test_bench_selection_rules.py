"""bench/selection_rules.py: each rule picks the epoch its definition says, per fold."""

from __future__ import annotations

from bench.selection_rules import RULES, selected


def _fold(inner: list[float]) -> list[dict]:
    return [{"inner_sharpe": s, "val_sharpe": 10.0 * (e + 1)} for e, s in enumerate(inner)]  # val tells the epoch


def test_rules_pick_argmax_moving_average_last_and_after_the_first_quarter() -> None:
    inner = [0.0, 3.0, 0.0, 0.0, 1.2, 1.3, 1.1, 0.0]  # a lone spike at epoch 2, a plateau at 5-7
    fold = _fold(inner)
    assert selected([fold], RULES["argmax"]) == 20.0
    assert selected([fold], RULES["ma3"]) == 60.0  # (1.2 + 1.3 + 1.1) / 3 = 1.2 > (0 + 3 + 0) / 3
    assert selected([fold], RULES["ma5"]) == 40.0  # (3 + 0 + 0 + 1.2 + 1.3) / 5 = 1.1 is the widest window's best
    assert selected([fold], RULES["last"]) == 80.0
    assert selected([fold], RULES["skipq"]) == 60.0  # argmax from index 2 on: the spike at index 1 is excluded
    assert selected([fold, _fold([1.0, 0.0])], RULES["last"]) == (80.0 + 20.0) / 2  # the fold mean


def test_non_finite_inner_sharpes_are_never_picked() -> None:
    fold = _fold([float("nan"), 0.5, float("inf")])  # a broken window's NaN / inf Sharpe
    assert selected([fold], RULES["argmax"]) == 20.0
