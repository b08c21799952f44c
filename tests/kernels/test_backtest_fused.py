"""The fused backtest kernel against the torch Backtester and the float64 reference env.

Without CUDA the kernel runs in the Triton interpreter (TRITON_INTERPRET=1, set here before any
Triton code is imported; CI sets it too). Small shapes: 3 windows of odd lengths ≤ 45 bars on the
parity market (no bar's high / low near a limit price), a tiny DuelingQNet whose greedy actions
vary from bar to bar. The torch run is stepped here (``_Run.one_step``) so that its actions,
Q-values and fill statuses can be recorded: the tests check that every order type and every fill
status occurs. Actions must agree bar for bar; a disagreement is reported with the torch Q margin
(a near-tie of Q says rounding, anything larger says a bug). The GPU test repeats the comparison on
a bigger shape with the default 54-input network, per precision.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from torch import nn  # noqa: E402

from foxhunt.agents.networks import DuelingQNet  # noqa: E402
from foxhunt.backtest.evaluator import Backtester, _Run  # noqa: E402
from foxhunt.backtest.fused import check_windows, launch, run_fused, unsupported  # noqa: E402
from foxhunt.backtest.policies import ActionPolicy, ExposurePolicy, GreedyPolicy  # noqa: E402
from foxhunt.env import EnvParams  # noqa: E402
from foxhunt.folds import FoldRange  # noqa: E402
from foxhunt.kernels.backtest.kernel import is_interpreted  # noqa: E402
from foxhunt.market import MarketData  # noqa: E402
from tests.backtest.test_evaluator import _reference_backtest  # noqa: E402
from tests.env.test_parity import TRAIN_END, N_BARS, parity_feature_set  # noqa: E402
from tests.helpers import random_feature_set  # noqa: E402

DEV = torch.device("cpu" if is_interpreted() else "cuda")
PARAMS = EnvParams(cost_bps=2.0, spread_bps=3.0, impact_eta=0.2, participation=0.1)
# Odd window lengths, the first past a 16-bar chunk; the interpreted kernel steps every bar of every path (each case
# below still covers every fill status, five round trips, a reversal and every order type / route it asserts).
STARTS, LENGTHS = [100, 1070, 1500], [29, 17, 23]


def small_market(seed: int = 0, has_volume: bool = True) -> MarketData:
    m = MarketData(parity_feature_set(seed, has_volume), DEV)
    m.set_fold(FoldRange(0, 50, TRAIN_END, TRAIN_END, N_BARS))
    return m


def varied_net(obs_dim: int, n_actions: int, seed: int = 0, hidden=(32, 32), head_hidden: int = 16,
               weight_scale: float = 3.0, bias_scale: float = 0.05) -> DuelingQNet:
    """A random DuelingQNet whose greedy action changes often: default init biases dominate a small
    net's Q (it then sits on one action), so biases are shrunk and weights scaled up."""
    torch.manual_seed(seed)
    net = DuelingQNet(obs_dim, n_actions, hidden=hidden, head_hidden=head_hidden)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(weight_scale if p.dim() == 2 else bias_scale)
    return net.to(DEV)


class Recording:
    """Wraps a policy: keeps the last actions and Q-values (Q from ``q_fn``)."""

    def __init__(self, q_fn) -> None:
        self.q_fn = q_fn
        self.actions: torch.Tensor | None = None
        self.q: torch.Tensor | None = None

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.q = self.q_fn(obs)
        self.actions = self.q.argmax(dim=1)
        return self.actions


def _bf16_truncate(x: torch.Tensor) -> torch.Tensor:
    return (x.contiguous().view(torch.int32) & -65536).view(torch.float32)


def bf16_q(net: DuelingQNet):
    """Q of ``net`` computed as the bf16 kernel does: bf16 weights and layer inputs, float32 sums.

    Weights are rounded to nearest (torch packs them); layer inputs are cast in the kernel, which
    rounds to nearest on a GPU but truncates in the Triton interpreter (its float conversion
    ignores the rounding mode), so the emulation follows the interpreter there."""
    rw = lambda x: x.to(torch.bfloat16).to(torch.float32)  # noqa: E731
    r = _bf16_truncate if is_interpreted() else rw
    lin = lambda m, x: r(x) @ rw(m.weight).T + m.bias  # noqa: E731
    act = lambda x: torch.where(x > 0, x, x * 0.01)  # noqa: E731

    def q(obs: torch.Tensor) -> torch.Tensor:
        h = act(lin(net.trunk[2], act(lin(net.trunk[0], obs))))
        v = lin(net.value[2], act(lin(net.value[0], h)))
        a = lin(net.advantage[2], act(lin(net.advantage[0], h)))
        return v + a - a.mean(dim=-1, keepdim=True)

    return q


