"""bench/configs/h200-fast-688ee41.toml reproduces 688ee41's h200-fast workload (issue 12's
before/after run): checked against that revision's resolved config, stored beside it as JSON
(bench/configs/h200-fast-688ee41.resolved.json, written by the old code: bench/before_after.py
dump-config), with bench/before_after.py's comparison."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from foxhunt.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def _before_after():
    spec = importlib.util.spec_from_file_location("before_after", ROOT / "bench" / "before_after.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _old() -> dict:
    return json.loads((ROOT / "bench" / "configs" / "h200-fast-688ee41.resolved.json").read_text())["config"]


def test_translated_config_resolves_to_the_688ee41_workload():
    ba = _before_after()
    new = load_config(ROOT / "bench" / "configs" / "h200-fast-688ee41.toml").to_dict()
    agreement = ba.compare(_old(), new)
    assert agreement["differences"] == [] and agreement["unchecked_new_keys"] == []
    assert agreement["same_workload"]
    parts = {m["key"]: m["new"] for m in agreement["mapped"] if m["key"].startswith("part ")}
    assert parts == {f"part {p}": "fused" for p in ("env_step", "acting", "train_step", "replay", "eval")}


def test_todays_h200_fast_is_a_different_workload_and_the_comparison_names_it():
    ba = _before_after()
    new = load_config(ROOT / "configs" / "h200-fast.toml").to_dict()
    agreement = ba.compare(_old(), new)
    differing = {d["key"] for d in agreement["differences"]}
    assert not agreement["same_workload"]
    assert {"dqn.batch_size", "dqn.hidden", "env.action_mode", "env.capital", "part acting",
            "train.select", "train.ensemble", "features.long_momentum"} <= differing


def test_report_table_shows_a_failed_run_by_its_exit_status(tmp_path):
    ba = _before_after()
    bench = {"wall_s": {k: 1.0 for k in ("total", "run", "trainer_build", "collection", "training", "epochs",
                                          "evaluation", "buy_and_hold", "checkpoints")},
             "dqn": {"rounds_per_epoch": 2, "train_steps_per_round": 3}, "transitions_per_epoch": 100,
             "epoch_s_first": 2.0, "epoch_s_steady_mean": 0.5, "validation": [{"agent_sharpe": 1.0}]}
    (tmp_path / "old.json").write_text(json.dumps(bench))
    (tmp_path / "new.json").write_text(json.dumps({**bench, "epoch_s_steady_mean": 0.25, "accel": {"acting": "torch"}}))
    (tmp_path / "manifest").write_text(
        f"old warm 0 3.0 {tmp_path}/old.json {tmp_path}/old.log\n"
        f"new_torch warm 0 3.0 {tmp_path}/new.json {tmp_path}/new.log\n"
        f"new_fused warm 1 2.0 {tmp_path}/missing.json {tmp_path}/missing.log\n"
        f"new_fused cold skip - {tmp_path}/x.json {tmp_path}/x.log\n")
    combined = ba.report(tmp_path / "manifest", tmp_path / "out.json", {"old_acting": "fused"}, None)
    text = ba.table(combined["runs"])
    assert "rc=1" in text and "skipped" in text and "fused (switch)" in text
    (ratio,) = combined["ratios_vs_old"]
    assert ratio["run"] == "new_torch/warm" and ratio["env_steps_per_s"] == 2.0
    assert json.loads((tmp_path / "out.json").read_text())["runs"][0]["figures"]["env_steps_per_s"] == 200.0
