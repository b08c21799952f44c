"""Crash safety from the command line: `foxhunt train` is SIGKILLed (after its first committed
checkpoint, then inside a save) and continued with `foxhunt train --resume` in a new process each
time; the final per-fold metrics, the metric rows and the last checkpoint equal an uninterrupted
run's bit for bit, and no torn checkpoint is ever committed.

Every process is a fresh interpreter, so this also catches state that differs between the start
and the resume code paths (issue 11: the config hash depended on the modules imported first)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foxhunt.train import checkpoint as ckpt
from tests.train.conftest import CLI, tiny_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAVE_PAUSE = "0.2"  # seconds between the files of a save (test hook): a save lasts >= 0.6 s
DROP = {"epoch_s", "collect_s", "train_s", "curiosity_s", "rounds_s"}  # wall-clock fields of metrics.jsonl rows


def _env(pause: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(ckpt.SLEEP_ENV, None)
    if pause:
        env[ckpt.SLEEP_ENV] = SAVE_PAUSE
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _popen(args: list[str], pause: bool) -> subprocess.Popen:
    return subprocess.Popen(args, env=_env(pause), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _temporaries(run: Path, pid: int | None = None) -> list[Path]:
    d = run / "checkpoints"
    if not d.is_dir():
        return []
    return [p for p in d.iterdir() if p.name.startswith(ckpt.TMP_PREFIX) and (pid is None or p.name.endswith(f"-{pid}"))]


def _wait(proc: subprocess.Popen, ready, what: str, timeout: float = 240.0) -> None:
    end = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (rc {proc.returncode}) before {what}:\n{proc.stdout.read()}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return out


def _verify_committed(run: Path) -> list[str]:
    """Every committed checkpoint verifies (schema-checked manifest, every file's length and sha256)."""
    found = ckpt.committed(run / "checkpoints")
    for path in found:
        ckpt.read_manifest(path)
    return [p.name for p in found]


def _rows(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in DROP} for line in (run / "metrics.jsonl").read_text().splitlines()]


def _assert_same_result(run: Path, ref: Path) -> None:
    for k in (0, 1):
        rel = Path("folds") / f"fold_{k}" / "metrics.json"
        assert (run / rel).read_bytes() == (ref / rel).read_bytes(), rel
    assert _rows(run) == _rows(ref)
    last, ref_last = ckpt.latest(run / "checkpoints"), ckpt.latest(ref / "checkpoints")
    epochs = tomllib.loads((ref / "config.toml").read_text())["train"]["epochs"]  # the last epoch of fold 1 (the last fold)
    assert last.name == ref_last.name == f"f001-e{epochs:05d}-end"
    files, ref_files = ckpt.read_manifest(last)["files"], ckpt.read_manifest(ref_last)["files"]
    assert {f: v["sha256"] for f, v in files.items()} == {f: v["sha256"] for f, v in ref_files.items()}
    assert not _temporaries(run)


def killed_in_fold_0_then_resumed_equals_uninterrupted(cfg: Path, root: Path, reference: bool = True) -> None:
    """``foxhunt train --config cfg`` run once uninterrupted, once SIGKILLed after its first committed
    checkpoint (in fold 0) and continued with ``--resume`` in a new process: the same results.
    ``reference=False``: the uninterrupted run of ``cfg`` is already in ``root/runs/ref`` (a fresh process)."""
    if reference:
        _finish(_popen(CLI + ["--config", str(cfg), "--name", "ref"], pause=False))
    run = root / "runs" / "k"
    proc = _popen(CLI + ["--config", str(cfg), "--name", "k"], pause=False)
    _wait(proc, lambda: bool(ckpt.committed(run / "checkpoints")), "the first committed checkpoint")
    _kill(proc)
    first = _verify_committed(run)
    assert first and first[-1].startswith("f000-")
    out = _finish(_popen(CLI + ["--resume", str(run)], pause=False))
    assert f"from checkpoint {first[-1]}" in out
    _assert_same_result(run, root / "runs" / "ref")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """select -> (folder, tiny config): the uninterrupted reference run ``runs/ref`` done once per
    config (a fresh process) and shared by the tests that kill runs of that config (each under its
    own run name in the same folder)."""
    made: dict[str, tuple[Path, Path]] = {}

    def get(select: str) -> tuple[Path, Path]:
        if select not in made:
            d = tmp_path_factory.mktemp(f"kill-{select}")
            cfg = tiny_config(d, epochs=3, every=1, cache=d / "cache", select=select)
            # 1,800 bars with 100-bar validation (the tiny config's 3,000 and 300: fold 0 still trains on more
            # than its 800): each fold's validation is backtested bar by bar; the checkpoints are the same
            cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
            assert "bars = 1800" in cfg.read_text() and "val = 100" in cfg.read_text()
            _finish(_popen(CLI + ["--config", str(cfg), "--name", "ref"], pause=False))
            made[select] = d, cfg
        return made[select]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("select", ["last"])  # select = inner, killed and resumed: tests/train/test_ensemble.py
def test_sigkill_after_the_first_checkpoint_and_inside_a_save_then_resume_gives_the_uninterrupted_result(uninterrupted, select):
    """(tests/train/test_ensemble.py kills and resumes a select = "inner" run of two agents: the epoch
    selectors' best scores and parameters travel in the checkpoints.)"""
    tmp_path, cfg = uninterrupted(select)
    run = tmp_path / "runs" / "k"

    # 1. Killed while training, right after its first checkpoint was committed.
    proc = _popen(CLI + ["--config", str(cfg), "--name", "k"], pause=False)
    _wait(proc, lambda: bool(ckpt.committed(run / "checkpoints")), "the first committed checkpoint")
    _kill(proc)
    assert _verify_committed(run)

    # 2. Resumed in a new process, killed inside one of its saves (between two files).
    proc = _popen(CLI + ["--resume", str(run)], pause=True)
    _wait(proc, lambda: bool(_temporaries(run, proc.pid)), "a save of the resumed process")
    time.sleep(float(SAVE_PAUSE) / 2)
    _kill(proc)
    torn = _temporaries(run, proc.pid)
    assert torn and not (torn[0] / "manifest.json").exists(), "the kill must land inside the save"
    committed_before = _verify_committed(run)

    # 3. Resumed again: finishes, the torn save is discarded, the result is the uninterrupted one.
    out = _finish(_popen(CLI + ["--resume", str(run)], pause=False))
    assert f"from checkpoint {committed_before[-1]}" in out
    _assert_same_result(run, tmp_path / "runs" / "ref")


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_result(uninterrupted):
    """A few kills at random moments (any phase: imports, data, training, evaluation, saves)."""
    tmp_path, cfg = uninterrupted("last")
    run = tmp_path / "runs" / "random"
    start = CLI + ["--config", str(cfg), "--name", "random"]
    rng = random.Random(20240611)
    kills = 0
    proc = _popen(start, pause=True)
    while True:
        if kills < 4:
            if kills % 2 == 0:  # inside or just after a save of this process
                _wait(proc, lambda: bool(_temporaries(run, proc.pid)) or proc.poll() is not None, "a save", )
                time.sleep(rng.uniform(0.0, 0.5))
            else:
                time.sleep(rng.uniform(1.0, 4.0))
            if proc.poll() is None:
                _kill(proc)
                kills += 1
                if run.exists():
                    _verify_committed(run)  # no torn checkpoint was ever committed
        out, _ = proc.communicate(timeout=300)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, out
        proc = _popen(CLI + ["--resume", str(run)] if run.exists() else start, pause=True)
    assert kills >= 3, kills
    _assert_same_result(run, tmp_path / "runs" / "ref")
