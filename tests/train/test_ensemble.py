"""train.ensemble = K from the command line, each run a fresh process, with train.select = "inner":
member k trains and selects exactly what a run of seed run.seed + k does, the fold's model is their
merged mean-Q network (what `foxhunt backtest --run` replays), and a run killed after a checkpoint
resumes to the uninterrupted result (every member's epoch selector travels in the checkpoints)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from foxhunt.agents.model_io import load_model
from foxhunt.train import checkpoint as ckpt
from tests.train.conftest import CLI, tiny_config
from tests.train.test_kill_resume import _assert_same_result, _finish, _kill, _popen, _verify_committed, _wait

ENSEMBLE = "ensemble = 2\n"


def _config(d: Path, seed: int = 0, ensemble: bool = True) -> Path:
    """Two epochs a fold (each member still picks one of them; a checkpoint still lies inside each fold),
    a 10 % held-back window (half the default: each epoch's selection scores half the bars), 100-bar
    validation and 1,800 bars (the tiny config's 300 and 3,000: fold 0 still trains on more than its 800)."""
    cfg = tiny_config(d, seed=seed, epochs=2, every=1, cache=d.parent / "cache", select="inner")
    text = cfg.read_text().replace('select = "inner"\n', 'select = "inner"\ninner_fraction = 0.1\n', 1)
    cfg.write_text(text.replace("val = 300\n", "val = 100\n", 1).replace("bars = 3000\n", "bars = 1800\n", 1))
    assert "bars = 1800" in cfg.read_text() and "val = 100" in cfg.read_text()
    if ensemble:
        cfg.write_text(cfg.read_text().replace("[train]\n", "[train]\n" + ENSEMBLE, 1))
    return cfg


def _train(cfg: Path, name: str) -> Path:
    _finish(_popen(CLI + ["--config", str(cfg), "--name", name], pause=False))
    return cfg.parent / "runs" / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The ensemble run (seeds 0 and 1) and plain runs of seed 0 and seed 1, same data."""
    base = tmp_path_factory.mktemp("ensemble")
    return {"team": _train(_config(base / "team"), "ref"), "seed0": _train(_config(base / "s0", 0, False), "r"),
            "seed1": _train(_config(base / "s1", 1, False), "r")}


@pytest.mark.slow
def test_each_member_selects_what_a_run_of_its_seed_selects_and_the_model_is_their_mean_q(runs):
    obs = torch.randn(300, load_model(runs["seed0"] / "folds" / "fold_0" / "model.safetensors")[0].obs_dim)
    for k in (0, 1):
        team = json.loads((runs["team"] / "folds" / f"fold_{k}" / "metrics.json").read_text())
        alone = [json.loads((runs[f"seed{s}"] / "folds" / f"fold_{k}" / "metrics.json").read_text()) for s in (0, 1)]
        assert team["selection"]["ensemble_seeds"] == [0, 1]
        assert team["selection"]["members"] == [a["selection"] for a in alone]  # each member's own pick
        assert team["selection"]["epoch"] == alone[0]["selection"]["epoch"]
        merged = load_model(runs["team"] / "folds" / f"fold_{k}" / "model.safetensors")[0]
        members = [load_model(runs[f"seed{s}"] / "folds" / f"fold_{k}" / "model.safetensors")[0] for s in (0, 1)]
        assert [m.out_features for m in merged.trunk if isinstance(m, torch.nn.Linear)] == [32]  # 2 x [16]
        want = (members[0](obs).double() + members[1](obs).double()) / 2
        torch.testing.assert_close(merged(obs).double(), want, atol=1e-5, rtol=1e-5)
    rows = [json.loads(line) for line in (runs["team"] / "metrics.jsonl").read_text().splitlines()]
    assert all(len(r["members"]) == 1 and r["members"][0]["member"] == 1 and "inner_sharpe" in r["members"][0] for r in rows)
    # foxhunt backtest --run replays the merged models: the run's own validation metrics
    out = subprocess.run(CLI[:-1] + ["backtest", "--run", str(runs["team"])], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    replay = json.loads((runs["team"] / "backtest" / "metrics.json").read_text())
    for r in (r for r in replay if r["label"] == "agent"):
        saved = json.loads((runs["team"] / "folds" / f"fold_{r['window']}" / "metrics.json").read_text())["agent"]
        assert (r["sharpe"], r["trade_count"]) == (saved["sharpe"], saved["trade_count"])


@pytest.mark.slow
def test_an_ensemble_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(runs):
    cfg = runs["team"].parent.parent / "tiny.toml"
    run = runs["team"].parent / "k"
    proc = _popen(CLI + ["--config", str(cfg), "--name", "k"], pause=False)
    _wait(proc, lambda: bool(ckpt.committed(run / "checkpoints")), "the first committed checkpoint")
    _kill(proc)
    assert _verify_committed(run)
    first = ckpt.committed(run / "checkpoints")[0]
    assert "member1_learner" in ckpt.read_manifest(first)["components"]
    out = _finish(_popen(CLI + ["--resume", str(run)], pause=False))
    assert "from checkpoint" in out and "ensemble: 2 agents a fold (seeds 0…1)" in out
    _assert_same_result(run, runs["team"])


def _corrupt(ckpt_dir: Path, fname: str, key: str, value: float) -> None:
    """Change one value of a member's saved tensor and record the file's new sha256 and length."""
    import hashlib

    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save

    tensors = st_load((ckpt_dir / fname).read_bytes())
    tensors[key].view(-1)[0] = value
    data = st_save(tensors)
    (ckpt_dir / fname).write_bytes(data)
    m = json.loads((ckpt_dir / "manifest.json").read_text())
    m["files"][fname].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (ckpt_dir / "manifest.json").write_text(json.dumps(m))


@pytest.mark.slow
@pytest.mark.parametrize("fname, key, value, rule", [
    ("member1_replay.safetensors", "storage.bar", 10**9, "member1_replay.safetensors storage.bar holds 1000000000, outside 0…"),
    ("member1_learner.safetensors", None, float("nan"), "member1_learner.safetensors tensor '"),
])
def test_a_bad_value_in_a_members_checkpoint_file_is_refused_naming_that_file(runs, tmp_path, fname, key, value, rule):
    from typer.testing import CliRunner

    from foxhunt.cli import app

    run = tmp_path / "ref"
    shutil.copytree(runs["team"], run)
    shutil.rmtree(ckpt.latest(run / "checkpoints"))  # resume from the checkpoint inside the last fold
    mid = ckpt.latest(run / "checkpoints")
    if key is None:  # the first float tensor of more than one value
        from safetensors.torch import load as st_load

        key = next(k for k, v in st_load((mid / fname).read_bytes()).items() if v.is_floating_point() and v.numel() > 1)
    _corrupt(mid, fname, key, value)
    res = CliRunner().invoke(app, ["train", "--resume", str(run)])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1].startswith(f"error: checkpoint {mid}: {rule}"), res.output
