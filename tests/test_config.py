"""Config: TOML in, overrides on top, unknown keys and out-of-range values are clear errors."""

from __future__ import annotations

import pytest

from foxhunt.config import build_config, load_config, parse_override
from foxhunt.errors import ConfigError


def test_defaults_build_and_round_trip_through_toml(tmp_path):
    cfg = load_config()
    path = cfg.write(tmp_path)
    again = load_config(path)
    assert again.to_dict() == cfg.to_dict()
    assert again.hash() == cfg.hash()


def test_file_values_and_overrides_apply_in_order(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('[data]\nsource = "sp500"\nbars = 3000\n[folds]\ntrain = "365D"\n')
    cfg = load_config(p, ["data.bars=2500", "folds.mode=sliding", "folds.val=30D"])
    assert cfg.data.source == "sp500"
    assert cfg.data.bars == 2500
    assert cfg.folds.train == "365D"
    assert cfg.folds.val == "30D"
    assert cfg.folds.mode == "sliding"


def test_unknown_key_is_an_error_naming_the_key(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[data]\nsorce = 'synthetic'\n")
    with pytest.raises(ConfigError, match=r"data\.sorce: unknown key"):
        load_config(p)


def test_unknown_section_is_an_error():
    with pytest.raises(ConfigError, match=r"unknown section \[dta\]"):
        build_config({"dta": {}})


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.bars=5", "data.bars"),
        ("data.source=\"yahoo\"", "data.source"),
        ("folds.train=\"90X\"", "folds.train"),
        ("folds.max_folds=0", "folds.max_folds"),
        ("run.device=\"tpu\"", "run.device"),
    ],
)
def test_out_of_range_value_is_an_error_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_file_source_requires_a_path():
    with pytest.raises(ConfigError, match="data.path"):
        load_config(None, ["data.source=\"file\""])


def test_missing_config_file_and_bad_toml_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[data\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_override_values_are_parsed_as_toml_else_strings():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a.b=true") == (["a", "b"], True)
    assert parse_override("a.b=90D") == (["a", "b"], "90D")
    with pytest.raises(ConfigError):
        parse_override("nokey")


def test_config_sections_are_frozen():
    cfg = load_config()
    with pytest.raises(Exception):
        cfg.data.bars = 10  # type: ignore[misc]
