"""The `foxhunt` CLI front half: sample data, prepare (data → features → folds → device), errors."""

from __future__ import annotations

from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.data.loader import load_bars


def test_data_sample_writes_a_valid_file_for_every_source(tmp_path):
    for source, bars in (("synthetic", 500), ("sp500", 300), ("nasdaq", 300)):
        out = tmp_path / f"{source}.parquet"
        res = CliRunner().invoke(app, ["data", "sample", "--source", source, "--bars", str(bars), "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert len(load_bars(out)) == bars


def test_prepare_builds_folds_and_device_market_on_built_in_data(tmp_path):
    res = CliRunner().invoke(app, [
        "prepare", "--device", "cpu", "--set", f"features.cache_dir=\"{tmp_path / 'cache'}\"",
        "--set", "data.bars=3000", "--set", "folds.train=1000", "--set", "folds.val=400",
    ])
    assert res.exit_code == 0, res.output
    assert "walk-forward folds" in res.output and "obs dim 54" in res.output
    assert any((tmp_path / "cache").glob("*.safetensors"))


def test_prepare_reports_a_bad_override_in_one_line_with_exit_2(tmp_path):
    res = CliRunner().invoke(app, ["prepare", "--device", "cpu", "--set", "folds.trian=10"])
    assert res.exit_code == 2
    assert "folds.trian: unknown key" in res.output
