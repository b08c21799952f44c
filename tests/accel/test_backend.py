"""The backend resolver: every accepted [accel] set runs one epoch (and its validation backtest) on
the CPU — Triton kernels through the interpreter — and every contradictory set is refused with a
one-line ConfigError (exit 2 from the CLI, nothing written). TRITON_INTERPRET=1 is set here before
Triton is imported (without CUDA)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.accel.backend import NOT_AUTO, PARTS, ExecutionPlan, fall_back, resolve, resolve_config  # noqa: E402
from foxhunt.accel.config import REMOVED_KEYS, AccelConfig  # noqa: E402
from foxhunt.agents.dqn.config import DQNConfig  # noqa: E402
from foxhunt.agents.dqn.trainer import DQNTrainer  # noqa: E402
from foxhunt.agents.replay import ProportionalPER, RankPER, UniformSampler, WidePER  # noqa: E402
from foxhunt.backtest.evaluator import Backtester  # noqa: E402
from foxhunt.backtest.policies import GreedyPolicy  # noqa: E402
from foxhunt.config import load_config  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from foxhunt.errors import ConfigError  # noqa: E402
from tests.agents.dqn_helpers import small_market  # noqa: E402

CPU = torch.device("cpu")
SAMPLERS = [("uniform", 2), ("rank", 2), ("proportional", 2), ("proportional", 32)]
BACKENDS = ["auto", "torch", "compiled", "fused"]
INTERPRETED = accel_triton.status(CPU).mode == "interpreted"


def dqn(sampler: str = "proportional", arity: int = 2, **kw) -> DQNConfig:
    base = dict(n_envs=8, rollout_len=2, rounds_per_epoch=2, train_steps_per_round=1, batch_size=16,
                buffer_capacity=1_024, warmup_transitions=16, hidden=(16, 16), head_hidden=8)
    base.update(kw)
    return DQNConfig(sampler=sampler, tree_arity=arity, **base)


def accepted_plans() -> dict[ExecutionPlan, tuple[str, int]]:
    """Every distinct plan the resolver accepts on the CPU over backends × samplers × part overrides,
    each with one sampler it was accepted with; the samplers rotate among the plans of equal
    ``replay`` so that every (replay choice, sampler) pair the resolver accepts is run at least once."""
    accepted: dict[ExecutionPlan, list[tuple[str, int]]] = {}
    overrides = [{}] + [{part: v} for part in PARTS for v in ("torch", "compiled", "fused")]
    for backend, (sampler, arity), over in itertools.product(BACKENDS, SAMPLERS, overrides):
        try:
            accel = AccelConfig(backend=backend, **over)
        except Exception:  # a value the part does not offer (pydantic): not a set the resolver sees
            continue
        try:
            plan = resolve(accel, dqn(sampler, arity), CPU)
        except ConfigError:
            continue
        key = ExecutionPlan(**{**plan.to_dict(), "notes": {}, "backend": "-"})
        if (sampler, arity) not in accepted.setdefault(key, []):
            accepted[key].append((sampler, arity))
    plans: dict[ExecutionPlan, tuple[str, int]] = {}
    for replay in ("torch", "fused"):
        group = [p for p in accepted if p.replay == replay]
        pairs = sorted({s for p in group for s in accepted[p]})
        for i, p in enumerate(group):
            want = [s for s in pairs if s in accepted[p]]
            plans[p] = want[i % len(want)]
        missing = set(pairs) - {plans[p] for p in group}
        for p in group:  # a pair no rotation reached: give it to a plan that accepts it
            for s in sorted(missing & set(accepted[p])):
                plans[p] = s
                missing.discard(s)
                break
    return plans


def test_cpu_auto_is_torch_and_the_plan_says_why():
    plan = resolve(AccelConfig(), dqn(), CPU)
    assert plan.backend == "torch" and all(getattr(plan, p) == "torch" for p in PARTS) and not plan.graphs
    assert "CPU" in plan.notes["backend"]
    assert plan.summary().startswith("accel: backend=torch on cpu")
    assert json.loads(plan.to_json())["env_step"] == "torch"


@pytest.mark.parametrize("accel, sampler, match", [
    (dict(backend="compiled"), "proportional", "accel.backend = 'compiled' on cpu: torch.compile paths are tested on CUDA only"),
    (dict(train_step="compiled"), "proportional", "accel.train_step = 'compiled' on cpu"),
    (dict(graphs="on"), "proportional", "accel.graphs = 'on' on cpu: CUDA graphs need a CUDA device"),
    (dict(replay="fused"), "uniform", "accel.replay = 'fused' on cpu: dqn.sampler = 'uniform' has no trees"),
    (dict(acting="fused"), "proportional", None),  # refused only for the 3-layer network below
])
def test_contradictory_sets_are_refused_with_one_line(accel, sampler, match):
    if match is None:
        with pytest.raises(ConfigError, match="accel.acting = 'fused' on cpu: dqn: the fused kernels need two trunk layers"):
            resolve(AccelConfig(**accel), dqn(sampler, hidden=(16, 16, 16)), CPU)
        with pytest.raises(ConfigError, match="accel.backend = 'fused' on cpu: acting: dqn: .*override accel.acting"):
            resolve(AccelConfig(backend="fused"), dqn(sampler, hidden=(600, 16)), CPU)
        return
    with pytest.raises(ConfigError, match=match) as err:
        resolve(AccelConfig(**accel), dqn(sampler), CPU)
    assert "\n" not in str(err.value)


def test_fused_without_usable_triton_is_refused_and_auto_never_picks_it(monkeypatch):
    monkeypatch.setattr(accel_triton, "is_interpreted", lambda: False)
    for accel in (dict(backend="fused"), dict(env_step="fused"), dict(eval="fused")):
        with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
            resolve(AccelConfig(**accel), dqn(), CPU)
    assert resolve(AccelConfig(), dqn(), CPU).backend == "torch"


def test_removed_keys_are_refused_naming_their_replacement():
    for section, keys in REMOVED_KEYS.items():
        for key, instead in keys.items():
            with pytest.raises(ConfigError, match=f"{section}.{key} was removed; use ") as err:
                load_config(overrides=[f"{section}.{key}=true"])
            assert instead.split()[0] in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="use dqn.sampler = 'proportional' with dqn.tree_arity = 32"):
        load_config(overrides=['dqn.sampler="proportional_wide"'])
    with pytest.raises(ConfigError, match="tree_arity = 32 applies to sampler = 'proportional' only"):
        load_config(overrides=['dqn.sampler="uniform"', "dqn.tree_arity=32"])


def test_a_contradiction_from_the_cli_is_one_line_exit_2_and_writes_nothing(tmp_path):
    cmd = [sys.executable, "-m", "foxhunt.cli", "train", "--device", "cpu", "--set", 'accel.backend="compiled"',
           "--set", f'run.out_dir="{(tmp_path / "runs").as_posix()}"']
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "accel.backend = 'compiled' on cpu" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_the_accepted_cpu_sets_are_the_expected_ones():
    plans = accepted_plans()
    assert all(p.train_step != "compiled" and p.env_step != "compiled" and not p.graphs for p in plans)
    fused_parts = {p for plan in plans for p in PARTS if getattr(plan, p) == "fused"}
    assert fused_parts == (set(PARTS) if INTERPRETED else set())


@pytest.mark.slow
def test_every_accepted_set_runs_one_epoch_and_its_validation_backtest_on_the_cpu():
    """Each distinct accepted plan: one epoch trains (weights move, updates counted) with the
    components the plan names, and the greedy policy backtests through the plan's eval path."""
    market = small_market()
    params = EnvParams(episode_length=50, reward_scale=100.0)
    samplers = {"uniform": UniformSampler, "rank": RankPER, 2: ProportionalPER, 32: WidePER}
    runs: set[tuple[str, str, int]] = set()
    for plan, (sampler, arity) in accepted_plans().items():
        cfg = dqn(sampler, arity)
        tr = DQNTrainer(market, params, cfg, seed=1, plan=plan)
        s = tr.replay.sampler
        assert isinstance(s, samplers[sampler if sampler != "proportional" else arity]), plan
        if sampler == "proportional":
            assert s.backend == plan.replay, plan
        assert (tr.learner.fused is not None) == (plan.train_step == "fused"), plan
        assert (tr.collector._fused is not None) == (plan.acting == "fused"), plan
        summary = tr.train_epoch()
        assert summary is not None and summary["updates"] > 0, plan
        assert not torch.equal(tr.learner.flat.data, tr.learner._init_weights), plan
        res = Backtester(market, params, chunk=8, cuda_graphs=plan.graphs).run(
            [market.fold.val_start], [16], GreedyPolicy(tr.learner.online), backend=plan.eval)
        assert res.metrics[0]["bars"] == 16, plan
        runs.add((plan.replay, sampler, arity))
    expected = {("torch", *s) for s in SAMPLERS}
    if INTERPRETED:
        expected |= {("fused", "proportional", 2), ("fused", "proportional", 32)}
    assert runs == expected


