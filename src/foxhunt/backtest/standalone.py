"""`foxhunt backtest --model`: saved models (one, or an ensemble) over equal windows of a bar file.

What this adds to ``Backtester`` (the CLI in ``cli_cmd`` only parses options and writes files):

* **Medians without look-ahead.** The env routes orders and starts its volatility EMA from the
  spread / volatility / volume medians of a training slice. A model file normally records its
  training medians; those are used. A file without them gets, for each window, the medians of the
  bars *before* that window only (``window_medians``), never of the window or later bars; the
  first 1 / (windows + 1) of the usable bars then serve as history and are not backtested.
* **The fused kernel when it covers the model.** ``--backend auto`` (default) runs the fused
  Triton kernel on CUDA when ``fused_unsupported`` allows it, ``fused`` requires it (an error
  saying why it cannot run; on a CPU it runs in the Triton interpreter with TRITON_INTERPRET=1),
  ``torch`` never uses it. A voting ensemble runs inside the kernel (K members' votes per bar); a
  mean-Q ensemble falls back to the torch path, which is printed and written into the report.
* **Annualisation** from the data, or ``--bars-per-year``; **barrier labels** with ``--barriers``.
* A rich progress bar on the torch path (fed by the chunk loop, no device reads).

The choice of path is local (``choose_fused``) so that it can be re-pointed at a shared backend
resolver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

BACKENDS = ("auto", "torch", "fused")


@dataclass
class StandaloneRun:
    """Everything the CLI writes: metric rows, curves per window, trades, and the notes."""

    rows: list[dict[str, Any]]
    curves: list[list[tuple[str, np.ndarray]]]
    times: list[np.ndarray]
    trades: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def choose_fused(backend: str, device_type: str) -> bool | str:
    """``Backtester.run``'s fused flag for a backend name (auto: the kernel on CUDA when it covers)."""
    if backend not in BACKENDS:
        from foxhunt.errors import ConfigError

        raise ConfigError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return False
    if backend == "fused":
        return True
    return "auto" if device_type == "cuda" else False


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
               ensemble_mode: str, backend: str, bars_per_year: float | None, barriers: bool,
               progress: Callable[[int, int], None] | None = None, say: Callable[[str], None] = print,
               sampled_seed: int | None = None) -> StandaloneRun:
    """Backtest the loaded models (``load_model`` triples, checked against ``fs``) and buy-and-hold.

    sampled_seed: one model's actions drawn from the softmax of its outputs (a PPO actor's policy),
    reproducibly from (seed, window, step), instead of its greedy argmax."""
    import torch

    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import EnsemblePolicy, ExposurePolicy, GreedyPolicy
    from foxhunt.env import EnvParams
    from foxhunt.errors import ConfigError
    from foxhunt.folds import FoldRange
    from foxhunt.market import MarketData, NormStats

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
    env_kw = {k: v for k, v in loaded[0][2].env.items() if k in EnvParams.model_fields}
    env = EnvParams(**env_kw)
    bt = Backtester(market, env, bars_per_year=bars_per_year)
    notes.append(bt.annualisation.describe())
    notes.append("episode rules: " + ("triple barrier: each round trip labelled +1 profit / −1 stop / 0 time "
                                      f"(profit {env.profit_bps:g} bps, stop {env.stop_bps:g} bps, expiry "
                                      f"{env.max_holding} bars); barriers end no window" if barriers
                                      else "plain windows (no barriers), each run to its end unless bust"))
    nets = [n for n, _, _ in loaded]
    f = market.n_features
    if len(nets) == 1 and sampled_seed is not None:
        from foxhunt.backtest.sampled import SampledPolicy

        policy, norms = SampledPolicy(nets[0], sampled_seed), [loaded[0][1]] * windows
    elif len(nets) == 1:
        policy, norms = GreedyPolicy(nets[0]), [loaded[0][1]] * windows
    else:
        policy = EnsemblePolicy(nets, mode=ensemble_mode, norms=[(nm.mean, nm.std) for _, nm, _ in loaded])
        ident = NormStats(torch.zeros(f, dtype=torch.float64, device=dev), torch.ones(f, dtype=torch.float64, device=dev))
        norms = [ident] * windows
    fused = choose_fused(backend, dev.type)
    bh_backend = "fused" if fused else "torch"  # buy-and-hold: fixed actions, always covered
    model_backend = bh_backend
    if fused:
        from foxhunt.backtest.fused import unsupported as fused_unsupported

        reason = fused_unsupported(bt, policy)
        if reason is not None and fused is True:
            raise ConfigError(f"--backend fused: the fused kernel cannot run {model[0]}: {reason}")
        if reason is not None:
            notes.append(f"fallback to the torch path: {reason}")
            model_backend = "torch"
    notes.append("model backtest: " + ("fused Triton kernel" if model_backend == "fused" else "torch path"))
    for note in notes:
        say(note)
    ones = torch.ones(windows, int(lengths.max()), device=dev)

    def run_both(sel: slice, med: dict[str, float] | None) -> tuple[Any, Any]:
        if med is not None:
            for key, dst in (("abs_return", market.median_abs_return), ("range", market.median_range),
                             ("volume", market.median_volume)):
                dst.fill_(med[key])
        st, ln = starts[sel], lengths[sel]
        res = bt.run(st, ln, policy, norms=norms[sel], keep_curves=True, keep_trades=True, backend=model_backend,
                     progress=progress, barriers=barriers)
        bh = bt.run(st, ln, ExposurePolicy(ones[sel, : int(ln.max())]), keep_curves=True, backend=bh_backend)
        return res, bh

    if recorded:
        pairs = [run_both(slice(0, windows), None)]
    else:
        pairs = []
        for w in range(windows):
            medians.append(window_medians(market, fs.warmup, int(starts[w])))
            pairs.append(run_both(slice(w, w + 1), medians[w]))
    label = "model" if len(nets) == 1 else f"ensemble ({ensemble_mode})"
    label += f" (sampled, seed {sampled_seed})" if sampled_seed is not None else ""
    return _collect(pairs, starts, lengths, medians, market.timestamps_host, notes, label, bool(recorded))


def _collect(pairs: list[tuple[Any, Any]], starts: np.ndarray, lengths: np.ndarray, medians: list[dict[str, float]],
             ts: np.ndarray, notes: list[str], label: str, one_run: bool) -> StandaloneRun:
    rows, curves, times, trades = [], [], [], []
    for w in range(starts.shape[0]):
        res, bh = pairs[0] if one_run else pairs[w]
        i = w if one_run else 0
        med = {f"median_{k}": v for k, v in medians[w].items()}
        for name, r in ((label, res), ("buy & hold", bh)):
            rows.append({"window": w, "label": name, "start": _iso(ts[starts[w]]), "end": _iso(ts[starts[w] + lengths[w]]),
                         **r.metrics[i], **med})
        curves.append([(label, res.equity(i)), ("buy & hold", bh.equity(i))])
        times.append(ts[starts[w]: starts[w] + lengths[w] + 1])
        trades += [{**tr, "window": w} for tr in (res.trades or []) if tr["window"] == i]
    return StandaloneRun(rows, curves, times, trades, notes)


def _iso(ns: int) -> str:
    return str(np.datetime64(int(ns), "ns").astype("datetime64[s]")).replace("T", " ")


__all__ = ["BACKENDS", "StandaloneRun", "choose_fused", "run_models", "window_edges", "window_medians"]
