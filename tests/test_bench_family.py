"""bench/bench_family.py parts and bench/merge_parts.py: draws scored in separate runs pool into one
file whose family gates are those of every merged row."""

from __future__ import annotations

import json

import bench.common
import bench.merge_parts
from bench.bench_family import main
from foxhunt.scorecard.family.gates import block_from_rows, family_gates


def test_two_parts_of_a_heldout_run_merge_into_one_file_with_the_gates_of_all_its_draws(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.common, "RESULTS", tmp_path)
    monkeypatch.setattr(bench.merge_parts, "RESULTS", tmp_path)
    # a no-edge draw, then a drift draw; 200-bar validation windows (the tiny layout's are 400)
    for part, draws in enumerate(("1", "0")):
        main(["--quick", "--family", "heldout", "--draws", draws, "--name", f"family_heldout_cpu_t_part{part}",
              "--set", "folds.val=200"])
    one = json.loads((tmp_path / "family_heldout_cpu_t_part1.json").read_text())
    assert [r["scenario"] for r in one["rows"]] == ["heldout00_drift"] and one["family_set"] == "heldout"
    assert one["rule"] == "HELD_OUT scores are reported, never optimised"
    merged = json.loads(bench.merge_parts.merge("family_heldout_cpu_t").read_text())
    assert [r["scenario"] for r in merged["rows"]] == ["heldout00_drift", "heldout01_no_edge"]
    assert merged["family_gates"] == json.loads(json.dumps(block_from_rows(merged["rows"], "heldout", "tiny")["gates"]))
    assert {g["name"]: g["draws"] for g in merged["family_gates"]}["not below flat"] == 2
    assert not list(tmp_path.glob("*_part*.json"))  # the parts are gone once merged


def test_the_baselines_bench_scores_each_baseline_in_the_agents_place_with_the_family_gates(tmp_path, monkeypatch):
    from bench.bench_family_baselines import BASELINES
    from bench.bench_family_baselines import main as baselines_main

    monkeypatch.setattr(bench.common, "RESULTS", tmp_path)
    baselines_main(["--quick", "--family", "heldout", "--draws", "0", "--sb3-steps", "64", "--name", "fb"])
    doc = json.loads((tmp_path / "fb.json").read_text())
    rows = doc["rows"][0]["rows"]
    assert set(rows) == set(BASELINES) and doc["sb3_steps_per_fold"] == 64
    assert rows["quant"]["capture_vs_quant"] in (1.0, None)  # the quant rule against itself
    for name, row in rows.items():  # the same draw, references and quant rule under every baseline
        assert row["scenario"] == "heldout00_drift" and row["quant_sharpe"] == rows["quant"]["agent_sharpe"]
        assert row["oracle_sharpe"] == rows["quant"]["oracle_sharpe"]
        assert set(doc["pooled"][name]) == {"capture vs quant", "capture vs oracle", "not below flat", "no-edge flat"}
    assert doc["rule"] == "HELD_OUT scores are reported, never optimised"
    (tmp_path / "fb_part0.json").write_text(json.dumps(doc))
    other = json.loads(json.dumps(doc))
    other["rows"][0]["index"] = 5  # a second part's draw (the same rows, another index)
    other["rows"][0]["rows"]["quant"]["agent_sharpe"] = -1.0  # …on which the quant rule lost
    (tmp_path / "fb_part1.json").write_text(json.dumps(other))
    monkeypatch.setattr(bench.merge_parts, "RESULTS", tmp_path)
    merged = json.loads(bench.merge_parts.merge("fb").read_text())
    assert merged["draws"] == "0,5" and set(merged["pooled"]) == set(BASELINES)
    assert merged["pooled"]["quant"]["not below flat"] == json.loads(json.dumps(
        {g["name"]: g["value"] for g in family_gates([d["rows"]["quant"] for d in merged["rows"]])}))["not below flat"]
