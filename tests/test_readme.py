"""README.md's commands work as written.

Every ```bash block of the README is split into commands. Each `foxhunt` command is parsed by the CLI's
own command objects (the sub-command exists, every flag exists and is not hidden, every value has its
type), every script it names exists and is executable, every repository path it names is tracked, and
every config file it passes loads. The commands that are cheap on a CPU then run in two groups (the
tune and scorecard blocks; the rest), each in README order in a fresh temporary directory that holds
nothing but the tracked files they name (the installed `foxhunt` on PATH), and must exit 0 and write
the files the README says they write. The others (the full built-in jobs, GPU configurations, a
PostgreSQL server, machine set-up) are only parsed;
``scripts/readme_commands.sh`` runs every block for real in a fresh clone.

Also checked: every `--flag` the README's prose names exists on some command, every relative link
(and its #anchor) resolves, and the file tree names every top-level tracked entry and every module
and subpackage of src/foxhunt.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Programs other than foxhunt that a README block may use: run (cheap, local) or only named.
RUN_PROGRAMS = {"cp", "mkdir", "ls", "cat"}
NAMED_PROGRAMS = {"createdb": "a PostgreSQL client tool on the database host"}

# Programs whose options the docs may quote (`tensorboard --logdir runs`): their flags are not foxhunt's.
OTHER_TOOLS = {"tensorboard", "pytest", "pip", "python", "git"}

# What the cheap commands must leave behind (paths relative to the temporary directory), as the README says.
WRITTEN = [
    "bars.parquet", "sp500.csv", ".foxhunt-cache",
    *(f"runs/quick/{f}" for f in ("config.toml", "folds.json", "accel.json", "metrics.jsonl", "summary.json", "report.html",
                                   "checkpoints", "tb", "folds/fold_0/model.safetensors", "folds/fold_0/metrics.json",
                                   "folds/fold_0/curves.safetensors", "folds/fold_0/trades.csv", "folds/fold_0/timings.json")),
    *(f"backtests/latest/{f}" for f in ("metrics.json", "metrics.csv", "trades.json", "accel.json", "report.html")),
    "runs/quick/backtest/metrics.json",
    *(f"runs/pooled/{f}" for f in ("summary.json", "folds.json", "folds/fold_0/metrics.json", "folds/fold_0/curves.safetensors")),
    *(f"runs/tune/mine/{f}" for f in ("config.toml", "study.db", "trials.csv", "best.toml", "summary.json", "report.html")),
    *(f"scorecard/tiny/{f}" for f in ("scorecard.json", "report.html", "runs/edge_daily/config.toml")),
]

# A command whose README comment gives its cost in minutes or hours, or names a GPU, is parsed, not run.
COSTLY_COMMENT = re.compile(r"\b(minutes|min|hours?|GPU|H200)\b")


# --------------------------------------------------------------------------- README → commands
@dataclass
class Part:
    """One simple command of a line (lines may chain parts with &&)."""

    argv: list[str]

    @property
    def program(self) -> str:
        return self.argv[0]

    @property
    def is_foxhunt(self) -> bool:
        return Path(self.argv[0]).name == "foxhunt"


@dataclass
class Command:
    line: int            # README line number where it starts
    text: str            # as written (continuations joined), for bash
    comment: str = ""    # its trailing # comment
    parts: list[Part] = field(default_factory=list)
    assigns: dict[str, str] = field(default_factory=dict)  # NAME=value lines


def bash_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of every ```bash block."""
    blocks, cur, start = [], None, 0
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if cur is None and s == "```bash":
            cur, start = [], i + 1
        elif cur is not None and s == "```":
            blocks.append((start, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    assert cur is None, "README.md: an unclosed ```bash block"
    return blocks


def commands(text: str) -> list[Command]:
    out: list[Command] = []
    for start, lines in bash_blocks(text):
        buf, first = "", 0
        for n, line in enumerate(lines, start):
            if not buf:
                first = n
            if line.rstrip().endswith("\\"):
                buf += line.rstrip()[:-1] + " "
                continue
            buf += line
            toks = shlex.split(buf, comments=True)
            if toks:
                out.append(_command(first, buf.strip(), toks))
            buf = ""
        assert not buf, f"README.md:{first}: a block ends in a line continuation"
    return out


def _command(line: int, text: str, toks: list[str]) -> Command:
    assert "<<" not in text and "|" not in toks, f"README.md:{line}: heredocs and pipes are not supported here: {text}"
    cmd = Command(line, text, comment_of(text))
    if len(toks) == 1 and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S+", toks[0]):
        name, value = toks[0].split("=", 1)
        cmd.assigns[name] = value
        return cmd
    part: list[str] = []
    for t in toks + ["&&"]:
        if t in ("&&", ";", "||"):
            assert part, f"README.md:{line}: empty command in {text!r}"
            cmd.parts.append(Part(part))
            part = []
        else:
            part.append(t)
    return cmd


def comment_of(text: str) -> str:
    """The text after the first # that starts a shell comment (outside quotes, after a blank)."""
    quote = ""
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return text[i + 1:].strip()
    return ""


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    return [re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), a) for a in argv]


