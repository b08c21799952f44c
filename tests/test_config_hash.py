"""The config hash depends only on the resolved values: never on which module a process imported
first (section registration order), on key order in the file, or on defaults being written out."""

from __future__ import annotations

import pytest

from foxhunt.config import build_config, load_config
from foxhunt.errors import ConfigError

def test_hash_and_section_order_are_the_same_whatever_order_sections_registered_in(monkeypatch):
    """`foxhunt train` registered [train] before [env]/[dqn]; `--resume` did not (issue 11)."""
    from foxhunt import config as config_mod

    ref = load_config(None, ["data.bars=5000"])
    for order in (reversed, lambda names: sorted(names, key=lambda n: n[::-1])):
        shuffled = {name: config_mod._SECTIONS[name] for name in order(list(config_mod._SECTIONS))}
        monkeypatch.setattr(config_mod, "_SECTIONS", shuffled)
        again = load_config(None, ["data.bars=5000"])
        assert again.hash() == ref.hash()
        assert again.to_toml() == ref.to_toml()
        assert list(again.sections())[:10] == ["run", "data", "features", "folds", "env", "dqn", "ppo", "direct", "forecast", "train"]


def test_every_section_registered_by_any_module_is_registered_by_build_config():
    """A section registered by a module that build_config does not import would make the section
    set (and the hash) depend on imports; every module of the package is imported here."""
    import importlib
    import pkgutil

    import foxhunt
    from foxhunt import config as config_mod

    before = set(build_config({}).sections())
    for info in pkgutil.walk_packages(foxhunt.__path__, "foxhunt."):
        try:
            importlib.import_module(info.name)
        except Exception:  # a module that cannot import here (optional extra, GPU only) registers nothing here
            continue
    assert set(config_mod._SECTIONS) == before


def test_hash_ignores_key_order_and_written_out_defaults(tmp_path):
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text('[folds]\nval = 500\ntrain = 2000\n[data]\nbars = 5000\n')
    b.write_text('[data]\nbars = 5000\nseed = 7\n[folds]\ntrain = 2000\nval = 500\nmode = "expanding"\n')
    assert load_config(a).hash() == load_config(b).hash()
    assert load_config(a).hash() != load_config(a, ["data.seed=8"]).hash()


def test_hash_survives_the_written_toml_round_trip(tmp_path):
    cfg = load_config(None, ["data.signal=0.1", "folds.train=\"90D\"", "run.name=\"x\""])
    again = load_config(cfg.write(tmp_path))
    assert again.hash() == cfg.hash()
    assert list(again.sections()) == list(cfg.sections())


def test_a_binary_config_file_is_one_line_config_error(tmp_path):
    p = tmp_path / "config.toml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError, match=r"config.toml: not a TOML text file \(byte \d+ is not UTF-8\)$"):
        load_config(p)
