"""`foxhunt train` with train.agent = "ppo": end to end in a fresh process, model files that
`foxhunt backtest` runs (greedy and sampled), and --resume after a crash to the uninterrupted result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.train import checkpoint as ckpt
from tests.train.conftest import tiny_config

PPO_SET = ['train.agent="ppo"', "ppo.n_envs=16", "ppo.rollout_len=8", "ppo.iterations_per_epoch=2", "ppo.minibatches=2",
           "ppo.update_epochs=2", "ppo.hidden=[16]", "ppo.head_hidden=8", "ppo.target_kl=0.05", "ppo.gamma=0.5"]
FOXHUNT = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())"]


def _sets() -> list[str]:
    return [a for s in PPO_SET for a in ("--set", s)]


def _fold_metrics(run: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((run / "folds").glob("fold_*/metrics.json"))]


@pytest.mark.slow
def test_foxhunt_train_runs_ppo_end_to_end_and_backtest_runs_its_models(tmp_path):
    cfg = tiny_config(tmp_path, epochs=2, every=1, report=True)
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1))  # 100-bar validation: stepped bar by bar
    res = subprocess.run([*FOXHUNT, "train", "--config", str(cfg), "--name", "p", *_sets()], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    run = tmp_path / "runs" / "p"
    assert 'agent = "ppo"' in (run / "config.toml").read_text()
    plan = json.loads((run / "accel.json").read_text())  # the plan names the agent whose network it checked
    assert plan["agent"] == "ppo" and plan["acting"] == plan["train_step"] == plan["replay"] == "torch"
    assert (run / "report.html").read_text().count("data:image/png;base64,") == 3  # out of sample, per fold, training
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(f, e) for f in (0, 1) for e in range(2)]
    assert {"entropy", "approx_kl", "clip_frac", "explained_var", "kl_stopped", "loss_mean", "collect_s", "train_s"} <= set(rows[0])
    assert all(r["updates"] == 2 * 2 * 2 and r["transitions"] == 2 * 16 * 8 for r in rows)
    model = run / "folds" / "fold_1" / "model.safetensors"
    from foxhunt.agents.model_io import load_model

    _, _, meta = load_model(model)
    assert meta.extra["agent"] == "ppo" and meta.n_actions == 5
    # --run: each fold's model on its validation window reproduces the run's own fold metrics (CPU).
    res = CliRunner().invoke(app, ["backtest", "--run", str(run), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    by_fold = {(r["window"], r["label"]): r for r in json.loads((run / "backtest" / "metrics.json").read_text())}
    for k in (0, 1):
        saved = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())["agent"]
        assert by_fold[(k, "agent")]["total_return"] == pytest.approx(saved["total_return"], rel=1e-9, abs=1e-12)
    # --model --policy sampled: reproducible with a seed, different across seeds.
    bars = tmp_path / "bars.parquet"
    assert CliRunner().invoke(app, ["data", "sample", "--source", "synthetic", "--bars", "700", "--out", str(bars)]).exit_code == 0
    outs = []
    for i, seed in enumerate((3, 3, 4)):
        out = tmp_path / f"bt{i}"
        res = CliRunner().invoke(app, ["backtest", "--model", str(model), "--data", str(bars), "--policy", "sampled", "--seed",
                                       str(seed), "--out", str(out), "--device", "cpu", "--cache-dir", str(tmp_path / "c")])
        assert res.exit_code == 0, res.output
        assert json.loads((out / "metrics.json").read_text())[0]["label"] == f"model (sampled, seed {seed})"
        outs.append((out / "trades.json").read_text())
    assert outs[0] == outs[1] and outs[0] != outs[2]


@pytest.mark.slow
@pytest.mark.parametrize("team", [[], ["--set", "train.ensemble=2"]], ids=["one", "ensemble"])
def test_a_crashed_ppo_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, team):
    """ensemble: two PPO agents, every member's state in the checkpoints (inner selection: test_ensemble.py)."""
    cfg = tiny_config(tmp_path, epochs=3, every=1)
    cfg.write_text(cfg.read_text().replace("val = 300\n", "val = 100\n", 1))  # 100-bar validation: stepped bar by bar
    train = lambda *a: CliRunner().invoke(app, ["train", "--config", str(cfg), *a, *_sets(), *team])  # noqa: E731
    assert train("--name", "ref").exit_code == 0
    real, saves = ckpt.save, []

    def crashing(*a, **k):
        out = real(*a, **k)
        saves.append(out.name)
        if len(saves) == 4:  # fold 1, epoch 1: mid-fold
            raise RuntimeError("simulated crash right after a commit")
        return out

    monkeypatch.setattr(ckpt, "save", crashing)
    res = train("--name", "crash")
    assert res.exit_code == 1 and isinstance(res.exception, RuntimeError)
    monkeypatch.setattr(ckpt, "save", real)
    run = tmp_path / "runs" / "crash"
    res = CliRunner().invoke(app, ["train", "--resume", str(run)])
    assert res.exit_code == 0, res.output
    assert f"from checkpoint {saves[-1]}" in " ".join(res.output.split())
    assert _fold_metrics(run) == _fold_metrics(tmp_path / "runs" / "ref")
    components = ckpt.read_manifest(ckpt.latest(run / "checkpoints"))["components"]
    assert ("member1_learner" in components) == bool(team) and "learner" in components
    strip = lambda p: [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")}  # noqa: E731
                       for line in (p / "metrics.jsonl").read_text().splitlines()]
    assert strip(run) == strip(tmp_path / "runs" / "ref")


