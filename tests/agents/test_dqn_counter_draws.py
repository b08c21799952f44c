"""dqn.counter_draws: the DQN trainer's exploration and episode-start draws from counter-based draws
(foxhunt.env.counter_draws) instead of its generators; its state carries the seeds and counters, so a
resumed trainer equals the uninterrupted one, and a new fold restarts the draws from the fold's seed."""

from __future__ import annotations

import torch

from foxhunt.env.counter_draws import counter_draws_torch
from foxhunt.folds import FoldRange
from tests.agents.dqn_helpers import small_trainer


def _values(tr, epochs: int) -> list[object]:
    return [tr.train_epoch().values for _ in range(epochs)]


def test_counter_draws_replace_the_generators_in_the_state_and_in_the_graphs_registry() -> None:
    tr = small_trainer(seed=3, counter_draws=True)
    state = tr.state_dict()
    assert "draw_seed" in state["collector"] and "generator" not in state["collector"]
    assert {"start_seed", "start_counter"} <= set(state["env"]) and "start_generator" not in state["env"]
    assert tr.collector.draws.generators() == {} and tr.env.sampler.generators() == {}
    plain = small_trainer(seed=3).state_dict()
    assert "generator" in plain["collector"] and "start_generator" in plain["env"]


def test_a_steps_exploration_draws_are_the_hash_of_the_seed_and_the_step_count() -> None:
    tr = small_trainer(seed=3, counter_draws=True)
    col = tr.collector
    col.env_steps.fill_(41)
    col.explore_draws()
    n = col._u.shape[0]
    u, a = torch.zeros(n), torch.zeros(n, dtype=torch.int64)
    counter_draws_torch(col.draws.seed_t.view(1), torch.tensor([41]), n, u32=u, ints=a, n_int=col.n_actions)
    assert torch.equal(col._u, u) and torch.equal(col._rand_action, a)


def test_a_trainer_on_counter_draws_resumed_from_its_state_equals_the_uninterrupted_one() -> None:
    a = small_trainer(seed=6, counter_draws=True)
    a.train_epoch()
    saved = {c: {k: v.clone() for k, v in part.items()} for c, part in a.state_dict().items()}
    ref = _values(a, 2)
    b = small_trainer(seed=6, counter_draws=True)
    b.load_state_dict(saved)
    assert _values(b, 2) == ref


def test_a_new_fold_restarts_the_draws_from_the_folds_seed_whatever_ran_before() -> None:
    """A fold's epoch equals a fresh trainer's, whatever the trainer ran before (its draws restart from the fold's
    seed and step 0; the replay's PER β restarts with its schedule), with counter draws and with generators."""
    fold1 = FoldRange(1, 500, 2_300, 2_310, 3_000)
    for counter in (True, False):
        fresh, used = small_trainer(seed=2, counter_draws=counter), small_trainer(seed=2, counter_draws=counter)
        used.train_epoch()
        for tr in (fresh, used):
            tr.reset_for_fold(fold1)
        assert fresh.train_epoch().values == used.train_epoch().values, counter
