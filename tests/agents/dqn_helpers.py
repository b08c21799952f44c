"""Small DQN setups shared by the agent tests."""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
import torch
from torch.nn.utils import vector_to_parameters

from foxhunt.accel.backend import ExecutionPlan
from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set


def small_market(n_bars: int = 3_000, n_features: int = 6, seed: int = 0, device="cpu") -> MarketData:
    m = MarketData(random_feature_set(n_bars, n_features, seed=seed), device)
    m.set_fold(FoldRange(0, 0, int(n_bars * 0.7), int(n_bars * 0.7) + 10, n_bars))
    return m


PLAN_KEYS = {f.name for f in fields(ExecutionPlan)}


def small_trainer(market: MarketData | None = None, seed: int = 0, **over) -> DQNTrainer:
    """A tiny DQNTrainer. Keyword arguments are DQNConfig fields, or ExecutionPlan fields
    (env_step, acting, train_step, replay, graphs, matmul_precision, readback: the plan is built
    directly, without the resolver's device rules, so tests can pin any component; graphs default
    to on with CUDA, as before)."""
    kw = dict(n_envs=16, rollout_len=4, rounds_per_epoch=4, train_steps_per_round=2, batch_size=32,
              buffer_capacity=4_096, warmup_transitions=64, hidden=(16, 16), head_hidden=8)
    plan_kw = {k: over.pop(k) for k in list(over) if k in PLAN_KEYS}
    kw.update(over)
    cfg = DQNConfig(**kw)
    m = market or small_market()
    plan_kw.setdefault("graphs", m.device.type == "cuda")  # as the torch backend resolves there
    plan = ExecutionPlan(device=str(m.device), **plan_kw)
    return DQNTrainer(m, EnvParams(episode_length=50, reward_scale=100.0), cfg, seed=seed, plan=plan)


def watch_batches(tr) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Record (bar, portfolio, online weights) of every train batch at its sampling (before the step)."""
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    sampler, st, ln = tr.replay.sampler, tr.replay.storage, tr.learner
    real = sampler.sample

    def sample(b: int):
        idx, w = real(b)
        seen.append((st.bar.index_select(0, idx).clone(), st.portfolio.index_select(0, idx).clone(), ln.flat.data.clone()))
        return idx, w

    sampler.sample = sample  # type: ignore[method-assign]
    return seen


def float64_q_stats(tr, seen) -> dict[str, float]:
    """The monitor's statistics recomputed in float64: observations normalised in float64 from the
    bars and portfolios sampled, Q of a float64 copy of the network with the step's weights."""
    m = tr.market
    net = copy.deepcopy(tr.learner.online).double()
    maxq, qabs = [], []
    for bar, port, weights in seen:
        obs = torch.cat([(m.features.double()[bar] - m.norm_mean.double()) * m.norm_inv_std.double(), port.double()], 1)
        vector_to_parameters(weights.double(), net.parameters())
        with torch.no_grad():
            q = net(obs)
        maxq.append(q.amax(1))
        qabs.append(q.abs().amax())
    x = torch.cat(maxq)
    return {"count": float(x.numel()), "mean": float(x.mean()), "std": float(x.std(unbiased=False)),
            "min": float(x.min()), "max": float(x.max()), "abs": float(torch.stack(qabs).max())}


def assert_q_monitor_matches(s, ref: dict[str, float], rel: float, batch: int = 32) -> None:
    """The epoch summary ``s``'s Q monitor equals ``float64_q_stats`` within ``rel`` (of the Q range)."""
    assert s["maxq_count"] == ref["count"] == s["updates"] * batch
    scale = max(abs(ref["min"]), abs(ref["max"]))
    assert s.maxq_mean == pytest.approx(ref["mean"], rel=rel, abs=rel * scale)
    assert s.maxq_std == pytest.approx(ref["std"], rel=10 * rel, abs=rel * scale)
    for key, name in (("maxq_min", "min"), ("maxq_max", "max"), ("q_abs_max", "abs")):
        assert s[key] == pytest.approx(ref[name], rel=rel, abs=rel * scale), key
    assert s["q_diverged"] == 0 and s["halt"] == 0
