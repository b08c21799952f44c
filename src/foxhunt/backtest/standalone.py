"""`foxhunt backtest --model`: saved models (one, or an ensemble) over equal windows of a bar file.

What this adds to ``Backtester`` (the CLI in ``cli_cmd`` only parses options and writes files):

* **Medians without look-ahead.** The env routes orders and starts its volatility EMA from the
  spread / volatility / volume medians of a training slice. A model file normally records its
  training medians; those are used. A file without them gets, for each window, the medians of the
  bars *before* that window only (``window_medians``), never of the window or later bars; the
  first 1 / (windows + 1) of the usable bars then serve as history and are not backtested.
* **The backend of ``[accel]``.** The caller resolves the plan's ``eval`` (``foxhunt.accel``:
  ``accel.backend = "auto"`` is the fused Triton kernel on CUDA, torch on a CPU; ``accel.eval``
  overrides it; on a CPU the kernel runs in the Triton interpreter with TRITON_INTERPRET=1).
  ``run_models`` settles it against what the files hold (``backtest.fused.unsupported`` through
  ``accel.backend.fall_back``): under ``auto`` a policy the kernel does not cover (a mean-Q
  ensemble, a sampled policy, another network) runs the torch path, printed and written into the
  report and the plan's notes; a fused backend the user named is then a one-line error. A voting
  ensemble runs inside the kernel (K members' votes per bar). Buy-and-hold follows the same
  choice, so the plan's ``eval`` is what ran.
* **Annualisation** from the data, or ``--bars-per-year``; **barrier labels** with ``--barriers``.
* A rich progress bar on the torch path (fed by the chunk loop, no device reads).

"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

@dataclass
class StandaloneRun:
    """Everything the CLI writes: metric rows, curves per window, trades, and the notes."""

    rows: list[dict[str, Any]]
    curves: list[list[tuple[str, np.ndarray]]]
    times: list[np.ndarray]
    trades: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    plan: Any = None  # the ExecutionPlan that ran (eval settled against the models)
    starts: list[int] = field(default_factory=list)  # each window's first bar (times[w][0]'s index)
    learner_eval: list[dict[str, Any] | None] = field(default_factory=list)  # per window: one model's own evaluation (registry: window_report)


def window_medians(market: Any, first_bar: int, start: int) -> dict[str, float]:
    """Set the market's medians from bars [first_bar, start) only (those before the window).

    Uses ``MarketData.set_fold`` with that slice as the training range (the same median rule as
    training). Returns the medians set (host floats, read once per window, outside any loop)."""
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange

    if start - first_bar < 2:
        raise ConfigError(f"window starting at bar {start}: only {start - first_bar} earlier bar(s) to take the "
                          f"spread / volatility medians from (need >= 2)")
    market.set_fold(FoldRange(0, first_bar, start, start, start + 1))
    return {"abs_return": float(market.median_abs_return), "range": float(market.median_range),
            "volume": float(market.median_volume)}


def window_edges(first_bar: int, last_bar: int, windows: int, history: bool) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of ``windows`` equal windows over [first_bar, last_bar]; with ``history`` the
    first of windows + 1 equal parts is left out (medians only)."""
    edges = np.linspace(first_bar, last_bar, windows + 1 + int(history)).astype(np.int64)
    if history:
        edges = edges[1:]
    return edges[:-1], np.diff(edges)


