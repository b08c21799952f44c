"""A fold's members stepped in lockstep (train.lockstep, foxhunt.train.lockstep) train exactly what they
train one after another and what each trains alone: DQN, PPO and the direct learner, members at
different decision intervals and discounts in one program; the guard names a halted member."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from foxhunt.agents.fold_trainer import TrainingHalted
from foxhunt.config import Config, load_config
from foxhunt.pipeline import prepare_market
from foxhunt.train.lockstep import Lockstep
from foxhunt.train.runner import WalkForwardRunner
from foxhunt.train.team import member_config
from tests.train.conftest import tiny_config

PPO = {"n_envs": 16, "rollout_len": 8, "iterations_per_epoch": 2, "minibatches": 2, "update_epochs": 2, "hidden": [16],
       "head_hidden": 8, "target_kl": 0.05}
DIRECT = {"window": 32, "batch_windows": 16, "steps_per_epoch": 2, "hidden": [16, 16], "head_hidden": 8,
          "relaxation": "straight_through"}


def _config(tmp_path: Path, agent: str, train: dict[str, Any]) -> Config:
    cfg = load_config(tiny_config(tmp_path, epochs=2, every=0, select="inner"))
    # one fold; a 10 % held-back window and 100-bar validation (the tiny config's 20 % and 300 bars): each epoch's
    # selection and the fold's validation are backtested bar by bar, and the claims hold at any size
    sections: dict[str, Any] = {"train": {"agent": agent, "abstain": False, "inner_fraction": 0.1, **train},
                                "folds": {"max_folds": 1, "val": 100}}
    if agent == "ppo":
        sections["ppo"] = PPO
    if agent == "direct":
        sections["direct"] = DIRECT
    if agent in ("direct", "forecast"):
        sections["env"] = {"action_mode": "factored"}
    if agent == "forecast":
        sections["forecast"] = {"hidden": [16], "batch": 64, "steps_per_epoch": 4}
    return cfg.replace(**sections)


def _train(cfg: Config) -> tuple[WalkForwardRunner, list[dict[str, float]]]:
    runner = WalkForwardRunner(prepare_market(cfg))
    agents = runner.score_folds()
    return runner, [a.metrics[0] for a in agents]


def _states(runner: WalkForwardRunner) -> list[dict[str, torch.Tensor]]:
    """Every member's trained network (after its epoch selection restored the picked epoch)."""
    from foxhunt.train.agent import policy_net

    return [{k: v.detach().clone() for k, v in policy_net(t).state_dict().items()} for t in runner.members]


def _same_metrics(a: list[dict[str, float]], b: list[dict[str, float]]) -> bool:
    """Equal metric rows (NaN equals NaN: an undefined metric is undefined in both)."""
    return all(x.keys() == y.keys() and all(x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for k in x) for x, y in zip(a, b))


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


GRIDS = {
    "dqn": {"ensemble": 2, "gamma_grid": [0.9, 0.5]},
    "ppo": {"ensemble": 2, "decision_grid": [1, 4]},
    "direct": {"ensemble": 2, "decision_grid": [1, 4]},
    "forecast": {"ensemble": 2, "decision_grid": [1, 4]},
}
"""Two members a fold: DQN's at two discounts, the other learners' at k = 1 and k = 4 (the forecast's
horizon follows its member's k)."""


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "ppo", "direct", "forecast"])
def test_a_member_in_lockstep_trains_and_selects_exactly_what_it_does_alone(tmp_path: Path, agent: str) -> None:
    cfg = _config(tmp_path, agent, GRIDS[agent])
    together, metrics = _train(cfg)
    assert together.lockstep.enabled
    picks = [s.best_epoch for s in together.selectors]
    # the last member (its own seed, and discount or interval) trained alone: the same network and pick
    k = len(together.members) - 1
    alone_cfg = member_config(cfg, k).replace(train={"ensemble": 1, "gamma_grid": [], "decision_grid": []})
    alone, _ = _train(alone_cfg)
    assert not alone.lockstep.enabled
    assert alone.members[0].env.decision_interval == together.members[k].env.decision_interval
    _assert_same(_states(alone)[0], _states(together)[k])
    assert alone.selectors[0].best_epoch == picks[k]
    if agent == "dqn":  # and the members one after another (train.lockstep = false): the same fold, exactly
        apart, metrics_apart = _train(cfg.replace(train={"lockstep": False}))
        assert not apart.lockstep.enabled
        assert _same_metrics(metrics, metrics_apart)
        for a, b in zip(_states(together), _states(apart)):
            _assert_same(a, b)
        assert picks == [s.best_epoch for s in apart.selectors]


