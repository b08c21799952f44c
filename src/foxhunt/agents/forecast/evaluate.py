"""Forecast-only evaluation: the out-of-sample information coefficient and hit rate of a fold.

On the fold's validation window, every bar t whose next h bars lie inside it (val_start … val_end −
1 − h) gets the fold's forecast (the mean of its members' median forecasts, features normalised
with the fold's training statistics) and its realised next-h log return (bars t+1 … t+h):

* ``ic_spearman``: Spearman rank correlation of forecast and realised return (the headline IC; tied
  values share their mean rank);
* ``ic_pearson``: their Pearson correlation;
* ``hit_rate``: the fraction of bars whose forecast has the realised return's sign (bars where
  either is exactly 0 are left out).

On a pooled universe the bars are every member symbol's validation bars whose next h bars lie in its own
window, pooled (``validation_bars``), each forecast and target in its own symbol's units.

Consecutive bars' h-bar returns overlap for h > 1, so the bars are not independent samples. The
runner writes the record into the fold's metrics.json (``learner_eval``), its fold line and
summary.json (``foxhunt.agents.registry``: the forecast entry's ``fold_report``).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from foxhunt.agents.forecast.net import ForecastNet, gather
from foxhunt.agents.forecast.target import realised, targets, valid_span
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData

ERROR_SAMPLES = 65_536
"""The risk term's error variance is taken over at most this many evenly spaced bars (held-back or training)."""


@torch.no_grad()
def forecasts(net: ForecastNet, market: MarketData, bars: torch.Tensor, output: int = 0) -> torch.Tensor:
    """Forecast ``output`` [N] float32 of market rows ``bars`` ([N] int64), normalised with the market's fold."""
    return net(gather(market, bars, net.sequence))[:, output]


