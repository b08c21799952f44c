"""The trainer memory estimate bounds what a DQNTrainer really holds, and a run that cannot fit the
device is one ConfigError line stating the estimate and the limit, before anything is allocated."""

from __future__ import annotations

import pytest
import torch

from foxhunt.budget import available_bytes, check_trainer_fits, dqn_trainer_bytes, dueling_params, with_device_overhead
from foxhunt.config import build_config
from foxhunt.errors import ConfigError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from tests.helpers import random_feature_set


def _storages(root: object) -> dict[int, int]:
    """data_ptr -> bytes of every tensor storage reachable from ``root`` through attributes and containers."""
    out: dict[int, int] = {}
    seen: set[int] = set()
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            out[o.untyped_storage().data_ptr()] = o.untyped_storage().nbytes()
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set)):
            stack.extend(o)
        elif hasattr(o, "__dict__") and type(o).__module__.startswith(("foxhunt", "torch.nn", "torch.optim")):
            stack.extend(vars(o).values())
    return out


@pytest.mark.slow
def test_the_estimate_is_at_least_what_a_trained_trainer_holds_and_at_most_four_times_it():
    dqn = {"n_envs": 32, "buffer_capacity": 20_000, "hidden": [64, 32], "head_hidden": 16, "batch_size": 64, "curiosity": True}
    from foxhunt.agents.dqn.trainer import DQNTrainer

    market = MarketData(random_feature_set(1_500, 12, seed=1), "cpu")
    market.set_fold(FoldRange(0, 100, 1_000, 1_050, 1_400))
    cfg = build_config({"env": {"action_mode": "exposure", "episode_length": 32},
                        "accel": {"graphs": "off"}, "dqn": {"rounds_per_epoch": 2, "warmup_transitions": 64, **dqn}})
    before = _storages(market)
    trainer = DQNTrainer(market, cfg.env, cfg.dqn, seed=0)
    trainer.train_epoch()
    held = sum(v for k, v in _storages(trainer).items() if k not in before)
    est = sum(with_device_overhead(dqn_trainer_bytes(cfg.dqn, market.n_features, cfg.env.n_actions), market.features.device).values())
    assert held <= est <= 4 * held, (held, est)


def test_dueling_params_counts_the_network_exactly():
    from foxhunt.agents.networks import DuelingQNet

    net = DuelingQNet(23, 5, (40, 30), 12)
    assert dueling_params(23, (40, 30), 12, 5) == sum(p.numel() for p in net.parameters())


def test_a_trainer_larger_than_the_device_is_one_line_stating_estimate_and_limit():
    cfg = build_config({"dqn": {"buffer_capacity": 10_000_000, "hidden": [4096, 4096]}})
    with pytest.raises(ConfigError) as exc:
        check_trainer_fits(cfg.dqn, 50, 45, "cpu", available=1 << 30)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("the DQN trainer (dqn.buffer_capacity=10000000, dqn.hidden=[4096, 4096], dqn.batch_size=256, "
                          "dqn.n_envs=256) needs ~")
    assert "largest part: replay" in msg and "but cpu has 1.00 GiB free: reduce it" in msg
    check_trainer_fits(build_config({}).dqn, 50, 45, "cpu", available=1 << 30)  # the defaults fit in 1 GiB


def test_available_bytes_is_a_positive_host_figure_on_the_cpu():
    assert 0 < available_bytes("cpu") < 1 << 50


@pytest.mark.parametrize("override, rule", [
    ("dqn.hidden=[-4]", "dqn.hidden.0: Input should be greater than or equal to 1 (got -4)"),
    ("dqn.hidden=[0]", "dqn.hidden.0: Input should be greater than or equal to 1 (got 0)"),
    ("dqn.hidden=[200000, 200000]", "dqn.hidden.0: Input should be less than or equal to 65536 (got 200000)"),
    ("dqn.head_hidden=1e9", "dqn.head_hidden: Input should be less than or equal to 65536 (got 1000000000.0)"),
    ("dqn.buffer_capacity=1e12", "dqn.buffer_capacity: Input should be less than or equal to 17179869184"),
    ("dqn.batch_size=1e12", "dqn.batch_size: Input should be less than or equal to 16777216"),
    ("dqn.rounds_per_epoch=1e12", "dqn.rounds_per_epoch: Input should be less than or equal to 1000000"),
    ("dqn.rounds_per_epoch=1000000", "rounds_per_epoch × train_steps_per_round = 100000000 exceeds 67108864"),
])
def test_size_fields_out_of_bounds_are_config_errors(override, rule):
    from foxhunt.config import load_config

    with pytest.raises(ConfigError, match=None) as exc:
        load_config(None, [override] + (["dqn.train_steps_per_round=100"] if "=1000000" in override else []))
    assert rule in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.gpu
@pytest.mark.parametrize("toml", ["configs/h200.toml", "configs/h200-fast.toml"])
def test_on_cuda_the_estimate_bounds_the_peak_memory_of_building_and_training_a_trainer(toml):
    """Peak CUDA memory (allocator high-water mark, graphs captured, one epoch) <= the estimate × margin."""
    from pathlib import Path

    from foxhunt.agents.dqn.trainer import DQNTrainer
    from foxhunt.budget import MARGIN
    from foxhunt.config import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / toml)
    market = MarketData(random_feature_set(200_000, 51, seed=1), "cuda")
    market.set_fold(FoldRange(0, 1_000, 150_000, 150_100, 199_000))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    trainer = DQNTrainer(market, cfg.env, cfg.dqn, seed=0)
    trainer.train_epoch()
    trainer.train_epoch()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    est = sum(with_device_overhead(dqn_trainer_bytes(cfg.dqn, market.n_features, cfg.env.n_actions), market.features.device).values())
    print(f"{toml}: peak {peak / 2**20:.1f} MiB, estimate {est / 2**20:.1f} MiB")  # shown with -s
    assert peak <= MARGIN * est, (peak, est)


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("dqn.hidden=[-4]", "error: <built-in train defaults> + overrides: dqn.hidden.0: Input should be greater than or equal to 1 (got -4)"),
    # 2^34 slots × ~90 B ≈ 1.4 TB: more than any test machine's memory, yet within the static bound
    ("dqn.buffer_capacity=17179869184", "error: the DQN trainer (dqn.buffer_capacity=17179869184, dqn.hidden=[128, 128], dqn.batch_size=256, dqn.n_envs=128) needs ~"),
])
def test_foxhunt_train_refuses_bad_sizes_in_one_line_with_exit_2_and_writes_nothing(tmp_path, override, message):
    import subprocess

    from tests.train.conftest import CLI

    res = subprocess.run(CLI + ["--set", override, "--set", f'run.out_dir="{tmp_path / "runs"}"', "--set",
                                f'features.cache_dir="{tmp_path / "cache"}"', "--set", "data.bars=3000",
                                "--set", "folds.train=1000", "--set", "folds.val=300"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 2, res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), res.stderr
    assert not (tmp_path / "runs").exists()


def test_on_cuda_the_fixed_workspace_part_is_added_and_on_the_cpu_it_is_not():
    """The fixed CUDA part (libraries' workspaces, graph pools) joins the estimate only on CUDA."""
    from foxhunt.budget import CUDA_FIXED_BYTES

    parts = {"replay": 10}
    assert with_device_overhead(parts, "cpu") == parts
    assert with_device_overhead(parts, "cuda") == {"replay": 10, "CUDA workspaces": CUDA_FIXED_BYTES}