class _Member:
    """A stand-in trainer: ``rounds`` rounds an epoch, recording the order of its rounds; halts if told."""

    def __init__(self, name: str, rounds: int, log: list[str], halt: bool = False) -> None:
        self.name, self.rounds, self.log, self.halt = name, rounds, log, halt

    def epoch_steps(self):
        for r in range(self.rounds):
            self.log.append(f"{self.name}{r}")
            yield

    def run_epoch(self) -> None:
        for _ in self.epoch_steps():
            pass

    def finish_epoch(self) -> str:
        if self.halt:
            raise TrainingHalted("training halted by the guard in fold 0, epoch 0: non-finite loss or gradient norm")
        return self.name


def test_lockstep_enqueues_round_r_of_every_member_before_round_r_plus_one_of_any() -> None:
    log: list[str] = []
    members = [_Member("a", 2, log), _Member("b", 3, log), _Member("c", 1, log)]
    assert Lockstep(members, torch.device("cpu")).train_epoch() == ["a", "b", "c"]
    assert log == ["a0", "b0", "c0", "a1", "b1", "b2"]
    log.clear()
    Lockstep(members, torch.device("cpu"), enabled=False).run_epoch()
    assert log == ["a0", "a1", "b0", "b1", "b2", "c0"]


def test_a_halted_member_is_named_in_the_guards_error() -> None:
    log: list[str] = []
    members = [_Member("a", 1, log), _Member("b", 1, log, halt=True)]
    step = Lockstep(members, torch.device("cpu"), labels=["member 0 (seed 0)", "member 1 (seed 1, decision interval 4)"])
    with pytest.raises(TrainingHalted, match=r"^member 1 \(seed 1, decision interval 4\): training halted by the guard in fold 0"):
        step.train_epoch()


class _Failing(_Member):
    """A member whose round ``at`` raises (a tune population's trial failing mid-epoch)."""

    def __init__(self, name: str, rounds: int, log: list[str], at: int) -> None:
        super().__init__(name, rounds, log)
        self.at = at

    def epoch_steps(self):
        for r in range(self.rounds):
            if r == self.at:
                raise ValueError(f"{self.name} broke in round {r}")
            self.log.append(f"{self.name}{r}")
            yield


def test_with_on_error_a_failing_member_stops_alone_and_a_subset_steps_only_its_members() -> None:
    log: list[str] = []
    members = [_Member("a", 3, log), _Failing("b", 3, log, at=1), _Member("c", 2, log, halt=True)]
    step = Lockstep(members, torch.device("cpu"), labels=["trial 0", "trial 1", "trial 2"])
    errors: list[tuple[int, str]] = []
    step.run_epoch(lambda k, exc: errors.append((k, str(exc))))
    assert log == ["a0", "b0", "c0", "a1", "c1", "a2"]  # b took no round after its failure; a and c went on
    assert step.finish(lambda k, exc: errors.append((k, str(exc)))) == ["a", "b", None]
    assert errors == [(1, "b broke in round 1"),
                      (2, "trial 2: training halted by the guard in fold 0, epoch 0: non-finite loss or gradient norm")]
    log.clear()
    assert step.subset([0, 2]).members == [members[0], members[2]]
    step.subset([0]).run_epoch()
    assert log == ["a0", "a1", "a2"]
    with pytest.raises(ValueError, match="b broke"):  # without on_error an exception propagates, as before
        step.run_epoch()


GPU_GRIDS = {"dqn": {"ensemble": 4, "gamma_grid": [0.9, 0.5], "decision_grid": [1, 4]}, **{a: GRIDS[a] for a in ("ppo", "direct")}}
"""On the GPU DQN's four members span two discounts and two intervals."""

