"""Check mode (``accel.check``, ``foxhunt.agents.dqn.checks``) and the addresses the captured graphs read.

Check mode counts each invariant's violations on the device, makes the bad values safe and names
them at the epoch readback: each injected fault below would otherwise end the run in the failing
op (on the CPU an IndexError / RuntimeError, on CUDA a device-side assert that names nothing). The
address tests are the CPU proof that nothing a captured CUDA graph reads is re-allocated by a new
fold or by a second trainer on another market (another length and feature count) in the same
process, as the scorecard runs its scenarios. The GPU test runs two scorecard scenarios of different
lengths and feature counts back to back with the fused backend in CUDA graphs.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.accel.backend import resolve  # noqa: E402
from foxhunt.agents.dqn.checks import CHECK_FIELDS, CheckFailed, captured_tensors, pointers  # noqa: E402
from foxhunt.config import build_config  # noqa: E402
from foxhunt.folds import FoldRange  # noqa: E402
from foxhunt.testing import forbid_host_reads  # noqa: E402
from tests.agents.dqn_helpers import small_market, small_trainer  # noqa: E402

FUSED = dict(acting="fused", env_step="fused", train_step="fused", replay="fused", sampler="proportional",
             tree_arity=32, hidden=(16, 16), head_hidden=8, matmul_precision="fp32")
needs_triton = pytest.mark.skipif(not accel_triton.status("cpu").usable, reason="Triton (TRITON_INTERPRET=1) needed")


def test_accel_check_is_off_by_default_and_turns_check_mode_on_in_the_plan():
    off = build_config({})
    on = build_config({"accel": {"check": True}})
    assert not resolve(off.accel, off.dqn, "cpu").check
    plan = resolve(on.accel, on.dqn, "cpu")
    assert plan.check and "check=on" in plan.summary()
    tr = small_trainer(check=True)
    assert tr.checks is not None and tr.collector.checks is tr.checks and tr.learner.checks is tr.checks
    assert small_trainer().checks is None


def test_a_clean_epoch_counts_no_violation_the_summary_carries_every_check_and_no_host_read_is_added():
    tr = small_trainer(check=True)
    s = tr.train_epoch()
    assert s["updates"] > 0 and all(s[k] == 0 for k in CHECK_FIELDS)
    with forbid_host_reads():  # the checks sit inside the captured round and train step
        tr.collector.round()
        tr.learner.train_step()


@needs_triton
def test_an_out_of_range_greedy_action_is_clamped_and_named_instead_of_failing_the_gather():
    """The H200 stop: the fused acting pass returned action n_actions (a NaN Q row) and the
    collector's q.gather failed. Injected here at the acting pass's output."""
    for check in (False, True):
        tr = small_trainer(check=check, eps_start=0.0, eps_end=0.0, **FUSED)
        act = tr.collector._fused.act

        def bad_act(obs, act=act, n=tr.env.n_actions):
            q, greedy = act(obs)
            greedy[:7] = n
            return q, greedy

        tr.collector._fused.act = bad_act
        if not check:
            with pytest.raises(RuntimeError, match="out of bounds"):
                tr.collector.round()
            continue
        with pytest.raises(CheckFailed, match=r"fold 0, epoch 0: greedy actions outside \[0, n_actions\).*: 112"):
            tr.train_epoch()  # 4 rounds x 4 steps x 7 envs
        assert int(tr.replay.storage.action.max()) < tr.env.n_actions


def test_a_bar_past_the_data_is_clamped_and_named_instead_of_failing_the_observation_gather():
    for check in (False, True):
        tr = small_trainer(check=check)
        tr.env.state.bar[:3] = tr.market.n_bars - 1  # t + 1 = T: past the data
        if not check:
            with pytest.raises(IndexError):
                tr.collector.round()
            continue
        with pytest.raises(CheckFailed, match=r"env bars \(t or t\+1\) outside the fold's training range"):
            tr.train_epoch()
        assert int(tr.replay.storage.next_bar.max()) <= tr.market.n_bars - 1


def test_corrupt_replay_contents_are_named_when_sampled():
    tr = small_trainer(check=True, warmup_transitions=0)
    tr.collector.round()
    st = tr.replay.storage
    st.bar[: st.size] = tr.market.n_bars + 5  # e.g. a stale graph writing another market's bars
    st.action[: st.size] = -1
    tr.monitor.reset()
    tr.learner.train_step()  # the gathers see clamped values: no IndexError
    tr.learner.flush_records(1)
    tr.monitor.start_readback(0)
    with pytest.raises(CheckFailed, match="bar or next bar lies outside the data.*action lies outside"):
        tr._collect_summary()


def _two_folds(m):
    n = m.n_bars
    return FoldRange(0, 0, int(n * 0.5), int(n * 0.5) + 10, int(n * 0.7)), FoldRange(1, 0, int(n * 0.7), int(n * 0.7) + 10, n)


@needs_triton
def test_graph_read_tensors_keep_their_addresses_across_folds_and_a_second_trainer_on_another_market():
    """Trainer A (3,000 bars, 6 features) over two folds, then trainer B (1,500 bars, 7 features) in
    the same process, then A again: every tensor the captured steps read keeps its address, and B
    shares none with A (no module- or class-level cache carries A's buffers, shapes or sizes)."""
    ma, mb = small_market(3_000, 6, seed=0), small_market(1_500, 7, seed=1)
    # one round an epoch: every captured part (fused env step, acting, train step, PER trees) runs in it
    a = small_trainer(ma, check=True, warmup_transitions=0, rounds_per_epoch=1, **FUSED)
    fa0, fa1 = _two_folds(ma)
    a.reset_for_fold(fa0)
    a.train_epoch()
    before = pointers(a)
    assert {"learner.fused.features", "collector.fused.online.w1", "env.state.bar", "sampler.sum_tree",
            "storage.bar", "sampler._out.32.idx"} <= set(before)
    a.reset_for_fold(fa1)  # verify_addresses: CheckFailed if anything moved
    a.train_epoch()
    assert pointers(a) == before
    b = small_trainer(mb, check=True, warmup_transitions=0, rounds_per_epoch=1, **FUSED)
    fb0, fb1 = _two_folds(mb)
    for f in (fb0, fb1):
        b.reset_for_fold(f)
        s = b.train_epoch()
        assert s["updates"] > 0
    shared = {t.data_ptr() for t in captured_tensors(a).values()} & {t.data_ptr() for t in captured_tensors(b).values()}
    assert not shared
    assert b.learner.fused._tensors["features"].shape == (1_500, 7) and b.collector._fused.online.obs_dim == 10
    a.reset_for_fold(fa0)
    a.train_epoch()
    assert pointers(a) == before


def test_a_re_allocated_graph_read_tensor_is_named_at_the_next_fold():
    tr = small_trainer(check=True)
    tr.train_epoch()
    tr.env.obs = torch.zeros_like(tr.env.obs)  # what a replayed graph would then read stale
    with pytest.raises(CheckFailed, match=r"captured CUDA graphs changed address: env\.obs re-allocated"):
        tr.reset_for_fold(tr.market.fold)


def test_cli_train_with_accel_check_runs_in_check_mode_and_logs_the_counters(tmp_path):
    """``foxhunt train --set accel.check=true`` in a fresh process: the plan says check=on, every
    epoch row of metrics.jsonl carries the counters (all 0 on a healthy run)."""
    import json
    import subprocess
    import sys

    from tests.train.conftest import tiny_config

    cfg = tiny_config(tmp_path, epochs=2)
    cmd = [sys.executable, "-m", "foxhunt.cli", "train", "--config", str(cfg), "--name", "chk", "--folds", "1",
           "--set", "accel.check=true"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "check=on" in res.stdout
    run = tmp_path / "runs" / "chk"
    assert json.loads((run / "accel.json").read_text())["check"] is True
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r[k] == 0 for r in rows for k in CHECK_FIELDS)


# ---------------------------------------------------------------------- GPU (the H200 scorecard stop)
@pytest.mark.gpu
def test_gpu_two_scorecard_markets_back_to_back_with_the_fused_backend_in_cuda_graphs(tmp_path):
    """no_edge (minute bars, 51 features) then leak (daily bars, 52 features: the scenario that
    stopped with a gather out of bounds) through the scorecard's runner in one process, with
    configs/h200-fast.toml (fused backend, CUDA graphs, bf16 acting) shrunk, in check mode."""
    if accel_triton.is_interpreted():
        pytest.skip("needs compiled Triton on CUDA")
    import tomllib
    from pathlib import Path

    from foxhunt.scorecard.build import Size
    from foxhunt.scorecard.markets import SPACING, make_scenario
    from foxhunt.scorecard.run import run_scenario

    cfg = Path(__file__).resolve().parents[2] / "configs" / "h200-fast.toml"
    base = tomllib.loads(cfg.read_text())
    size = Size("gpu-test", bars=120_000, train=40_000, val=10_000, max_folds=2, real_train=2_500, real_val=500,
                epochs=2, daily_bars=30_000, daily_train=12_000, daily_val=3_000)
    over = ["run.device=\"cuda\"", "train.ensemble=1", "accel.check=true", "accel.acting=\"fused\"", "dqn.n_envs=1024", "dqn.rounds_per_epoch=6",
            "dqn.train_steps_per_round=6", "dqn.batch_size=1024", "dqn.buffer_capacity=131072",
            "dqn.warmup_transitions=16384", "env.episode_length=512"]
    for name in ("no_edge", "leak"):
        sc = make_scenario(name, size.n_bars(SPACING[name]))
        r = run_scenario(sc, base, size, over, tmp_path / name, str(cfg), baselines=())  # CheckFailed names a fault
        assert r.n_folds == 2 and r.agent.summary()["sharpe"] == r.agent.summary()["sharpe"]
    torch.cuda.synchronize()
