"""Epoch selection on a held-back tail of the training window (``train.select = "inner"``)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.train.selection import EpochSelector, WithSelection, split_fold
from tests.train.conftest import CLI, tiny_config


def test_split_fold_holds_back_the_tail_after_a_purge_gap():
    f = FoldRange(3, 100, 1100, 1160, 1460)
    part, start, steps = split_fold(f, 0.2, 60)
    assert part == FoldRange(3, 100, 1100 - 200 - 60, 1160, 1460)
    assert (start, steps) == (900, 199)  # bars 901 … 1099 are stepped, as validation steps val_start+1 …
    assert start + steps + 1 == f.train_end


def test_split_fold_refuses_a_window_too_short_to_score():
    with pytest.raises(ConfigError, match="fold 0: train.inner_fraction = 0.01 of 1000 training bars leaves 10 held-back bars"):
        split_fold(FoldRange(0, 0, 1000, 1060, 1200), 0.01, 60)


class _Scripted:
    """A backtest whose Sharpe per call is scripted."""

    def __init__(self, values):
        self.values = list(values)
        self.calls = []

    def __call__(self, start, steps, policy):
        self.calls.append((start, steps))
        return self.values.pop(0)


def test_selector_restores_the_parameters_of_the_best_epoch_bitwise():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    bt = _Scripted([0.5, 2.0, float("nan"), 1.0])
    sel = EpochSelector(net, lambda: net, bt)
    sel.begin_fold(10, 50)
    kept = None
    for epoch in range(1, 5):
        with torch.no_grad():
            net.weight.add_(torch.randn_like(net.weight))  # "training"
        sel.observe(epoch)
        if epoch == 2:
            kept = {k: v.clone() for k, v in net.state_dict().items()}
    info = sel.finish()
    assert info["epoch"] == 2 and info["inner_sharpe"] == 2.0
    assert all(torch.equal(net.state_dict()[k], kept[k]) for k in kept)
    assert bt.calls == [(10, 50)] * 4


def test_selector_scores_a_policy_that_never_trades_as_flat():
    net = nn.Linear(2, 2)
    sel = EpochSelector(net, lambda: net, _Scripted([float("nan"), -0.5]))
    sel.begin_fold(0, 30)
    assert math.isnan(sel.observe(1))
    sel.observe(2)
    assert sel.finish()["epoch"] == 1  # NaN (no trade) counts as flat's 0, above -0.5


def test_selector_state_round_trips_and_refuses_a_foreign_shape():
    net = nn.Linear(3, 2)
    sel = EpochSelector(net, lambda: net, _Scripted([1.5]))
    sel.begin_fold(7, 40)
    sel.observe(1)
    state = {k: v.clone() for k, v in sel.state_dict().items()}
    other = EpochSelector(nn.Linear(3, 2), lambda: net, _Scripted([]))
    other.load_state_dict(state)
    assert (other.best_epoch, other.best_sharpe, other.window) == (1, 1.5, (7, 40))
    assert all(torch.equal(other.snapshot[k], sel.snapshot[k]) for k in sel.snapshot)
    wrong = EpochSelector(nn.Linear(5, 2), lambda: net, _Scripted([]))
    with pytest.raises(ValueError, match="weight"):
        wrong.load_state_dict(state)


def test_with_selection_adds_one_component_and_refuses_a_checkpoint_without_it():
    class T:
        epoch = 4

        def state_dict(self):
            return {"learner": {}}

        def load_state_dict(self, s):
            self.loaded = s

    net = nn.Linear(2, 2)
    w = WithSelection(T(), EpochSelector(net, lambda: net, _Scripted([])))
    assert set(w.state_dict()) == {"learner", "selection"} and w.epoch == 4
    with pytest.raises(ValueError, match="no selection component"):
        w.load_state_dict({"learner": {}})


def test_train_with_inner_selection_records_the_selected_epoch_and_trains_on_the_part_before_the_held_back_bars(tmp_path):
    import subprocess

    cfg = tiny_config(tmp_path, epochs=3, every=0, select="inner")
    out = subprocess.run(CLI + ["--config", str(cfg), "--name", "sel"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / "runs" / "sel"
    folds = json.loads((run / "folds.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all("inner_sharpe" in r for r in rows)
    for f in folds:
        m = json.loads((run / "folds" / f"fold_{f['fold']}" / "metrics.json").read_text())
        sel = m["selection"]
        assert 1 <= sel["epoch"] <= 3
        inner = int((f["train_end"] - f["train_start"]) * 0.2)
        assert sel["inner_start"] == f["train_end"] - inner and sel["inner_steps"] == inner - 1
        fold_rows = [r for r in rows if r["fold"] == f["fold"]]
        best = max(range(3), key=lambda i: (fold_rows[i]["inner_sharpe"] if math.isfinite(fold_rows[i]["inner_sharpe"]) else 0.0, -i))
        assert sel["epoch"] == best + 1


def test_sub_windows_cover_the_window_contiguously_and_pooled_sharpe_matches_the_formula():
    from foxhunt.train.selection import pooled_sharpe, sub_windows

    starts, lengths = sub_windows(100, 5001, 2048)
    assert len(starts) == 3 and max(lengths) <= 2048 and sum(lengths) == 5001
    assert starts[0] == 100 and all(starts[i] + lengths[i] == starts[i + 1] for i in range(2))
    assert sub_windows(7, 30, 2048) == ([7], [30])
    r = torch.randn(500, dtype=torch.float64).numpy() * 0.01 + 0.001
    import numpy as np

    from foxhunt.backtest.metrics_reference import window_metrics

    assert pooled_sharpe(r, 252.0) == pytest.approx(window_metrics(r, bars_per_year=252.0)["sharpe"], rel=1e-9)
    assert math.isnan(pooled_sharpe(np.zeros(10), 252.0))
