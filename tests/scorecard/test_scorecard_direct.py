"""The direct learner in the scorecard: on a tiny development draw (a daily drift) it trades at a
profit in every fold where the quant rule does, and `foxhunt scorecard --config configs/train-direct.toml`
reports its row as "agent (direct)" beside the baselines, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "train-direct.toml"


@pytest.mark.slow
def test_on_a_tiny_development_draw_the_direct_learner_trades_at_a_profit_where_the_quant_rule_does(tmp_path):
    from foxhunt.scorecard.build import SIZES
    from foxhunt.scorecard.family import draw, size_for
    from foxhunt.scorecard.run import run_scenario

    sc = draw("dev", 4, "tiny")  # a daily drift of ~30 bars: 2 folds of 400 validation bars, SE of a fold ~0.8
    assert sc.params["form"] == "drift" and sc.params["interval"] == "daily"
    size = size_for(SIZES["tiny"], sc)
    size = type(size)(**{**size.__dict__, "epochs": None})  # the overrides' epochs
    r = run_scenario(sc, tomllib.loads(CONFIG.read_text()), size,
                     ['run.device="cpu"', 'train.select="last"', "train.epochs=6", "direct.window=32", "direct.position_input=false",
                      f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}"], tmp_path, str(CONFIG), baselines=("quant",))
    assert r.agent_kind == "direct"
    quant = [f.sharpe for f in r.baselines["quant"].folds]
    agent = [f.sharpe for f in r.agent.folds]
    assert all(q > 0 for q in quant), quant
    assert all(a > 0.5 for a in agent), agent  # every fold at a profit
    assert r.agent.summary()["trades_per_1000"] > 5


@pytest.mark.slow
def test_the_scorecard_reports_the_direct_learners_row_beside_the_baselines(tmp_path):
    out = tmp_path / "sc"
    res = subprocess.run([sys.executable, "-m", "foxhunt.cli", "scorecard", "--size", "tiny", "--scenarios", "leak",
                          "--baselines", "quant", "--config", str(CONFIG), "--out", str(out),
                          "--set", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}", "--set", "train.epochs=2",
                          "--set", "direct.steps_per_epoch=2", "--set", "direct.window=32", "--set", 'train.select="last"'],
                         cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["agent"] == "direct"
    leak = card["scenarios"][0]
    assert leak["agent_kind"] == "direct" and "quant" in leak["baselines"]
    assert "agent (direct)" in res.stdout
