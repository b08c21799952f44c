"""`foxhunt backtest --model FILE --data DIR`: saved models over every symbol of a universe, one
backtest call for all of them, and the symbols held together as portfolios.

* **Windows = symbols.** Each symbol's usable bars (after its feature warm-up, up to its last bar)
  are split into ``--windows`` equal windows, as one file's are; the windows of all S symbols (S ×
  windows rows) step in lockstep in ONE ``Backtester.run`` call for the model, one for buy-and-hold
  and one for the quant rule, on the torch path or the fused kernel (``[accel]``, settled as for one
  file). A window is (start, length) inside one symbol's rows of the ``UniverseMarket``: its last
  fill reads that symbol's last bar, never the next symbol's first.
* **Normalisation and medians**: every symbol's features are normalised with the model's own
  statistics (as for one file), and the order-routing medians are the ones the model file records
  (a universe backtest needs them: the env holds one set of medians, so a model file without them
  is refused in one line; ``foxhunt train`` records them).
* **Annualisation**: one factor for every row: ``--bars-per-year`` (``backtest.bars_per_year``), else
  inferred from the union calendar of the universe's bars (``annualisation``), so that a symbol's
  Sharpe and the portfolio's are on one scale.
* **Quant rule** (``quant_rules``): per symbol and window, the rule with the best proxy Sharpe on
  that symbol's bars before the window (in sample), backtested on the window like the model.
* **Portfolios** (``portfolio``): each policy's per-symbol returns on the union of the symbols'
  return dates, equal-weight and inverse-volatility-weighted. A symbol's training volatility is the
  standard deviation of its simple close-to-close returns over its bars before its first backtest
  window (its feature warm-up bars, ``WARMUP`` = 303 at least), never a bar it is evaluated on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from foxhunt.backtest.portfolio import WEIGHT_RULES, PortfolioResult, portfolios, training_volatility, union_axis

__all__ = ["UniverseRun", "universe_windows", "run_universe", "BENCHMARK", "QUANT"]

BENCHMARK = "buy & hold"
QUANT = "quant rule"


@dataclass
class UniverseRun:
    """What a universe backtest writes.

    symbols: S names. rows: per-symbol metric rows (symbol, window, label, start, end, metrics)
    then the portfolio rows (symbol "portfolio", window "all", weights). sharpe: [S, windows] the
    model's Sharpe per symbol and window. returns: {label: S arrays}, each symbol's windows joined;
    times: S arrays [n_s + 1] int64 ns (the first window's start bar, then each return's bar).
    axis: [T] the union of the return times; portfolios: {(label, rule): PortfolioResult} on it.
    """

    symbols: tuple[str, ...]
    rows: list[dict[str, Any]]
    sharpe: np.ndarray
    returns: dict[str, list[np.ndarray]]
    times: list[np.ndarray]
    axis: np.ndarray
    portfolios: dict[tuple[str, str], PortfolioResult]
    label: str
    bars_per_year: float
    trades: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan: Any = None


def universe_windows(offsets: np.ndarray, warmup: int, windows: int, symbols: Sequence[str],
                     files: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) [S × windows] int64, symbol-major: symbol s's ``windows`` equal windows over
    its rows [offsets[s] + warmup, offsets[s + 1] - 1] (``standalone.window_edges``), so the last
    window's last step fills on the symbol's own last bar. ConfigError naming the symbol and its file
    when it has fewer than 2 usable bars a window."""
    from foxhunt.backtest.standalone import window_edges
    from foxhunt.errors import ConfigError

    starts, lengths = [], []
    for s in range(len(offsets) - 1):
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        usable = hi - lo - 1 - warmup
        if usable < 2 * windows:
            raise ConfigError(f"symbol {symbols[s]} (file {files[s]}): {max(usable, 0)} usable bars after the {warmup}-bar "
                              f"feature warm-up cannot make {windows} window(s) of at least 2 bars")
        st, ln = window_edges(lo + warmup, hi - 1, windows, history=False)
        starts.append(st)
        lengths.append(ln)
    return np.concatenate(starts), np.concatenate(lengths)


