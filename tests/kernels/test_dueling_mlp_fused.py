"""The fused dueling-MLP kernel (acting forward pass) against DuelingQNet, and the collector with it.

Without CUDA the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, set here before any
Triton code is imported; CI sets it too). Small random nets of odd sizes: Q equals the torch net in
float32 ("ieee"; "tf32" computes float32 in the interpreter), the max / argmax outputs equal torch's
amax / argmax of the kernel's own Q, bf16 equals a torch emulation with bf16 weights and layer
inputs, and a collection round with fused acting equals the torch one. The GPU tests repeat the
comparison on the default 54 → 256 → 256 → {128, 128} → 45 net at N = 65,536 (bf16, tf32) and
check that a captured round replays bit for bit like the eager one.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from tests.kernels.cross_compile import run_interpreter_off  # noqa: E402

from foxhunt.accel import triton as accel_triton  # noqa: E402
from foxhunt.agents.dqn import fused as fused_acting  # noqa: E402
from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.kernels.acting import kernel as dmf  # noqa: E402
from foxhunt.kernels.rules import packing as pk  # noqa: E402
from foxhunt.kernels.rules.packing import pack_dueling  # noqa: E402
from foxhunt.testing import forbid_host_reads  # noqa: E402
from tests.agents.dqn_helpers import small_market, small_trainer  # noqa: E402

DEV = torch.device("cpu" if dmf.is_interpreted() else "cuda")


def varied_net(obs_dim: int, n_actions: int, hidden=(32, 48), head_hidden: int = 24, seed: int = 0,
               weight_scale: float = 3.0, bias_scale: float = 0.05) -> DuelingQNet:
    """A random DuelingQNet whose Q differs clearly between actions (default-init biases dominate a
    small net's Q; they are shrunk and the weights scaled up)."""
    torch.manual_seed(seed)
    net = DuelingQNet(obs_dim, n_actions, hidden=hidden, head_hidden=head_hidden)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(weight_scale if p.dim() == 2 else bias_scale)
    return net.to(DEV)


def _bf16_truncate(x: torch.Tensor) -> torch.Tensor:
    return (x.contiguous().view(torch.int32) & -65536).view(torch.float32)


def bf16_q(net: DuelingQNet, obs: torch.Tensor) -> torch.Tensor:
    """Q as the bf16 kernel computes it: bf16 weights (rounded to nearest by the packing) and bf16
    layer inputs (obs included), float32 sums, bias, LeakyReLU and dueling head. The kernel casts
    layer inputs in Triton, which rounds to nearest on a GPU but truncates in the interpreter (its
    float conversion ignores the rounding mode): the emulation follows the interpreter there."""
    rw = lambda x: x.to(torch.bfloat16).to(torch.float32)  # noqa: E731
    r = _bf16_truncate if dmf.is_interpreted() else rw
    slope = net.trunk[1].negative_slope
    lin = lambda m, x: r(x) @ rw(m.weight).T + m.bias  # noqa: E731
    act = lambda x: torch.where(x > 0, x, x * slope)  # noqa: E731
    with torch.no_grad():
        h = act(lin(net.trunk[2], act(lin(net.trunk[0], obs))))
        v = lin(net.value[2], act(lin(net.value[0], h)))
        a = lin(net.advantage[2], act(lin(net.advantage[0], h)))
        return v + a - a.mean(dim=-1, keepdim=True)


def acting_pack(net: DuelingQNet, precision: str) -> pk.DuelingWeights:
    """The pack the kernel runs here: compiled, every block padded to MIN_WIDTH and the head to
    MIN_HEAD (what the collector packs; narrower blocks are refused there); in the interpreter the
    narrow pack, so that CI covers odd block widths of the kernel's code."""
    if dmf.is_interpreted():
        return pk.pack_net(net, precision)
    return pk.pack_net(net, precision, dmf.MIN_HEAD, dmf.MIN_WIDTH)


def _check_max_argmax(out: dmf.FusedQ) -> None:
    assert torch.equal(out.argmax, out.q.argmax(dim=1))
    assert torch.equal(out.q_max, out.q.amax(dim=1))


CASES = [  # obs_dim, n_actions, hidden, head_hidden
    (7, 5, (32, 48), 24),
    (54, 45, (48, 32), 16),
    (54, 5, (32, 32), 24),
]


@pytest.mark.parametrize("block_m", [None, 16])
@pytest.mark.parametrize("n", [1, 37, 200])
@pytest.mark.parametrize("case", CASES)
def test_fused_q_equals_the_torch_net_in_float32(case, n, block_m):
    obs_dim, n_actions, hidden, head = case
    net = varied_net(obs_dim, n_actions, hidden, head, seed=n)
    obs = torch.randn(n, obs_dim, generator=torch.Generator().manual_seed(n)).to(DEV)
    with torch.no_grad():
        ref = net(obs)
    packed = pk.pack_net(net, "ieee")
    out = dmf.fused_dueling_q(packed, obs, precision="ieee", q_max=True, argmax=True, block_m=block_m, bn=16)
    torch.testing.assert_close(out.q, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    _check_max_argmax(out)
    # Only the requested outputs are computed; the others stay None.
    only = dmf.fused_dueling_q(packed, obs, precision="ieee", q=False, q_max=True, block_m=block_m)
    assert only.q is None and only.argmax is None
    torch.testing.assert_close(only.q_max, out.q_max, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


def test_obs_with_a_row_stride_and_preallocated_outputs_are_written_in_place():
    net = varied_net(7, 5)
    wide = torch.randn(37, 11, generator=torch.Generator().manual_seed(5)).to(DEV)
    obs = wide[:, 2:9]  # row stride 11, contiguous columns: read in place, no copy
    q = torch.full((37, 5), float("nan"), device=DEV)
    arg = torch.full((37,), -1, dtype=torch.int64, device=DEV)
    block_m = 16 if dmf.is_interpreted() else None  # compiled tensor-core tiles keep >= 128 rows (MIN_COMPILED_BLOCK_M)
    out = dmf.fused_dueling_q(acting_pack(net, "tf32"), obs, precision="tf32", q=q, argmax=arg, block_m=block_m)
    assert out.q is q and out.argmax is arg and out.q_max is None
    tol = 1e-5 if dmf.is_interpreted() else 1e-2  # compiled tf32: 10-bit mantissa inputs
    with torch.no_grad():
        torch.testing.assert_close(q, net(obs), rtol=tol, atol=tol * float(q.abs().max()))
    assert torch.equal(arg, q.argmax(dim=1))


@pytest.mark.parametrize("case", CASES[:2])
def test_bf16_kernel_equals_a_torch_emulation_with_bf16_weights_and_layer_inputs(case):
    obs_dim, n_actions, hidden, head = case
    net = varied_net(obs_dim, n_actions, hidden, head, seed=11)
    obs = torch.randn(200, obs_dim, generator=torch.Generator().manual_seed(11)).to(DEV)
    block_m = 64 if dmf.is_interpreted() else None  # compiled: the 128-row tile (64 gave wrong Q on the H200)
    out = dmf.fused_dueling_q(acting_pack(net, "bf16"), obs, precision="bf16", q_max=True, argmax=True, block_m=block_m)
    ref = bf16_q(net, obs)
    scale = float(ref.abs().max())
    # Interpreted, the same roundings in another summation order; compiled, a tensor-core sum may
    # round a hidden unit to the neighbouring bf16 value.
    tol = 1e-5 if dmf.is_interpreted() else 5e-3  # as the 64 K-row GPU test's bound against the emulation
    torch.testing.assert_close(out.q, ref, rtol=tol, atol=tol * scale)
    _check_max_argmax(out)
    with torch.no_grad():  # and it is a bf16 approximation of the float32 net
        assert float((out.q - net(obs)).abs().max()) < 5e-2 * scale


def test_bad_arguments_raise_a_clear_error():
    net = varied_net(7, 5)
    obs = torch.randn(4, 7, device=DEV)
    with pytest.raises(ValueError, match="needs torch.bfloat16 weights"):
        dmf.fused_dueling_q(pk.pack_net(net, "tf32"), obs, precision="bf16")
    with pytest.raises(ValueError, match="obs must be"):
        dmf.fused_dueling_q(pk.pack_net(net, "tf32"), obs[:, :6], precision="tf32")
    with pytest.raises(ValueError, match="q must be"):
        dmf.fused_dueling_q(pk.pack_net(net, "tf32"), obs, precision="tf32", q=torch.empty(4, 6, device=DEV))
    with pytest.raises(ValueError, match="block_m"):
        dmf.fused_dueling_q(pk.pack_net(net, "tf32"), obs, precision="tf32", block_m=24)


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
@pytest.mark.parametrize("block_m", [16, 32, 64])
def test_compiled_tensor_core_launches_of_fewer_than_128_rows_are_refused(monkeypatch, precision, block_m):
    # On the H200 a 64-row bf16 tile of a 45-action net gave wrong Q (bench/results/sanitizer_cuda.json):
    # the compiled paths refuse such tiles before launching anything; checked here without a GPU by
    # taking the compiled branch of the launcher (the refusal comes before any kernel launch).
    net = varied_net(54, 45, (48, 32), 16, seed=3)
    obs = torch.randn(8, 54, generator=torch.Generator().manual_seed(3)).to(DEV)
    monkeypatch.setattr(dmf, "is_interpreted", lambda: False)
    with pytest.raises(ValueError, match=f"block_m = {block_m}: the compiled {precision} kernel runs tiles of at least 128 rows"):
        dmf.fused_dueling_q(pk.pack_net(net, precision), obs, precision=precision, block_m=block_m)


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_compiled_launches_of_a_pack_with_a_block_under_64_or_a_one_stage_loop_are_refused(monkeypatch, precision):
    # On the H200 the 32-wide layer-2 block of this net gave wrong bf16 Q at the default launch, and the
    # shipped [64, 64] net did with a 1-stage chunk loop (bench/results/acting_shapes_cuda.json); the
    # compiled paths refuse both before launching (the compiled branch, taken here without a GPU).
    net = varied_net(54, 45, (48, 32), 16, seed=3)
    obs = torch.randn(8, 54, generator=torch.Generator().manual_seed(3)).to(DEV)
    monkeypatch.setattr(dmf, "is_interpreted", lambda: False)
    narrow = pk.pack_net(net, precision)
    assert narrow.dims == (64, 64, 32, 32, 64)
    with pytest.raises(ValueError, match=r"^the compiled %s kernel needs every block at least 64 wide and the head 64 "
                                         r"\(this pack: D, H1, H2, H3, A = 64, 64, 32, 32, 64; " % precision):
        dmf.fused_dueling_q(narrow, obs, precision=precision)
    wide = pk.pack_net(net, precision, dmf.MIN_HEAD, dmf.MIN_WIDTH)
    assert wide.dims == (64, 64, 64, 64, 64)
    with pytest.raises(ValueError, match=f"^stages = 1: the compiled {precision} kernel pipelines its chunk loop over at least 2"):
        dmf.fused_dueling_q(wide, obs, precision=precision, stages=1)
    five = pk.pack_net(varied_net(54, 5, (64, 64), 32), precision)  # the 5-action head alone: A = 16
    with pytest.raises(ValueError, match=r"A = 64, 64, 64, 64, 16;"):
        dmf.fused_dueling_q(five, obs, precision=precision)


def test_the_padded_pack_computes_the_narrow_packs_q_in_the_interpreter():
    # Padding adds zero rows / columns only: the same Q (the interpreter runs any pack).
    net = varied_net(54, 45, (48, 32), 16, seed=5)
    obs = torch.randn(40, 54, generator=torch.Generator().manual_seed(5)).to(DEV)
    if not dmf.is_interpreted():
        pytest.skip("the interpreter runs the narrow pack; compiled, it is refused")
    narrow = dmf.fused_dueling_q(pk.pack_net(net, "ieee"), obs, precision="ieee").q
    wide = dmf.fused_dueling_q(pk.pack_net(net, "ieee", dmf.MIN_HEAD, dmf.MIN_WIDTH), obs, precision="ieee").q
    torch.testing.assert_close(wide, narrow, rtol=1e-6, atol=1e-6 * float(narrow.abs().max()))


def test_nets_wider_than_the_compiled_tile_allows_are_refused_by_default(monkeypatch):
    # A 512-wide trunk's default tile has 64 rows: refused when compiled, so the resolver keeps such
    # nets' acting in torch (accel.backend.ACTING_MAX_WIDTH, the same width as the kernel's).
    from foxhunt.accel.backend import ACTING_MAX_WIDTH

    assert ACTING_MAX_WIDTH == dmf.MAX_COMPILED_WIDTH == 256
    net = varied_net(7, 5, (512, 32), 16, seed=4)
    obs = torch.randn(4, 7, generator=torch.Generator().manual_seed(4)).to(DEV)
    monkeypatch.setattr(dmf, "is_interpreted", lambda: False)
    with pytest.raises(ValueError, match=r"block_m = 64: .* a net wider than 256 units \(here 512\) gets fewer by default"):
        dmf.fused_dueling_q(pk.pack_net(net, "bf16"), obs, precision="bf16")


@pytest.mark.parametrize("precision", ["ieee", "bf16"])
def test_pack_into_after_an_in_place_weight_change_equals_a_fresh_pack(precision):
    net = varied_net(54, 45, (48, 32), 16, seed=3)
    packed = pk.pack_net(net, precision)
    ptrs = [t.data_ptr() for t in (packed.w1, packed.w2, packed.w3, packed.w4, packed.b1, packed.b4)]
    with torch.no_grad():  # an optimiser step: in place, as MaskedAdam updates the flat buffer
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    trunk, value, adv, slope = pk.dueling_pairs(net)
    pk.pack_dueling_into(trunk, value, adv, packed)
    fresh = pack_dueling(trunk, value, adv, slope, packed.w1.dtype)
    for name in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4"):
        assert torch.equal(getattr(packed, name), getattr(fresh, name)), name
    assert ptrs == [t.data_ptr() for t in (packed.w1, packed.w2, packed.w3, packed.w4, packed.b1, packed.b4)]


# ------------------------------------------------------------------------------------------ collector
def _rounds(fused: bool, rounds: int = 3, **over) -> list[tuple[torch.Tensor, ...]]:
    """Per round: (actions, rewards, |TD| priorities) [L, N], with train steps between rounds (so
    the packed weights must follow the learner). Uniform replay: the sampled batches do not depend
    on the priorities, which differ between the two paths by float rounding."""
    kw = dict(seed=4, acting="fused" if fused else "torch", eps_start=0.3, eps_end=0.0, eps_decay_steps=8, sampler="uniform",
              warmup_transitions=0, matmul_precision="fp32")
    kw.update(over)
    tr = small_trainer(small_market(device=DEV), **kw)
    out = []
    for _ in range(rounds):
        tr.collector.round()
        c = tr.collector
        out.append((c.r_action.clone(), c.r_reward.clone(), c.r_td.clone()))
        for _ in range(2):
            tr.learner.train_step()
    return out


def test_a_collection_round_with_fused_acting_equals_the_torch_round():
    ref, fused = _rounds(False), _rounds(True)
    for (a0, r0, td0), (a1, r1, td1) in zip(ref, fused):
        assert torch.equal(a0, a1)
        torch.testing.assert_close(r1, r0, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(td1, td0, rtol=1e-5, atol=1e-6)
    # By the last round ε is 0: the greedy actions vary, so the comparison sees the network.
    assert ref[-1][0].unique().numel() > 1


def test_a_fused_round_with_its_weight_refresh_does_no_host_reads():
    tr = small_trainer(small_market(device=DEV), acting="fused")
    tr.collector.round()
    with forbid_host_reads():
        tr.collector.round()


def test_fused_acting_refuses_networks_and_devices_it_cannot_run(monkeypatch):
    assert fused_acting.unsupported(varied_net(7, 5), DEV) is None
    with pytest.raises(ValueError, match="fused acting unavailable: the fused kernels need two trunk layers"):
        small_trainer(small_market(device=DEV), acting="fused", hidden=(16, 16, 16))
    with pytest.raises(ValueError, match="fused acting unavailable: layers wider than"):
        small_trainer(small_market(device=DEV), acting="fused", hidden=(600, 16))
    if DEV.type == "cpu":
        monkeypatch.setattr(accel_triton, "is_interpreted", lambda: False)
        with pytest.raises(ValueError, match="fused acting unavailable: no CUDA device"):
            small_trainer(small_market(), acting="fused")


# ------------------------------------------------------------------------------------ sm_90 compile
COMPILE_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from foxhunt.kernels.acting import kernel as k
from tests.kernels.compile_backtest_sm90 import resource_usage
fn = k._dueling_q_kernel
for prec, stores in (("bf16", (1, 0, 1)), ("bf16", (0, 1, 0)), ("tf32", (1, 0, 1))):
    cfg = k.DEFAULTS[prec]
    w = "bf16" if prec == "bf16" else "fp32"
    consts = dict(N_ACTIONS=45, D=64, H1=256, H2=256, H3=256, A=64, BLOCK_M=cfg["block_m"], BN=cfg["bn"],
                  STAGES=cfg["stages"], PREC="ieee" if prec == "bf16" else prec, F32_DOT=prec != "bf16",
                  ROUND=prec == "bf16", STORE_Q=bool(stores[0]), STORE_MAX=bool(stores[1]), STORE_ARG=bool(stores[2]))
    ptrs = dict(obs_ptr="*fp32", w1="*" + w, w2="*" + w, w3="*" + w, w4="*" + w, b1="*fp32", b2="*fp32", b3="*fp32",
                b4="*fp32", q_ptr="*fp32", max_ptr="*fp32", arg_ptr="*i64")
    sig = {{n: "constexpr" if n in consts else ptrs.get(n, "fp32" if n == "slope" else "i32") for n in fn.arg_names}}
    attrs = {{(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptrs}}
    kern = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=cfg["num_warps"]))
    ptx = kern.asm["ptx"]
    print(prec, stores, "|", ptx.count("wgmma.mma_async"), kern.metadata.shared, "|",
          resource_usage(kern.asm["cubin"]), flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU cross-compile check with this machine's Triton; a GPU "
                    "machine's image carries another (the H200's Triton 3.6 + ptxas 12.8 spill 64 B here)")
def test_default_launches_compile_for_sm90_on_tensor_cores_and_bf16_does_not_spill():
    """Cross-compiled with the bundled ptxas (no GPU needed): the default launch parameters use
    wgmma, fit the 227 KB of shared memory, and the bf16 kernel (the fast path) keeps every
    activation in registers (no spill stack). tf32 spills by design (see the module docstring)."""
    from tests.kernels.cross_compile import ROOT

    lines = run_interpreter_off(COMPILE_SCRIPT.format(root=str(ROOT)))
    assert len(lines) == 3, lines
    for line in lines:
        name, counts, usage = line.split("|")
        wgmma, shared = map(int, counts.split())
        assert wgmma > 0 and shared <= 227 * 1024, line
        if name.startswith("bf16") and usage.strip():
            assert "STACK:0" in usage, f"register spills: {line}"


# ---------------------------------------------------------------------------------------------- GPU
GPU_TOL = {"tf32": 1e-2, "bf16": 3e-2}
"""Largest max |Q error| / max |Q| of the kernel against the float32 torch net (tf32 inputs carry
~5e-4 relative error per product, bf16 ~4e-3 per rounding, through four layers)."""


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_gpu_default_net_at_64k_rows_agrees_with_torch(precision):
    if dmf.is_interpreted():
        pytest.skip("the interpreter is too slow for the big shape")
    net = varied_net(54, 45, hidden=(256, 256), head_hidden=128, seed=7, weight_scale=2.0, bias_scale=0.1)
    obs = torch.randn(65_536, 54, generator=torch.Generator(device="cuda").manual_seed(7), device="cuda")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            ref = net(obs)
        emu = bf16_q(net, obs) if precision == "bf16" else None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    out = dmf.fused_dueling_q(acting_pack(net, precision), obs, precision=precision, q_max=True, argmax=True)
    torch.cuda.synchronize()
    _check_max_argmax(out)
    scale = float(ref.abs().max())
    err = float((out.q - ref).abs().max())
    ref_arg = ref.argmax(dim=1)
    differ = out.argmax != ref_arg
    # A row may pick another action only where the torch margin between the two is within the error.
    rows = differ.nonzero().squeeze(1)
    gaps = ref[rows, ref_arg[rows]] - ref[rows, out.argmax[rows]]
    print(f"\n{precision}: max |Q error| / max |Q| = {err / scale:.2e}, argmax differs on "
          f"{float(differ.float().mean()):.3%} of rows, largest torch margin there {float(gaps.max()) if len(rows) else 0:.2e} "
          f"(max |Q| {scale:.3g})")
    assert err <= GPU_TOL[precision] * scale
    assert len(rows) == 0 or float(gaps.max()) <= 2 * err + 1e-6 * scale
    if emu is not None:  # against the emulation, only summation order and rounding-boundary flips remain
        assert float((out.q - emu).abs().max()) <= 5e-3 * scale


@pytest.mark.gpu
def test_gpu_ieee_kernel_equals_the_float32_net():
    if dmf.is_interpreted():
        pytest.skip("runs the compiled kernel")
    for case in CASES:
        for n in (1, 37, 4_099):
            net = varied_net(*case[:2], case[2], case[3], seed=n)
            obs = torch.randn(n, case[0], device="cuda")
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False
            try:
                with torch.no_grad():
                    ref = net(obs)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            out = dmf.fused_dueling_q(pk.pack_net(net, "ieee"), obs, precision="ieee", q_max=True, argmax=True)
            torch.testing.assert_close(out.q, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
            _check_max_argmax(out)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_gpu_captured_round_with_fused_acting_replays_like_eager(precision):
    if dmf.is_interpreted():
        pytest.skip("CUDA graphs")
    res = []
    for graphs in (False, True):
        tr = small_trainer(small_market(device="cuda"), n_envs=1024, graphs=graphs, seed=5, acting="fused",
                           matmul_precision=precision, buffer_capacity=16_384)
        for _ in range(3):
            tr.train_epoch()
        tr._round()  # one more (replayed) round after the last train steps: its refresh packs the final weights
        torch.cuda.synchronize()
        c = tr.collector
        fresh = pk.pack_net(tr.learner.online, precision, dmf.MIN_HEAD, dmf.MIN_WIDTH)  # the collector's padding
        for name in ("w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4"):
            assert torch.equal(getattr(c._fused.online, name), getattr(fresh, name)), (graphs, name)
        res.append((tr.learner.flat.data.clone(), tr.replay.storage.reward.clone(),
                    tr.replay.storage.action.clone(), c.r_td.clone(), c._fused.q_next_max.clone()))
    for a, b in zip(*res):
        assert torch.equal(a, b)
