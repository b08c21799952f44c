"""`foxhunt backtest` checks its output paths before it loads a model or runs anything: one exact
line, exit code 2, nothing written — run as the user runs it, in a fresh process (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_run import assert_refused


@pytest.mark.slow
def test_a_file_as_out_or_cache_dir_is_refused_before_the_backtest_runs(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    (tmp_path / "run").mkdir()
    # The model file does not even exist: the --out check comes first, before any loading.
    assert_refused(tmp_path, ["backtest", "--model", "missing.safetensors", "--out", "a_file"],
                   "--out a_file: exists and is not a directory")
    assert_refused(tmp_path, ["backtest", "--model", "missing.safetensors", "--out", "out", "--cache-dir", "a_file"],
                   "--cache-dir a_file: exists and is not a directory")
    assert_refused(tmp_path, ["backtest", "--run", "run", "--out", "a_file/x"], "--out a_file/x: a_file is not a directory")
    assert_refused(tmp_path, ["backtest", "--run", "a_file"], "--run a_file: not a training run directory (not a directory)")
