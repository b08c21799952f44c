"""ppo.epoch_graph (foxhunt.agents.ppo.trainer) and direct.epoch_graph (agents/step_trainer.py): an epoch's iterations run as one step (one CUDA graph on a
GPU) and train exactly what the per-iteration steps train: the same weights, Adam moments, env state and
epoch summaries, on the CPU and, bit for bit, with graphs on a GPU."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from foxhunt.agents.exec_choice import ExecChoice  # noqa: E402
from foxhunt.train.logs import PhaseTimer  # noqa: E402
from tests.agents.dqn_helpers import small_market  # noqa: E402
from tests.agents.test_ppo import small_ppo  # noqa: E402


def _run(device: str, epoch_graph: bool):
    choice = ExecChoice(matmul_precision="fp32") if device == "cuda" else None
    tr = small_ppo(small_market(device=device), seed=3, choice=choice, target_kl=0.05, epoch_graph=epoch_graph)
    timer = PhaseTimer(tr.device)
    timer.install(tr)
    rows = []
    for e in range(3):
        timer.begin_epoch(e)
        rows.append(tr.train_epoch().to_dict())
    state = [t.clone() for t in (tr.learner.flat.data, tr.learner.opt.m, tr.learner.opt.v, tr.env.state.equity, tr.buffer.advantage)]
    return tr, rows, state, timer


def _same_rows(a, b) -> bool:
    return all(x.keys() == y.keys() and all(x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for k in x) for x, y in zip(a, b))


def test_an_epoch_is_one_step_and_trains_exactly_what_its_iterations_train():
    on, rows_on, s_on, t_on = _run("cpu", True)
    off, rows_off, s_off, t_off = _run("cpu", False)
    assert t_on.calls == {"rounds_s": 3} and t_off.calls["collect_s"] == t_off.calls["train_s"] == 3 * off.cfg.iterations_per_epoch
    assert on.rounds == off.rounds == 3 * on.cfg.iterations_per_epoch
    assert _same_rows(rows_on, rows_off)
    assert all(torch.equal(a, b) for a, b in zip(s_on, s_off))


@pytest.mark.gpu
def test_gpu_the_epoch_graph_equals_the_per_iteration_graphs_bit_for_bit():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    on, rows_on, s_on, _ = _run("cuda", True)
    _, rows_off, s_off, _ = _run("cuda", False)
    assert on._steady.__wrapped__.graph is not None
    assert _same_rows(rows_on, rows_off)
    assert all(torch.equal(a, b) for a, b in zip(s_on, s_off))


def test_a_direct_learner_epoch_as_one_step_trains_exactly_what_its_steps_train():
    from tests.agents.test_direct import small_direct

    out = []
    for on in (True, False):
        tr = small_direct(seed=4, epoch_graph=on)
        rows = [tr.train_epoch().to_dict() for _ in range(2)]
        out.append((rows, tr.learner.flat.data.clone(), tr.rounds))
    assert _same_rows(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1]) and out[0][2] == out[1][2] == 6
