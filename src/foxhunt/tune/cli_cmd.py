"""``foxhunt tune``: hyperparameter search across walk-forward folds (Optuna).

Registered in ``foxhunt.cli`` (``app.command("tune")(user_errors(tune))``). Every input (config,
[tune.space], fold layout and hold-out on the data, storage URL, an existing study's config) is
checked before the study directory is written; a bad one is one red line and exit code 2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from foxhunt.console import console


# Help strings are rich markup (typer): ``escape`` keeps "[tune.space]" from being read as a style tag
# and dropped from --help (tests/test_cli_help.py).
def tune(
    config: Optional[Path] = typer.Option(None, "--config", help=escape(
        "TOML config with a [tune] section; its [tune.space] table is the search space (default: the built-in study, "
        "configs/tune-default.toml)")),
    trials: Optional[int] = typer.Option(None, "--trials", help="finished trials the study stops at, across workers (tune.trials)"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="each worker asks no new trial after S seconds (tune.timeout_s)"),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage: sqlite:///…, postgresql://…, journal:PATH (default: study.db in the study directory)"),
    study: Optional[str] = typer.Option(None, "--study", help="study name (tune.study); an existing study is resumed"),
    workers: Optional[int] = typer.Option(None, "--workers", help="local worker processes (0: one per GPU)"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    data: Optional[list[Path]] = typer.Option(None, "--data", help="bar file (CSV/Parquet) instead of the config's data; a "
                                              "directory, several --data or a pattern is a universe: one pooled agent a fold, "
                                              "scored by its portfolio (tune.universe_weights)"),
    finish: bool = typer.Option(True, "--finish/--no-finish", help="after the trials: hold-out, best.toml, report (off for extra worker nodes)"),
    overrides: list[str] = typer.Option([], "--set", help="config override section.key=value (repeatable)"),
) -> None:
    """Search hyperparameters across walk-forward folds with Optuna; retrain the best config and
    evaluate it once on a hold-out the search never saw; report deflated Sharpe and PBO. On a universe
    (--data DIR) a fold's score is its portfolio's validation Sharpe."""
    from foxhunt.config import load_config
    from foxhunt.tune.config import default_tune_config
    from foxhunt.tune.session import open_session, run_workers

    ov = list(overrides)
    for key, v in (("trials", trials), ("timeout_s", timeout), ("workers", workers)):
        if v is not None:
            ov.append(f"tune.{key}={v}")
    for key, v in (("storage", storage), ("study", study)):
        if v is not None:
            ov.append(f'tune.{key}="{v}"')
    if device is not None:
        ov.append(f'run.device="{device}"')
    values = None
    if data:  # set as values after the overrides (a path is never pasted into TOML text)
        sources = [str(d.expanduser().resolve()) for d in data]
        values = {"data": {"source": "file", "path": sources[0], **({"paths": sources[1:]} if len(sources) > 1 else {})}}
    cfg = load_config(config, ov, values) if config is not None else default_tune_config(ov, values)
    if data and config is None:
        cfg = _data_reward_scale(cfg, ov, values, console)
    s = open_session(cfg, console)
    prepared = s.evaluator.prepared_for(s.evaluator.trial_config({}))
    console.print(
        f"study [bold]{cfg.tune.study}[/] ({'resumed' if s.resumed else 'new'}) in {s.study_dir}; storage "
        f"{s.url.split('@')[-1]}; {len(cfg.tune.entries())} searched keys, {len(prepared.folds)} folds, "
        + _holdout_text(cfg.tune.holdout, s.evaluator.cut, getattr(prepared, "calendar", None))
        + f"; sampler {cfg.tune.sampler}, pruner {cfg.tune.pruner}"
        + (f"; populations of {cfg.tune.population} trials a worker" if cfg.tune.population > 1 else ""),
        highlight=False, soft_wrap=True)
    run_workers(s, console)
    if not finish:
        console.print("trials done (--no-finish: no hold-out, no report)", highlight=False)
        return
    from foxhunt.tune.finish import finish as finish_study

    summary = finish_study(s, console)
    _print_summary(summary, console)
    console.print(f"report: [bold]{s.study_dir / 'report.html'}[/]; best config: {s.study_dir / 'best.toml'}", highlight=False,
                  soft_wrap=True)


def _data_reward_scale(cfg: Any, ov: list[str], values: dict[str, Any], console: Any) -> Any:
    """The built-in study on the user's bars: env.reward_scale from their volatility, as ``foxhunt train --data``
    sets it (``foxhunt.train.interval_presets``; the built-in study's 100 suits daily bars only, a minute
    file's rewards would be ~30 times too small); ``--set env.reward_scale=…`` wins."""
    from foxhunt.tune.config import default_tune_config
    from foxhunt.train.interval_presets import data_preset, sets_reward_scale

    if sets_reward_scale(ov):
        return cfg
    preset = data_preset(cfg.data)
    scale = preset.values.get("env.reward_scale")
    if scale is None:  # prices that do not move: the built-in value stays
        return cfg
    values.setdefault("env", {})["reward_scale"] = scale
    of = f", the median over {preset.symbols} symbols" if preset.symbols > 1 else ""
    console.print(f"env.reward_scale = {scale:g}: 1 / per-bar σ {preset.sigma:.3%} of the data{of} "
                  f"(as foxhunt train --data; --set env.reward_scale=… wins)", highlight=False, soft_wrap=True)
    return default_tune_config(ov, values)


def _holdout_text(holdout: float, cut: Any, calendar: Any) -> str:
    """The study line's hold-out: a file's first hold-out bar, or a universe's first hold-out date."""
    if calendar is None:
        return f"hold-out {holdout:.0%} (from bar {cut})"
    first = str(calendar[cut].astype("datetime64[ns]"))[:19] if cut < len(calendar) else None
    where = f"hold-out {holdout:.0%} of the union calendar (every symbol from {first})" if first else "no hold-out"
    return f"a universe: each fold scored by its portfolio's validation Sharpe, {where}"


def _g(v: Any, fmt: str) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _print_summary(summary: dict[str, Any], console: Any) -> None:
    c = summary["counts"]
    t = summary["this_session"]
    console.print(f"trials: {c['COMPLETE']} complete, {c['PRUNED']} pruned, {c['FAIL']} failed; this session {t['trials']} "
                  f"trials in {t['wall_s']:.1f} s (mean {_g(t['trial_s_mean'], '{:.2f}')} s a trial, overhead "
                  f"{_g(t['overhead_s_mean'], '{:.3f}')} s)", highlight=False)
    b = summary.get("best")
    if not b:
        console.print("no complete trial: no best config", highlight=False)
        return
    console.print(f"best trial {b['number']}: score {b['value']:+.3f}, params {b['params']}", highlight=False, soft_wrap=True)
    ho = summary.get("holdout")
    if ho:
        from foxhunt.backtest.display import sharpe_text

        a = ho["agent"]
        span = ho['fold']['val_end'] - ho['fold']['val_start']
        universe = ho["fold"].get("universe")
        what = f"{span} calendar dates, the {ho['weights']} portfolio of {a.get('symbols')} symbols" if universe else f"{span} bars"
        console.print(f"hold-out (once, {what}): {sharpe_text(a)}, "
                      f"return {_g(a.get('total_return'), '{:+.2%}')}, max DD {_g(a.get('max_drawdown'), '{:.2%}')}", highlight=False)
    ov = summary.get("overfitting", {})
    d, p = ov.get("deflated_sharpe", {}), ov.get("pbo", {})
    console.print(f"deflated Sharpe ratio {_g(d.get('dsr'), '{:.3f}')}; probability of backtest overfitting "
                  f"{_g(p.get('pbo'), '{:.2f}')}", highlight=False)
