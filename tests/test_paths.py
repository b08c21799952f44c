"""paths.py: output-path checks refuse what a later mkdir / write would fail on, and create nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from foxhunt.errors import PathError
from foxhunt.paths import check_output_dir, check_output_file


@pytest.fixture
def place(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    return tmp_path


def test_usable_output_directories_pass_and_nothing_is_created(place: Path) -> None:
    before = sorted(place.rglob("*"))
    for p in (place / "dir", place / "new", place / "new" / "deeper", place / "dir" / "x" / "y"):
        assert check_output_dir(p, "--out") == p
    assert sorted(place.rglob("*")) == before


@pytest.mark.parametrize("rel, rule", [
    ("file", "exists and is not a directory"),
    ("file/sub", "is not a directory"),
    ("dangling", "is a broken symbolic link"),
    ("dangling/sub", "is a broken symbolic link"),
])
def test_unusable_output_directories_are_path_errors_naming_the_option_path_and_rule(place: Path, rel: str, rule: str) -> None:
    with pytest.raises(PathError) as e:
        check_output_dir(place / rel, "--cache-dir")
    assert str(e.value).startswith(f"--cache-dir {place / rel}: ") and rule in str(e.value)


def test_output_files_may_replace_a_file_but_not_a_directory(place: Path) -> None:
    assert check_output_file(place / "file", "--out") == place / "file"
    assert check_output_file(place / "new" / "bars.csv", "--out") == place / "new" / "bars.csv"
    with pytest.raises(PathError, match="is a directory; expected a file name"):
        check_output_file(place / "dir", "--out")
    with pytest.raises(PathError, match="file is not a directory"):
        check_output_file(place / "file" / "bars.csv", "--out")


@pytest.mark.parametrize("check", [check_output_dir, check_output_file])
def test_a_nul_byte_or_an_empty_path_is_refused(check, tmp_path: Path) -> None:
    with pytest.raises(PathError, match="NUL byte"):
        check(str(tmp_path / "a\0b"), "run.out_dir")
    with pytest.raises(PathError, match="empty"):
        check("", "run.out_dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PathError, match="not writable"):
            check_output_dir(ro, "--out")
        with pytest.raises(PathError, match="no permission"):
            check_output_dir(ro / "new", "--out")
    finally:
        ro.chmod(0o700)
