"""``foxhunt scorecard``: the learning scorecard over the known-oracle markets and the real series.

Registered in ``foxhunt.cli``. Every input (size, scenario names, config file, overrides,
baselines, output directory) is validated before anything is written; a bad one is one line and
exit code 2.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer

from foxhunt.console import console
from foxhunt.errors import ConfigError, FoxhuntError
from foxhunt.provenance import machine

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# SB3 env steps per fold at each size, DQN and PPO alike (one env at a time through the Gymnasium wrapper).
SB3_BUDGET = {"tiny": 300, "cpu": 3_000, "gpu": 20_000}
BASELINES = ("supervised", "sb3_dqn", "sb3_ppo")


def scorecard(
    size: str = typer.Option("cpu", "--size", help="cpu (2-core CPU, ~10 min) | gpu (the H200 scale) | tiny (CI)"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML configuration under test (default: the built-in train config)"),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="comma-separated subset (default: all)"),
    baselines: str = typer.Option("supervised,sb3_dqn", "--baselines", help="comma-separated baselines: supervised, sb3_dqn, sb3_ppo, or none"),
    sb3_steps: Optional[int] = typer.Option(None, "--sb3-steps", help="SB3 env steps per fold, DQN and PPO (default by size)"),
    out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: scorecard/<timestamp>); must not exist"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    overrides: list[str] = typer.Option([], "--set", help="config override section.key=value (repeatable)"),
) -> None:
    """Score the agent on markets whose best policy is known (and on S&P 500 / NASDAQ).

    Each scenario runs walk-forward through the same runner as `foxhunt train`; the table compares the
    agent with flat, buy-and-hold, the oracle rules and the baselines on the validation windows, and
    checks the gates. Writes scorecard.json and report.html (equity curves) into the output directory.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from foxhunt.config import build_config, apply_overrides
    from foxhunt.scorecard.build import SIZES
    from foxhunt.scorecard.markets import SCENARIOS, SPACING, make_scenario
    from foxhunt.scorecard.report import rich_table, scorecard_dict, write_html, write_json
    from foxhunt.scorecard.run import pct, run_scenario
    from foxhunt.train.config import DEFAULT_TRAIN_TOML

    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: expected one of {', '.join(SIZES)}")
    names = list(SCENARIOS)
    if scenarios is not None:
        names = [s.strip() for s in scenarios.split(",") if s.strip()]
        bad = [s for s in names if s not in SCENARIOS]
        if bad or not names:
            raise ConfigError(f"--scenarios: unknown scenario {bad[0] if bad else scenarios!r} (known: {', '.join(SCENARIOS)})")
    chosen = [] if baselines.strip() == "none" else [b.strip() for b in baselines.split(",") if b.strip()]
    bad_b = [b for b in chosen if b not in BASELINES]
    if bad_b:
        raise ConfigError(f"--baselines: unknown baseline {bad_b[0]!r} (known: {', '.join(BASELINES)}, or none)")
    if sb3_steps is not None and sb3_steps < 0:
        raise ConfigError(f"--sb3-steps {sb3_steps}: must be >= 0")
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"config file {config} does not exist")
        try:
            base: dict[str, Any] = tomllib.loads(config.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config}: not valid TOML: {exc}") from None
        source = str(config)
    else:
        base = tomllib.loads(DEFAULT_TRAIN_TOML)
        source = "<built-in train defaults>"
    ov = list(overrides) + ([f"run.device={device!r}".replace("'", '"')] if device is not None else [])
    build_config(apply_overrides({k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}, ov), source=f"{source} + overrides")
    out_dir = out if out is not None else Path("scorecard") / time.strftime("%Y%m%d-%H%M%S")
    if out_dir.exists():
        raise ConfigError(f"--out {out_dir}: already exists (pick another directory)")
    out_dir.mkdir(parents=True)

    sz = SIZES[size]
    budget = SB3_BUDGET[size] if sb3_steps is None else sb3_steps
    results = []
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[info]}"), console=console) as bar:
        task = bar.add_task("scenarios", total=len(names), info="")
        for name in names:
            bar.update(task, info=f"{name}: generating + training")
            sc = make_scenario(name, sz.n_bars(SPACING[name]))
            try:
                r = run_scenario(sc, base, sz, ov, out_dir, source, baselines=chosen, sb3_budget=budget)
            except FoxhuntError:
                if not results:  # a configuration the scenarios cannot run (e.g. episodes longer than a fold)
                    shutil.rmtree(out_dir, ignore_errors=True)
                raise
            results.append(r)
            cap = r.capture()
            bar.update(task, advance=1, info=f"{name}: agent Sharpe {r.agent.summary()['sharpe']:+.2f}, capture "
                                            f"{pct(cap)} ({r.wall_s:.0f} s)")
    meta = {"size": size, "config": source, "agent": results[0].agent_kind if results else None, "overrides": ov, "baselines": chosen, "sb3_steps_per_fold": budget,
            "wall_s": time.perf_counter() - t0, "device": _device(out_dir, names[0])}
    meta["machine"] = machine(meta["device"])  # GPU name, versions, git revision
    card = scorecard_dict(results, meta)
    write_json(out_dir / "scorecard.json", card)
    write_html(out_dir / "report.html", results, meta)
    console.print(rich_table(results))
    verdict = {True: "[green]PASS[/]", False: "[red]FAIL[/]", None: "not gated"}[card["passed"]]
    console.print(f"gates: {verdict}; scorecard.json and report.html in [bold]{out_dir}[/]", highlight=False, soft_wrap=True)


def _device(out_dir: Path, first: str) -> str:
    from foxhunt.config import load_config
    from foxhunt.device import resolve_device

    cfg = load_config(out_dir / "runs" / first / "config.toml")
    return str(resolve_device(cfg.run.device))