# ---------------------------------------------------------------- the evaluated network, fallbacks
CUDA = torch.device("cuda")  # a plan is data: resolving for CUDA needs no GPU, only Triton importable
needs_triton = pytest.mark.skipif(accel_triton.status(CUDA).mode != "compiled", reason="triton does not import")


def ppo(hidden=(16, 16), head_hidden: int = 8):
    from foxhunt.agents.ppo.config import PPOConfig

    return PPOConfig(hidden=hidden, head_hidden=head_hidden)


@needs_triton
def test_auto_checks_the_network_that_will_be_evaluated_dqns_or_ppos_actor():
    """Under auto on CUDA, eval is fused exactly when the agent's own network fits the kernel: DQN's
    widths for DQN, the actor's ``[ppo]`` widths for PPO (whatever the other section says)."""
    wide_dqn = dqn(hidden=(600, 16))
    plan = resolve(AccelConfig(), wide_dqn, CUDA)
    assert plan.eval == plan.acting == "torch" and "dqn: the fused kernels hold layers of at most 512" in plan.notes["eval"]
    plan = resolve(AccelConfig(), wide_dqn, CUDA, ppo=ppo())
    assert plan.agent == "ppo" and plan.eval == "fused" and plan.env_step == "fused"
    # PPO has no fused acting, train step or replay: torch, noted (they did not run fused before either)
    assert plan.acting == plan.train_step == plan.replay == "torch" and "for ppo" in plan.notes["acting"]
    plan = resolve(AccelConfig(), dqn(), CUDA, ppo=ppo(hidden=(16, 16, 16)))
    assert plan.eval == "torch" and plan.notes["eval"].startswith("ppo: the fused kernels need two trunk layers")
    plan = resolve(AccelConfig(), dqn(), CUDA, obs_dim=700)
    assert plan.eval == "torch" and "observation" in plan.notes["eval"]
    # train.ensemble = K: the held-back backtests run one member (eval); the fold's model, the members merged
    # K times as wide, runs in torch where the kernel cannot hold it (model_eval), noted, named or not
    plan = resolve(AccelConfig(), dqn(hidden=(128, 128)), CUDA, ensemble=4)
    assert plan.eval == plan.model_eval == "fused" and "eval_model" not in plan.notes
    for accel in (AccelConfig(acting="fused"), AccelConfig(eval="fused")):
        plan = resolve(accel, dqn(hidden=(256, 256)), CUDA, ensemble=4)
        assert plan.eval == "fused" and plan.model_eval == "torch"
        assert plan.notes["eval_model"] == ("the fold's model of 4 merged members: the fused kernels hold layers of at most 512 "
                                            "units (hidden / 2 × head_hidden × train.ensemble = 4): torch")
    with pytest.raises(ConfigError, match="accel.eval = 'fused' on cuda: dqn: the fused kernels hold layers of at most 512"):
        resolve(AccelConfig(eval="fused"), dqn(hidden=(1024, 256)), CUDA)


