"""A tune population's validation backtests of one fold as one backtest.

Why: a population trains its K trials side by side, but each trial's fold ends with the greedy
backtest of its fold model on the validation window (``WalkForwardRunner.evaluate``): K backtests of
the same window, one after another, each a chain of small per-bar kernels. On an H100 at 1 M bars
(5 folds of 100 K validation bars) that was ~0.36 s a trial a fold: with 32 trials the validations took
four times as long as the population's training. Trials whose fold models have one shape and one
decision interval, and whose backtests price the same costs, step one backtest of K windows
(``MemberGreedyPolicy``: window j reads trial j's network), the way a fold's members are scored on the
held-back window (``selection.observe_members``).

Equality: each window's actions are its network's greedy actions on the same bars as alone, and the
per-window metrics do not read other windows, so every trial's metrics and returns equal those of its
own backtest (tests/tune/test_population.py compares a population's recorded values with the same
trials alone, bit for bit). A trial that saves trades, a network that reads the last bars (a sequence
network), or a group of one runs ``evaluate`` as before.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from foxhunt.backtest.policies import MemberGreedyPolicy
from foxhunt.backtest.result import BacktestResult
from foxhunt.folds import FoldRange


def _group_key(runner: Any, net: Any) -> str | None:
    """Runners with equal keys can share one backtest (None: this one runs alone)."""
    if hasattr(net, "bind_history") or runner.tcfg.save_trades:
        return None
    d = runner.cfg.to_dict()
    shapes = [(k, list(v.shape), str(v.dtype)) for k, v in net.state_dict().items()]
    return json.dumps({"net": type(net).__qualname__, "shapes": shapes, "k": runner.fold_interval(),
                       "env": d.get("env"), "backtest": d.get("backtest"), "chunk": runner.tcfg.eval_chunk,
                       "backend": runner.plan.model_eval, "graphs": runner.plan.graphs,
                       "market": id(runner.market), "runner": type(runner).__qualname__},
                      sort_keys=True, default=str)


def _window(res: BacktestResult, j: int) -> BacktestResult:
    """Window j of a multi-window result, as a one-window result."""
    pick = slice(j, j + 1)
    return BacktestResult(metrics=[res.metrics[j]], starts=res.starts[pick], lengths=res.lengths[pick],
                          returns=None if res.returns is None else res.returns[pick],
                          positions=None if res.positions is None else res.positions[pick],
                          metrics_tensor=None if res.metrics_tensor is None else res.metrics_tensor[pick],
                          bars_per_year=res.bars_per_year)


def validate_together(runners: Sequence[Any], fold: FoldRange) -> list[BacktestResult | Exception]:
    """Each runner's greedy validation backtest of ``fold`` (``runner.evaluate(fold)[0]``), runners that
    can share one (``_group_key``) in one backtest. A runner's exception is its entry; the others go on."""
    out: list[BacktestResult | Exception | None] = [None] * len(runners)
    groups: dict[str, list[tuple[int, Any]]] = {}
    alone: list[int] = []
    for j, r in enumerate(runners):
        try:
            net = r.fold_net()
            key = _group_key(r, net)
        except Exception as exc:  # noqa: BLE001 - the trial's own failure is its outcome
            out[j] = exc
            continue
        if key is None:
            alone.append(j)
        else:
            groups.setdefault(key, []).append((j, net))
    for members in groups.values():
        if len(members) == 1:
            alone.append(members[0][0])
            continue
        first = runners[members[0][0]]
        n = fold.val_len - 1
        m = len(members)
        try:
            policy = MemberGreedyPolicy([net for _, net in members], [(i, i + 1) for i in range(m)], first.fold_interval())
            res = first.backtester.run([fold.val_start] * m, [n] * m, policy, backend=first.plan.model_eval,
                                       keep_curves=True)
        except Exception:  # noqa: BLE001 - the shared run failed: each trial's own backtest decides
            alone.extend(j for j, _ in members)
            continue
        for i, (j, _) in enumerate(members):
            out[j] = _window(res, i)
    for j in sorted(alone):
        try:
            out[j] = runners[j].evaluate(fold)[0]
        except Exception as exc:  # noqa: BLE001
            out[j] = exc
    return out  # type: ignore[return-value]


__all__ = ["validate_together"]
