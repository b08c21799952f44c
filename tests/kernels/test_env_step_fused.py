"""The fused training env step (one Triton kernel) equals the torch ``vec_env.step``, step by step.

Without CUDA the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, set here before Triton
is imported; CI sets it too). Each scenario steps a torch env and a fused copy of it in lockstep
(``env_step_pair.Pair``: same initial state, same start-sampler generator state, state re-synchronised
after each compared step) on the parity market with per-env parameter variation (``per_env_params``:
capital, sizing, reserve, costs, spread, impact, participation, barriers, end_on_barrier, Kelly,
risk, diversity, curiosity, DSR, reward scale, episode length, bust level), sticky random actions
(retries of unfilled orders, holdings, barrier expiries) and asserts what the run covered: every
action, every fill status, barrier labels with end_on_barrier on and off, dones by length, barrier
and bust (and their auto-resets), round trips, reversals, Kelly sizing, the diversity and risk
penalties. The GPU tests repeat it compiled on CUDA at N = 4096 and capture fused steps in a graph.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("triton")

from foxhunt.env import EnvParams, StepOutput  # noqa: E402
from foxhunt.env.fused import FusedEnvStep, fused_step, unsupported  # noqa: E402
from foxhunt.env.state import StartSampler  # noqa: E402
from foxhunt.env.vec_env import step  # noqa: E402
from foxhunt.folds import FoldRange  # noqa: E402
from foxhunt.kernels.env_step.kernel import is_interpreted  # noqa: E402
from foxhunt.market import MarketData  # noqa: E402
from foxhunt.accel.graphs import capture  # noqa: E402
from foxhunt.testing import cuda_sync_errors, forbid_host_reads  # noqa: E402
from tests.helpers import capture_guards  # noqa: E402
from tests.env.test_parity import N_BARS, TRAIN_END, parity_feature_set, per_env_params  # noqa: E402
from tests.env.env_helpers import mirrored_market  # noqa: E402
from tests.kernels.env_step_pair import Pair  # noqa: E402

DEV = torch.device("cpu" if is_interpreted() else "cuda")


def market_on(dev: torch.device, seed: int = 0, has_volume: bool = True, mirror: bool = False) -> MarketData:
    """``tests.env.test_parity.parity_market`` on ``dev`` (with its mirror appended: ``train.mirror``)."""
    fs = parity_feature_set(seed, has_volume)
    fold = FoldRange(0, 50, TRAIN_END, TRAIN_END, N_BARS)
    if mirror:
        return mirrored_market(fs, fold, dev)
    m = MarketData(fs, dev)
    m.set_fold(fold)
    return m


def run(n: int, steps: int, *, seed: int, reward_mode: str = "return", action_mode: str = "factored",
        has_volume: bool = True, curiosity: bool = True, dev: torch.device = DEV, hold: float = 0.6,
        mirror: bool = False, decision_interval: int = 1, decision_bars: list[int] | None = None) -> Pair:
    """Step a torch env and its fused copy ``steps`` times with sticky random actions (each step one
    decision of ``decision_interval`` bars, or of each env's own k: env i's is ``decision_bars[i % len]``, up
    to ``decision_interval``); returns the pair."""
    market = market_on(dev, seed, has_volume, mirror)
    pair = Pair(market, n, EnvParams(reward_mode=reward_mode, action_mode=action_mode,
                                     decision_interval=decision_interval), per_env_params(n, seed + 1), seed)
    if decision_bars is not None:
        pair.env.params.decision_bars = torch.tensor(decision_bars, device=dev).repeat(n // len(decision_bars) + 1)[:n]
    n_act = pair.env.n_actions
    rng = np.random.default_rng(seed + 2)
    actions = rng.integers(n_act, size=n)
    skew = np.arange(n) % 4 == 0  # a quarter of the envs lean long: low-entropy rings (diversity penalty)
    for _ in range(steps):
        change = rng.random(n) > hold
        draw = np.where(skew & (rng.random(n) < 0.7), n_act - 1, rng.integers(n_act, size=n))
        actions = np.where(change, draw, actions)
        bonus = torch.from_numpy(rng.uniform(-1e-4, 2e-3, n).astype(np.float32)).to(dev) if curiosity else None
        pair.step(torch.from_numpy(actions.astype(np.int64)).to(dev), bonus)
    st = pair.stats
    print(f"\n{reward_mode}/{action_mode} volume={has_volume} curiosity={curiosity}: {st.steps} steps, "
          f"{st.bitwise_steps} bitwise equal, max relative differences {st.max_rel}, ties {st.ties}")
    return pair


def assert_states_close(got, ref) -> None:
    """Every EnvState tensor within float32 rounding of the torch one (discrete fields equal)."""
    for name, t in ref.tensors().items():
        atol = 1.0 if name in ("cash", "equity", "peak") else 1e-6
        torch.testing.assert_close(getattr(got, name), t, rtol=1e-5, atol=atol, msg=name)


def assert_covered(pair: Pair, required: list[str], max_ties: int = 2) -> None:
    c = pair.stats.cover
    missing = [k for k in required if c[k] == 0]
    assert not missing, f"the run did not exercise {missing}; coverage {dict(c)}"
    assert len(pair.stats.ties) <= max_ties, pair.stats.ties


COMMON = ["fill0", "fill1", "trade_closed", "reversal", "done_length", "done_bust", "kelly_sized",
          "diversity_penalty", "risk_penalty", "label1_end0", "label-1_end0", "label0_end0", "label1_end1",
          "done_barrier"]


# Step counts: the required coverage is complete at step 100 of the one-bar scenarios below (the first
# length ends; their auto-resets are stepped for 20 steps after it, 30 on the mirrored market), at step 25
# (k = 4: 30 decisions, 120 bars) and 12 (k = 9: 16 decisions, 144 bars) of the k-bar ones; the shortest
# episode is 100 bars, so every run steps envs past an auto-reset.


def test_fused_step_equals_torch_step_factored_return_mode_with_volume_and_curiosity():
    pair = run(32, 120, seed=0)
    assert_covered(pair, COMMON + [f"action{a}" for a in range(45)] + ["fill2", "fill3", "label-1_end1"])


def test_fused_step_equals_torch_step_exposure_routing_dsr_mode_without_curiosity():
    pair = run(24, 120, seed=3, reward_mode="dsr", action_mode="exposure", curiosity=False)
    assert_covered(pair, [f"action{a}" for a in range(5)] + ["fill0", "fill1", "fill2", "fill3", "trade_closed",
                                                            "reversal", "done_length", "label1_end0"])


def test_fused_step_equals_torch_step_pnl_mode_on_a_market_without_volume():
    pair = run(16, 120, seed=7, reward_mode="pnl", has_volume=False)
    assert_covered(pair, ["fill0", "fill1", "fill3", "trade_closed", "reversal", "done_length"])
    assert pair.stats.cover["fill2"] == 0  # without volume IoC is never cut


def test_fused_step_equals_torch_step_on_a_mirrored_market_and_restarts_envs_in_both_copies():
    pair = run(24, 130, seed=5, reward_mode="return", action_mode="exposure", mirror=True)
    assert_covered(pair, ["fill0", "fill1", "trade_closed", "reversal", "done_barrier", "done_bust"])
    m = pair.market
    bars = pair.env.state.bar
    assert m.mirror_offset == N_BARS and m.n_rows == 2 * N_BARS
    assert bool((bars >= N_BARS).any()) and bool((bars < N_BARS).any()), bars


@pytest.mark.parametrize("k,reward_mode,action_mode", [(4, "return", "factored"), (9, "dsr", "exposure")])
def test_fused_k_bar_decisions_equal_the_torch_decision_step(k, reward_mode, action_mode):
    """env.decision_interval k: the kernel steps the k bars of a decision in one launch (the held action,
    the summed reward, ends inside the interval, the last trade, one start draw) as the torch
    ``decision.step_decision`` does."""
    pair = run(24, {4: 30, 9: 16}[k], seed=17 + k, reward_mode=reward_mode, action_mode=action_mode, decision_interval=k)
    assert_covered(pair, ["fill0", "fill1", "trade_closed", "reversal", "done_length", "done_barrier"])


def test_fused_decisions_at_each_envs_own_k_equal_the_torch_decision_step():
    """Per-env decision intervals (a stack of members at different k): each env stops after its own k bars,
    in the kernel as in the torch decision step (its k = 1 envs too)."""
    pair = run(24, 30, seed=31, decision_interval=8, decision_bars=[8, 1, 8, 3])
    assert_covered(pair, ["fill0", "fill1", "trade_closed", "reversal", "done_length", "done_barrier"])


def test_fused_step_reads_nothing_on_the_host_and_matches_the_drop_in_env_step():
    pair = Pair(market_on(DEV), 16, EnvParams(), per_env_params(16, 1), 0)
    env = pair.env
    snap = env.snapshot()
    fused = FusedEnvStep(env)
    actions = torch.arange(16, dtype=torch.int64, device=DEV) * 2
    bonus = torch.full((16,), 5e-5, device=DEV)
    fused(actions, bonus)  # compile / warm up outside the guard
    env.restore(snap)
    with forbid_host_reads(), cuda_sync_errors(DEV):
        for _ in range(3):
            out = fused(actions, bonus)
    assert out is env.out
    ref_state, ref_out = pair.state, pair.out  # the untouched copy, stepped by torch
    sampler = StartSampler(16, DEV, 0)
    sampler.generator.set_state(snap[1])
    for _ in range(3):
        step(ref_state, env.params, env.market, actions, bonus, ref_out, sampler=sampler)
    assert_states_close(env.state, ref_state)


def test_fused_env_step_is_a_drop_in_for_the_dqn_collectors_env_step():
    """Two identical trainers, one collecting through ``FusedEnvStep`` (the collector's ``_env_step``
    switch; on CUDA its rounds are captured graphs): same actions, transitions and env state."""
    from tests.agents.dqn_helpers import small_market, small_trainer

    a, b = (small_trainer(small_market(device=DEV), seed=3, curiosity=True) for _ in range(2))
    b.collector._env_step = FusedEnvStep(b.env)
    for _ in range(3):
        a._round()
        b._round()
    ca, cb = a.collector, b.collector
    for name in ("r_action", "r_done", "r_next_bar", "r_trade_closed"):
        assert torch.equal(getattr(ca, name), getattr(cb, name)), name
    for name in ("r_reward", "r_next_portfolio", "r_curiosity", "r_trade_return"):
        torch.testing.assert_close(getattr(cb, name), getattr(ca, name), rtol=1e-5, atol=1e-6, msg=name)
    assert_states_close(b.env.state, a.env.state)


def test_unsupported_names_why_the_kernel_cannot_run():
    market = market_on(DEV)
    env = Pair(market, 4, EnvParams(), None, 0).env
    assert unsupported(env.params, market) is None
    if not is_interpreted():
        cpu = market_on(torch.device("cpu"))
        from foxhunt.env.params import EnvTensors

        reason = unsupported(EnvTensors.build(EnvParams(), 4, "cpu"), cpu)
        assert reason is not None and "interpreter" in reason
    env.auto_reset = False
    with pytest.raises(ValueError, match="auto_reset"):
        FusedEnvStep(env)
    env.auto_reset = True
    with pytest.raises(ValueError, match="int64"):
        fused_step(env.state, env.params, market, torch.zeros(4, dtype=torch.int32, device=DEV), None,
                   StepOutput.allocate(4, DEV), env.sampler)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_fused_step_equals_torch_step_for_4096_envs_and_200_steps():
    if is_interpreted():
        pytest.skip("runs the compiled kernel")
    pair = run(4096, 200, seed=11, dev=torch.device("cuda"))
    assert_covered(pair, COMMON + [f"action{a}" for a in range(45)] + ["fill2", "fill3"], max_ties=4)


@pytest.mark.gpu
def test_gpu_fused_step_equals_torch_step_on_a_mirrored_market_for_4096_envs():
    if is_interpreted():
        pytest.skip("runs the compiled kernel")
    pair = run(4096, 200, seed=13, action_mode="exposure", dev=torch.device("cuda"), mirror=True)
    assert_covered(pair, ["fill0", "fill1", "trade_closed", "reversal", "done_barrier"], max_ties=4)
    bars = pair.env.state.bar
    assert 0.4 < float((bars >= N_BARS).double().mean()) < 0.6


@pytest.mark.gpu
def test_gpu_fused_k_bar_decisions_equal_the_torch_decision_step_for_4096_envs():
    if is_interpreted():
        pytest.skip("runs the compiled kernel")
    pair = run(4096, 60, seed=19, dev=torch.device("cuda"), decision_interval=8)
    assert_covered(pair, COMMON + ["fill2", "fill3"], max_ties=4)


@pytest.mark.gpu
def test_gpu_fused_steps_captured_in_a_cuda_graph_replay_like_eager_torch_steps():
    if is_interpreted():
        pytest.skip("runs the compiled kernel")
    dev, n, k = torch.device("cuda"), 4096, 16
    pair = Pair(market_on(dev, 5), n, EnvParams(reward_mode="dsr"), per_env_params(n, 6), 5)
    env = pair.env
    g = torch.Generator(device=dev).manual_seed(3)
    actions = torch.randint(0, 45, (k, n), device=dev, generator=g)
    bonus = torch.rand((k, n), device=dev, generator=g) * 1e-3
    rewards = torch.zeros((k, n), device=dev)
    snap = env.snapshot()

    def body() -> None:
        for i in range(k):
            fused_step(env.state, env.params, env.market, actions[i], bonus[i], env.out, env.sampler)
            rewards[i].copy_(env.out.reward)

    graph = capture(body, dev, generators=[env.sampler.generator], save=lambda: snap, restore=env.restore,
                    restore_after_warmup=True, during_capture=lambda: capture_guards(dev))  # warm-up compiles
    graph.replay()
    torch.cuda.synchronize()
    ref_state, ref_out, sampler = pair.state, pair.out, StartSampler(n, dev, 5)
    sampler.generator.set_state(snap[1])
    ref_rewards = torch.zeros_like(rewards)
    for i in range(k):
        step(ref_state, env.params, env.market, actions[i], bonus[i], ref_out, sampler=sampler)
        ref_rewards[i].copy_(ref_out.reward)
    assert_states_close(env.state, ref_state)
    torch.testing.assert_close(rewards, ref_rewards, rtol=1e-5, atol=1e-4)
    for name, t in ref_out.tensors().items():
        torch.testing.assert_close(getattr(env.out, name), t, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("mirror", [False, True], ids=["plain", "mirror"])
def test_fused_step_equals_torch_step_on_a_pooled_universe_with_each_envs_symbol_medians_and_starts(
        tmp_path_factory, mirror: bool):
    """A pooled universe (three symbols): the kernel prices and routes each env's orders with its episode's symbol's
    medians ([N], gathered at the decision's start bar) and restarts done envs at the starts the pooled draw maps
    (a symbol, then a start in its training rows; each copy's with train.mirror), as the torch step does."""
    from foxhunt.universe_market import PooledFold
    from tests.universe.conftest import prepared_universe

    prepared = prepared_universe(tmp_path_factory.mktemp("pooled_fused"), train={"mirror": mirror},
                                 run={"device": DEV.type})
    m = prepared.market
    m.set_fold(PooledFold.of(prepared.folds[0]))
    assert m.pooled and (m.mirror_offset > 0) == mirror
    n, seed = 24, 3
    pair = Pair(m, n, EnvParams(action_mode="exposure", episode_length=40), None, seed)
    rng = np.random.default_rng(seed)
    actions = rng.integers(pair.env.n_actions, size=n)
    for _ in range(90):
        actions = np.where(rng.random(n) > 0.6, rng.integers(pair.env.n_actions, size=n), actions)
        pair.step(torch.from_numpy(actions.astype(np.int64)).to(DEV), None)
    assert_covered(pair, ["fill0", "trade_closed", "done_length"])
    sym = torch.searchsorted(m.symbol_ends, pair.env.state.bar, right=True)
    assert len(set(sym.tolist())) > 1  # the envs sit in several symbols, each priced with its own medians
