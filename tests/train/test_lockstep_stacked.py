"""dqn.stack_members: a fold's DQN members take their updates as one stacked program (agents.dqn.member_stack)
run by the lockstep after round r of every member. On the CPU (the fused train step eager, named
explicitly: auto picks the torch step there) the members train what they train with the flag off within
float32 rounding (the stack's batched GEMMs may sum in another order), pick the same epochs, count
the same updates; the runner writes the same files; a killed stacked run resumes to the uninterrupted
stacked run's result; the stack's joint collection rounds (one step for every member's round) train bit for bit
what each member's own rounds train; the flag off builds no stack; contradictions are one-line ConfigErrors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.config import Config, load_config
from foxhunt.errors import ConfigError
from foxhunt.pipeline import prepare_market
from foxhunt.train import checkpoint as ckpt
from foxhunt.train.lockstep import Lockstep, MemberStack
from foxhunt.train.runner import WalkForwardRunner
from tests.train.conftest import snapshot, tiny_config
from tests.train.test_lockstep import _states

RTOL = 1e-5
"""float32: weight differences within this fraction of the tensor's largest magnitude (measured ~1e-7
after two epochs; batched GEMMs' summation order)."""
METRIC_RTOL = 1e-4
"""Validation metrics (the greedy backtest of the fold's model): within this relative tolerance (equal
in the runs measured: the greedy actions did not change)."""

FUSED = {"accel": {"train_step": "fused"}, "dqn": {"joint_rounds": True}}  # the stacks collect batched unless a test says
GRIDS = {"ensemble": {"ensemble": 2}, "gamma-grid": {"ensemble": 2, "gamma_grid": [0.9, 0.5]}}


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny members' ops run fastest on one intra-op thread (two on the shared 2-core machine tripled
    these tests' time); the setting is process-wide, so it is put back."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _config(tmp_path: Path, train: dict[str, Any]) -> Config:
    cfg = load_config(tiny_config(tmp_path, epochs=2, every=0, select="inner"))
    return cfg.replace(train={"abstain": False, "inner_fraction": 0.1, **train}, folds={"max_folds": 1, "val": 100},
                       **FUSED)


def _unwrapped(step: Any) -> Any:
    """A stack's step as the lockstep built it (the runner's PhaseTimer wraps it)."""
    return getattr(step, "__wrapped__", step)


def _train(cfg: Config) -> tuple[WalkForwardRunner, list[dict[str, float]]]:
    runner = WalkForwardRunner(prepare_market(cfg))
    return runner, [a.metrics[0] for a in runner.score_folds()]


def _assert_close_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        scale = max(a[k].abs().max().item(), 1e-30)
        assert (a[k] - b[k]).abs().max().item() <= RTOL * scale, k


