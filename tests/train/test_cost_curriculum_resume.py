"""train.cost_curriculum from the command line: a run killed after its first checkpoint (inside the ramp) and
continued with `foxhunt train --resume` in a new process ends with the uninterrupted run's results bit for bit
(the epoch's costs are a function of the epoch, set again by the resumed process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny import shorter
from tests.train.conftest import tiny_config
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted


def _curriculum_config(directory: Path) -> Path:
    path = tiny_config(directory, epochs=3, every=1, cache=directory / "cache")
    text = path.read_text()
    assert "[train]\n" in text
    path.write_text(text.replace("[train]\n", "[train]\ncost_curriculum = 2\ntrain_cost_multiplier = 3.0\n", 1))
    return path


@pytest.mark.slow
def test_a_run_killed_inside_the_cost_ramp_and_resumed_gives_the_uninterrupted_result(tmp_path):
    # killed in fold 0, whose first epochs ramp the costs
    killed_in_fold_0_then_resumed_equals_uninterrupted(shorter(_curriculum_config(tmp_path)), tmp_path)
