"""Scorecard outputs from hand-made results: the rich table, scorecard.json and report.html."""

from __future__ import annotations

import json

from rich.console import Console

from foxhunt.scorecard.report import rich_table, scorecard_dict, write_html, write_json
from tests.scorecard.test_gates import _policy, _result


def test_table_json_and_html_carry_every_scenario_policy_and_gate(tmp_path):
    refs = {"buy_and_hold": _policy("buy_and_hold", [0.5, 0.5]), "oracle": _policy("oracle", [2.0, 2.0])}
    results = [_result("leak", _policy("agent", [1.5, 1.7]), refs),
               _result("no_edge", _policy("agent", [0.0, 0.0], turnover=0.5), {"buy_and_hold": _policy("buy_and_hold", [0.1, 0.1])})]
    results[0].baselines["supervised"] = _policy("supervised", [1.0, 1.0])
    console = Console(record=True, width=200)
    console.print(rich_table(results))
    text = console.export_text()
    assert "leak" in text and "supervised" in text and "PASS" in text and "FAIL" in text and "80.0%" in text
    card = scorecard_dict(results, {"size": "tiny"})
    write_json(tmp_path / "scorecard.json", card)
    back = json.loads((tmp_path / "scorecard.json").read_text())
    assert back["passed"] is False and back["size"] == "tiny"
    leak = back["scenarios"][0]
    assert leak["agent"]["capture"] == 0.8 and leak["baselines"]["supervised"]["capture"] == 0.5
    assert leak["best_reference"] == "oracle" and leak["gate"]["passed"] is True
    write_html(tmp_path / "report.html", results, {"size": "tiny"})
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "capture" in html and "no_edge" in html


def test_the_agent_row_names_the_agent_kind_in_the_table_json_and_html(tmp_path):
    refs = {"buy_and_hold": _policy("buy_and_hold", [0.5, 0.5]), "oracle": _policy("oracle", [2.0, 2.0])}
    ppo = _result("leak", _policy("agent", [1.5, 1.7]), refs)
    ppo.agent_kind = "ppo"
    dqn = _result("leak", _policy("agent", [1.0, 1.2]), refs)  # the default kind: dqn
    console = Console(record=True, width=200)
    console.print(rich_table([dqn, ppo]))
    text = console.export_text()
    assert "agent (dqn)" in text and "agent (ppo)" in text
    card = scorecard_dict([ppo], {"size": "tiny", "agent": "ppo"})
    write_json(tmp_path / "scorecard.json", card)
    back = json.loads((tmp_path / "scorecard.json").read_text())
    assert back["agent"] == "ppo" and back["scenarios"][0]["agent_kind"] == "ppo"
    write_html(tmp_path / "report.html", [dqn, ppo], {"size": "tiny"})
    html = (tmp_path / "report.html").read_text()
    assert "agent (ppo)" in html and "agent (dqn)" in html


def test_the_html_says_which_folds_abstention_made_flat_and_what_they_replaced(tmp_path):
    refs = {"buy_and_hold": _policy("buy_and_hold", [0.5, 0.5])}
    agent = _policy("agent", [0.0, 1.2])
    agent.extra["abstain"] = {"z": 3.0, "flat_folds": [0], "mean_inner_z": [1.25, 6.5], "without": [-0.31, None]}
    quiet = _policy("agent", [1.0, 1.0])
    quiet.extra["abstain"] = {"z": 3.0, "flat_folds": [], "mean_inner_z": [4.0, 5.0], "without": [None, None]}
    write_html(tmp_path / "report.html", [_result("sp500", agent, refs), _result("leak", quiet, refs)], {"size": "tiny"})
    page = (tmp_path / "report.html").read_text()
    assert ("abstention (bar 3 SE): members&#x27; mean held-back Sharpe per fold +1.25, +6.50 SE; flat folds 0 of 2 "
            "(their ensembles would have scored -0.31).") in page
    assert "+4.00, +5.00 SE; every fold traded." in page
    write_html(tmp_path / "plain.html", [_result("leak", _policy("agent", [1.0, 1.0]), refs)], {"size": "tiny"})
    assert "abstention" not in (tmp_path / "plain.html").read_text()