def run_models(model: Sequence[Path], loaded: Sequence[tuple[Any, Any, Any]], fs: Any, dev: Any, *, windows: int,
               ensemble_mode: str, plan: Any, bars_per_year: float | None, barriers: bool,
               progress: Callable[[int, int], None] | None = None, say: Callable[[str], None] = print,
               sampled_seed: int | None = None) -> StandaloneRun:
    """Backtest the loaded models (``load_model`` triples, checked against ``fs``) and buy-and-hold.

    plan: the ``ExecutionPlan`` of ``[accel]`` on ``dev`` (``resolve(accel, None, dev,
    parts=("eval",))``): its ``eval`` and ``graphs``; settled against the models here (module
    docstring) and returned in ``StandaloneRun.plan``, its summary said first.
    sampled_seed: one model's actions drawn from the softmax of its outputs (a PPO actor's policy),
    reproducibly from (seed, window, step), instead of its greedy argmax."""
    import torch

    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import ExposurePolicy
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange
    from foxhunt.market import MarketData

    market = MarketData(fs, dev)
    t = len(fs)
    usable = t - 1 - fs.warmup
    recorded = loaded[0][2].extra.get("medians")
    if usable < (windows + int(not recorded)) * 2:
        raise ConfigError(f"{usable} usable bars cannot make {windows} windows")
    starts, lengths = window_edges(fs.warmup, t - 1, windows, history=not recorded)
    market.set_fold(FoldRange(0, fs.warmup, t - 2, t - 2, t - 1))  # bounds only; medians set below
    notes = []
    if recorded:
        market.median_abs_return.fill_(recorded["abs_return"])
        market.median_range.fill_(recorded["range"])
        market.median_volume.fill_(recorded["volume"])
        medians = [dict(recorded)] * windows
        notes.append(f"medians (order routing, initial volatility): recorded in {model[0]}")
    else:
        medians = []
        notes.append(f"medians: {model[0]} records none, so each window uses the bars before it only (bars "
                     f"{fs.warmup}…{int(starts[0]) - 1} are history, not backtested)")
    env, k = model_env(loaded, notes)
    bt = Backtester(market, env, bars_per_year=bars_per_year, cuda_graphs=plan.graphs)
    notes.append(bt.annualisation.describe())
    notes.append(episode_note(env, barriers))
    policy, norm = model_policy(model, loaded, dev, market.n_features, k, ensemble_mode, sampled_seed)
    norms = [norm] * windows
    plan = settle_backend(plan, bt, policy, model, notes)
    backend = plan.eval  # the model and buy-and-hold alike
    notes.append("model backtest: " + ("fused Triton kernel" if backend == "fused" else "torch path"))
    notes.insert(0, plan.summary())  # printed first and written into the report
    for note in notes:
        say(note)
    ones = torch.ones(windows, int(lengths.max()), device=dev)

    def run_both(sel: slice, med: dict[str, float] | None) -> tuple[Any, Any]:
        if med is not None:
            for key, dst in (("abs_return", market.median_abs_return), ("range", market.median_range),
                             ("volume", market.median_volume)):
                dst.fill_(med[key])
        st, ln = starts[sel], lengths[sel]
        res = bt.run(st, ln, policy, norms=norms[sel], keep_curves=True, keep_trades=True, backend=backend,
                     progress=progress, barriers=barriers)
        bh = bt.run(st, ln, ExposurePolicy(ones[sel, : int(ln.max())]), keep_curves=True, backend=backend)
        return res, bh

    if recorded:
        pairs = [run_both(slice(0, windows), None)]
    else:
        pairs = []
        for w in range(windows):
            medians.append(window_medians(market, fs.warmup, int(starts[w])))
            pairs.append(run_both(slice(w, w + 1), medians[w]))
    label = policy_label(len(loaded), ensemble_mode, sampled_seed)
    run = _collect(pairs, starts, lengths, medians, market.timestamps_host, notes, label, bool(recorded))
    run.plan = plan
    run.learner_eval = _learner_eval(loaded, market, starts, lengths)
    return run


def _learner_eval(loaded: Sequence[tuple[Any, Any, Any]], market: Any, starts: np.ndarray,
                  lengths: np.ndarray) -> list[dict[str, Any] | None]:
    """One model's own evaluation per window (the forecast's IC and hit rate: ``registry.Learner.window_report``)
    under its normalisation; [] for an ensemble of files or a learner without one."""
    from foxhunt.agents.registry import LEARNERS
    from foxhunt.market import inverse_std

    if len(loaded) != 1:
        return []
    net, norm, meta = loaded[0]
    entry = LEARNERS.get(str(meta.extra.get("agent", "")))
    if entry is None or entry.window_report is None:
        return []
    market.norm_mean.copy_(norm.mean)  # the model's normalisation, as its backtest had it (after the backtests)
    market.norm_inv_std.copy_(inverse_std(norm.std))
    return [entry.window_report(net, market, int(a), int(a) + int(n) + 1, dict(meta.extra)) for a, n in zip(starts, lengths)]


def model_env(loaded: Sequence[tuple[Any, Any, Any]], notes: list[str]) -> tuple[Any, int]:
    """(EnvParams, decision interval k) the models were trained with (the first model's env; every
    member must share one k), the interval noted when it is not 1."""
    from foxhunt.env import EnvParams
    from foxhunt.errors import ConfigError

    env = EnvParams(**{k: v for k, v in loaded[0][2].env.items() if k in EnvParams.model_fields})
    intervals = sorted({int(meta.env.get("decision_interval", 1)) for _, _, meta in loaded})
    if len(intervals) > 1:
        raise ConfigError(f"--model: the models decide at different intervals (env.decision_interval {intervals}); "
                          "an ensemble's members must share one")
    if intervals[0] > 1:
        notes.append(f"decisions: every {intervals[0]} bars (the model's env.decision_interval), held in between")
    return env, intervals[0]


