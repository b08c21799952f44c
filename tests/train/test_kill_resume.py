"""Crash safety: SIGKILL `foxhunt train` at random moments (some inside a checkpoint save), resume
each time until it finishes; no torn checkpoint is ever committed or loaded, and the final per-fold
metrics equal an uninterrupted run's exactly."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from foxhunt.train import checkpoint as ckpt
from tests.train.conftest import CLI, tiny_config

KILLS = 12
SAVE_PAUSE = "0.06"  # seconds between the files of a save: a save lasts >= 0.18 s


def _env(pause: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(ckpt.SLEEP_ENV, None)
    if pause:
        env[ckpt.SLEEP_ENV] = SAVE_PAUSE
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _saving(run: Path) -> bool:
    d = run / "checkpoints"
    return d.is_dir() and any(p.name.startswith(ckpt.TMP_PREFIX) for p in d.iterdir())


def _wait_for_save(proc: subprocess.Popen, run: Path, timeout: float = 60.0) -> bool:
    """Poll until a save is in progress (a temporary checkpoint directory exists) or the process ends."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if _saving(run):
            return True
        time.sleep(0.003)
    return False


def _wait_for_save_end(proc: subprocess.Popen, run: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None and _saving(run):
        time.sleep(0.002)


def _verify_committed(run: Path) -> int:
    """Every committed checkpoint verifies (manifest present, every file's sha256 matches)."""
    found = ckpt.committed(run / "checkpoints")
    for path in found:
        ckpt.read_manifest(path)
    return len(found)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_metrics(tmp_path):
    cfg = tiny_config(tmp_path, epochs=7, every=1, report=True, cache=tmp_path / "cache")
    ref = subprocess.run(CLI + ["--config", str(cfg), "--name", "ref"], env=_env(False), capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr + ref.stdout
    run = tmp_path / "runs" / "k"
    start = CLI + ["--config", str(cfg), "--name", "k"]
    rng = random.Random(20240611)
    kills = inside = resumes = 0
    proc = subprocess.Popen(start, env=_env(True), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while True:
        if kills < KILLS:
            mode = kills % 3
            if mode == 0:  # inside a save: the first file is being written, the manifest is not yet
                _wait_for_save(proc, run)
                time.sleep(rng.uniform(0.0, 0.12))
            elif mode == 1:  # after some progress
                _wait_for_save(proc, run)
                time.sleep(rng.uniform(0.05, 0.6))
            elif kills % 2:  # between saves: training, metrics lines, evaluation, fold files
                _wait_for_save(proc, run)
                _wait_for_save_end(proc, run)
                time.sleep(rng.uniform(0.0, 0.03))
            else:  # any moment from the start (imports, data, training, evaluation, saves)
                time.sleep(rng.uniform(0.5, 3.0))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                inside += _saving(run)
                if run.exists():
                    _verify_committed(run)  # no torn checkpoint was ever committed
        out, _ = proc.communicate(timeout=300)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, out
        if run.exists():
            resumes += 1
            proc = subprocess.Popen(CLI + ["--resume", str(run)], env=_env(True), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        else:  # killed before the run directory existed: start again
            proc = subprocess.Popen(start, env=_env(True), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("kills", kills, "inside a save", inside, "resumes", resumes)  # shown with -s
    assert kills >= 10 and inside >= 3 and resumes >= 8, (kills, inside, resumes)
    assert not _saving(run)
    assert _verify_committed(run) == 2
    ref_run = tmp_path / "runs" / "ref"
    for k in (0, 1):
        rel = Path("folds") / f"fold_{k}" / "metrics.json"
        assert (run / rel).read_bytes() == (ref_run / rel).read_bytes(), rel
    last, ref_last = ckpt.latest(run / "checkpoints"), ckpt.latest(ref_run / "checkpoints")
    assert last.name == ref_last.name == "f001-e00007-end"
    files, ref_files = ckpt.read_manifest(last)["files"], ckpt.read_manifest(ref_last)["files"]
    assert {f: v["sha256"] for f, v in files.items()} == {f: v["sha256"] for f, v in ref_files.items()}
    drop = {"epoch_s", "collect_s", "train_s", "curiosity_s"}
    rows = [{k: v for k, v in line.items() if k not in drop} for line in _jsonl(run / "metrics.jsonl")]
    ref_rows = [{k: v for k, v in line.items() if k not in drop} for line in _jsonl(ref_run / "metrics.jsonl")]
    assert rows == ref_rows
    assert (run / "report.html").is_file()


def _jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]
