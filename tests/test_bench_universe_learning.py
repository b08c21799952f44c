"""bench/bench_universe_learning.py: a quick run trains a no-edge universe pooled and one agent per symbol and
records their portfolios beside the references; parts merge into one file whose gates cover every row."""

from __future__ import annotations

import json

import pytest

import bench.common
from bench.bench_universe_learning import gates, main, merge


@pytest.mark.slow
def test_a_quick_run_records_both_modes_portfolios_references_and_the_no_edge_gate(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.common, "RESULTS", tmp_path)
    main(["--quick", "--name", "ul", "--set", "folds.val=200"])  # 200-bar validation windows (tiny: 400)
    doc = json.loads((tmp_path / "ul.json").read_text())
    assert [(r["universe"], r["mode"]) for r in doc["rows"]] == [("heldout_u01_no_edge", "pooled"),
                                                                 ("heldout_u01_no_edge", "per_symbol")]
    ref = doc["references"]["heldout_u01_no_edge"]
    assert ref["kind"] == "no_edge" and ref["oracle"]["sharpe"] == 0.0  # no edge: the oracle is flat
    for r in doc["rows"]:
        assert r["portfolio"]["dates"] == ref["quant"]["dates"]  # the same windows as the references
        assert len(r["flat"]) == 2 and len(r["flat"][0]) == (1 if r["mode"] == "pooled" else 2)
    assert {g["mode"] for g in doc["gates"] if g["name"] == "no-edge flat"} == {"pooled", "per_symbol"}


def _row(u, mode, sharpe, kind="edge", turnover=0.0):
    return {"universe": u, "kind": kind, "mode": mode, "portfolio": {"sharpe": sharpe, "se": 0.5}, "turnover": turnover}


def test_the_gates_compare_seed_means_and_gate_the_quant_rule_only_where_it_beats_two_standard_errors():
    refs = {"e1": {"kind": "edge", "quant": {"sharpe": 1.5, "se": 0.5}}, "e2": {"kind": "edge", "quant": {"sharpe": 0.8, "se": 0.5}},
            "n": {"kind": "no_edge", "quant": {"sharpe": 0.1, "se": 0.5}}}
    rows = [_row("e1", "pooled", 1.0), _row("e1", "pooled", 2.2), _row("e1", "per_symbol", 1.5),
            _row("e2", "pooled", 0.1), _row("e2", "per_symbol", 0.3),
            _row("n", "pooled", -0.5, "no_edge"), _row("n", "per_symbol", 0.0, "no_edge", turnover=0.05)]
    g = {(x["name"], x["universe"], x.get("mode")): x for x in gates(rows, refs)}
    assert g[("pooled >= per-symbol", "e1", None)]["passed"] is True  # mean 1.6 >= 1.5
    assert g[("pooled >= 100 % of the quant rule", "e1", None)]["passed"] is True and g[("pooled >= 100 % of the quant rule", "e1", None)]["capture"] == 1.6 / 1.5
    assert g[("pooled >= per-symbol", "e2", None)]["passed"] is False
    assert g[("pooled >= 100 % of the quant rule", "e2", None)]["passed"] is None  # 0.8 < 2 SE: not gated
    assert g[("no-edge flat", "n", "pooled")]["passed"] is True and g[("no-edge flat", "n", "per_symbol")]["passed"] is False


def test_parts_merge_into_one_file_with_the_gates_of_all_their_rows(tmp_path):
    refs = {"e1": {"kind": "edge", "quant": {"sharpe": 1.5, "se": 0.5}}, "n": {"kind": "no_edge", "quant": {"sharpe": 0.1, "se": 0.5}}}
    for part, u in (("a", "e1"), ("b", "n")):
        rows = [_row(u, "pooled", 1.0, refs[u]["kind"]), _row(u, "per_symbol", 0.5, refs[u]["kind"])]
        bench.common._write(tmp_path / f"ul_part_{part}.json", {"rows": rows, "references": {u: refs[u]}, "universes": {u: {}},
                                                                 "gates": gates(rows, {u: refs[u]})})
    doc = json.loads(merge("ul", tmp_path).read_text())
    assert [r["universe"] for r in doc["rows"]] == ["e1", "e1", "n", "n"] and set(doc["references"]) == {"e1", "n"}
    assert doc["gates"] == json.loads(json.dumps(gates(doc["rows"], doc["references"])))
    assert not list(tmp_path.glob("ul_part_*.json"))