def test_one_ppo_trainer_is_built_once_and_reused_across_folds(tmp_path, monkeypatch):
    import foxhunt.agents.ppo.trainer as ppo_mod

    built, resets = [], []
    real = ppo_mod.PPOTrainer

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

        def reset_for_fold(self, fold, warm_start=False):
            resets.append((fold.fold, warm_start, self.buffer.bar.data_ptr(), self.learner.flat.data.data_ptr()))
            return super().reset_for_fold(fold, warm_start)

    monkeypatch.setattr(ppo_mod, "PPOTrainer", Counting)
    cfg = tiny_config(tmp_path, epochs=1, every=0)
    res = CliRunner().invoke(app, ["train", "--config", str(cfg), "--name", "x", "--set", "train.warm_start=true", *_sets()])
    assert res.exit_code == 0, res.output
    assert len(built) == 1
    assert [(f, w) for f, w, _, _ in resets] == [(0, False), (1, True)]
    assert len({(p, q) for _, _, p, q in resets}) == 1  # same rollout buffer and weights: nothing re-allocated


def test_the_ppo_example_config_is_the_built_in_run_with_the_ppo_learner():
    from foxhunt.config import load_config
    from foxhunt.train.config import default_train_config

    root = Path(__file__).resolve().parents[2]
    ppo, base = load_config(root / "configs" / "train-ppo.toml"), default_train_config()
    assert ppo.train.agent == "ppo" and base.train.agent == "dqn"
    for section in ("data", "folds", "env"):
        assert getattr(ppo, section) == getattr(base, section)
    assert ppo.train.train_cost_multiplier == base.train.train_cost_multiplier
    assert ppo.ppo.batch_rows % ppo.ppo.minibatches == 0


def test_the_h200_ppo_config_is_h200s_data_with_ppo_and_about_two_million_env_steps_an_agent_a_fold():
    """configs/h200-ppo.toml: configs/h200.toml's data, folds and env with PPO; sized by the training
    bars (a daily scorecard fold has 25-45 K), not by the GPU: ~2 M env steps an agent a fold (<= ~84
    visits a bar), with the inner epoch selection that keeps the epoch before over-fitting."""
    from foxhunt.config import load_config
    from foxhunt.train.agent import env_steps_per_epoch

    root = Path(__file__).resolve().parents[2]
    ppo, dqn = load_config(root / "configs" / "h200-ppo.toml"), load_config(root / "configs" / "h200.toml")
    assert ppo.train.agent == "ppo" and ppo.run.device == "cuda"
    for section in ("data", "folds", "env"):
        assert getattr(ppo, section) == getattr(dqn, section)
    assert ppo.train.train_cost_multiplier == dqn.train.train_cost_multiplier == 3.0
    steps = ppo.train.epochs * env_steps_per_epoch(ppo)
    assert 1_000_000 <= steps <= 25_000 * 84 and ppo.train.select == "inner"


def test_an_unknown_agent_and_a_bad_minibatch_split_are_one_line_errors_that_write_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["train", "--set", 'train.agent="a2c"'])
    assert res.exit_code == 2
    assert res.output == "error: <built-in train defaults> + overrides: train.agent: Input should be 'dqn', 'ppo', 'direct' or 'forecast' (got 'a2c')\n"
    res = CliRunner().invoke(app, ["train", "--set", 'train.agent="ppo"', "--set", "ppo.minibatches=7"])
    assert res.exit_code == 2
    assert res.output == ("error: <built-in train defaults> + overrides: ppo: minibatches 7 must divide "
                          "n_envs × rollout_len = 8192\n")
    assert list(tmp_path.iterdir()) == []


def test_ppo_with_inner_selection_ends_each_fold_with_the_selected_epochs_actor(tmp_path, monkeypatch):
    """train.select = "inner" with PPO: the selector snapshots the actor-critic (its parameters are
    views into the learner's flat buffer) and the fold's model file is the selected epoch's actor,
    not the last epoch's. The held-back Sharpe is scripted (epoch 1 best) so the check does not
    depend on what a tiny run happens to learn."""
    from foxhunt.agents.model_io import load_model
    from foxhunt.train import runner as runner_mod
    from foxhunt.train.agent import policy_net

    scripted = {1: 1.0, 2: 0.5, 3: -0.2}  # epoch (1-based) -> held-back Sharpe
    actors: list[dict[str, torch.Tensor]] = []  # the greedy net after each epoch, in call order
    calls = {"n": 0}

    def window_sharpe(self, start, steps, policy):
        actors.append({k: v.detach().clone() for k, v in policy_net(self.trainer).state_dict().items()})
        calls["n"] += 1
        return scripted[(calls["n"] - 1) % 3 + 1]

    monkeypatch.setattr(runner_mod.WalkForwardRunner, "_window_sharpe", window_sharpe)
    cfg = tiny_config(tmp_path, epochs=3, every=0, select="inner")
    res = CliRunner().invoke(app, ["train", "--config", str(cfg), "--name", "s", *_sets()])
    assert res.exit_code == 0, res.output
    assert calls["n"] == 6  # 2 folds x 3 epochs
    run = tmp_path / "runs" / "s"
    for k in (0, 1):
        m = json.loads((run / "folds" / f"fold_{k}" / "metrics.json").read_text())
        assert m["selection"]["epoch"] == 1 and m["selection"]["inner_sharpe"] == 1.0
        net, _, _ = load_model(run / "folds" / f"fold_{k}" / "model.safetensors")
        saved = net.state_dict()
        first, last = actors[3 * k], actors[3 * k + 2]
        assert all(torch.equal(saved[n], first[n]) for n in first)  # epoch 1's actor, bitwise
        assert any(not torch.equal(saved[n], last[n]) for n in last)  # training moved it after epoch 1