# --------------------------------------------------------------------------- the CLI's command objects
def cli() -> Any:
    import typer.main

    from foxhunt.cli import app

    return typer.main.get_command(app)


def resolve(argv: list[str]) -> tuple[list[str], Any, list[str]]:
    """(sub-command path, command object, its arguments) of ``foxhunt ARGS``."""
    cmd, path, rest = cli(), [], list(argv)
    while hasattr(cmd, "commands"):
        assert rest, f"`foxhunt {' '.join(path)}` needs a sub-command"
        name = rest.pop(0)
        assert name in cmd.commands, f"`foxhunt {' '.join(path + [name])}`: no such command (known: {', '.join(cmd.commands)})"
        cmd, path = cmd.commands[name], path + [name]
    return path, cmd, rest


def check_foxhunt(argv: list[str]) -> dict[str, Any]:
    """Parse ``foxhunt ARGS`` exactly as the CLI does (without running it); returns the parameters."""
    path, cmd, rest = resolve(argv)
    where = f"`foxhunt {' '.join(path)}`"
    opts = {o: p for p in cmd.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])] if o.startswith("-")}
    for a in rest:
        flag = a.split("=", 1)[0]
        if flag.startswith("--"):
            shown = sorted(o for o, p in opts.items() if not getattr(p, "hidden", False))
            assert flag in opts, f"{where}: no option {flag} (options: {', '.join(shown)})"
            assert not getattr(opts[flag], "hidden", False), f"{where}: {flag} is a hidden (removed) option"
    try:
        ctx = cmd.make_context(f"foxhunt {' '.join(path)}", list(rest))
    except Exception as exc:  # the CLI's usage errors: missing argument, bad value …
        raise AssertionError(f"{where} {' '.join(rest)}: {type(exc).__name__}: {exc}") from None
    return {"path": path, **ctx.params}


def all_flags() -> set[str]:
    out: set[str] = {"--help"}

    def walk(cmd: Any) -> None:
        for p in cmd.params:
            if not getattr(p, "hidden", False):
                out.update(o for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])] if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(cli())
    return out


# --------------------------------------------------------------------------- which commands run here
def why_not_run(cmd: Command, env: dict[str, str]) -> str | None:
    """None when the command is cheap enough to run on a CPU in the test; else why it is only parsed."""
    if COSTLY_COMMENT.search(cmd.comment):
        return f"the README says: {cmd.comment}"
    for part in cmd.parts:
        argv = expand(part.argv, env)
        if part.program.startswith("./"):
            return "sets up a machine or runs the whole test suite"
        if part.program in NAMED_PROGRAMS:
            return NAMED_PROGRAMS[part.program]
        if not part.is_foxhunt:
            continue
        args = argv[1:]
        if "--device" in args and args[args.index("--device") + 1] == "cuda":
            return "needs a CUDA GPU"
        if any("configs/h200" in a for a in args):
            return "a GPU-sized configuration"
        if any(a.startswith(("postgresql://", "mysql://")) for a in args):
            return "needs a database server"
        if len(args) == 1 and args[0] in ("train", "tune", "scorecard"):
            return "the full built-in job (minutes on a CPU)"
        if "--size" in args and args[args.index("--size") + 1] in ("cpu", "gpu"):
            return "a full-size scorecard"
    return None


def tracked() -> set[str]:
    try:
        res = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
        files = set(res.stdout.splitlines())
    except (OSError, subprocess.SubprocessError):
        files = set()
    if not files:  # not a git checkout: the files that are there, less what use creates
        skip = {".git", ".venv", "runs", ".foxhunt-cache", "backtests", "scorecard", "__pycache__", ".hypothesis"}
        files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)}
    return files