GPU_CASES = {
    "dqn-torch": ("dqn", {"accel": {"backend": "torch"}, "dqn": {"n_envs": 256}}),
    "dqn-fused": ("dqn", {"accel": {"backend": "fused"}, "dqn": {"n_envs": 256, "hidden": [64, 64], "head_hidden": 32,
                                                                "sampler": "proportional"}}),
    "ppo-fused-env": ("ppo", {"accel": {"backend": "torch", "env_step": "fused"}, "ppo": {**PPO, "n_envs": 256}}),
    "direct": ("direct", {"accel": {"backend": "torch"}}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_members_on_their_own_cuda_streams_equal_members_one_after_another_bit_for_bit(tmp_path: Path, case: str) -> None:
    agent, sections = GPU_CASES[case]
    cfg = _config(tmp_path, agent, GPU_GRIDS[agent]).replace(run={"device": "cuda"}, **sections)
    together, metrics = _train(cfg)
    assert together.lockstep.streams is not None and len(together.lockstep.streams) == len(together.members)
    apart, metrics_apart = _train(cfg.replace(train={"lockstep": False}))
    assert _same_metrics(metrics, metrics_apart)
    for a, b in zip(_states(together), _states(apart)):
        _assert_same(a, b)
    assert [s.best_epoch for s in together.selectors] == [s.best_epoch for s in apart.selectors]


@pytest.mark.gpu
def test_a_lockstep_epoch_of_graphed_members_runs_without_any_sync_but_the_readback(tmp_path: Path) -> None:
    from foxhunt.testing import cuda_sync_errors

    cfg = _config(tmp_path, "dqn", GPU_GRIDS["dqn"]).replace(run={"device": "cuda"}, **GPU_CASES["dqn-torch"][1])
    runner = WalkForwardRunner(prepare_market(cfg))
    runner._begin_fold(runner.folds[0], warm_start=False)
    runner.lockstep.train_epoch()  # the first epoch captures every member's graphs
    runner.lockstep.train_epoch()  # the replay buffer is warm: the update graphs are captured too
    with cuda_sync_errors("cuda"):
        runner.lockstep.run_epoch()
    assert all(s is not None for s in runner.lockstep.finish())


@pytest.mark.parametrize("hold,kernels,grid,counter", [(0.0, False, "gamma", False), (0.3, False, "gamma", True),
                                                     (0.3, True, "decision", False)],
                         ids=["torch-gamma-grid", "explore-hold-counter-draws", "explore-hold-fused-env-decision-grid"])
def test_ppo_members_batched_rollouts_train_bit_for_bit_what_their_own_rollouts_train(
        tmp_path: Path, hold: float, kernels: bool, grid: str, counter: bool) -> None:
    """ppo.batched_rollouts: the members' envs one env of members x envs and their rollout steps one program;
    each member's actor-critic pass, random draws (its own generator; with counter draws one op for all members)
    and update stay its own, so every member trains and selects exactly what it does rolling out alone; a decision
    grid's members too (each env stops after its member's k). kernels: the fused env step (the interpreter on a
    CPU), as on a GPU."""
    cfg = _config(tmp_path, "ppo", {"ensemble": 2, "gamma_grid": [0.9, 0.5]} if grid == "gamma" else GRIDS["ppo"])
    cfg = cfg.replace(ppo={"explore_hold": hold, "counter_draws": counter})
    if kernels:  # one epoch: the interpreted kernel steps slowly
        cfg = cfg.replace(accel={"env_step": "fused"}, train={"epochs": 1})
    batched, metrics_batched = _train(cfg.replace(ppo={"batched_rollouts": True}))
    own, metrics_own = _train(cfg)
    st = batched.lockstep.stacks
    assert len(st) == 1 and st[0].step is None and own.lockstep.stacks == []
    rounds = getattr(st[0].rounds, "__wrapped__", st[0].rounds)
    assert rounds.collection is not None and all(t._round_step.calls == 0 for t in batched.members)
    assert all(t.rollout.env_steps.item() > 0 for t in batched.members)
    assert (rounds.collection.draw_seed is not None) == counter == (rounds.collection.env.sampler.counters is not None)
    for a, b in zip(_states(own), _states(batched)):
        _assert_same(a, b)
    assert _same_metrics(metrics_own, metrics_batched)
    assert [s.best_epoch for s in own.selectors] == [s.best_epoch for s in batched.selectors]
    if grid == "decision":  # one env of both members: each env decides every its member's own k bars
        env = rounds.collection.env
        assert env.decision_interval == 4 and sorted(set(env.params.decision_bars.tolist())) == [1, 4]


@pytest.mark.gpu
@pytest.mark.parametrize("grid,counter", [({"ensemble": 2, "gamma_grid": [0.9, 0.5]}, False),
                                          ({"ensemble": 2, "decision_grid": [1, 4]}, False),
                                          ({"ensemble": 2, "decision_grid": [1, 4]}, True)],
                         ids=["gamma-grid", "decision-grid", "decision-grid-counter-draws"])
def test_ppo_batched_rollouts_on_cuda_train_bit_for_bit_what_their_own_rollouts_train(tmp_path: Path, grid: dict,
                                                                                     counter: bool) -> None:
    """On a GPU the batched rollout is one captured graph (the fused env step over every member's envs, a decision
    grid's members at their own k; counter draws: every member's draws one Triton launch each)."""
    cfg = _config(tmp_path, "ppo", grid).replace(  # the env step fused, as ppo-fused-env's streams test runs it
        run={"device": "cuda"}, accel={"backend": "torch", "env_step": "fused", "matmul_precision": "fp32"},
        ppo={**PPO, "n_envs": 256, "counter_draws": counter, "explore_hold": 0.3 if counter else 0.0})
    batched, metrics_batched = _train(cfg.replace(ppo={"batched_rollouts": True}))
    own, metrics_own = _train(cfg)
    rounds = getattr(batched.lockstep.stacks[0].rounds, "__wrapped__", batched.lockstep.stacks[0].rounds)
    assert rounds.graph is not None
    for a, b in zip(_states(own), _states(batched)):
        _assert_same(a, b)
    assert _same_metrics(metrics_own, metrics_batched)
