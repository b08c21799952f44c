"""``foxhunt scorecard``: the learning scorecard over the known-oracle markets and the real series,
or over the first N draws of the procedural market family (``--family dev|heldout --draws N``).

Registered in ``foxhunt.cli``. Every input (size, scenario names or family, config file, overrides,
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
BASELINES = ("quant", "supervised", "sb3_dqn", "sb3_ppo")
DEFAULT_BASELINES = "quant,supervised,sb3_dqn"
DEFAULT_DRAWS = 12  # one full stratum of the family's pattern


def scorecard(
    size: str = typer.Option("cpu", "--size", help="cpu (2-core CPU, ~10 min) | gpu (the H200 scale) | tiny (CI)"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML configuration under test (default: the built-in train config)"),
    scenarios: Optional[str] = typer.Option(None, "--scenarios", help="comma-separated subset of the named scenarios (default: all)"),
    family: Optional[str] = typer.Option(None, "--family", help="score procedural family draws instead of the named scenarios: "
                                         "dev (tuning allowed) | heldout (report only: never choose a setting on it)"),
    draws: Optional[int] = typer.Option(None, "--draws", help=f"with --family: how many draws, the set's first N (default {DEFAULT_DRAWS})"),
    baselines: str = typer.Option(DEFAULT_BASELINES, "--baselines",
                                  help="comma-separated baselines: quant, supervised, sb3_dqn, sb3_ppo, or none. The list is "
                                       "exact: leave quant out and capture vs quant (and the family's quant gate) is n/a"),
    sb3_steps: Optional[int] = typer.Option(None, "--sb3-steps", help="SB3 env steps per fold, DQN and PPO (default by size)"),
    out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: scorecard/<timestamp>); must not exist"),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda"),
    overrides: list[str] = typer.Option([], "--set", help="config override section.key=value (repeatable)"),
) -> None:
    """Score the agent on markets whose best policy is known (and on S&P 500 / NASDAQ), or on a family of
    procedural markets (--family dev|heldout --draws N).

    Each scenario or draw runs walk-forward through the same runner as `foxhunt train`; the table compares the
    agent with flat, buy-and-hold, the oracle rules and the baselines on the validation windows, and
    checks the gates. Writes scorecard.json and report.html (equity curves) into the output directory.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from foxhunt.config import build_config, apply_overrides
    from foxhunt.scorecard.build import SIZES
    from foxhunt.scorecard.family import FAMILIES, draw, size_for
    from foxhunt.scorecard.family.gates import family_block, gate_lines, rich_family_table
    from foxhunt.scorecard.markets import SCENARIOS, SPACING, make_scenario
    from foxhunt.scorecard.report import learner_note, rich_table, scorecard_dict, write_html, write_json
    from foxhunt.scorecard.run import pct, run_scenario
    from foxhunt.train.config import DEFAULT_TRAIN_TOML

    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: expected one of {', '.join(SIZES)}")
    if family is not None and scenarios is not None:
        raise ConfigError("--family and --scenarios are mutually exclusive (a run scores the named scenarios or family draws)")
    if draws is not None and family is None:
        raise ConfigError("--draws needs --family dev|heldout")
    if family is not None and family not in FAMILIES:
        raise ConfigError(f"--family {family!r}: expected one of {', '.join(FAMILIES)}")
    n_draws = DEFAULT_DRAWS if draws is None else draws
    if family is not None and not (1 <= n_draws <= 10_000):
        raise ConfigError(f"--draws {n_draws}: must be between 1 and 10000")
    names = list(SCENARIOS) if family is None else [f"{family} draw {i}" for i in range(n_draws)]
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
        for i, name in enumerate(names):
            bar.update(task, info=f"{name}: generating + training")
            if family is None:
                sc, sz_sc = make_scenario(name, sz.n_bars(SPACING[name])), sz
            else:
                sc = draw(family, i, size)
                sz_sc = size_for(sz, sc)
                name = sc.name
            try:
                r = run_scenario(sc, base, sz_sc, ov, out_dir, source, baselines=chosen, sb3_budget=budget)
            except FoxhuntError:
                if not results:  # a configuration the scenarios cannot run (e.g. episodes longer than a fold)
                    shutil.rmtree(out_dir, ignore_errors=True)
                raise
            results.append(r)
            cap = r.capture()
            bar.update(task, advance=1, info=f"{name}: agent Sharpe {r.agent.summary()['sharpe']:+.2f}, capture "
                                            f"{pct(cap)} ({r.wall_s:.0f} s)")
    meta = {"size": size, "config": source, "agent": results[0].agent_kind if results else None, "overrides": ov, "baselines": chosen, "sb3_steps_per_fold": budget,
            "wall_s": time.perf_counter() - t0, "device": _device(out_dir, results[0].name)}
    if family is not None:
        meta.update(family_set=family, draws=n_draws)
    meta["machine"] = machine(meta["device"])  # GPU name, versions, git revision
    block = family_block(results, family, size) if family is not None else None
    card = scorecard_dict(results, meta, block)
    write_json(out_dir / "scorecard.json", card)
    write_html(out_dir / "report.html", results, meta, block)
    if block is None:
        console.print(rich_table(results))
        for r in results:  # the forecast learner's IC and hit rate per fold, beside its fold Sharpes
            if learner_note(r):
                console.print(learner_note(r), highlight=False, soft_wrap=True, markup=False)
    else:
        console.print(rich_family_table(block))
        for line in gate_lines(block):
            console.print(f"family {family}: {line}", highlight=False, soft_wrap=True, markup=False)
    verdict = {True: "[green]PASS[/]", False: "[red]FAIL[/]", None: "not gated"}[card["passed"]]
    console.print(f"gates: {verdict}; scorecard.json and report.html in [bold]{out_dir}[/]", highlight=False, soft_wrap=True)


def _device(out_dir: Path, first: str) -> str:
    from foxhunt.config import load_config
    from foxhunt.device import resolve_device

    cfg = load_config(out_dir / "runs" / first / "config.toml")
    return str(resolve_device(cfg.run.device))