def torch_run(bt: Backtester, starts, lengths, q_fn) -> dict[str, np.ndarray]:
    """The torch backtest stepped bar by bar, recording actions, Q-values and fill statuses."""
    st, ln = check_windows(bt.market, starts, lengths)
    rec = Recording(q_fn)
    run = _Run(bt, st, ln, rec, None, False)
    acts, qs, status, stepped = [], [], [], []
    with torch.no_grad():
        for _ in range(int(ln.max())):
            run.one_step()
            acts.append(rec.actions.clone())
            qs.append(rec.q.clone())
            status.append(run.out.fill_status.clone())
            stepped.append(run.out.stepped.clone())
    t = int(ln.max())
    return {
        "returns": run.returns[:, :t].cpu().numpy(), "positions": run.positions[:, :t].cpu().numpy(),
        "trade_return": run.trade_ret[:, :t].cpu().numpy(), "trade_closed": run.trade_closed[:, :t].cpu().numpy(),
        "actions": torch.stack(acts, 1).cpu().numpy(), "q": torch.stack(qs, 1).cpu().numpy(),
        "status": torch.stack(status, 1).cpu().numpy(), "stepped": torch.stack(stepped, 1).cpu().numpy(),
        "equity": run.state.equity.cpu().numpy(),
    }


def first_divergence(ref: dict[str, np.ndarray], actions: np.ndarray) -> list[tuple[int, int, float, float]]:
    """Per window the first stepped bar where the kernel's action differs: (w, t, margin, |Q| scale)."""
    out = []
    for w in range(actions.shape[0]):
        diff = np.flatnonzero(ref["stepped"][w] & (ref["actions"][w] != actions[w]))
        if diff.size:
            t = int(diff[0])
            q = ref["q"][w, t]
            out.append((w, t, float(q[ref["actions"][w, t]] - q[actions[w, t]]), float(np.abs(q).max())))
    return out