# --------------------------------------------------------------------------- the tests
def test_every_readme_command_is_well_formed() -> None:
    """Fast: every command parses as the CLI parses it; scripts, repository paths and configs exist."""
    from foxhunt.config import load_config

    cmds = commands(README.read_text())
    assert cmds, "README.md has no ```bash commands"
    files, env, made = tracked(), {}, set()
    seen_foxhunt = set()
    for cmd in cmds:
        env.update(cmd.assigns)
        for part in cmd.parts:
            argv = expand(part.argv, env)
            where = f"README.md:{cmd.line}: {cmd.text}"
            if part.program.startswith("./") or (not part.is_foxhunt and "/" in part.program):
                rel = os.path.normpath(part.program)
                assert rel in files and os.access(ROOT / rel, os.X_OK), f"{where}: {rel} is not a tracked executable"
                continue
            if part.is_foxhunt:
                try:
                    params = check_foxhunt(argv[1:])
                except AssertionError as exc:
                    raise AssertionError(f"{where}: {exc}") from None
                seen_foxhunt.add(" ".join(params["path"]))
                conf = params.get("config")
                if conf is not None:
                    rel = os.path.normpath(str(conf))
                    if rel in files:
                        load_config(ROOT / rel)  # the configuration is valid, key by key
                    else:
                        assert rel in made or why_not_run(cmd, env) is None, f"{where}: --config {rel} is neither tracked nor made before"
                continue
            assert part.program in RUN_PROGRAMS | set(NAMED_PROGRAMS), f"{where}: unknown program {part.program!r}"
            if part.program == "cp":
                src, dst = argv[-2], argv[-1]
                assert os.path.normpath(src) in files, f"{where}: {src} is not a tracked file"
                made.add(os.path.normpath(dst))
    tour = {"data sample", "data validate", "features build", "prepare", "train", "backtest", "tune", "scorecard"}
    assert tour <= seen_foxhunt, f"README.md shows no example of: {', '.join(sorted(tour - seen_foxhunt))}"


