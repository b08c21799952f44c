"""[tune] / [tune.space]: parsing, Optuna distributions, and one-line errors for bad entries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna.distributions as od
import pytest

from foxhunt.config import build_config
from foxhunt.errors import ConfigError
from foxhunt.tune.config import DEFAULT_TUNE_TOML, check_space_bounds, default_tune_config
from foxhunt.tune.space import apply_params, decode, distributions

ROOT = Path(__file__).resolve().parents[2]


def test_default_tune_toml_is_the_file_in_configs() -> None:
    assert (ROOT / "configs" / "tune-default.toml").read_text() == DEFAULT_TUNE_TOML
    cfg = default_tune_config()
    assert set(cfg.tune.entries()) == {"dqn.lr", "dqn.gamma", "dqn.eps_decay_steps"}
    check_space_bounds(cfg)


def test_space_entries_become_optuna_distributions_in_both_spellings() -> None:
    nested = build_config({"tune": {"space": {"dqn": {"lr": {"low": 1e-4, "high": 1e-2, "log": True},
                                                      "batch_size": {"low": 32, "high": 256, "step": 32},
                                                      "hidden": [[64, 64], [128]],
                                                      "sampler": {"choices": ["uniform", "rank"]}}}}})
    dotted = build_config({"tune": {"space": {"dqn.lr": {"low": 1e-4, "high": 1e-2, "log": True},
                                              "dqn.batch_size": {"low": 32, "high": 256, "step": 32},
                                              "dqn.hidden": [[64, 64], [128]],
                                              "dqn.sampler": {"choices": ["uniform", "rank"]}}}})
    assert nested.tune.entries() == dotted.tune.entries()
    d = distributions(nested.tune.entries())
    assert d["dqn.lr"] == od.FloatDistribution(1e-4, 1e-2, log=True)
    assert d["dqn.batch_size"] == od.IntDistribution(32, 256, step=32)
    assert d["dqn.sampler"] == od.CategoricalDistribution(("uniform", "rank"))
    # list choices are searched as JSON texts and decoded back into config values
    assert d["dqn.hidden"] == od.CategoricalDistribution(("[64, 64]", "[128]"))
    values = decode(nested.tune.entries(), {"dqn.hidden": "[128]", "dqn.lr": 0.001})
    assert values == {"dqn.hidden": [128], "dqn.lr": 0.001}
    cfg = build_config(apply_params(nested.to_dict(), values))
    assert cfg.dqn.hidden == (128,) and cfg.dqn.lr == 0.001


@pytest.mark.parametrize("space, message", [
    ({"dqn.lrate": {"low": 1e-4, "high": 1e-2}}, "<config>: tune.space: dqn.lrate: unknown key (section 'dqn' has no key 'lrate')"),
    ({"nope.lr": [1, 2]}, "<config>: tune.space: nope.lr: unknown key (section 'nope' is not searchable"),
    ({"dqn.lr": {"low": 1e-3, "high": 1e-3}}, "<config>: tune.space: dqn.lr: empty range (low = high = 0.001)"),
    ({"dqn.lr": {"low": 1e-2, "high": 1e-3}}, "<config>: tune.space: dqn.lr: low 0.01 > high 0.001"),
    ({"dqn.lr": {"low": 0.0, "high": 1e-3, "log": True}}, "<config>: tune.space: dqn.lr: log scale needs low > 0 (got low=0.0)"),
    ({"dqn.lr": {"low": 1e-4}}, "<config>: tune.space: dqn.lr: a range needs both low and high"),
    ({"dqn.hidden": []}, "<config>: tune.space: dqn.hidden: choices must be a non-empty list"),
])
def test_bad_space_entries_are_config_errors_naming_the_entry(space: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config({"tune": {"space": space}})
    assert str(exc.value).startswith(message)
    assert "\n" not in str(exc.value)


def test_range_ends_must_pass_the_target_keys_own_rules() -> None:
    cfg = build_config({"tune": {"space": {"dqn.lr": {"low": 1e-3, "high": 2.0}}}})
    with pytest.raises(ConfigError, match=r"^tune.space.dqn.lr: value 2.0 breaks the key's rule: .*less than or equal to 1"):
        check_space_bounds(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("entry, message", [
    ('dqn.lrate = { low = 0.001, high = 0.01 }', "tune.space: dqn.lrate: unknown key (section 'dqn' has no key 'lrate')"),
    ('dqn.lr = { low = 0.01, high = 0.01 }', "tune.space: dqn.lr: empty range (low = high = 0.01); give a fixed value in its own section instead"),
    ('dqn.lr = { low = 0.01, high = 0.001 }', "tune.space: dqn.lr: low 0.01 > high 0.001"),
    ('dqn.lr = { low = -1.0, high = 0.001, log = true }', "tune.space: dqn.lr: log scale needs low > 0 (got low=-1.0)"),
])
def test_cli_bad_space_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, entry: str, message: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'[tune]\nout_dir = "{tmp_path / "studies"}"\n[tune.space]\n{entry}\n')
    p = subprocess.run([sys.executable, "-m", "foxhunt.cli", "tune", "--config", str(cfg)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {cfg}: {message}"]
    assert sorted(q.name for q in tmp_path.iterdir()) == ["bad.toml"]
