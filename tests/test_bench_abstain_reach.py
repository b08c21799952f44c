"""bench/abstain_reach.py: the counts of edge folds whose oracle / quant rule clear the abstention bar."""

import json

from bench.abstain_reach import main, reach


def _row(scenario: str, kind: str, interval: str, oracle: list[float], quant: list[float], bars: list[float]) -> dict:
    # nested fields as bench_family stores them (Python literals in strings)
    return {"scenario": scenario, "kind": kind, "interval": interval, "abstain_bar": str(bars),
            "oracle_fold_sharpes": str({"flat": [0.0] * len(bars), "buy_and_hold": [9.0] * len(bars),
                                        "oracle_theta0": [-50.0] * len(bars), "oracle_band0.5": oracle}),
            "quant_fold_sharpes": str(quant)}


def test_reach_counts_only_edge_folds_above_their_bar_using_the_best_oracle_rule():
    rows = [_row("a", "edge", "minute", [12.0, 5.0, 15.0], [1.0, 13.0, 2.0], [13.9, 12.4, 11.2]),
            _row("a", "edge", "minute", [99.0] * 3, [99.0] * 3, [0.0] * 3),  # a second variant's row: ignored
            _row("b", "no_edge", "minute", [0.0] * 3, [20.0] * 3, [1.0] * 3),  # no edge: not counted
            _row("c", "edge", "daily", [3.0, 2.0, 0.5], [0.1, 0.9, 0.7], [0.7, 0.6, 0.6])]
    r = reach(rows)
    assert r["by_interval"] == {"minute": {"folds": 3, "oracle_clears": 1, "quant_clears": 1},
                                "daily": {"folds": 3, "oracle_clears": 2, "quant_clears": 2}}
    assert [d["scenario"] for d in r["draws"]] == ["a", "c"]
    assert r["draws"][0]["oracle"] == [12.0, 5.0, 15.0]  # band0.5 (sum 32) beats theta0 and buy-and-hold is no oracle


def test_main_writes_the_counts_per_file(tmp_path, capsys):
    src = tmp_path / "family_dev_cuda_x.json"
    src.write_text(json.dumps({"rows": [_row("a", "edge", "hourly", [3.0], [2.0], [1.5])]}))
    out = tmp_path / "reach.json"
    assert main([str(src), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["family_dev_cuda_x.json"]["by_interval"]["hourly"] == {
        "folds": 1, "oracle_clears": 1, "quant_clears": 1}
    assert "hourly  oracle 1 of 1, quant rule 1 of 1" in capsys.readouterr().out