def compare(ref: dict[str, np.ndarray], out, upto: np.ndarray | None = None, rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Returns, positions, trade returns / flags equal on bars [0, upto[w]) of each window."""
    w, t = ref["returns"].shape
    upto = np.full(w, t) if upto is None else upto
    got = {"returns": out.returns, "positions": out.positions, "trade_return": out.trade_return,
           "trade_closed": out.trade_closed}
    for name, arr in got.items():
        arr = arr.cpu().numpy()
        for i in range(w):
            a, b = arr[i, : upto[i]], ref[name][i, : upto[i]]
            if name == "trade_closed":
                np.testing.assert_array_equal(a, b, err_msg=f"{name}, window {i}")
            else:
                np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{name}, window {i}")


def assert_same_actions(ref: dict[str, np.ndarray], actions: np.ndarray, tol: float = 0.0) -> np.ndarray:
    """Actions equal bar for bar, or (tol > 0) first differ at a near-tie: a torch Q margin ≤ tol·max|Q|.
    Returns per window the number of bars before the first difference."""
    div = first_divergence(ref, actions)
    big = [d for d in div if d[2] > tol * d[3]] if tol > 0 else div
    assert not big, "greedy actions differ (window, bar, torch Q margin, |Q| scale; a margin near 0 is a " \
                    f"near-tie of Q, not a bug, and the test inputs should avoid it): {big}"
    upto = np.full(actions.shape[0], actions.shape[1])
    for w, t, _, _ in div:
        upto[w] = t
    return upto


def exposure_routes(market: MarketData, vol_lambda: float) -> tuple[set[int], set[int]]:
    """Order types and urgencies that exposure mode routes on the decision bars of the test windows
    (the vol EMA does not depend on the actions, so it is recomputed here in float64)."""
    rg = market.bar_range.cpu().numpy().astype(np.float64)
    absret = np.abs(market.log_return.cpu().numpy().astype(np.float64))
    med_rg, med_ar = float(market.median_range), float(market.median_abs_return)
    orders, urgencies = set(), set()
    for s, n in zip(STARTS, LENGTHS):
        v = med_ar
        for t in range(s, s + n):
            orders.add(1 if rg[t] < med_rg else (0 if rg[t] > 2 * med_rg else 2))
            urgencies.add(2 if v > 1.5 * med_ar else (0 if v < 0.5 * med_ar else 1))
            v = vol_lambda * v + (1 - vol_lambda) * absret[t + 1]
    return orders, urgencies


CASES = {
    "factored": dict(),
    "exposure": dict(action_mode="exposure", vol_lambda=0.5),  # a fast vol EMA: all three urgencies
    "kelly": dict(kelly=True, kelly_min_trades=2, kelly_alpha=0.2, kelly_fraction=1.0),
    "no_volume": dict(),
}


PATHS = {"row": dict(block_w=1), "row-no-precompute": dict(block_w=1, precompute=False),
         "row-both-heads": dict(block_w=1, adv_only=False), "tiles": dict(block_w=16),
         "tiles-both-heads": dict(block_w=16, adv_only=False)}
"""The kernel's MLP paths: one window per program with layer 1's feature part precomputed and the
advantage head alone (the default for few windows), the same without the precompute, the same with
both heads on every bar, and tl.dot tiles of 16 windows (advantage head only, and both heads)."""
GPU_ONLY_PATHS = {"row-l1keep": dict(block_w=1, l1_keep=True)}
"""Cache hints (the interpreter ignores them): checked compiled, on the GPU."""


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(CASES))
def test_fused_kernel_equals_the_torch_backtester_bar_for_bar(case, path):
    market = small_market(0, has_volume=case != "no_volume")
    params = PARAMS.model_copy(update=CASES[case])
    net = varied_net(market.obs_dim, params.n_actions)
    bt = Backtester(market, params, chunk=16, cuda_graphs=False)
    ref = torch_run(bt, STARTS, LENGTHS, net)
    st, ln = check_windows(market, STARTS, LENGTHS)
    out = launch(bt, st, ln, net, precision="ieee", store_debug=True, **{**PATHS, **GPU_ONLY_PATHS}[path])
    assert_same_actions(ref, out.actions.cpu().numpy())
    compare(ref, out)
    np.testing.assert_array_equal(out.fill_status.cpu().numpy(), np.where(ref["stepped"], ref["status"], 0))
    np.testing.assert_allclose(out.final_equity.cpu().numpy(), ref["equity"], rtol=1e-6)
    # The run exercised what it claims to: fills of every status, round trips, reversals.
    statuses = set(np.unique(ref["status"][ref["stepped"]]).tolist())
    assert {1, 2, 3} <= statuses if case != "no_volume" else {1, 3} <= statuses, statuses
    assert ref["trade_closed"].sum() >= 5
    pos = ref["positions"]
    assert (np.sign(pos[:, 1:]) * np.sign(pos[:, :-1]) < 0).any(), "no reversal happened"
    if case != "exposure":
        order_types = set(np.unique((ref["actions"][ref["stepped"]] // 3) % 3).tolist())
        assert order_types == {0, 1, 2}, order_types
    else:
        assert len(np.unique(ref["actions"][ref["stepped"]])) >= 3
        orders, urgencies = exposure_routes(market, params.vol_lambda)
        assert orders == {0, 1, 2} and urgencies == {0, 1, 2}, (orders, urgencies)
    if case == "kelly":
        assert (np.abs(pos[pos != 0]) < 0.94).any(), "Kelly sizing never scaled a position"


@pytest.mark.parametrize("path", list(PATHS))
def test_odd_layer_widths_are_padded_exactly(path):
    """Hidden widths that are not powers of two (20, 24; heads of 12) on every MLP path: the
    row path splits layer 3 into its heads at the unpadded width."""
    market = small_market(3)
    net = varied_net(market.obs_dim, 45, seed=3, hidden=(20, 24), head_hidden=12)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    ref = torch_run(bt, STARTS, LENGTHS, net)
    st, ln = check_windows(market, STARTS, LENGTHS)
    out = launch(bt, st, ln, net, precision="ieee", store_debug=True, **PATHS[path])
    assert_same_actions(ref, out.actions.cpu().numpy())
    compare(ref, out)


@pytest.mark.parametrize("block_w", [1, 16])
def test_bf16_kernel_equals_a_torch_net_with_bf16_weights_and_activations(block_w):
    market = small_market(1)
    net = varied_net(market.obs_dim, 45, seed=1)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    ref = torch_run(bt, STARTS, LENGTHS, bf16_q(net))
    st, ln = check_windows(market, STARTS, LENGTHS)
    out = launch(bt, st, ln, net, precision="bf16", store_debug=True, block_w=block_w)
    # Interpreted, the kernel computes exactly the emulation; compiled, its tensor-core sums may
    # round a hidden unit to the neighbouring bf16 value: near-ties of Q may then differ.
    upto = assert_same_actions(ref, out.actions.cpu().numpy(), tol=0.0 if is_interpreted() else 2e-2)
    compare(ref, out, upto)


def test_a_bust_ends_the_window_and_finished_windows_stop_changing():
    market = small_market(2)
    params = PARAMS.model_copy(update=dict(bust_fraction=0.995, cost_bps=20.0, spread_bps=10.0))
    net = varied_net(market.obs_dim, 45, seed=2)
    bt = Backtester(market, params, chunk=16, cuda_graphs=False)
    ref = torch_run(bt, STARTS, LENGTHS, net)
    st, ln = check_windows(market, STARTS, LENGTHS)
    out = launch(bt, st, ln, net, precision="ieee", store_debug=True)
    assert_same_actions(ref, out.actions.cpu().numpy())
    compare(ref, out)
    stepped = ref["stepped"]
    assert (stepped.sum(1) < ln).any(), "no window went bust"
    for name in ("returns", "positions", "trade_return"):
        assert (getattr(out, name).cpu().numpy()[~stepped] == 0).all(), name
    assert not out.trade_closed.cpu().numpy()[~stepped].any()
    bust_level = params.bust_fraction * params.capital
    np.testing.assert_array_equal(out.final_equity.cpu().numpy() <= bust_level, ref["equity"] <= bust_level)


def test_fused_run_matches_the_float64_reference_env_on_its_own_actions():
    market = small_market(3)
    params = PARAMS.model_copy(update=dict(kelly=True, kelly_min_trades=2))
    net = varied_net(market.obs_dim, 45, seed=3)
    bt = Backtester(market, params, chunk=16, cuda_graphs=False)
    st, ln = check_windows(market, STARTS, LENGTHS)
    out = launch(bt, st, ln, net, precision="ieee", store_debug=True, store_trades=True)
    rets, pos, trades, traded = _reference_backtest(market, st, ln, out.actions.cpu().numpy(), params)
    np.testing.assert_allclose(out.returns.cpu().numpy(), rets, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.positions.cpu().numpy(), pos, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.traded.cpu().numpy(), traded, rtol=1e-4, atol=1e-7)  # turnover's input
    closed = out.trade_closed.cpu().numpy()
    w_idx, t_idx = np.nonzero(closed)
    entry = out.trade_entry_bar.cpu().numpy()
    side = out.trade_side.cpu().numpy()
    got = [(int(w), int(entry[w, t]), int(st[w] + t + 1), int(side[w, t])) for w, t in zip(w_idx, t_idx)]
    assert got == [tr[:4] for tr in trades] and len(got) >= 5
    np.testing.assert_allclose(out.trade_return.cpu().numpy()[closed], [tr[4] for tr in trades], rtol=1e-4, atol=1e-6)


def test_run_fused_returns_the_backtesters_result_with_per_window_norms():
    market = small_market(4)
    net = varied_net(market.obs_dim, 45, seed=4)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    norms = [market.norm_stats(0, 50), market.norm_stats(200, 600), market.norm_stats(0, 2000)]
    a = bt.run(STARTS, LENGTHS, GreedyPolicy(net), norms=norms, keep_curves=True, keep_trades=True)
    b = run_fused(bt, STARTS, LENGTHS, net, norms=norms, keep_curves=True, keep_trades=True, precision="ieee")
    np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.positions, a.positions, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.metrics_tensor.cpu().numpy(), a.metrics_tensor.cpu().numpy(), rtol=1e-4, atol=1e-9)
    assert [r["status"] for r in b.metrics] == [r["status"] for r in a.metrics]
    assert len(a.trades) >= 5 and len(b.trades) == len(a.trades)
    for ta, tb in zip(a.trades, b.trades):
        assert {k: ta[k] for k in ("window", "entry_bar", "exit_bar", "side")} == \
               {k: tb[k] for k in ("window", "entry_bar", "exit_bar", "side")}
        assert tb["return"] == pytest.approx(ta["return"], rel=1e-5, abs=1e-7)
        assert tb["size"] == pytest.approx(ta["size"], rel=1e-5)
        assert tb["costs"] == pytest.approx(ta["costs"], rel=1e-4, abs=1e-6)


def test_the_fused_backend_refuses_what_the_kernel_does_not_cover_naming_why():
    """``unsupported`` names the reason; ``Backtester.run(backend="fused")`` raises it (the caller
    settles a fallback: ``accel.backend.fall_back``, tests/accel); the torch backend runs them all."""
    market = small_market(0)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    class Custom:
        def __call__(self, obs, t):
            return torch.zeros(obs.shape[0], dtype=torch.int64, device=obs.device)

    deep = DuelingQNet(market.obs_dim, 45, hidden=(16, 16, 16)).to(DEV)
    wrong = DuelingQNet(market.obs_dim, 5).to(DEV)
    tanh = DuelingQNet(market.obs_dim, 45).to(DEV)
    tanh.trunk[1] = nn.Tanh()
    for policy, why in ((Custom(), "not a GreedyPolicy, an EnsemblePolicy, a MemberGreedyPolicy or an ActionPolicy"),
                        (GreedyPolicy(deep), "two trunk layers"), (GreedyPolicy(wrong), "the env needs"),
                        (GreedyPolicy(tanh), "layers other than Linear and LeakyReLU")):
        assert why in unsupported(bt, policy)
        with pytest.raises(ValueError, match=f"fused backtest unavailable: .*{why}"):
            bt.run(STARTS, LENGTHS, policy, backend="fused")
    assert bt.run(STARTS, [5, 3, 7], Custom()).metrics[2]["bars"] == 7
    with pytest.raises(ValueError, match="backend = 'auto': expected 'torch' or 'fused'"):
        bt.run(STARTS, LENGTHS, Custom(), backend="auto")
    res = bt.run(STARTS, [5, 3, 7], GreedyPolicy(varied_net(market.obs_dim, 45)), backend="fused")
    assert len(res.metrics) == 3 and res.metrics[2]["bars"] == 7


def test_backtester_run_fused_backend_gives_the_torch_paths_result():
    if not is_interpreted():
        pytest.skip("bar-level equality with the default tf32 precision is the GPU tests' (near-ties)")
    market = small_market(5)
    net = varied_net(market.obs_dim, 45, seed=5)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    lengths = [20, 13, 17]
    a = bt.run(STARTS, lengths, GreedyPolicy(net), keep_curves=True)
    b = bt.run(STARTS, lengths, GreedyPolicy(net), keep_curves=True, backend="fused")
    np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.metrics_tensor.cpu().numpy(), a.metrics_tensor.cpu().numpy(), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_fixed_action_policies_run_fused_with_the_torch_paths_result(mode):
    """ActionPolicy (random actions, columns fewer than bars: the last column repeats) and
    ExposurePolicy buy-and-hold give the torch path's returns, positions and metrics."""
    market = small_market(6)
    params = PARAMS.model_copy(update=dict(action_mode=mode))
    bt = Backtester(market, params, chunk=16, cuda_graphs=False)
    lengths = LENGTHS
    g = torch.Generator().manual_seed(6)
    rand = ActionPolicy(torch.randint(0, params.n_actions, (3, 24), generator=g).to(DEV))  # 24 < 29 columns
    hold = ExposurePolicy(torch.ones((3, 29), device=DEV), params.n_actions)
    for policy in (rand, hold):
        a = bt.run(STARTS, lengths, policy, keep_curves=True)
        b = bt.run(STARTS, lengths, policy, keep_curves=True, backend="fused")
        np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b.positions, a.positions, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b.metrics_tensor.cpu().numpy(), a.metrics_tensor.cpu().numpy(), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("k,block_w", [(3, 1), (5, 16)])
def test_fused_kernel_holds_a_decision_for_k_bars_as_the_torch_backtester(k, block_w):
    """GreedyPolicy(net, decision_interval=k): the kernel runs the net on bars 0, k, 2k, … of each
    window and holds its action (row and tile paths) with the torch path's returns and trades."""
    market = small_market(7)
    net = varied_net(market.obs_dim, 45, seed=7)
    bt = Backtester(market, PARAMS, chunk=16, cuda_graphs=False)
    policy = GreedyPolicy(net, decision_interval=k)
    a = bt.run(STARTS, LENGTHS, policy, keep_curves=True, keep_trades=True)
    b = run_fused(bt, STARTS, LENGTHS, policy, keep_curves=True, keep_trades=True, precision="ieee", block_w=block_w)
    np.testing.assert_allclose(b.returns, a.returns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.positions, a.positions, rtol=1e-5, atol=1e-7)
    assert [(t["entry_bar"], t["exit_bar"], t["side"]) for t in b.trades] == \
           [(t["entry_bar"], t["exit_bar"], t["side"]) for t in a.trades]
    every_bar = bt.run(STARTS, LENGTHS, GreedyPolicy(net), keep_curves=True)
    assert not np.array_equal(every_bar.positions, a.positions)


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_compiled_kernel_passes_the_small_exact_cases():
    """The small cases above, compiled for the GPU (div_rn / sqrt_rn, no FMA contraction)."""
    if is_interpreted():
        pytest.skip("runs the compiled kernel")
    for path in [*PATHS, *GPU_ONLY_PATHS]:
        for case in CASES:
            test_fused_kernel_equals_the_torch_backtester_bar_for_bar(case, path)
        if path in PATHS:
            test_odd_layer_widths_are_padded_exactly(path)
    for block_w in (1, 16):
        test_bf16_kernel_equals_a_torch_net_with_bf16_weights_and_activations(block_w)
    test_a_bust_ends_the_window_and_finished_windows_stop_changing()
    test_fused_run_matches_the_float64_reference_env_on_its_own_actions()
    test_run_fused_returns_the_backtesters_result_with_per_window_norms()
    for mode in ("factored", "exposure"):
        test_fixed_action_policies_run_fused_with_the_torch_paths_result(mode)


GPU_TOL = {("ieee", "fp32"): 1e-4, ("tf32", "fp32"): 2e-2, ("bf16", "bf16"): 2e-2, ("bf16", "fp32"): None}
"""(kernel precision, torch net): the largest torch Q margin (relative to max |Q|) at which the
kernel may pick another action (tf32 inputs carry ~5e-4 relative error, bf16 ~4e-3 per rounding);
None: the bf16 kernel against the float32 net is reported (is bf16 good enough?), not asserted."""


@pytest.mark.gpu
@pytest.mark.parametrize("block_w", [1, 16])
@pytest.mark.parametrize("mode", ["factored", "exposure"])
def test_gpu_fused_kernel_agrees_with_the_torch_path_up_to_near_ties_on_a_big_shape(mode, block_w):
    if is_interpreted():
        pytest.skip("the interpreter is too slow for the big shape")
    fs = random_feature_set(n_bars=40_000, n_features=51, seed=7)
    market = MarketData(fs, "cuda")
    market.set_fold(FoldRange(0, 0, 20_000, 20_000, 40_000))
    params = PARAMS.model_copy(update=dict(action_mode=mode, kelly=True))
    net = varied_net(market.obs_dim, params.n_actions, seed=7, hidden=(256, 256), head_hidden=128,
                     weight_scale=2.0, bias_scale=0.1)
    rng = np.random.default_rng(7)
    w = 37
    lengths = rng.integers(1_500, 3_000, w)
    starts = rng.integers(0, 40_000 - 3_001, w)
    bt = Backtester(market, params, chunk=64, cuda_graphs=False)
    st, ln = check_windows(market, starts, lengths)
    refs = {"fp32": torch_run(bt, st, ln, net), "bf16": torch_run(bt, st, ln, bf16_q(net))}
    outs = {p: launch(bt, st, ln, net, precision=p, store_debug=True, block_w=block_w) for p in ("ieee", "tf32", "bf16")}
    torch.cuda.synchronize()
    report = []
    for (prec, ref_key), tol in GPU_TOL.items():
        ref, out = refs[ref_key], outs[prec]
        div = first_divergence(ref, out.actions.cpu().numpy())
        upto = ln.copy()
        for wi, t, _, _ in div:
            upto[wi] = t
        compare(ref, out, upto, rtol=1e-4, atol=1e-6)
        rel = sorted(m / s for _, _, m, s in div)
        big = [(wi, t, m, s) for wi, t, m, s in div if tol is not None and m > tol * s]
        report.append(f"{mode} block_w={block_w} {prec} kernel vs torch {ref_key} net: {len(div)}/{w} windows diverge, "
                      f"{upto.sum() / ln.sum():.1%} of bars before the first difference; relative Q margins "
                      f"there: {[f'{r:.1e}' for r in rel]}; beyond {tol}: {big}")
        assert not big, report[-1]
    print("\n".join(report))
    # A fused run agrees with the float64 reference env on its own actions.
    out = launch(bt, st[:3], np.minimum(ln[:3], 800), net, precision="tf32", store_debug=True, block_w=block_w)
    rets, pos, _, _ = _reference_backtest(market, st[:3], np.minimum(ln[:3], 800), out.actions.cpu().numpy(), params)
    np.testing.assert_allclose(out.returns.cpu().numpy(), rets, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.positions.cpu().numpy(), pos, rtol=1e-4, atol=1e-6)
