"""The family's gates and capture vs the quant rule, on hand-made results (no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from rich.console import Console

from foxhunt.scorecard.family.gates import CAPTURE_CLIP, block_from_rows, draw_row, family_block, gate_lines, rich_family_table
from foxhunt.scorecard.report import rich_table, scorecard_dict, write_html, write_json
from foxhunt.scorecard.run import MAX_NO_EDGE_TURNOVER, judge
from tests.scorecard.test_gates import _policy, _result


def _draw(name, kind, agent, quant, oracle=4.0, turnover=0.0, index=0):
    refs = {"buy_and_hold": _policy("buy_and_hold", [0.1, 0.1])}
    if kind == "edge":
        refs["oracle_theta0"] = _policy("oracle_theta0", [oracle, oracle])
    else:
        refs["oracle_flat"] = _policy("oracle_flat", [0.0, 0.0])
    r = _result(name, _policy("agent", [agent, agent], turnover=turnover), refs)
    r.baselines["quant"] = _policy("quant", [quant, quant])
    r.baselines["quant"].extra = {"rules": ["mom100", "mom100_band"]}
    r.params = {"family": "dev", "index": index, "seed": 1_000_000 + index, "form": "drift" if kind == "edge" else "no_edge",
                "kind": kind, "interval": "daily", "horizon": 300.0, "strength": 0.1, "costs": "low", "cost_rate_bps": 1.0,
                "noise_text": "GARCH", "noise": {"vol_model": "garch", "df": 5.0, "jump_rate": 0.0}, "expected_oracle_sharpe_best": oracle}
    r.gate = judge(r)
    return r


def test_capture_vs_quant_is_agent_over_quant_and_none_when_quant_earns_nothing():
    r = _draw("dev00_drift", "edge", agent=1.0, quant=2.0)
    assert r.capture_vs_quant() == pytest.approx(0.5)
    assert _draw("dev00_drift", "edge", agent=1.0, quant=-0.5).capture_vs_quant() is None
    d = r.to_dict()
    assert d["capture_vs_quant"] == d["agent"]["capture_vs_quant"] == pytest.approx(0.5)
    assert d["baselines"]["quant"]["capture_vs_quant"] is None and d["params"]["form"] == "drift"
    plain = _result("leak", _policy("agent", [1.0, 1.0]), {"buy_and_hold": _policy("buy_and_hold", [0.5, 0.5]), "oracle": _policy("oracle", [2.0, 2.0])})
    assert plain.capture_vs_quant() is None and "params" not in plain.to_dict()  # no quant baseline run


def test_a_draws_own_gate_is_not_below_flat_by_2_se_and_no_edge_draws_also_flat():
    se = math.sqrt(252 / 1000) / math.sqrt(2)
    assert _draw("a", "edge", agent=-1.9 * se, quant=1.0).gate["passed"]
    assert not _draw("a", "edge", agent=-2.1 * se, quant=1.0).gate["passed"]
    assert _draw("b", "no_edge", agent=0.0, quant=0.0).gate["passed"]
    churn = _draw("b", "no_edge", agent=0.0, quant=0.0, turnover=2 * MAX_NO_EDGE_TURNOVER)
    assert not churn.gate["passed"] and churn.gate["kind"] == "family no-edge"


def test_family_gates_pool_the_edge_draws_captures_clipped_and_judge_every_draw():
    results = [_draw("dev00_drift", "edge", agent=1.5, quant=2.0, oracle=3.0, index=0),  # 75 % of quant, 50 % of oracle
               _draw("dev01_no_edge", "no_edge", agent=0.0, quant=-0.3, index=1),
               _draw("dev02_mean_revert", "edge", agent=3.0, quant=0.1, oracle=4.0, index=2),  # 3000 %: clipped to 200 %
               _draw("dev03_vol_state", "edge", agent=1.0, quant=-1.0, oracle=2.0, index=3)]  # quant earned nothing: left out
    block = family_block(results, "dev", "tiny")
    g = {x["name"]: x for x in block["gates"]}
    assert g["capture vs quant"]["value"] == pytest.approx((0.75 + CAPTURE_CLIP[1]) / 2) and g["capture vs quant"]["draws"] == 2
    assert g["capture vs quant"]["passed"] is True
    # capture vs oracle is the goal, reported and never gated
    assert g["capture vs oracle"]["value"] == pytest.approx((0.5 + 0.75 + 0.5) / 3) and g["capture vs oracle"]["passed"] is None
    assert g["capture vs oracle"]["goal"] is True and g["capture vs oracle"]["met"] is False
    assert g["not below flat"]["passed"] is True and g["no-edge flat"]["passed"] is True
    assert block["passed"] is True and block["edge_draws"] == 3 and block["no_edge_draws"] == 1
    sunk = family_block(results + [_draw("dev04_drift", "edge", agent=-5.0, quant=1.0, oracle=2.0, index=4)], "dev", "tiny")
    assert sunk["passed"] is False and {x["name"]: x for x in sunk["gates"]}["not below flat"]["passed"] is False
    rows = {r["scenario"]: r for r in block["rows"]}
    assert rows["dev02_mean_revert"]["capture_vs_quant"] == pytest.approx(30.0)  # the row keeps the raw ratio
    assert rows["dev00_drift"]["quant_rules"] == ["mom100", "mom100_band"] and rows["dev00_drift"]["oracle_sharpe"] == 3.0
    lines = gate_lines(block)
    assert lines[0].startswith("PASS  capture vs quant") and lines[1].startswith("GOAL not met  capture vs oracle")
    assert not family_block(results[1:2], "heldout", "tiny")["gates"][0]["passed"]  # None: no edge draw to judge
    assert family_block(results[1:2], "heldout", "tiny")["rule"] == "HELD_OUT scores are reported, never optimised"


def test_capture_beyond_noise_counts_only_the_edge_draws_whose_quant_rule_beat_2_se():
    se = math.sqrt(252 / 1000) / math.sqrt(2)  # the hand-made draws' SE of a fold-mean Sharpe
    results = [_draw("dev00_drift", "edge", agent=1.5, quant=2.0, index=0),  # quant 2.0 > 2 SE (~0.71): counted, 75 %
               _draw("dev02_mean_revert", "edge", agent=0.0, quant=0.5, index=2),  # quant inside the noise: left out
               _draw("dev05_no_edge", "no_edge", agent=0.0, quant=3.0, index=5)]  # no edge: never counted
    assert 0.5 < 2 * se < 2.0
    block = family_block(results, "dev", "tiny")
    b = block["beyond_noise"]
    assert b["draws"] == ["dev00_drift"] and b["value"] == pytest.approx(0.75)
    assert {g["name"]: g["value"] for g in block["gates"]}["capture vs quant"] == pytest.approx(0.375)  # the gate: both
    assert gate_lines(block)[-1].startswith("reported  capture vs quant beyond noise: capture vs quant 75.0% over the 1 edge draws")


def test_gates_from_rows_scored_in_separate_parts_equal_the_gates_of_one_run():
    results = [_draw("dev00_drift", "edge", agent=1.5, quant=2.0, oracle=3.0, index=0),
               _draw("dev01_no_edge", "no_edge", agent=-0.1, quant=0.2, turnover=2 * MAX_NO_EDGE_TURNOVER, index=1),
               _draw("dev02_mean_revert", "edge", agent=-5.0, quant=0.5, oracle=1.0, index=2)]
    whole = family_block(results, "heldout", "gpu")
    parts = [json.loads(json.dumps(draw_row(r))) for r in (results[2], results[0], results[1])]  # through JSON, any order
    pooled = block_from_rows(sorted(parts, key=lambda r: r["index"]), "heldout", "gpu")
    assert pooled == json.loads(json.dumps(whole))
    assert [g["passed"] for g in pooled["gates"]] == [False, None, False, False]


def test_the_family_block_reaches_the_json_the_console_and_the_html(tmp_path):
    results = [_draw("dev00_drift", "edge", agent=1.5, quant=2.0, index=0), _draw("dev01_no_edge", "no_edge", agent=0.0, quant=0.2, index=1)]
    block = family_block(results, "dev", "tiny")
    card = scorecard_dict(results, {"size": "tiny"}, block)
    assert card["passed"] is True and card["family"]["set"] == "dev"  # capture vs oracle 37.5 % < 60 %: a goal, not gated
    write_json(tmp_path / "scorecard.json", card)
    back = json.loads((tmp_path / "scorecard.json").read_text())
    assert back["family"]["rows"][0]["capture_vs_quant"] == pytest.approx(0.75)
    console = Console(record=True, width=250)
    console.print(rich_family_table(block))
    console.print(rich_table(results))
    text = console.export_text()
    assert "dev00_drift" in text and "75.0%" in text and "mom100,mom100_band" in text and "vs quant" in text
    write_html(tmp_path / "report.html", results, {"size": "tiny"}, block)
    page = (tmp_path / "report.html").read_text()
    assert "family dev" in page and "PASS  not below flat" in page and page.count("data:image/png;base64,") == 2


def _timed(name: str, kind: str, beta: float, agent_timing: float, quant_timing: float, index: int, seed: int = 0):
    """A hand-made draw whose folds' returns are beta × buy-and-hold's plus a part orthogonal to it
    with an exact timing Sharpe (the agent's ``agent_timing``, the quant rule's ``quant_timing``)."""
    from foxhunt.scorecard.policies import FoldScore, PolicyScore

    rng = np.random.default_rng(seed)
    n, bpy = 1000, 252.0

    def rest(m: np.ndarray, sharpe: float) -> np.ndarray:
        x = np.stack([np.ones(n), m], 1)
        z = rng.normal(size=n)
        z -= x @ np.linalg.lstsq(x, z, rcond=None)[0]  # orthogonal to a constant and to buy-and-hold
        return z / z.std(ddof=1) * 1e-3 + sharpe / math.sqrt(bpy) * 1e-3

    def score(label: str, folds: list[np.ndarray]) -> PolicyScore:
        p = PolicyScore(label, capital=10_000.0)
        for r in folds:
            p.folds.append(FoldScore(float(r.mean() / r.std(ddof=1) * math.sqrt(bpy)), float(np.prod(1 + r) - 1), -0.05, 10, 5.0,
                                     0.0, r.astype(np.float32), np.ones(n, np.float32)))
        return p

    ms = [rng.normal(2e-4, 1e-2, n) for _ in range(2)]
    r = _draw(name, kind, agent=1.0, quant=2.0, index=index)
    r.references["buy_and_hold"] = score("buy_and_hold", ms)
    r.agent = score("agent", [beta * m + rest(m, agent_timing) for m in ms])
    r.baselines["quant"] = score("quant", [0.3 * m + rest(m, quant_timing) for m in ms])
    r.baselines["quant"].extra = {"rules": ["mom100"]}
    return r


def test_timing_capture_is_agent_timing_over_quant_timing_and_is_pooled_where_the_quant_rule_times(tmp_path):
    se = math.sqrt(252 / 1000) / math.sqrt(2)  # 2 SE ~ 0.71
    results = [_timed("dev00_drift", "edge", beta=1.0, agent_timing=0.6, quant_timing=2.0, index=0),  # holds: 30 %
               _timed("dev02_mean_revert", "edge", beta=0.1, agent_timing=3.0, quant_timing=1.5, index=2),  # times: 200 %
               _timed("dev04_vol_state", "edge", beta=0.0, agent_timing=1.0, quant_timing=0.5, index=4),  # quant within noise
               _timed("dev05_no_edge", "no_edge", beta=0.0, agent_timing=0.0, quant_timing=3.0, index=5)]  # no edge
    r = results[0]
    assert r.timing()["beta"] == pytest.approx(1.0, abs=1e-6) and r.timing()["timing_sharpe"] == pytest.approx(0.6, abs=1e-4)
    assert r.timing(r.baselines["quant"])["timing_sharpe"] == pytest.approx(2.0, abs=1e-4)
    assert r.timing_capture_vs_quant() == pytest.approx(0.3, abs=1e-4)
    assert _timed("x", "edge", beta=0.0, agent_timing=1.0, quant_timing=-0.5, index=1).timing_capture_vs_quant() is None
    d = r.to_dict()
    assert d["timing_capture_vs_quant"] == d["agent"]["timing_capture_vs_quant"] == pytest.approx(0.3, abs=1e-4)
    assert d["agent"]["beta"] == pytest.approx(1.0, abs=1e-6) and d["baselines"]["quant"]["timing_capture_vs_quant"] is None
    block = family_block(results, "dev", "tiny")
    row = {x["scenario"]: x for x in block["rows"]}["dev02_mean_revert"]
    assert row["agent_beta"] == pytest.approx(0.1, abs=1e-6) and row["agent_timing_sharpe"] == pytest.approx(3.0, abs=1e-4)
    assert row["quant_timing_sharpe"] == pytest.approx(1.5, abs=1e-4) and row["timing_capture_vs_quant"] == pytest.approx(2.0, abs=1e-4)
    t = block["timing"]
    assert 0.5 < 2 * se < 1.5 and t["draws"] == ["dev00_drift", "dev02_mean_revert"]  # where the quant rule times, edge only
    assert t["value"] == pytest.approx((0.3 + CAPTURE_CLIP[1]) / 2, abs=1e-4) and t["met"] is True and t["goal"] == 1.0
    assert [g["name"] for g in block["gates"]] == ["capture vs quant", "capture vs oracle", "not below flat", "no-edge flat"]
    assert "GOAL met  timing capture vs quant: timing capture vs quant 115.0% >= 100% over the 2 edge draws" in gate_lines(block)[4]
    parts = [json.loads(json.dumps(draw_row(x))) for x in results]  # rows pooled from JSON give the same block
    assert block_from_rows(parts, "dev", "tiny")["timing"] == t
    console = Console(record=True, width=300)
    console.print(rich_family_table(block))
    text = console.export_text()
    assert "timing vs q" in text and "200.0%" in text
    write_html(tmp_path / "report.html", results, {"size": "tiny"}, block)
    page = (tmp_path / "report.html").read_text()
    assert "<th>timing vs quant</th>" in page and "<th>agent β</th>" in page and "timing capture vs quant 115.0%" in page
