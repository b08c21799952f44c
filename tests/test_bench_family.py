"""bench/bench_family.py parts and bench/merge_parts.py: draws scored in separate runs pool into one
file whose family gates are those of every merged row."""

from __future__ import annotations

import json

import bench.common
import bench.merge_parts
from bench.bench_family import main
from foxhunt.scorecard.family.gates import block_from_rows


def test_two_parts_of_a_heldout_run_merge_into_one_file_with_the_gates_of_all_its_draws(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.common, "RESULTS", tmp_path)
    monkeypatch.setattr(bench.merge_parts, "RESULTS", tmp_path)
    for part, draws in enumerate(("1", "0")):  # a no-edge draw, then a drift draw
        main(["--quick", "--family", "heldout", "--draws", draws, "--name", f"family_heldout_cpu_t_part{part}"])
    one = json.loads((tmp_path / "family_heldout_cpu_t_part1.json").read_text())
    assert [r["scenario"] for r in one["rows"]] == ["heldout00_drift"] and one["family_set"] == "heldout"
    assert one["rule"] == "HELD_OUT scores are reported, never optimised"
    merged = json.loads(bench.merge_parts.merge("family_heldout_cpu_t").read_text())
    assert [r["scenario"] for r in merged["rows"]] == ["heldout00_drift", "heldout01_no_edge"]
    assert merged["family_gates"] == json.loads(json.dumps(block_from_rows(merged["rows"], "heldout", "tiny")["gates"]))
    assert {g["name"]: g["draws"] for g in merged["family_gates"]}["not below flat"] == 2
    assert not list(tmp_path.glob("*_part*.json"))  # the parts are gone once merged
