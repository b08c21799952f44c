"""The forecast learner in the scorecard: `foxhunt scorecard --config configs/train-forecast.toml`
reports its row as "agent (forecast)" beside the baselines, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "train-forecast.toml"


@pytest.mark.slow
def test_the_scorecard_reports_the_forecast_learners_row_beside_the_baselines(tmp_path):
    out = tmp_path / "sc"
    res = subprocess.run([sys.executable, "-m", "foxhunt.cli", "scorecard", "--size", "tiny", "--scenarios", "leak",
                          "--baselines", "quant", "--config", str(CONFIG), "--out", str(out),
                          "--set", f"features.cache_dir={json.dumps(str(tmp_path / 'cache'))}", "--set", "train.epochs=2",
                          "--set", "forecast.steps_per_epoch=4", "--set", 'train.select="last"'],
                         cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "scorecard.json").read_text())
    assert card["agent"] == "forecast"
    leak = card["scenarios"][0]
    assert leak["agent_kind"] == "forecast" and "quant" in leak["baselines"]
    assert "agent (forecast)" in res.stdout
