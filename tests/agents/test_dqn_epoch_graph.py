"""dqn.epoch_graph (foxhunt.agents.dqn.trainer): an epoch whose every round trains runs as one step (one CUDA
graph on a GPU) and trains exactly what the per-round steps train: the same weights, optimiser state, replay
contents, counters and epoch summaries; an epoch that starts before the replay holds a batch, the lagged
collection and curiosity keep their per-round steps."""

from __future__ import annotations

import pytest
import torch

from foxhunt.train.logs import PhaseTimer
from tests.agents.dqn_helpers import small_trainer


def _state(tr) -> dict[str, torch.Tensor]:
    st = tr.replay.storage
    return {"online": tr.learner.flat.data.clone(), "target": tr.learner.target_flat.clone(), "adam_m": tr.learner.opt.m.clone(),
            "reward": st.reward.clone(), "bar": st.bar.clone(), "env_steps": tr.collector.env_steps.clone(),
            "epsilon": tr.collector.epsilon.clone()}


def _epochs(tr, n: int) -> tuple[list[dict[str, float]], PhaseTimer]:
    timer = PhaseTimer(tr.device)
    timer.install(tr)
    rows = []
    for e in range(n):
        timer.begin_epoch(e)
        rows.append(tr.train_epoch().to_dict())
    return rows, timer


def _same_rows(a: list[dict[str, float]], b: list[dict[str, float]]) -> bool:
    return all(x.keys() == y.keys() and all(x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]) for k in x) for x, y in zip(a, b))


def _run(device: str | None = None, **over):
    from tests.agents.dqn_helpers import small_market

    market = small_market(device=device or "cpu")
    tr = small_trainer(market, seed=5, warmup_transitions=200, **over)  # epoch 0: rounds 1-3 collect only
    rows, timer = _epochs(tr, 3)
    return tr, rows, timer


def test_a_steady_epoch_is_one_step_and_trains_exactly_what_its_rounds_train():
    on, rows_on, t_on = _run(epoch_graph=True)
    off, rows_off, t_off = _run(epoch_graph=False)
    # epoch 0 starts with an empty replay: per round; epochs 1 and 2 are steady: one step each
    assert t_on.calls["rounds_s"] == 2 and t_on.calls["collect_s"] == on.cfg.rounds_per_epoch
    assert "rounds_s" not in t_off.calls and t_off.calls["collect_s"] == 3 * off.cfg.rounds_per_epoch
    assert _same_rows(rows_on, rows_off)
    a, b = _state(on), _state(off)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (on.rounds, on.replay.storage.pos, on.replay.storage.size) == (off.rounds, off.replay.storage.pos, off.replay.storage.size)
    assert rows_on[2]["updates"] == on.cfg.rounds_per_epoch * on.cfg.train_steps_per_round


@pytest.mark.parametrize("over", [{"overlap_collection": True}, {"curiosity": True, "curiosity_every": 2},
                                  {"train_steps_per_round": 0}])
def test_lagged_collection_curiosity_and_no_updates_keep_their_per_round_steps(over):
    tr = small_trainer(seed=1, **over)
    _, timer = _epochs(tr, 2)
    assert "rounds_s" not in timer.calls


@pytest.mark.gpu
def test_gpu_the_steady_epoch_graph_equals_the_per_round_graphs_bit_for_bit():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    on, rows_on, t_on = _run("cuda", epoch_graph=True)
    off, rows_off, _ = _run("cuda", epoch_graph=False)
    assert on._steady.__wrapped__.graph is not None and t_on.calls["rounds_s"] == 2
    assert _same_rows(rows_on, rows_off)
    a, b = _state(on), _state(off)
    assert all(torch.equal(a[k], b[k]) for k in a)
