"""bench/rescore_abstention.py: a fold trades at z when its members' mean held-back Sharpe beats z · SE, scoring its
traded or would-have-been Sharpe; rows the rule does not reproduce at their own bar are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.rescore_abstention import fold_sharpes, main, reproduces

ROW = {"scenario": "d", "member_inner_sharpes": [[3.0, 5.0], [1.0], [0.5, 0.7]], "abstain_se": [1.0, 1.0, 0.2],
       "abstain_bar": [3.0, 3.0, 0.6], "flat": [False, True, True], "agent_fold_sharpes": [2.0, 0.0, 0.0],
       "flat_alternative_sharpe": [None, -1.5, 4.0], "quant_fold_sharpes": [1.0, 1.0, 1.0]}


def test_a_fold_trades_at_z_when_its_members_mean_beats_z_standard_errors() -> None:
    assert reproduces(ROW)  # at its own bar: fold 0 (mean 4 > 3) traded, folds 1 (1 <= 3) and 2 (0.6 <= 0.6) flat
    assert not reproduces({**ROW, "abstain_bar": [3.0, 0.5, 0.6]})  # fold 1 would trade at that bar, yet is flat
    assert fold_sharpes(ROW, 3.0) == [2.0, 0.0, 0.0]
    assert fold_sharpes(ROW, 2.9) == [2.0, 0.0, 4.0]  # fold 2: 0.6 > 2.9 x 0.2
    assert fold_sharpes(ROW, 0.9) == [2.0, -1.5, 4.0]  # fold 1: 1.0 > 0.9 x 1.0, scored what it would have


def test_the_table_skips_rows_the_rule_does_not_reproduce(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**ROW, "scenario": "grid", "flat": [True, True, True]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rows": [ROW, bad]}))
    main([str(path), "--z", "3", "0.9"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["d", "+1.00", "+0.67", "(1/3)", "+1.50", "(3/3)"]
    assert out[2].startswith("grid") and "not re-scored" in out[2]