def episode_note(env: Any, barriers: bool) -> str:
    """The report's line on episode rules (barrier labels or plain windows)."""
    return "episode rules: " + ("triple barrier: each round trip labelled +1 profit / −1 stop / 0 time "
                                f"(profit {env.profit_bps:g} bps, stop {env.stop_bps:g} bps, expiry "
                                f"{env.max_holding} bars); barriers end no window" if barriers
                                else "plain windows (no barriers), each run to its end unless bust")


def model_policy(model: Sequence[Path], loaded: Sequence[tuple[Any, Any, Any]], dev: Any, n_features: int, k: int,
                 ensemble_mode: str, sampled_seed: int | None) -> tuple[Any, Any]:
    """(policy, NormStats every window uses) of the loaded models: one model greedy (or sampled) under
    its own normalisation; several a voting / mean-Q ensemble whose members normalise for themselves
    (the windows then get the identity). k: the models' decision interval."""
    import torch

    from foxhunt.backtest.policies import EnsemblePolicy, GreedyPolicy
    from foxhunt.errors import ConfigError
    from foxhunt.market import NormStats

    nets = [n for n, _, _ in loaded]
    if len(nets) == 1 and sampled_seed is not None:
        from foxhunt.backtest.sampled import SampledPolicy

        return SampledPolicy(nets[0], sampled_seed, decision_interval=k), loaded[0][1]
    if len(nets) == 1:
        return GreedyPolicy(nets[0], k), loaded[0][1]
    if any(hasattr(n, "bind_history") for n in nets):
        raise ConfigError(f"--model: {model[[hasattr(n, 'bind_history') for n in nets].index(True)]} reads the last bars "
                          "of the market (direct.policy = 'attention') and runs alone, not in an ensemble of model files")
    policy = EnsemblePolicy(nets, mode=ensemble_mode, norms=[(nm.mean, nm.std) for _, nm, _ in loaded], decision_interval=k)
    ident = NormStats(torch.zeros(n_features, dtype=torch.float64, device=dev),
                      torch.ones(n_features, dtype=torch.float64, device=dev))
    return policy, ident


def settle_backend(plan: Any, bt: Any, policy: Any, model: Sequence[Path], notes: list[str]) -> Any:
    """The plan with its ``eval`` settled against the policy: under a fused eval that the kernel
    cannot run, ``fall_back`` (torch under auto, a one-line error when fused was named), noted."""
    from foxhunt.accel.backend import fall_back

    if plan.eval == "fused":
        from foxhunt.backtest.fused import unsupported as fused_unsupported

        reason = fused_unsupported(bt, policy)
        plan = fall_back(plan, "eval", None if reason is None else f"the fused kernel cannot run {model[0]}: {reason}")
        if reason is not None:
            notes.append(f"fallback to the torch path: {reason}")
    return plan


def policy_label(n_models: int, ensemble_mode: str, sampled_seed: int | None) -> str:
    """The rows' label of the models' policy: "model", "ensemble (vote)" …, "(sampled, seed S)" added."""
    label = "model" if n_models == 1 else f"ensemble ({ensemble_mode})"
    return label + (f" (sampled, seed {sampled_seed})" if sampled_seed is not None else "")


def _collect(pairs: list[tuple[Any, Any]], starts: np.ndarray, lengths: np.ndarray, medians: list[dict[str, float]],
             ts: np.ndarray, notes: list[str], label: str, one_run: bool) -> StandaloneRun:
    """The rows (the model's with its exposure and timing against buy-and-hold on the same window:
    ``foxhunt.backtest.timing``), curves, times and trades of every window."""
    from foxhunt.backtest.timing import row_fields, window_timing

    rows, curves, times, trades = [], [], [], []
    for w in range(starts.shape[0]):
        res, bh = pairs[0] if one_run else pairs[w]
        i = w if one_run else 0
        med = {f"median_{k}": v for k, v in medians[w].items()}
        for name, r in ((label, res), ("buy & hold", bh)):
            timing = row_fields(window_timing(res, i, bh, i)) if r is res else {}
            rows.append({"window": w, "label": name, "start": _iso(ts[starts[w]]), "end": _iso(ts[starts[w] + lengths[w]]),
                         **r.metrics[i], **timing, **med})
        curves.append([(label, res.equity(i)), ("buy & hold", bh.equity(i))])
        times.append(ts[starts[w]: starts[w] + lengths[w] + 1])
        trades += [{**tr, "window": w} for tr in (res.trades or []) if tr["window"] == i]
    return StandaloneRun(rows, curves, times, trades, notes, starts=[int(x) for x in starts])


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")


__all__ = ["StandaloneRun", "episode_note", "model_env", "model_policy", "policy_label", "run_models", "settle_backend", "window_edges", "window_medians"]
