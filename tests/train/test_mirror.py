"""train.mirror through the runner and the CLI: the DQN replay fills from both copies of the market,
inside each copy's training range and with no bar check firing; a market prepared without the mirror
is refused; a run killed inside its first fold and resumed in a new process ends bit for bit as the
uninterrupted run (the replay's mirrored bars pass the resume checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foxhunt.errors import ConfigError
from tests.tiny import shorter
from tests.train.conftest import tiny_config
from tests.train.test_kill_resume import killed_in_fold_0_then_resumed_equals_uninterrupted


def _mirror_config(directory: Path, epochs: int = 3, every: int = 1) -> Path:
    path = tiny_config(directory, epochs=epochs, every=every, cache=directory / "cache")
    text = path.read_text()
    assert "[train]\n" in text
    path.write_text(text.replace("[train]\n", "[train]\nmirror = true\n", 1))
    return path


def test_dqn_on_a_mirrored_market_stores_transitions_from_both_copies_inside_their_training_ranges(tmp_path):
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.runner import WalkForwardRunner

    cfg = load_config(_mirror_config(tmp_path, epochs=1, every=0), ["accel.check=true"])
    runner = WalkForwardRunner(prepare_market(cfg))
    m = runner.market
    assert m.mirror_offset == m.n_bars and m.n_rows == 2 * m.n_bars
    runner.score_folds()  # check mode: any bar outside its copy's training range raises CheckFailed
    st = runner.members[0].replay.storage
    f = runner.folds[-1]  # the replay holds the last fold's transitions
    for name in ("bar", "next_bar"):
        bars = getattr(st, name)[: st.size].cpu()
        in_mirror = bars >= m.n_bars
        base = bars - in_mirror.long() * m.n_bars
        assert 0.3 < float(in_mirror.double().mean()) < 0.7, name
        assert int(base.min()) >= f.train_start and int(base.max()) <= f.train_end, name


def test_a_market_prepared_without_its_mirror_is_refused_for_a_mirrored_run(tmp_path):
    from foxhunt.config import load_config
    from foxhunt.pipeline import prepare_market
    from foxhunt.train.runner import WalkForwardRunner

    prepared = prepare_market(load_config(tiny_config(tmp_path, cache=tmp_path / "cache")))
    prepared.config = load_config(_mirror_config(tmp_path))
    with pytest.raises(ConfigError, match=r"train.mirror = true, but the market was prepared without its mirror"):
        WalkForwardRunner(prepared)


@pytest.mark.slow
def test_a_mirrored_run_killed_in_its_first_fold_and_resumed_gives_the_uninterrupted_result(tmp_path):
    killed_in_fold_0_then_resumed_equals_uninterrupted(shorter(_mirror_config(tmp_path)), tmp_path)
