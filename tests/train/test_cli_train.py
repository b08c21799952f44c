"""`foxhunt train`: outputs, bitwise seeds, one trainer across folds, one-line errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.train import checkpoint as ckpt
from tests.train.conftest import snapshot, tiny_config


def _train(*args: str):
    return CliRunner().invoke(app, ["train", *args])


def _fold_metrics(run: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((run / "folds").glob("fold_*/metrics.json"))]


def test_run_directory_holds_config_folds_metrics_checkpoints_tensorboard_and_report(tmp_path):
    cfg = tiny_config(tmp_path, epochs=3, every=2, tb=True, report=True)
    res = _train("--config", str(cfg), "--name", "r1")
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "r1"
    assert 'name = "r1"' in (run / "config.toml").read_text()
    folds = json.loads((run / "folds.json").read_text())
    assert len(folds) == 2 and "val_start_time" in folds[0]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(f, e) for f in (0, 1) for e in range(3)]
    assert {"reward_mean", "loss_mean", "q_mean", "epsilon", "epoch_s", "collect_s", "train_s", "updates"} <= set(rows[0])
    for k in (0, 1):
        m = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())
        assert {"sharpe", "total_return", "max_drawdown", "trade_count"} <= set(m["agent"])
        assert m["buy_and_hold"]["exposure_time"] == pytest.approx(1.0)
        assert (run / "folds" / f"fold_{k}" / "curves.safetensors").is_file()
        assert (run / "folds" / f"fold_{k}" / "trades.csv").read_text().startswith("window,entry_bar")
        assert (run / "folds" / f"fold_{k}" / "model.safetensors").is_file()
        assert json.loads((run / "folds" / f"fold_{k}" / "timings.json").read_text())["transition_s"] >= 0
    names = [p.name for p in ckpt.committed(run / "checkpoints")]
    assert names == ["f001-e00002-epoch", "f001-e00003-end"]  # keep_checkpoints = 2
    assert list((run / "tb").glob("events.out.tfevents.*"))
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "buy-and-hold" in html  # out of sample, per fold, training
    assert "Out of sample: 2 validation windows joined" in html and "Monthly returns" in html
    assert all((run / "folds" / f"fold_{k}" / "oos.safetensors").is_file() for k in (0, 1)) and (run / "data.json").is_file()
    assert "report:" in res.output and "B&H" in res.output


def test_the_same_seed_gives_bitwise_identical_fold_metrics_and_another_seed_does_not(tmp_path):
    cfg = tiny_config(tmp_path, epochs=2, every=0)
    for name in ("a", "b"):
        assert _train("--config", str(cfg), "--name", name).exit_code == 0
    a, b = _fold_metrics(tmp_path / "runs" / "a"), _fold_metrics(tmp_path / "runs" / "b")
    assert len(a) == 2 and a == b
    res = _train("--config", str(cfg), "--name", "c", "--set", "run.seed=1")
    assert res.exit_code == 0
    assert _fold_metrics(tmp_path / "runs" / "c") != a


def test_one_trainer_is_built_once_and_reused_across_folds(tmp_path, monkeypatch):
    import foxhunt.agents.dqn.trainer as dqn_mod  # train.agent.build_trainer takes the class from here

    built, resets = [], []
    real = dqn_mod.DQNTrainer

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

        def reset_for_fold(self, fold, warm_start=False):
            resets.append((fold.fold, warm_start, self.replay.storage.bar.data_ptr(), self.market.features.data_ptr()))
            return super().reset_for_fold(fold, warm_start)

    monkeypatch.setattr(dqn_mod, "DQNTrainer", Counting)
    cfg = tiny_config(tmp_path, epochs=1, every=0)
    assert _train("--config", str(cfg), "--name", "x", "--set", "train.warm_start=true").exit_code == 0
    assert len(built) == 1
    assert [(f, w) for f, w, _, _ in resets] == [(0, False), (1, True)]
    assert len({(p, q) for _, _, p, q in resets}) == 1  # same replay and market buffers: nothing re-allocated


def test_resume_of_a_finished_run_rebuilds_the_report_and_trains_nothing(tmp_path):
    cfg = tiny_config(tmp_path, epochs=1, every=0, report=True)
    assert _train("--config", str(cfg), "--name", "done").exit_code == 0
    run = tmp_path / "runs" / "done"
    before = _fold_metrics(run)
    lines = (run / "metrics.jsonl").read_text()
    res = _train("--resume", str(run))
    assert res.exit_code == 0, res.output
    assert "already complete" in res.output and _fold_metrics(run) == before
    assert (run / "metrics.jsonl").read_text() == lines


def _assert_one_line_exit_2(res) -> str:
    assert res.exit_code == 2, res.output
    text = res.output.strip()
    assert text.startswith("error:") and "\n" not in text, text
    return text


@pytest.mark.parametrize("extra, match", [
    (["--set", "dqn.n_envs=0"], "dqn.n_envs"),
    (["--set", "train.bogus=1"], "train.bogus"),
    (["--set", "folds.train=100000"], "no walk-forward fold fits"),
    (["--set", "env.episode_length=5000"], "episode_length"),
    (["--device", "tpu"], "device"),
    (["--data", "x.csv", "--sample", "sp500"], "not both"),
    (["--sample", "nosuch"], "nosuch"),
])
def test_bad_input_is_one_line_exit_2_and_creates_no_run_directory(tmp_path, extra, match):
    cfg = tiny_config(tmp_path)
    text = _assert_one_line_exit_2(_train("--config", str(cfg), "--name", "bad", *extra))
    assert match in text
    assert not (tmp_path / "runs").exists()


def test_a_bad_data_file_names_the_file_and_writes_nothing(tmp_path):
    bad = tmp_path / "bars.csv"
    bad.write_text("timestamp,open,high,low,close,volume\n2024-01-01,1,0.5,1,1,1\n")
    cfg = tiny_config(tmp_path)
    text = _assert_one_line_exit_2(_train("--config", str(cfg), "--data", str(bad), "--name", "bad"))
    assert "bars.csv" in text and not (tmp_path / "runs").exists()


def test_a_missing_config_file_and_an_existing_run_name_are_refused(tmp_path):
    assert "does not exist" in _assert_one_line_exit_2(_train("--config", str(tmp_path / "nope.toml")))
    cfg = tiny_config(tmp_path, epochs=1, every=0)
    assert _train("--config", str(cfg), "--name", "r").exit_code == 0
    run = tmp_path / "runs" / "r"
    before = snapshot(run)
    assert "already exists" in _assert_one_line_exit_2(_train("--config", str(cfg), "--name", "r"))
    assert snapshot(run) == before


def test_bad_resume_directories_are_refused_and_left_untouched(tmp_path):
    assert "no such run directory" in _assert_one_line_exit_2(_train("--resume", str(tmp_path / "none")))
    (tmp_path / "empty").mkdir()
    assert "config.toml is missing" in _assert_one_line_exit_2(_train("--resume", str(tmp_path / "empty")))
    cfg = tiny_config(tmp_path, epochs=2, every=1)
    assert _train("--config", str(cfg), "--name", "r").exit_code == 0
    run = tmp_path / "runs" / "r"
    assert "cannot be combined with --epochs" in _assert_one_line_exit_2(_train("--resume", str(run), "--epochs", "3"))
    last = ckpt.latest(run / "checkpoints")
    data = bytearray((last / "learner.safetensors").read_bytes())
    data[100] ^= 0x01
    (last / "learner.safetensors").write_bytes(bytes(data))
    (run / "checkpoints" / ".tmp-f001-e00009-epoch-1").mkdir()  # a leftover: must survive a refused resume
    before = snapshot(run)
    text = _assert_one_line_exit_2(_train("--resume", str(run)))
    assert "learner.safetensors" in text and "corrupt" in text
    assert snapshot(run) == before
    (run / "config.toml").write_text("[dqn]\nn_envs = -1\n")
    assert "dqn.n_envs" in _assert_one_line_exit_2(_train("--resume", str(run)))


def test_lagged_readback_gives_the_same_fold_metrics_and_epoch_rows(tmp_path):
    cfg = tiny_config(tmp_path, epochs=3, every=2)
    assert _train("--config", str(cfg), "--name", "plain").exit_code == 0
    assert _train("--config", str(cfg), "--name", "lagged", "--set", "accel.readback=\"lagged\"").exit_code == 0
    plain, lagged = tmp_path / "runs" / "plain", tmp_path / "runs" / "lagged"
    strip = lambda p: [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")}  # noqa: E731
                       for line in (p / "metrics.jsonl").read_text().splitlines()]
    assert strip(plain) == strip(lagged)
    for a, b in zip(_fold_metrics(plain), _fold_metrics(lagged)):
        assert json.loads(a)["agent"] == json.loads(b)["agent"]


@pytest.mark.parametrize("crash_after_saves", [2, 4])
def test_a_crash_after_a_committed_checkpoint_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, crash_after_saves):
    cfg = tiny_config(tmp_path, epochs=3, every=1)
    assert _train("--config", str(cfg), "--name", "ref", "--set", "accel.readback=\"lagged\"").exit_code == 0
    real, saves = ckpt.save, []

    def crashing(*a, **k):
        out = real(*a, **k)
        saves.append(out.name)
        if len(saves) == crash_after_saves:
            raise RuntimeError("simulated crash right after a commit")
        return out

    monkeypatch.setattr(ckpt, "save", crashing)
    res = _train("--config", str(cfg), "--name", "crash", "--set", "accel.readback=\"lagged\"")
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)
    monkeypatch.setattr(ckpt, "save", real)
    run = tmp_path / "runs" / "crash"
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"torn line from the crashed process": ')  # must be rolled back on resume
    res = _train("--resume", str(run))
    assert res.exit_code == 0, res.output
    assert f"from checkpoint {saves[-1]}" in " ".join(res.output.split())
    assert _fold_metrics(run) == _fold_metrics(tmp_path / "runs" / "ref")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(f, e) for f in (0, 1) for e in range(3)]


def test_every_fused_fast_path_together_trains_and_evaluates_end_to_end(tmp_path):
    """configs/h200-fast.toml's shape (accel.backend = "fused": fused env step, fused acting MLP,
    compiled train step with the hand-written backward, 32-ary Triton PER trees, fused validation
    backtests) in one walk-forward run; without CUDA the Triton kernels run in the interpreter, in a
    subprocess so that TRITON_INTERPRET is set before Triton is imported. The resolved plan is
    printed and written into the run directory (accel.json). Small folds (800 + 50 bars, one epoch of two
    rounds of 4 env steps and 2 train steps; the defaults are 16 and 8): the
    interpreted validation backtests cost ~80 ms a bar, and the claim does not depend on fold size."""
    import os
    import subprocess
    import sys

    sets = ["dqn.n_envs=16", "dqn.hidden=[16,16]", "dqn.head_hidden=8", "dqn.rounds_per_epoch=2", "dqn.batch_size=32",
            "dqn.rollout_len=4", "dqn.train_steps_per_round=2",  # interpreted env, acting and train steps: few a round
            "dqn.buffer_capacity=4096", "dqn.warmup_transitions=64", "accel.backend=\"fused\"",
            "dqn.sampler=\"proportional\"", "dqn.tree_arity=32", "data.bars=3000", "folds.train=800", "folds.val=50",
            "train.report=false", f"run.out_dir=\"{(tmp_path / 'runs').as_posix()}\""]
    cmd = [sys.executable, "-m", "foxhunt.cli", "train", "--folds", "2", "--epochs", "1", "--name", "fast"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = tmp_path / "runs" / "fast"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(0, 0), (1, 0)]
    assert all(r["updates"] > 0 for r in rows)
    for k in (0, 1):
        m = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())
        assert m["agent"]["bars"] > 0 and m["buy_and_hold"]["exposure_time"] == pytest.approx(1.0)
    plan = json.loads((run / "accel.json").read_text())
    assert {p: plan[p] for p in ("env_step", "acting", "train_step", "replay", "eval")} == dict.fromkeys(
        ("env_step", "acting", "train_step", "replay", "eval"), "fused")
    assert "accel: backend=fused" in res.stdout


def test_resuming_a_run_written_before_component_state_is_refused_in_one_line(tmp_path):
    """An older run directory: its config has the removed speed switches and its checkpoint the
    format-1 layout; --resume says the checkpoint cannot be resumed (not which key to edit)."""
    run = tmp_path / "runs" / "old"
    (run / "checkpoints" / "f000-e00001-epoch").mkdir(parents=True)
    (run / "config.toml").write_text("[dqn]\ncuda_graphs = true\nfused_env = false\n")
    (run / "folds.json").write_text("[]\n")
    manifest = {"format": 1, "files": {"trainer.safetensors": {}}, "host": {}, "generators": []}
    (run / "checkpoints" / "f000-e00001-epoch" / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(run)
    text = _assert_one_line_exit_2(_train("--resume", str(run)))
    assert "format 1 was written by an older foxhunt" in text and "start a new run" in text
    assert snapshot(run) == before