@needs_triton
def test_compiled_fused_acting_keeps_nets_wider_than_its_128_row_tiles_hold_in_torch():
    """The compiled acting kernel runs only 128-row tiles (64 gave wrong Q on the H200), which hold
    trunk layers and head pairs of at most ACTING_MAX_WIDTH units: wider nets act in torch under auto
    (noted) and a named fused acting is refused in one line; the interpreter (a CPU) is not limited."""
    plan = resolve(AccelConfig(), dqn(hidden=(512, 64), head_hidden=32), CUDA)
    assert plan.acting == "torch" and "128-row tiles" in plan.notes["acting"] and plan.eval == "fused"
    plan = resolve(AccelConfig(), dqn(hidden=(64, 64), head_hidden=256), CUDA)
    assert plan.acting == "torch" and "2 × head_hidden: 512" in plan.notes["acting"]
    assert resolve(AccelConfig(), dqn(hidden=(256, 256), head_hidden=128), CUDA).acting == "fused"
    with pytest.raises(ConfigError, match="accel.acting = 'fused' on cuda: dqn: the compiled fused acting kernel runs 128-row tiles"):
        resolve(AccelConfig(acting="fused"), dqn(hidden=(512, 64)), CUDA)


@needs_triton
def test_auto_picks_every_fused_part_on_cuda_the_acting_kernel_included():
    """Auto runs what is tested on the device: with the acting kernel's head padded to MIN_HEAD (its
    H200 fault fixed) every part of a DQN plan is fused and no part is held back (NOT_AUTO is empty)."""
    plan = resolve(AccelConfig(), dqn(), CUDA)
    assert plan.acting == plan.env_step == plan.train_step == plan.replay == plan.eval == "fused"
    assert not NOT_AUTO and "acting" not in plan.notes


