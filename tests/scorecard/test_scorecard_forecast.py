"""The forecast learner in the scorecard: `foxhunt scorecard --config configs/train-forecast.toml`
reports its row as "agent (forecast)" beside the baselines and, per fold, the forecast's out-of-sample IC and
hit rate beside its fold Sharpe, in a fresh process."""

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
    # the forecast's own out-of-sample evaluation per fold, beside the fold Sharpes, as each fold's metrics.json recorded it
    evals, sharpes = leak["agent"]["learner_eval"], leak["agent"]["fold_sharpes"]
    assert len(evals) == len(sharpes) >= 2
    for k, (ev, sharpe) in enumerate(zip(evals, sharpes)):
        assert ev == json.loads((out / "runs" / "leak" / "folds" / f"fold_{k}" / "metrics.json").read_text())["learner_eval"]
        phrase = f"fold {k}: Sharpe {sharpe:+.2f}, forecast IC {ev['ic_spearman']:+.3f} (Spearman, {ev['horizon']}-bar) hit {ev['hit_rate']:.1%}"
        assert phrase in res.stdout and phrase in (out / "report.html").read_text()
