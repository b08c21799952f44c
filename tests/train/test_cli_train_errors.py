"""`foxhunt train` refuses bad paths and run directories before any work, in one exact line with
exit code 2 and nothing written — run as the user runs it, in a fresh process (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foxhunt.config import load_config
from foxhunt.train.manifest import RunDirError
from foxhunt.train.run_dir import create_run_dir
from tests.cli_run import assert_refused


def _fake_run_dir(root: Path, wrong: str) -> None:
    """runs/r with the files --resume looks for first, and ``wrong`` of the wrong type."""
    run = root / "runs" / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.toml").write_text("")
    (run / "folds.json").write_text("[]")
    if wrong == "checkpoints":
        (run / "checkpoints").rmdir()
        (run / "checkpoints").write_text("")
    else:
        (run / wrong).mkdir()


@pytest.mark.slow
def test_bad_run_names_out_dirs_and_run_directories_are_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    _fake_run_dir(tmp_path, "checkpoints")
    assert_refused(tmp_path, ["train", "--set", 'run.name="a\\u0000b"'],
                   "run name 'a\\x00b': must be non-empty, without '/' or NUL, not starting with '.'")
    assert_refused(tmp_path, ["train", "--name", "r", "--set", 'run.out_dir="a_file"'],
                   "run.out_dir a_file: exists and is not a directory")
    assert_refused(tmp_path, ["train", "--resume", "runs/r"], "--resume runs/r: checkpoints is not a directory")
    (tmp_path / "runs" / "r" / "checkpoints").unlink()
    (tmp_path / "runs" / "r" / "checkpoints").mkdir()
    (tmp_path / "runs" / "r" / "metrics.jsonl").mkdir()
    assert_refused(tmp_path, ["train", "--resume", "runs/r"], "--resume runs/r: metrics.jsonl is not a regular file")


def test_a_nul_in_the_run_name_leaves_no_runs_directory_behind(tmp_path: Path) -> None:
    cfg = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"', 'run.name="a\\u0000b"'])
    with pytest.raises(RunDirError, match="without '/' or NUL"):
        create_run_dir(cfg, None, None)  # type: ignore[arg-type]  # refused before prepared is used
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_directory_creation_removes_the_directories_it_made(tmp_path: Path, monkeypatch) -> None:
    from foxhunt.config import Config

    def fail(self: Config, directory: object, filename: str = "config.toml") -> None:
        raise OSError(28, "No space left on device", str(directory))

    monkeypatch.setattr(Config, "write", fail)
    cfg = load_config(None, [f'run.out_dir="{tmp_path / "deep" / "runs"}"'])
    with pytest.raises(RunDirError, match="No space left on device"):
        create_run_dir(cfg, None, "r")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