def run_universe(model: Sequence[Path], loaded: Sequence[tuple[Any, Any, Any]], uf: Any, universe: Any, dev: Any, *,
                 windows: int, ensemble_mode: str, plan: Any, bars_per_year: float | None, barriers: bool,
                 progress: Callable[[int, int], None] | None = None, say: Callable[[str], None] = print,
                 sampled_seed: int | None = None) -> UniverseRun:
    """Backtest the loaded models, buy-and-hold and the quant rule on every symbol of ``universe``
    (its ``UniverseFeatures`` ``uf``, checked against the models by the caller) in one call each,
    then their portfolios. plan: the ``[accel]`` plan (``run_models``' rules)."""
    import torch

    from foxhunt.backtest.annualisation import infer_bars_per_year
    from foxhunt.backtest.evaluator import Backtester
    from foxhunt.backtest.policies import ExposurePolicy
    from foxhunt.backtest.standalone import episode_note, model_env, model_policy, policy_label, settle_backend
    from foxhunt.errors import ConfigError
    from foxhunt.universe_market import UniverseMarket

    recorded = loaded[0][2].extra.get("medians")
    if not recorded:
        raise ConfigError(f"model {model[0]} records no medians (order routing, initial volatility): a universe backtest "
                          "uses the model's recorded medians for every symbol; backtest one file, or use a model saved by "
                          "foxhunt train")
    s_count, warmup = len(universe), uf.features.warmup
    starts, lengths = universe_windows(uf.offsets, warmup, windows, universe.symbols, universe.files)
    market = UniverseMarket(uf, dev)
    for key, dst in (("abs_return", market.median_abs_return), ("range", market.median_range),
                     ("volume", market.median_volume)):
        dst.fill_(recorded[key])
    notes = [f"universe: {s_count} symbols × {windows} window(s) each, every window inside its symbol's bars, all in one "
             "backtest call per policy", f"medians (order routing, initial volatility): recorded in {model[0]}, for every symbol"]
    env, k = model_env(loaded, notes)
    calendar = np.unique(market.timestamps_host)
    bpy = float(bars_per_year) if bars_per_year is not None else infer_bars_per_year(calendar)
    bt = Backtester(market, env, bars_per_year=bpy, cuda_graphs=plan.graphs)
    notes.append(f"annualisation: {bpy:,.1f} bars per year (" + ("set by the user" if bars_per_year is not None else
                 f"inferred from the union calendar of the {s_count} symbols") + "), one factor for every row")
    notes.append(episode_note(env, barriers))
    policy, norm = model_policy(model, loaded, dev, market.n_features, k, ensemble_mode, sampled_seed)
    plan = settle_backend(plan, bt, policy, model, notes)
    backend = plan.eval
    notes.append("model backtest: " + ("fused Triton kernel" if backend == "fused" else "torch path"))
    quant, rules = _quant(universe, uf.offsets, starts, lengths, windows, env, bpy)
    notes.append(f"quant rule: per symbol and window, the best of {rules} causal rules on the symbol's bars before the "
                 "window (in sample), backtested on the window")
    notes.append("portfolios: equal-weight, and inverse-volatility-weighted by each symbol's return volatility over its bars "
                 "before its first window; renormalised over the symbols with a bar on each date (no bar: no exposure)")
    notes.insert(0, plan.summary())
    for note in notes:
        say(note)
    n_w, t_max = starts.shape[0], int(lengths.max())
    res = bt.run(starts, lengths, policy, norms=[norm] * n_w, keep_curves=True, keep_trades=True, backend=backend,
                 progress=progress, barriers=barriers)
    bh = bt.run(starts, lengths, ExposurePolicy(torch.ones(n_w, t_max, device=dev)), keep_curves=True, backend=backend)
    qx = torch.as_tensor(quant, dtype=torch.float32, device=dev)
    qr = bt.run(starts, lengths, ExposurePolicy(qx), keep_curves=True, backend=backend)
    label = policy_label(len(loaded), ensemble_mode, sampled_seed)
    run = _collect(universe, market, starts, lengths, windows, {label: res, BENCHMARK: bh, QUANT: qr}, label, bpy)
    run.notes, run.plan = notes, plan
    return run


