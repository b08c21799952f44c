"""Counter-based draws (foxhunt.env.counter_draws): a pure function of (seed, counter, stream, row), uniform, the
Triton kernel equal to the torch definition, a member's rows of a batched draw equal to its own draw, and the
start sampler and the DQN collector drawing from them as they would from a generator."""

from __future__ import annotations

import pytest
import torch

from foxhunt.env.counter_draws import STREAM_U32_B, StepDraws, counter_draws, counter_draws_torch, mix
from foxhunt.env.stacked import StackedSampler
from foxhunt.env.state import StartSampler

SEEDS = torch.tensor([0, 5, 2**40 + 17, -3, 2**62 + 11], dtype=torch.int64)
COUNTERS = torch.tensor([0, 7, 2**33 + 1, 123_456, 1], dtype=torch.int64)


def _draw(seed, counter, n, n_int=5, fn=counter_draws_torch):
    m = seed.shape[0]
    out = dict(u32=torch.zeros(m * n), ints=torch.zeros(m * n, dtype=torch.int64),
               u64=torch.zeros(m * n, dtype=torch.float64))
    fn(seed, counter, n, n_int=n_int, **out)
    return out


def test_the_mixer_is_a_bijection_of_the_32_bit_word_on_a_sample_and_stays_in_the_word() -> None:
    x = torch.arange(0, 2**32, 2**32 // 65_536 + 1, dtype=torch.int64)
    y = mix(x)
    assert y.min() >= 0 and y.max() < 2**32 and y.unique().numel() == x.numel()


@pytest.mark.parametrize("n", [1, 37, 130])
def test_the_triton_kernel_equals_the_torch_definition_bit_for_bit(n: int) -> None:
    pytest.importorskip("triton")
    from foxhunt.accel.triton import unavailable

    if unavailable("cpu") is not None:
        pytest.skip("the Triton interpreter is off (TRITON_INTERPRET=1)")
    from foxhunt.kernels.draws.kernel import counter_draws_fused

    ref = _draw(SEEDS, COUNTERS, n, n_int=27)
    got = _draw(SEEDS, COUNTERS, n, n_int=27, fn=counter_draws_fused)
    for k in ref:
        assert torch.equal(ref[k], got[k]), k
    one = torch.zeros(n)  # one output alone (the other outputs' constexpr branches off)
    counter_draws_fused(SEEDS[:1], COUNTERS[:1], n, u32=one)
    assert torch.equal(one, ref["u32"][:n])
    second, second_ref = torch.zeros(n), torch.zeros(n)  # the second float32 stream
    counter_draws_fused(SEEDS[:1], COUNTERS[:1], n, u32=second, u32_stream=STREAM_U32_B)
    counter_draws_torch(SEEDS[:1], COUNTERS[:1], n, u32=second_ref, u32_stream=STREAM_U32_B)
    assert torch.equal(second, second_ref) and not torch.equal(second, one)


def test_a_members_rows_of_a_batched_draw_are_its_own_draw() -> None:
    n = 64
    batched = _draw(SEEDS, COUNTERS, n)
    for m in range(SEEDS.shape[0]):
        own = _draw(SEEDS[m:m + 1], COUNTERS[m:m + 1], n)
        for k in batched:
            assert torch.equal(batched[k][m * n:(m + 1) * n], own[k]), (m, k)


def test_draws_are_in_range_uniform_and_differ_across_counters_seeds_and_streams() -> None:
    n = 200_000
    d = _draw(SEEDS[1:2], COUNTERS[:1], n, n_int=9)
    for k in ("u32", "u64"):
        u = d[k]
        assert 0.0 <= u.min() and u.max() < 1.0
        counts = torch.histc(u.float(), bins=20, min=0.0, max=1.0)
        chi2 = (((counts - n / 20) ** 2) / (n / 20)).sum().item()
        assert chi2 < 45.0, (k, chi2)  # 19 degrees of freedom: p ~ 1e-3
    counts = torch.bincount(d["ints"], minlength=9).double()
    assert d["ints"].min() == 0 and d["ints"].max() == 8
    assert (((counts - n / 9) ** 2) / (n / 9)).sum().item() < 30.0  # 8 degrees of freedom
    nxt = _draw(SEEDS[1:2], COUNTERS[:1] + 1, n, n_int=9)
    other_seed = _draw(SEEDS[2:3], COUNTERS[:1], n, n_int=9)
    for a, b in ((d["u32"], nxt["u32"]), (d["u32"], other_seed["u32"]), (d["u32"], d["u64"].float()),
                 (d["u32"], d["ints"].float())):
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.01
    assert (d["u32"][1:] != d["u32"][:-1]).float().mean() > 0.999


def test_a_start_sampler_on_counter_draws_advances_restarts_on_reseed_and_keeps_its_state() -> None:
    s = StartSampler(16, "cpu", seed=3)
    s.use_counter(11)
    assert s.generators() == {} and set(s.state_tensors()) == {"start_seed", "start_counter"}
    s.fill_uniform()
    first = s.uniform.clone()
    s.fill_uniform()
    assert int(s.counter) == 2 and not torch.equal(first, s.uniform)
    s.seed(11)
    s.fill_uniform()
    assert torch.equal(first, s.uniform)
    ref = torch.zeros(16, dtype=torch.float64)
    counter_draws_torch(torch.tensor([11]), torch.tensor([0]), 16, u64=ref)
    assert torch.equal(first, ref)


def test_a_stack_of_counter_samplers_draws_each_members_own_starts_in_one_call() -> None:
    n = 8
    alone = [StartSampler(n, "cpu") for _ in range(3)]
    stacked = [StartSampler(n, "cpu") for _ in range(3)]
    for k, (a, b) in enumerate(zip(alone, stacked)):
        a.use_counter(100 + k)
        b.use_counter(100 + k)
    uniform = torch.zeros(3 * n, dtype=torch.float64)
    for m, b in enumerate(stacked):  # the stack env's rows (as env.stacked.stack_envs makes them)
        b.uniform = uniform[m * n:(m + 1) * n]
    stack = StackedSampler(stacked, uniform, torch.zeros(3 * n, dtype=torch.int64))
    assert stack.counters is not None
    for _ in range(3):
        stack.fill_uniform()
        for a in alone:
            a.fill_uniform()
    for m, a in enumerate(alone):
        assert torch.equal(uniform[m * n:(m + 1) * n], a.uniform)
        assert int(stacked[m].counter) == 3  # each member's own counter, a view of the stack's
    stacked[1].seed(101)  # a member re-seeded in place restarts its rows only
    assert int(stack.counters["counter"][1]) == 0 and int(stack.counters["counter"][0]) == 3


def test_step_draws_counted_are_the_definition_at_the_callers_counter_and_a_reseed_restarts_them() -> None:
    d = StepDraws("cpu", seed=4, counted=True)
    assert d.generators() == {} and set(d.state_tensors()) == {"draw_seed"}
    u, ref = torch.zeros(10, dtype=torch.float64), torch.zeros(10, dtype=torch.float64)
    d.uniform64(u, torch.tensor(7))
    counter_draws_torch(torch.tensor([4]), torch.tensor([7]), 10, u64=ref)
    assert torch.equal(u, ref)
    d.seed(6)
    assert int(d.seed_t) == 6
    plain = StepDraws("cpu", seed=4, counted=False)
    assert set(plain.generators()) == {"generator"} and plain.state_tensors() == {}


@pytest.mark.gpu
def test_the_compiled_kernel_on_cuda_equals_the_torch_definition_on_the_cpu() -> None:
    n = 1_000
    ref = _draw(SEEDS, COUNTERS, n, n_int=27)
    m = SEEDS.shape[0]
    got = dict(u32=torch.zeros(m * n, device="cuda"), ints=torch.zeros(m * n, dtype=torch.int64, device="cuda"),
               u64=torch.zeros(m * n, dtype=torch.float64, device="cuda"))
    counter_draws(SEEDS.cuda(), COUNTERS.cuda(), n, n_int=27, **got)
    for k in ref:
        assert torch.equal(ref[k], got[k].cpu()), k
