"""train.gamma_grid: member k trains with γ = grid[k mod g], each fold keeps the discount whose members
score best on the held-back window, and abstention judges that group at a bar raised for the choice.

The run tests are fresh `foxhunt train` processes: a 2-member grid run [0.5, 0.9] against plain runs
of seed 0 at γ 0.5 and seed 1 at γ 0.9 on the same data (member k must be exactly that run)."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import NormalDist

import pytest

from foxhunt.train.config import default_train_config
from foxhunt.train.gamma_grid import adjusted_z, choose, member_gamma
from foxhunt.train.team import member_config
from tests.cli_run import assert_refused
from tests.train.conftest import CLI, tiny_config
from tests.train.test_kill_resume import _finish, _popen

GRID = [0.5, 0.9]


def test_member_k_trains_with_the_grids_k_mod_g_discount_and_seed_plus_k():
    cfg = default_train_config(["train.select=inner", "train.ensemble=4", "train.gamma_grid=[0.5, 0.9]"])
    got = [(member_config(cfg, k).dqn.gamma, member_config(cfg, k).run.seed) for k in range(4)]
    assert got == [(0.5, 0), (0.9, 1), (0.5, 2), (0.9, 3)]
    ppo = default_train_config(["train.agent=ppo", "train.select=inner", "train.ensemble=2", "train.gamma_grid=[0.97, 0.995]"])
    assert [member_config(ppo, k).ppo.gamma for k in range(2)] == [0.97, 0.995]
    assert member_config(ppo, 1).dqn.gamma == ppo.dqn.gamma  # the other learner's section is untouched
    plain = default_train_config(["train.ensemble=2"])
    assert member_gamma(plain, 1) is None and member_config(plain, 1).dqn.gamma == plain.dqn.gamma


def test_gamma_grid_normalise_scales_each_members_reward_by_one_minus_gamma_over_the_shortest_discounts():
    base = ["train.select=inner", "train.ensemble=3", "train.gamma_grid=[0.9, 0.5, 0.99]", "env.reward_scale=100"]
    raw = default_train_config(base)  # off by default: every member keeps the run's reward scale
    assert [member_config(raw, k).env.reward_scale for k in range(3)] == [100.0, 100.0, 100.0]
    norm = default_train_config([*base, "train.gamma_grid_normalise=true"])
    assert [member_config(norm, k).env.reward_scale for k in range(3)] == pytest.approx([20.0, 100.0, 2.0])


@pytest.mark.parametrize("z", [1.0, 2.0, 3.0])
def test_the_abstention_bar_for_the_best_of_g_groups_divides_the_tail_by_g(z):
    tail = 1.0 - NormalDist().cdf(z)
    assert adjusted_z(z, 1) == z
    prev = z
    for g in (2, 3, 5):
        zg = adjusted_z(z, g)
        assert zg > prev
        assert 1.0 - NormalDist().cdf(zg) == pytest.approx(tail / g, rel=1e-9)
        prev = zg
    assert adjusted_z(0.0, 3) == 0.0  # no bar stays no bar
    assert adjusted_z(3.0, 3) == pytest.approx(3.3201, abs=1e-4)  # p 0.00135 / 3


def test_the_best_group_by_mean_held_back_sharpe_wins_ties_go_to_the_earlier_discount():
    picks = [{"inner_sharpe": s} for s in (1.0, 4.0, 2.0, 0.5, None, 3.0)]
    gamma, members, rows = choose(picks, [0.5, 0.9, 0.98, 0.5, 0.9, 0.98])
    assert [r["gamma"] for r in rows] == [0.5, 0.9, 0.98]
    assert [r["members"] for r in rows] == [[0, 3], [1, 4], [2, 5]]
    assert [r["mean_inner_sharpe"] for r in rows] == [0.75, 2.0, 2.5]  # None counts as a flat member's 0
    assert (gamma, members) == (0.98, [2, 5])
    tied = choose([{"inner_sharpe": 1.0}, {"inner_sharpe": 1.0}], [0.9, 0.5])
    assert tied[:2] == (0.9, [0])
    assert choose([{"inner_sharpe": float("nan")}, {"inner_sharpe": -1.0}], [0.5, 0.9])[:2] == (0.5, [0])


@pytest.mark.parametrize("sets, message", [
    (["train.gamma_grid=[0.5, 0.9]"], 'train: gamma_grid needs select = "inner": the fold\'s discount is chosen on the held-back window'),
    (["train.select=inner", "train.gamma_grid=[0.5, 0.9]"],
     "train: gamma_grid has 2 discounts but ensemble = 1: each needs a member (ensemble >= 2; a multiple of 2 gives each the same number)"),
    (["train.select=inner", "train.ensemble=2", "train.gamma_grid=[0.5, 1.0]"], "train: gamma_grid [0.5, 1.0]: every discount must be in [0, 1)"),
    (["train.select=inner", "train.ensemble=2", "train.gamma_grid=[0.9, 0.9]"], "train: gamma_grid [0.9, 0.9]: the discounts must differ"),
])
def test_a_bad_gamma_grid_is_refused_in_one_line_with_exit_2_and_nothing_written(tmp_path, sets, message):
    assert_refused(tmp_path, ["train"] + [a for s in sets for a in ("--set", s)], "<built-in train defaults> + overrides: " + message)


# ---------------------------------------------------------------------- runs, each a fresh process
def _config(d: Path, seed: int, text: str, report: bool = False) -> Path:
    """One epoch, a 10 % held-back window, 100-bar validation and 1,800 bars (the tiny config's 20 %, 300 bars and
    3,000: fold 0 still trains on more than its 800): the held-back window and validation are backtested
    bar by bar, and the claims hold at any size."""
    cfg = tiny_config(d, seed=seed, epochs=1, every=0, cache=d.parent / "cache", select="inner", abstain=True, report=report)
    text = text + "inner_fraction = 0.1\n"
    cfg.write_text(cfg.read_text().replace("[train]\n", "[train]\n" + text, 1).replace("val = 300\n", "val = 100\n", 1)
                   .replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text()
    return cfg


def _run(cfg: Path) -> tuple[Path, str]:
    out = _finish(_popen(CLI + ["--config", str(cfg), "--name", "r"], pause=False))
    return cfg.parent / "runs" / "r", out


def _metrics(run: Path, k: int) -> dict:
    return json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    base = tmp_path_factory.mktemp("gamma_grid")
    team = _config(base / "team", 0, f"ensemble = 2\ngamma_grid = {GRID}\n", report=True)
    alone = [_config(base / f"s{k}", k, "") for k in (0, 1)]
    for k, cfg in enumerate(alone):  # plain runs: no abstention, so that their own model is scored
        text = cfg.read_text().replace("abstain = true\n", "abstain = false\n", 1)
        cfg.write_text(text.replace("[dqn]\n", f"[dqn]\ngamma = {GRID[k]}\n", 1))
    return {"team": _run(team), "s0": _run(alone[0]), "s1": _run(alone[1])}


@pytest.mark.slow
def test_each_fold_keeps_the_discount_whose_member_scored_best_and_abstains_on_it_at_the_raised_bar(runs):
    team, out = runs["team"]
    assert "discounts 0.5, 0.9 (train.gamma_grid)" in out
    summary = json.loads((team / "summary.json").read_text())
    page = (team / "report.html").read_text()
    assert "<th>γ (held-back choice)</th>" in page
    for k in (0, 1):
        got = _metrics(team, k)["selection"]
        alone = [_metrics(runs[f"s{s}"][0], k) for s in (0, 1)]
        assert got["members"] == [a["selection"] for a in alone]  # member k is the plain run of seed k at grid[k]
        scores = [a["selection"]["inner_sharpe"] for a in alone]
        best = 0 if scores[0] >= scores[1] else 1
        assert got["gamma"] == GRID[best]
        assert [r["members"] for r in got["gamma_groups"]] == [[0], [1]]
        for row, solo in zip(got["gamma_groups"], alone):  # each group's own validation (reporting only) = its solo run's
            assert (row["validation"]["sharpe"], row["validation"]["trade_count"]) == (solo["agent"]["sharpe"], solo["agent"]["trade_count"])
        record = got["abstain"]
        assert record["z"] == pytest.approx(adjusted_z(3.0, 2)) and record["inner_sharpes"] == [scores[best]]
        assert f"γ {GRID[best]:g}" in out and summary["folds"][k]["gamma"] == GRID[best]
        assert f"<td>{GRID[best]:g}</td>" in page
        # the fold's network is the chosen member's: what the flat fold replaced scores what that run scored
        chosen = alone[best]["agent"]
        if record["flat"]:
            assert (record["all_members"]["sharpe"], record["all_members"]["trade_count"]) == (chosen["sharpe"], chosen["trade_count"])
        else:
            assert (_metrics(team, k)["agent"]["sharpe"], _metrics(team, k)["agent"]["trade_count"]) == (chosen["sharpe"], chosen["trade_count"])