def _quant(universe: Any, offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray, windows: int, env: Any,
           bpy: float) -> tuple[np.ndarray, int]:
    """[S × windows, max length] the quant rule's exposures per window (0 past each length), each
    window's rule chosen on its symbol's bars before it; and the most candidate rules offered."""
    from foxhunt.backtest.quant_rules import quant_exposures
    from foxhunt.folds import FoldRange

    out = np.zeros((starts.shape[0], int(lengths.max())))
    most = 0
    for s, bars in enumerate(universe.bars):
        rows = range(s * windows, (s + 1) * windows)
        folds = [FoldRange(i, 0, int(starts[i] - offsets[s]), int(starts[i] - offsets[s]),
                           int(starts[i] - offsets[s] + lengths[i] + 1)) for i in rows]
        ex, info = quant_exposures(bars.close, bars.volume, folds, env, bpy)
        most = max(most, info["candidates"])
        for i in rows:
            out[i, : lengths[i]] = np.clip(ex[i][: lengths[i]], -1.0, 1.0)
    return out, most


def _collect(universe: Any, market: Any, starts: np.ndarray, lengths: np.ndarray, windows: int, results: dict[str, Any],
             label: str, bpy: float) -> UniverseRun:
    """Per-symbol rows (the model's with its timing against buy-and-hold), each symbol's windows
    joined, and the portfolios of every policy on the union date axis."""
    from foxhunt.backtest.standalone import _iso
    from foxhunt.backtest.timing import row_fields, window_timing

    ts = market.timestamps_host
    res, bh = results[label], results[BENCHMARK]
    rows: list[dict[str, Any]] = []
    sharpe = np.full((len(universe), windows), np.nan)
    per: dict[str, list[np.ndarray]] = {k: [] for k in results}
    times: list[np.ndarray] = []
    for s, symbol in enumerate(universe.symbols):
        idx = list(range(s * windows, (s + 1) * windows))
        for j, i in enumerate(idx):
            for name, r in results.items():
                timing = row_fields(window_timing(res, i, bh, i)) if name == label else {}
                rows.append({"symbol": symbol, "window": j, "label": name, "start": _iso(ts[starts[i]]),
                             "end": _iso(ts[starts[i] + lengths[i]]), **r.metrics[i], **timing})
            sharpe[s, j] = res.metrics[i]["sharpe"]
        for name, r in results.items():
            per[name].append(np.concatenate([r.returns[i, : lengths[i]].astype(np.float64) for i in idx]))
        first = int(starts[idx[0]])
        times.append(ts[first: int(starts[idx[-1]] + lengths[idx[-1]]) + 1].astype(np.int64))
    vol = np.array([training_volatility(b.close[: int(starts[s * windows] - universe.offsets[s]) + 1])
                    for s, b in enumerate(universe.bars)])
    _check_vol(vol, universe)
    axis, grids = union_axis([t[1:] for t in times], per)
    ports = portfolios(grids, vol, bars_per_year=bpy)
    first_time = min(int(t[0]) for t in times)
    for rule in WEIGHT_RULES:
        for name in results:
            p = ports[(name, rule)]
            rows.append({"symbol": "portfolio", "window": "all", "label": name, "weights": rule, "start": _iso(first_time),
                         "end": _iso(int(axis[-1])), **p.metrics, "bars_per_year": bpy, "symbols": len(universe)})
    trades = [{"symbol": universe.symbols[t["window"] // windows], **t, "window": t["window"] % windows}
              for t in (res.trades or [])]
    return UniverseRun(universe.symbols, rows, sharpe, per, times, axis, ports, label, bpy, trades)


def _check_vol(vol: np.ndarray, universe: Any) -> None:
    """A symbol whose pre-window returns do not vary has no inverse-volatility weight: one line."""
    from foxhunt.errors import ConfigError

    bad = ~(np.isfinite(vol) & (vol > 0))
    if bad.any():
        s = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"symbol {universe.symbols[s]} (file {universe.files[s]}): its closes before its first backtest "
                          "window do not vary, so it has no inverse-volatility weight")