def _assert_close_metrics(a: dict[str, float], b: dict[str, float]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if math.isnan(a[k]):
            assert math.isnan(b[k]), k
        else:
            assert b[k] == pytest.approx(a[k], rel=METRIC_RTOL, abs=1e-9), k


@pytest.mark.parametrize("grid", list(GRIDS))
def test_stacked_members_equal_the_same_members_unstacked_within_float32_rounding(tmp_path: Path, grid: str) -> None:
    cfg = _config(tmp_path, GRIDS[grid])
    apart, metrics_apart = _train(cfg)
    stacked, metrics = _train(cfg.replace(dqn={"stack_members": True}))
    assert apart.lockstep.stacks == [] and len(stacked.lockstep.stacks) == 1
    assert all(t.updates_by is stacked.lockstep.stacks[0].trainers[0].updates_by is not None for t in stacked.members)
    joint = _unwrapped(stacked.lockstep.stacks[0].rounds)  # every member's collection round as one step (timed)
    assert joint is not None and all(t.rounds_by is joint and t._round_step.calls == 0 for t in stacked.members)
    assert joint.calls == 2 * stacked.members[0].cfg.rounds_per_epoch  # 1 fold x 2 epochs
    rounds = _unwrapped(stacked.lockstep.stacks[0].step).calls
    # the epoch log's collect_s / train_s time the stack's steps (member 0's own are never called)
    assert stacked.timer.calls == {"collect_s": joint.calls, "train_s": rounds}
    assert rounds > 0  # the stack ran every member's updates, and no member ran its own (none counted twice):
    assert all(int(t.learner.updates) == rounds * t.cfg.train_steps_per_round for t in stacked.members)
    for a, b in zip(apart.members, stacked.members):  # the same updates counted and taken
        assert int(a.learner.updates) == int(b.learner.updates) > 0
        assert a.last_summary["updates"] == b.last_summary["updates"] > 0  # the epoch summary's count, exactly
        assert a.last_summary.values == pytest.approx(b.last_summary.values, rel=METRIC_RTOL, nan_ok=True)
    assert [s.best_epoch for s in stacked.selectors] == [s.best_epoch for s in apart.selectors]
    for a, b in zip(_states(apart), _states(stacked)):
        _assert_close_states(a, b)
    for a, b in zip(metrics_apart, metrics):
        _assert_close_metrics(a, b)


BATCHED_CASES = {"torch-gamma-grid": (GRIDS["gamma-grid"], False),
                 "fused-kernels-decision-grid-counter-draws": ({"ensemble": 2, "decision_grid": [1, 3]}, True)}


@pytest.mark.parametrize("case", list(BATCHED_CASES))
def test_the_stacks_batched_collection_rounds_train_bit_for_bit_what_each_members_own_rounds_train(
        tmp_path: Path, case: str) -> None:
    """Batched rounds (the members' envs one env of members x envs, their steps one program) change the host's
    launches and the kernels' shapes, not a member's arithmetic or its order (dqn.joint_rounds = false: each
    member launches its own round). A decision grid's members share the one env too (each env stops after its
    member's k). kernels: the fused env step and acting kernels (Triton; the interpreter on a CPU), as on a GPU,
    and counter-based draws (every member's exploration and episode-start draws one op each)."""
    grid, kernels = BATCHED_CASES[case]
    cfg = _config(tmp_path, grid).replace(dqn={"stack_members": True})
    if kernels:
        cfg = cfg.replace(accel={"env_step": "fused", "acting": "fused"}, train={"epochs": 1},  # interpreted: slow
                          dqn={"rounds_per_epoch": 3, "hidden": [16, 16], "head_hidden": 8, "counter_draws": True})
    joint, metrics_joint = _train(cfg)
    own, metrics_own = _train(cfg.replace(dqn={"joint_rounds": False}))
    rounds = _unwrapped(joint.lockstep.stacks[0].rounds)
    assert rounds is not None and rounds.collection is not None and own.lockstep.stacks[0].rounds is None
    if kernels:  # the fused env step over the stack's one env, the members' fused acting passes in one launch each
        assert type(rounds.collection._env_step).__name__ == "FusedEnvStep" and rounds.collection.fused
        assert rounds.collection.packs is not None and rounds.collection.packs[0].members == len(joint.members)
        assert rounds.collection.draw_seed is not None and rounds.collection.env.sampler.counters is not None
    assert all(t._round_step.calls > 0 for t in own.members)
    for a, b in zip(_states(own), _states(joint)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.dumps(metrics_own) == json.dumps(metrics_joint)  # NaN fields included
    assert [s.best_epoch for s in own.selectors] == [s.best_epoch for s in joint.selectors]


def test_the_batched_rounds_make_each_members_env_and_buffers_views_of_its_rows_and_batch_a_decision_grid(
        tmp_path: Path) -> None:
    from foxhunt.agents.dqn.stacked_collection import unsupported

    cfg = _config(tmp_path, GRIDS["ensemble"]).replace(dqn={"stack_members": True})
    runner = WalkForwardRunner(prepare_market(cfg))
    col = _unwrapped(runner.lockstep.stacks[0].rounds).collection
    n = cfg.dqn.n_envs
    for m, t in enumerate(runner.members):  # member m's tensors are rows m*N ... of the stack's
        assert t.env.state.bar.data_ptr() == col.env.state.bar[m * n].data_ptr()
        assert t.env.sampler.uniform.data_ptr() == col.env.sampler.uniform[m * n].data_ptr()
        assert t.collector.r_td.data_ptr() == col.buffers["r_td"][m].data_ptr()
        assert t.collector.env_steps.data_ptr() == col.env_steps[m].data_ptr()
    # members at different decision intervals (a decision grid) share the one env: each env decides every its
    # member's own k bars, up to the largest
    grid = WalkForwardRunner(prepare_market(_config(tmp_path, {"ensemble": 2, "decision_grid": [1, 2]}).replace(dqn={"stack_members": True})))
    assert unsupported(grid.members) is None
    env = _unwrapped(grid.lockstep.stacks[0].rounds).collection.env
    assert env.decision_interval == 2 and env.params.decision_bars.tolist() == [1] * n + [2] * n
    # what they cannot share: a member that differs in the env's structure
    mixed = WalkForwardRunner(prepare_market(_config(tmp_path, GRIDS["ensemble"]).replace(dqn={"stack_members": True})))
    mixed.members[1].env.params.base = mixed.members[1].env.params.base.model_copy(update={"reward_mode": "pnl"})
    assert unsupported(mixed.members) == "member 1 differs in env.reward_mode"


def test_the_flag_off_builds_no_stack_and_hands_off_nothing(tmp_path: Path) -> None:
    runner = WalkForwardRunner(prepare_market(_config(tmp_path, GRIDS["ensemble"])))
    assert runner.lockstep.stacks == [] and all(t.updates_by is None for t in runner.members)
    # one member asks for nothing either (a stack needs two or more)
    single = WalkForwardRunner(prepare_market(_config(tmp_path, {}).replace(dqn={"stack_members": True})))
    assert single.lockstep.stacks == [] and single.members[0].updates_by is None


@pytest.mark.parametrize("sections, message", [
    ({"accel": {"train_step": "auto"}}, r"^accel\.train_step = 'torch' on cpu: dqn\.stack_members = true stacks the "
                                        r"members' fused train steps"),
    ({"train": {"lockstep": False}}, r"^dqn\.stack_members = true .* needs train\.lockstep = true$"),
])
def test_a_stack_without_the_fused_train_step_or_the_lockstep_is_a_one_line_config_error(
        tmp_path: Path, sections: dict[str, Any], message: str) -> None:
    cfg = _config(tmp_path, GRIDS["gamma-grid"]).replace(dqn={"stack_members": True})
    with pytest.raises(ConfigError, match=message) as info:
        WalkForwardRunner(prepare_market(cfg.replace(**sections)))
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="stack_members = true cannot combine with overlap_collection"):
        cfg.replace(dqn={"overlap_collection": True})


def test_a_stacked_member_refuses_to_run_an_epoch_alone(tmp_path: Path) -> None:
    cfg = _config(tmp_path, GRIDS["gamma-grid"]).replace(dqn={"stack_members": True})
    runner = WalkForwardRunner(prepare_market(cfg))
    with pytest.raises(RuntimeError, match="member stack"):
        runner.members[0].run_epoch()


class _Member:
    """A stand-in member: ``rounds`` rounds an epoch, logged; a replay of ``size`` transitions."""

    def __init__(self, name: str, rounds: int, log: list[str], size: int = 64) -> None:
        self.name, self.rounds, self.log = name, rounds, log
        self.cfg = SimpleNamespace(warmup_transitions=32, batch_size=32, train_steps_per_round=2)
        self.replay = SimpleNamespace(storage=SimpleNamespace(size=size))

    def epoch_steps(self):
        for r in range(self.rounds):
            self.log.append(f"{self.name}{r}")
            yield

    def finish_epoch(self) -> str:
        return self.name


def test_a_stacks_updates_run_after_round_r_of_each_of_its_members_and_before_round_r_plus_one() -> None:
    log: list[str] = []
    a, b, c = _Member("a", 2, log), _Member("b", 2, log), _Member("c", 2, log)
    stack = MemberStack((0, 2), (a, c), lambda: log.append("S"), None)  # type: ignore[arg-type]
    step = Lockstep([a, b, c], torch.device("cpu"), stacks=[stack])
    step.run_epoch()
    assert log == ["a0", "b0", "c0", "S", "a1", "b1", "c1", "S"]
    log.clear()
    a.replay.storage.size = c.replay.storage.size = 16  # not yet a batch: the trainer's rule, no updates
    step.run_epoch()
    assert log == ["a0", "b0", "c0", "a1", "b1", "c1"]
    # a tune population's subset: a stack's members stay (renumbered) or leave; one that leaves (a pruned trial of a
    # population stacked across trials) keeps its row in the program but is no longer waited for nor asked
    assert step.subset([1, 2, 0]).stacks[0].members == (2, 1)
    assert step.subset([1]).stacks == []
    a.replay.storage.size = c.replay.storage.size = 1 << 20
    part = step.subset([0, 1])
    assert part.stacks[0].members == (0,) and part.stacks[0].trainers == (a,)
    c.replay.storage.size = 16  # the member that left: its replay is no longer asked
    log.clear()
    part.run_epoch()
    assert log == ["a0", "b0", "S", "a1", "b1", "S"]


def test_a_joint_stack_runs_round_r_of_its_members_after_their_set_up_and_before_their_round_r_bookkeeping() -> None:
    log: list[str] = []
    a, b, c = _Member("a", 2, log), _Member("b", 2, log), _Member("c", 2, log)
    for m in (a, c):
        m.cfg.rounds_per_epoch = 2

        def steps(m=m):  # DQNTrainer.epoch_steps with rounds_by set: its set-up, then one yield a round
            m.log.append(f"{m.name}S")
            yield
            yield from _Member.epoch_steps(m)

        m.epoch_steps = steps  # type: ignore[method-assign]
    stack = MemberStack((0, 2), (a, c), lambda: log.append("U"), None, lambda: log.append("R"))  # type: ignore[arg-type]
    Lockstep([a, b, c], torch.device("cpu"), stacks=[stack]).run_epoch()
    assert log == ["aS", "b0", "cS", "R", "a0", "b1", "c0", "U", "R", "a1", "c1", "U"]


def test_a_member_that_fails_mid_epoch_is_no_longer_waited_for_by_its_stack() -> None:
    """A failed trial of a population stacked across trials must not stop the others' updates."""
    log: list[str] = []
    a, c = _Member("a", 3, log), _Member("c", 3, log)

    def failing():
        log.append("c0")
        yield
        raise RuntimeError("diverged")

    def filling():  # a's replay holds a batch from round 1 on; c's, which failed at round 1, never does
        for r in range(3):
            a.replay.storage.size = 16 if r == 0 else 64
            log.append(f"a{r}")
            yield

    a.epoch_steps, c.epoch_steps = filling, failing  # type: ignore[method-assign]
    a.replay.storage.size = c.replay.storage.size = 16
    step = Lockstep([a, c], torch.device("cpu"), stacks=[MemberStack((0, 1), (a, c), lambda: log.append("S"), None)])  # type: ignore[arg-type]
    errors: list[int] = []
    step.run_epoch(lambda k, exc: errors.append(k))
    assert errors == [1]
    assert log == ["a0", "c0", "a1", "S", "a2", "S"]  # round 0: no replay holds a batch yet


def test_a_population_of_stacked_trials_trains_bit_for_bit_what_each_stacked_trial_trains_alone(tmp_path: Path) -> None:
    """A tune population keeps each trial's stack its own (foxhunt.tune.population)."""
    from dataclasses import replace

    from foxhunt.tune.population import PopulationRunner

    base = _config(tmp_path, GRIDS["ensemble"]).replace(dqn={"stack_members": True})
    cfgs = [base, base.replace(dqn={"lr": 4e-3})]
    prepared = prepare_market(base)
    prepared.market.set_fold(prepared.folds[0])
    runners = [WalkForwardRunner(replace(prepared, config=c)) for c in cfgs]
    pop = PopulationRunner(runners)
    assert [st.members for st in pop.lockstep.stacks] == [(0, 1), (2, 3)]
    assert pop.score_folds([None, None]) == [None, None]
    for c, together in zip(cfgs, runners):
        alone, _ = _train(c)
        for a, b in zip(_states(alone), _states(together)):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert [s.best_epoch for s in alone.selectors] == [s.best_epoch for s in together.selectors]


def _cli(*args: str):
    return CliRunner().invoke(app, ["train", *args])


STACK_SETS = ("train.ensemble=2", "dqn.stack_members=true", "dqn.joint_rounds=true", "dqn.counter_draws=true",
              "accel.train_step=\"fused\"", "train.threads=1")
"""The stacked runs collect batched too (dqn.joint_rounds, off by default): resume and the fresh process cover it."""


def test_foxhunt_train_with_stacked_members_runs_in_a_fresh_process_and_writes_the_same_files(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, epochs=2, every=1)
    assert _cli("--config", str(cfg), "--name", "apart", "--set", "train.ensemble=2", "--set", "train.threads=1",
                "--set", "accel.train_step=\"fused\"").exit_code == 0
    cmd = [sys.executable, "-m", "foxhunt.cli", "train", "--config", str(cfg), "--name", "stacked"]
    for s in STACK_SETS:
        cmd += ["--set", s]
    env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    apart, stacked = tmp_path / "runs" / "apart", tmp_path / "runs" / "stacked"
    assert snapshot(apart).keys() == snapshot(stacked).keys()
    rows = [[json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] for run in (apart, stacked)]
    counts = [[(r["fold"], r["epoch"], r["updates"]) for r in run_rows] for run_rows in rows]
    assert counts[0] == counts[1]
    assert all(r["updates"] > 0 for r in rows[1][1:])


def test_a_killed_stacked_run_resumes_to_the_uninterrupted_stacked_result(tmp_path: Path, monkeypatch) -> None:
    """Checkpoints load in place into the stacked rows: the resumed members train on from them."""
    cfg = tiny_config(tmp_path, epochs=2, every=1)
    sets = [x for s in STACK_SETS for x in ("--set", s)]
    assert _cli("--config", str(cfg), "--name", "ref", *sets).exit_code == 0
    real, saves = ckpt.save, []

    def crashing(*a, **k):
        out = real(*a, **k)
        saves.append(out.name)
        if len(saves) == 1:  # after fold 0's first epoch: the resume loads it and trains fold 0's second epoch on
            raise RuntimeError("simulated crash right after a commit")
        return out

    monkeypatch.setattr(ckpt, "save", crashing)
    res = _cli("--config", str(cfg), "--name", "crash", *sets)
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)
    monkeypatch.setattr(ckpt, "save", real)
    run = tmp_path / "runs" / "crash"
    res = _cli("--resume", str(run))
    assert res.exit_code == 0, res.output
    assert saves[-1].startswith("f000-e00001") and f"from checkpoint {saves[-1]}" in " ".join(res.output.split())
    fold_metrics = lambda r: [p.read_bytes() for p in sorted((r / "folds").glob("fold_*/metrics.json"))]  # noqa: E731
    assert len(fold_metrics(run)) == 2 and fold_metrics(run) == fold_metrics(tmp_path / "runs" / "ref")