def _sampled(spans: Sequence[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """At most ``ERROR_SAMPLES`` evenly spaced bars of the spans' bars lo … lo + n − 1, pooled ([M] int64)."""
    rows = torch.cat([torch.arange(lo, lo + n, dtype=torch.int64) for lo, n in spans if n > 0] or [torch.zeros(0, dtype=torch.int64)])
    return rows[:: max(1, -(-int(rows.numel()) // ERROR_SAMPLES))].to(device)


def training_spans(market: MarketData, h: int) -> list[tuple[int, int]]:
    """(first bar, count) of the training bars whose target lies in the training slice: ``valid_span``'s one
    span, or on a pooled universe one per member symbol (its training rows less their last h)."""
    if not market.pooled:
        return [tuple(int(t) for t in valid_span(market, h))]  # type: ignore[list-item]
    b = market.fold.bounds  # type: ignore[union-attr]
    return [(int(b[s, 0]), max(0, int(b[s, 1]) - h - int(b[s, 0]))) for s in market.fold.members]  # type: ignore[union-attr]


def validation_bars(market: MarketData, fold: FoldRange, h: int) -> torch.Tensor:
    """[N] int64: the fold's validation bars whose next h bars lie inside the validation window (val_start …
    val_end − 1 − h), or on a pooled universe every member symbol's, pooled."""
    bounds = getattr(fold, "bounds", None)
    spans = [(fold.val_start, fold.val_end)] if bounds is None else \
        [(int(bounds[s, 2]), int(bounds[s, 3])) for s in fold.members]  # type: ignore[attr-defined]
    parts = [torch.arange(a, e - h, dtype=torch.int64) for a, e in spans if e - h > a]
    return torch.cat(parts or [torch.zeros(0, dtype=torch.int64)]).to(market.device)


@torch.no_grad()
def _mse(net: ForecastNet, market: MarketData, bars: torch.Tensor, h: int, output: int) -> float:
    err = forecasts(net, market, bars, output) - targets(market, bars, h)
    return float(err.double().square().mean())


@torch.no_grad()
def training_error_variance(net: ForecastNet, market: MarketData, h: int, output: int = 0) -> float:
    """v: the forecast's mean squared error against its target over the fold's training bars (those whose
    target lies inside the training slice; at most ``ERROR_SAMPLES``, evenly spaced), in h-bar variances."""
    return _mse(net, market, _sampled(training_spans(market, h), market.device), h, output)


def held_back_bars(window: tuple[int, int], h: int) -> tuple[int, int]:
    """(first bar, count) of the bars of the held-back ``window`` (first bar, end bar exclusive) whose h-bar
    target lies inside it: first … end − 1 − h (their targets read bars up to end − 1, never past it);
    the count may be 0 (a window no longer than h)."""
    start, end = int(window[0]), int(window[1])
    return start, max(0, end - h - start)


@torch.no_grad()
def error_variance(net: ForecastNet, market: MarketData, h: int, output: int = 0,
                   held_back: Sequence[tuple[int, int]] = ()) -> tuple[float, str, int]:
    """(v, source, bars) of the execution's risk term: the forecast's mean squared error against its target
    in h-bar variances (features and target normalised with the market's fold: the training statistics),
    over at most ``ERROR_SAMPLES`` evenly spaced bars of the held-back windows ``held_back`` (first bar,
    end bar exclusive, each; ``train.select = "inner"``: one, or a pooled universe's one per member symbol)
    whose target lies inside their window (source "held_back"), or of the training bars
    (``training_spans``; source "training") where there is no held-back window or it holds no such bar.
    The held-back error is the forecast's error out of sample: on the training bars a network that fits
    noise reports a small v and the risk term shrinks nothing."""
    bars = _sampled([held_back_bars(w, h) for w in held_back], market.device)
    if bars.numel():
        return _mse(net, market, bars, h, output), "held_back", int(bars.numel())
    bars = _sampled(training_spans(market, h), market.device)
    return _mse(net, market, bars, h, output), "training", int(bars.numel())


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 0 … N − 1 of x [N] (float64), tied values sharing their mean rank (bars of zero return tie)."""
    values, order = torch.sort(x, stable=True)
    _, inverse, counts = torch.unique_consecutive(values, return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts
    mean_rank = first.to(x.dtype) + (counts.to(x.dtype) - 1.0) / 2.0
    r = torch.empty_like(x)
    r[order] = mean_rank[inverse]
    return r


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float | None:
    a, b = a - a.mean(), b - b.mean()
    den = float((a.square().sum() * b.square().sum()).sqrt())
    return float((a * b).sum()) / den if den > 0 else None


def information(forecast: torch.Tensor, outcome: torch.Tensor) -> dict[str, Any]:
    """{ic_spearman, ic_pearson, hit_rate, n} of forecasts and realised returns ([N] each; None where undefined)."""
    f, r = forecast.double(), outcome.double()
    n = int(f.numel())
    if n < 2:
        return {"ic_spearman": None, "ic_pearson": None, "hit_rate": None, "n": n}
    signed = (f != 0) & (r != 0)
    m = int(signed.sum())
    hits = float(((f > 0) == (r > 0))[signed].double().mean()) if m else None
    return {"ic_spearman": _pearson(_ranks(f), _ranks(r)), "ic_pearson": _pearson(f, r), "hit_rate": hits, "n": n}


def fold_report(trainers: Sequence[Any], market: MarketData, fold: FoldRange) -> dict[str, Any]:
    """The fold's forecast evaluation (module docstring) from its members (``ForecastTrainer``s, their
    selected weights in place) on the validation window of ``fold``."""
    h = int(trainers[0].h)
    out: dict[str, Any] = {"kind": "forecast", "horizon": h}
    bars = validation_bars(market, fold, h)
    if bars.numel() == 0:
        return {**out, **information(torch.zeros(0), torch.zeros(0))}
    f = torch.stack([t.forecasts(bars) for t in trainers]).mean(0)
    return {**out, **information(f, realised(market, bars, h)), **risk_record(trainers)}


def risk_record(trainers: Sequence[Any]) -> dict[str, Any]:
    """With ``forecast.risk_aversion`` > 0: the risk term's ``error_variance`` (the members' mean v, which
    the ensemble's mean score prices: the rule on their mean risk), ``error_source`` ("held_back" |
    "training") and ``error_bars`` (member 0's bars); {} otherwise."""
    if not trainers[0].cfg.risk_aversion > 0:
        return {}
    rows = [t.error_variance() for t in trainers]
    return {"error_variance": sum(r[0] for r in rows) / len(rows), "error_source": rows[0][1], "error_bars": rows[0][2]}


def fold_phrase(record: dict[str, Any]) -> str:
    """The fold line's words for a ``fold_report`` record."""
    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else fmt.format(v)
    return (f"forecast IC {num(record.get('ic_spearman'), '{:+.3f}')} (Spearman, {record.get('horizon')}-bar) "
            f"hit {num(record.get('hit_rate'), '{:.1%}')}")


__all__ = ["ERROR_SAMPLES", "error_variance", "fold_phrase", "fold_report", "forecasts", "held_back_bars", "information",
           "risk_record", "training_error_variance", "training_spans", "validation_bars"]
