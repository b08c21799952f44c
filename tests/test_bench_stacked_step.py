"""bench/bench_stacked_step.py: the stacked members' step (vmap over a member axis) does each member's own step,
so the benchmark compares two ways of doing the same arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench import bench_stacked_step as bss


def _args(**over):
    args = type("A", (), {})()
    args.obs, args.actions, args.hidden, args.head_hidden, args.batch, args.steps = 6, 5, [8, 8], 4, 16, 3
    args.__dict__.update(over)
    return args


def test_a_round_of_stacked_steps_equals_each_member_stepping_alone():
    args = _args()
    lay, state, batch = bss.make_members(3, args, torch.device("cpu"))
    state64 = {k: x.double() for k, x in state.items()}
    batch64 = {k: (x.double() if x.is_floating_point() else x) for k, x in batch.items()}
    hp = {"delta": 1.0, "clip": 10.0, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "lr": 1e-2, "tau": 0.05}

    def one(*a):
        return bss.member_step(lay, hp, *a)

    alone = {k: x.clone() for k, x in state64.items()}
    bss.separate_round(one, alone, batch64)()
    bss.stacked_round(torch.vmap(one), state64, batch64)()
    start = state["online"].double()
    assert (alone["online"] - start).abs().max() > 1e-3  # the round moved the weights
    for k in bss.STATE:  # float64: the member axis changes no member's arithmetic beyond rounding
        torch.testing.assert_close(state64[k], alone[k], rtol=1e-12, atol=1e-12)


def test_the_quick_run_writes_both_arms_and_their_weight_difference(tmp_path: Path):
    out = tmp_path / "s.json"
    bss.main(["--quick", "--out", str(out)])
    res = json.loads(out.read_text())
    assert [r["members"] for r in res["rows"]] == [1, 2] and not res["errors"]
    for r in res["rows"]:
        assert r["separate"]["round_s"] > 0 and r["stacked"]["round_s"] > 0
        assert r["max_abs_weight_diff"] < 1e-5