@pytest.mark.gpu
@pytest.mark.parametrize("grid", list(GRIDS))
def test_stacked_members_on_cuda_equal_the_same_members_unstacked_within_float32_rounding(tmp_path: Path,
                                                                                          grid: str) -> None:
    """Compiled stack, its round of updates one CUDA graph on its own stream and its members' collection rounds one
    graph of the batched collection (the updates passed on an H100 at a879a13; the batched rounds not yet run on a card)."""
    cfg = _config(tmp_path, GRIDS[grid]).replace(run={"device": "cuda"}, accel={"backend": "fused", "matmul_precision": "fp32"},
                                                  dqn={"n_envs": 256, "hidden": [64, 64], "head_hidden": 32})
    apart, metrics_apart = _train(cfg)
    stacked, metrics = _train(cfg.replace(dqn={"stack_members": True}))
    st = stacked.lockstep.stacks[0]
    assert st.stream is not None and _unwrapped(st.step).graph is not None and _unwrapped(st.rounds).graph is not None
    for a, b in zip(apart.members, stacked.members):
        assert int(a.learner.updates) == int(b.learner.updates) > 0
    assert [s.best_epoch for s in stacked.selectors] == [s.best_epoch for s in apart.selectors]
    for a, b in zip(_states(apart), _states(stacked)):
        _assert_close_states(a, b)
    for a, b in zip(metrics_apart, metrics):
        _assert_close_metrics(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("grid,counter", [({"ensemble": 2, "gamma_grid": [0.9, 0.5]}, False),
                                          ({"ensemble": 4, "decision_grid": [1, 4]}, False),
                                          ({"ensemble": 4, "decision_grid": [1, 4]}, True)],
                         ids=["gamma-grid", "decision-grid", "decision-grid-counter-draws"])
def test_batched_rounds_on_cuda_train_bit_for_bit_what_each_members_own_rounds_train(tmp_path: Path, grid: dict,
                                                                                       counter: bool) -> None:
    """On a GPU the batched round is one captured graph: the fused env step over every member's envs, each
    member's fused acting passes on its rows; elementwise over envs, so the same bits as each member's own graphs
    (a decision grid's members too: each env stops after its member's k); with counter-based draws, every
    member's draws one Triton launch each, the same bits as each member's own launch."""
    cfg = _config(tmp_path, grid).replace(
        run={"device": "cuda"}, accel={"backend": "fused", "matmul_precision": "fp32"},
        dqn={"n_envs": 256, "hidden": [64, 64], "head_hidden": 32, "stack_members": True, "counter_draws": counter})
    joint, metrics_joint = _train(cfg)
    own, metrics_own = _train(cfg.replace(dqn={"joint_rounds": False}))
    rounds = _unwrapped(joint.lockstep.stacks[0].rounds)
    assert rounds.graph is not None and rounds.collection.fused and own.lockstep.stacks[0].rounds is None
    for a, b in zip(_states(own), _states(joint)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.dumps(metrics_own) == json.dumps(metrics_joint)
    assert [s.best_epoch for s in own.selectors] == [s.best_epoch for s in joint.selectors]


def test_check_mode_accepts_the_stacks_moved_tensors_and_still_names_a_later_move(tmp_path: Path) -> None:
    """The stack re-homes each member's tensors before any capture (check mode's reference addresses are
    rebased then); a tensor rebound afterwards is still named by check mode's address check."""
    cfg = _config(tmp_path, GRIDS["ensemble"])
    cfg = cfg.replace(dqn={"stack_members": True}, accel={"train_step": "fused", "check": True})
    runner, metrics = _train(cfg)
    assert len(runner.lockstep.stacks) == 1 and metrics
    member = runner.members[0]
    member.checks.verify_addresses()  # the stacked rows are the reference: nothing moved
    member.learner.opt.m = member.learner.opt.m.clone()  # detaches member 0's Adam moment from the stack
    with pytest.raises(Exception, match="changed address"):
        member.checks.verify_addresses()