def _slugs(md: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", md.read_text(), re.M)}


@pytest.mark.parametrize("doc", ["README.md", "docs/REFERENCE.md"])
def test_docs_name_only_existing_options_and_link_targets(doc: str) -> None:
    """Every `--flag` in the prose exists on some command; every relative link and #anchor resolves."""
    path = ROOT / doc
    text = path.read_text()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    spans = [sp for sp in re.findall(r"`([^`]+)`", prose) if sp.split()[0] not in OTHER_TOOLS]
    named = {f for sp in spans for f in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", sp)}
    assert named - all_flags() == set(), f"{doc} names options no command has: {sorted(named - all_flags())}"
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text):
        if "://" in target:
            continue
        dest = (path.parent / target) if target else path
        assert dest.exists(), f"{doc} links to a missing {target}"
        if anchor:
            assert anchor in _slugs(dest), f"{doc} links to {target}#{anchor}: no such heading ({sorted(_slugs(dest))})"


def test_readme_file_tree_names_every_entry() -> None:
    text = README.read_text()
    # the file tree: every top-level tracked entry, every module and subpackage of src/foxhunt
    tree = text.split("## File tree", 1)[1]
    files = tracked()
    top = {f.split("/", 1)[0] + ("/" if "/" in f else "") for f in files}
    missing = [t for t in sorted(top) if not re.search(rf"(^|[\s,]){re.escape(t.rstrip('/'))}(/|[\s,]|$)", tree, re.M)]
    assert not missing, f"README.md's file tree does not name {missing}"
    pkg = ROOT / "src" / "foxhunt"
    names = [p.name + "/" for p in pkg.iterdir() if (p / "__init__.py").is_file()]
    names += [p.name for p in pkg.glob("*.py") if p.name != "__init__.py"]
    missing = [n for n in sorted(names) if not re.search(rf"(^|[\s,]){re.escape(n)}([\s,:]|$)", tree, re.M)]
    assert not missing, f"README.md's file tree does not name src/foxhunt/{missing}"


# The cheap commands run in two groups, each in README order in its own fresh directory: the tune and
# scorecard blocks (they read nothing the others write) and everything else. The second group is a test
# of its own class, so that pytest-xdist (--dist loadscope: a module's functions, or a class, go to one
# worker) can run the two on different workers: together they are the suite's longest test.
SEPARATE = ("tune", "scorecard")


def _group(cmd: Command, blocks: list[tuple[int, list[str]]]) -> str:
    """"tune_scorecard" for the commands of a ```bash block that runs `foxhunt tune` or `foxhunt scorecard`; else "core"."""
    start, lines = next((b, ls) for b, ls in blocks if b <= cmd.line < b + len(ls))
    block = [c for c in commands(README.read_text()) if start <= c.line < start + len(lines)]
    subs = {p.argv[1] for c in block for p in c.parts if p.is_foxhunt and len(p.argv) > 1}
    return "tune_scorecard" if subs & set(SEPARATE) else "core"


def _written(group: str) -> list[str]:
    mine = [f for f in WRITTEN if f.startswith(("runs/tune/", "scorecard/"))]
    return mine if group == "tune_scorecard" else [f for f in WRITTEN if f not in mine]


def _run_cpu_commands(tmp_path: Path, group: str) -> None:
    """The cheap commands of ``group``, in README order, in an empty directory with only the tracked files they name."""
    files = tracked()
    binary = Path(sys.executable).parent / "foxhunt"
    bindir = Path(sys.executable).parent
    if not binary.is_file():  # an environment without the console script: the same entry point
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "foxhunt").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m foxhunt.cli "$@"\n')
        (bindir / "foxhunt").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # as a user runs it
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", COLUMNS="120")
    env.setdefault("OMP_NUM_THREADS", "1")
    text = README.read_text()
    blocks = bash_blocks(text)
    ran, skipped = [], []
    for cmd in commands(text):
        env.update(cmd.assigns)
        why = why_not_run(cmd, env)
        if why is not None or not cmd.parts:
            skipped.append((cmd.line, why))
            continue
        if _group(cmd, blocks) != group:
            continue
        for part in cmd.parts:  # the tracked files it names, and nothing else
            for a in part.argv[1:]:
                rel = os.path.normpath(a.split("=", 1)[-1])
                if rel in files and not (work / rel).exists():
                    (work / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / rel, work / rel)
        t0 = time.perf_counter()
        res = subprocess.run(["bash", "-c", cmd.text], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        ran.append((cmd.line, round(time.perf_counter() - t0, 1), cmd.text[:60]))
        assert res.returncode == 0, (f"README.md:{cmd.line}: `{cmd.text}` exited {res.returncode}\n"
                                     f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    print("\n".join([*(f"README.md:{n}: {s:6.1f} s  {t}" for n, s, t in ran),
                     *(f"README.md:{n}: parsed only ({why})" for n, why in skipped if why)]))
    missing = [f for f in _written(group) if not (work / f).exists()]
    assert not missing, f"the README's commands did not write {missing}"
    assert ran, "no README command ran"


def test_the_cheap_commands_fall_into_the_two_groups_and_each_group_runs_some() -> None:
    """Every cheap command runs in exactly one group; the tune and scorecard group holds only its blocks."""
    text = README.read_text()
    blocks, env, got = bash_blocks(text), {}, {"core": [], "tune_scorecard": []}
    for cmd in commands(text):
        env.update(cmd.assigns)
        if why_not_run(cmd, env) is None and cmd.parts:
            got[_group(cmd, blocks)].append(cmd)
    assert got["core"] and got["tune_scorecard"]
    subs = {p.argv[1] for c in got["tune_scorecard"] for p in c.parts if p.is_foxhunt}
    assert subs == set(SEPARATE), subs
    assert not {p.argv[1] for c in got["core"] for p in c.parts if p.is_foxhunt} & set(SEPARATE)


@pytest.mark.slow
def test_readme_cpu_commands_run_in_a_fresh_directory(tmp_path: Path) -> None:
    """The cheap commands but the tune and scorecard blocks, in README order, in an empty directory with
    only the tracked files they name."""
    _run_cpu_commands(tmp_path, "core")


class TestTheReadmesTuneAndScorecardCommands:
    """A class: its own pytest-xdist scope (--dist loadscope), so that it may run beside the test above."""

    @pytest.mark.slow
    def test_readme_tune_and_scorecard_commands_run_in_a_fresh_directory(self, tmp_path: Path) -> None:
        """The cheap commands of the tune and scorecard blocks, in README order, in an empty directory
        with only the tracked files they name."""
        _run_cpu_commands(tmp_path, "tune_scorecard")
