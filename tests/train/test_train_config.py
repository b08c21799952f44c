"""The [train] section and the built-in `foxhunt train` defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from foxhunt.config import load_config
from foxhunt.errors import ConfigError
from foxhunt.train.config import DEFAULT_TRAIN_TOML, TrainConfig, default_train_config

ROOT = Path(__file__).resolve().parents[2]


def test_configs_train_default_toml_is_byte_identical_to_the_builtin_defaults():
    assert (ROOT / "configs" / "train-default.toml").read_text() == DEFAULT_TRAIN_TOML


def test_builtin_defaults_equal_loading_the_shipped_file():
    from foxhunt.config import DataConfig

    path = ROOT / "configs" / "train-default.toml"
    if "signal" in DataConfig.model_fields:
        assert default_train_config().to_toml() == load_config(path).to_toml()
    else:  # until the data section knows `signal`, the built-in defaults leave it out
        assert default_train_config().to_toml() == load_config(None, _flatten(path, drop={"data.signal"})).to_toml()


def _flatten(path: Path, drop: set[str]) -> list[str]:
    import sys

    import tomli_w

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    out = []
    for sec, table in tomllib.loads(path.read_text()).items():
        for key, value in table.items():
            if f"{sec}.{key}" not in drop:
                out.append(f"{sec}.{key}={tomli_w.dumps({'v': value})[4:].strip()}")
    return out


def test_train_section_is_registered_with_every_config():
    cfg = load_config(None, ["train.epochs=3"])
    assert isinstance(cfg.train, TrainConfig) and cfg.train.epochs == 3


@pytest.mark.parametrize("override, key", [
    ("train.epochs=0", "train.epochs"),
    ("train.checkpoint_every=-1", "train.checkpoint_every"),
    ("train.nope=1", "train.nope"),
    ("train.keep_checkpoints=0", "train.keep_checkpoints"),
])
def test_bad_train_keys_are_one_line_config_errors_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.split(".")[0]) as exc:
        default_train_config([override])
    assert "\n" not in str(exc.value)


def test_overrides_apply_on_top_of_the_builtin_defaults():
    cfg = default_train_config(["dqn.n_envs=8", "folds.max_folds=2"])
    assert cfg.dqn.n_envs == 8 and cfg.folds.max_folds == 2 and cfg.env.action_mode == "exposure"
