"""dqn.overlap_collection through `foxhunt train` in fresh processes: a run with the option on killed
in its first fold and resumed equals the uninterrupted run (the staged round travels in the
checkpoint), and the option with dqn.curiosity is a one-line refusal naming both keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_run import assert_refused
from tests.tiny import shorter
from tests.train.conftest import tiny_config
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted


def _overlap(path: Path) -> Path:
    text = path.read_text()
    assert "[dqn]\n" in text
    path.write_text(text.replace("[dqn]\n", "[dqn]\noverlap_collection = true\n", 1))
    return path


def test_overlap_with_curiosity_is_refused_in_one_line_naming_both_keys(tmp_path):
    cfg = tiny_config(tmp_path)
    assert_refused(tmp_path, ["train", "--config", str(cfg), "--set", "dqn.overlap_collection=true",
                              "--set", "dqn.curiosity=true"],
                   f"{cfg} + overrides: dqn: overlap_collection = true cannot combine with curiosity = true (the bonus "
                   "of a collection on the second stream would read the forward model while its train step writes it)")


@pytest.mark.slow
def test_a_run_with_overlap_killed_in_its_first_fold_and_resumed_gives_the_uninterrupted_result(tmp_path):
    cfg = shorter(_overlap(tiny_config(tmp_path, cache=tmp_path / "cache")))
    killed_in_fold_0_then_resumed_equals_uninterrupted(cfg, tmp_path)
