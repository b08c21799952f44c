"""Universes of the procedural family: deterministic in their seed, one edge form and its parameters, costs
and calendar shared by every symbol, each symbol its own noise, latent path and strength solved to the
shared target; no-edge universes plant nothing; written as files a universe run reads back exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foxhunt.config import build_config
from foxhunt.data.universe import load_universe
from foxhunt.scorecard.family import form_of
from foxhunt.scorecard.family.universe import universe_draw, write_universe


def test_a_universe_draw_is_deterministic_and_shares_its_form_but_not_its_paths() -> None:
    a, b = universe_draw("dev", 0, 3), universe_draw("dev", 0, 3)
    assert a.symbols == ("U00S00", "U00S01", "U00S02") and a.form == form_of(0) == "drift" and a.kind == "edge"
    assert all(np.array_equal(x.close, y.close) for x, y in zip(a.bars, b.bars))
    assert all(np.array_equal(a.bars[0].timestamps, x.timestamps) for x in a.bars)  # one calendar
    assert not np.array_equal(a.bars[0].close, a.bars[1].close)  # each its own path
    rows = a.params["symbols"]
    assert len({r["strength"] for r in rows}) == 3  # each strength solved on its own noise and latent
    for r in rows:  # ... to the shared target, where reached
        assert not r["reached"] or abs(r["expected_oracle_sharpe_best"] - a.params["target_sharpe"]) < 0.05 * a.params["target_sharpe"]
    assert universe_draw("heldout", 0, 3).bars[0].close[-1] != a.bars[0].close[-1]  # the held-out seeds are others


def test_a_no_edge_universe_plants_nothing_and_its_oracle_is_flat() -> None:
    u = universe_draw("heldout", 1, 2)
    assert u.kind == "no_edge" and all(r["strength"] == 0.0 for r in u.params["symbols"])
    assert all(not np.any(v) for o in u.oracles for v in o.values())


def test_a_written_universe_loads_back_bar_for_bar(tmp_path: Path) -> None:
    u = universe_draw("dev", 3, 2)
    d = write_universe(u, tmp_path / "u")
    cfg = build_config({"data": {"source": "file", "path": str(d)}})
    back = load_universe([str(d)], cfg.data)
    assert back.symbols == u.symbols
    for x, y in zip(back.bars, u.bars):
        assert all(np.array_equal(getattr(x, c), getattr(y, c)) for c in ("timestamps", "open", "high", "low", "close", "volume"))