@needs_triton
def test_an_explicit_backend_or_override_the_agent_cannot_run_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="accel.backend = 'fused' on cuda: eval: ppo: the fused kernels need two trunk") as e:
        resolve(AccelConfig(backend="fused"), dqn(), CUDA, ppo=ppo(hidden=(16,)))
    assert "\n" not in str(e.value)
    for part in ("acting", "train_step"):
        with pytest.raises(ConfigError, match=f"accel.{part} = 'fused' on cuda: {part} has no fused implementation "
                                              "under train.agent = 'ppo'"):
            resolve(AccelConfig(**{part: "fused"}), dqn(), CUDA, ppo=ppo())
    with pytest.raises(ConfigError, match="accel.eval = 'fused' on cuda: ppo: the fused kernels hold"):
        resolve(AccelConfig(eval="fused"), dqn(), CUDA, ppo=ppo(head_hidden=300))


def test_resolve_config_follows_train_agent():
    from foxhunt.train.config import default_train_config

    ppo3 = ['train.agent="ppo"', "ppo.hidden=[16, 16, 16]"]
    assert resolve_config(default_train_config(ppo3), CPU).agent == "ppo"
    if INTERPRETED:
        with pytest.raises(ConfigError, match="accel.eval = 'fused' on cpu: ppo: the fused kernels need two trunk"):
            resolve_config(default_train_config([*ppo3, 'accel.eval="fused"']), CPU)
        assert resolve_config(default_train_config(['accel.eval="fused"', "ppo.hidden=[16, 16, 16]"]), CPU).eval == "fused"


@needs_triton
def test_fall_back_is_a_note_under_auto_and_an_error_for_a_named_implementation():
    auto = resolve(AccelConfig(), dqn(), CUDA)
    assert auto.eval == "fused" and "eval" not in auto.named
    plan = fall_back(auto, "eval", "the ensemble's mode is 'mean'")
    assert plan.eval == "torch" and plan.notes["eval"] == "the ensemble's mode is 'mean': torch"
    assert fall_back(auto, "eval", None) is auto and fall_back(plan, "eval", "again") is plan
    for accel in (AccelConfig(backend="fused"), AccelConfig(eval="fused")):
        named = resolve(accel, dqn(), CUDA)
        assert "eval" in named.named
        with pytest.raises(ConfigError, match="accel.eval = 'fused' on cuda: the ensemble's mode is 'mean' "
                                              r"\(set accel.eval = 'torch' to run it in torch\)"):
            fall_back(named, "eval", "the ensemble's mode is 'mean'")
