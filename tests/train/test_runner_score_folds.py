"""WalkForwardRunner.score_folds (the tune trials' entry point) trains and evaluates exactly as
`foxhunt train`'s run() does, writes nothing, and stops when its per-fold callback raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foxhunt.config import load_config
from foxhunt.pipeline import prepare_market
from foxhunt.train.run_dir import create_run_dir
from foxhunt.train.runner import WalkForwardRunner
from tests.train.conftest import tiny_config


class Stop(Exception):
    pass


@pytest.mark.slow
def test_score_folds_equals_run_and_stops_when_the_callback_raises(tmp_path: Path) -> None:
    cfg = load_config(tiny_config(tmp_path, epochs=1, every=0))
    prepared = prepare_market(cfg)
    runner = WalkForwardRunner(prepared)
    run_dir, resolved = create_run_dir(cfg, prepared, "ref")
    runner.use_config(resolved)
    runner.run(run_dir)
    ref = [json.loads((run_dir / "folds" / f"fold_{f.fold}" / "metrics.json").read_text())["agent"] for f in prepared.folds]

    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    seen: list[tuple[int, dict[str, float]]] = []
    out = WalkForwardRunner(prepare_market(cfg)).score_folds(lambda k, fold, agent: seen.append((k, agent.metrics[0])))
    assert [k for k, _ in seen] == list(range(len(prepared.folds))) == list(range(len(out)))
    for (_, m), r in zip(seen, ref):
        assert m["sharpe"] == pytest.approx(r["sharpe"], rel=1e-9, abs=1e-12)
        assert m["total_return"] == pytest.approx(r["total_return"], rel=1e-9, abs=1e-12)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before  # nothing written

    calls: list[int] = []

    def stop_after_first(k: int, fold: object, agent: object) -> None:
        calls.append(k)
        raise Stop()

    with pytest.raises(Stop):
        WalkForwardRunner(prepare_market(cfg)).score_folds(stop_after_first)
    assert calls == [0]
