"""The feature cache: hit / miss / rebuild rules, atomic writes, corruption detection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt.errors import CacheError
from foxhunt.features import cache, spec
from foxhunt.features.cache import load_or_build, read_cache

from .conftest import gbm_bars, with_prices


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of the feature builder made by the cache."""
    calls: list[int] = []
    real = spec.build_features

    def counting(bars, device=None, **kw):  # noqa: ANN001, ANN202
        calls.append(len(bars))
        return real(bars, device, **kw)

    monkeypatch.setattr(spec, "build_features", counting)
    return calls


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _same(a, b) -> bool:  # noqa: ANN001
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("ohlc", "volume", "timestamps")) and (
        torch.equal(a.features, b.features) and torch.equal(a.targets.nan_to_num(9), b.targets.nan_to_num(9))
    )


def test_first_call_builds_then_same_bars_and_spec_reuse_without_rebuilding(tmp_path: Path, builds: list[int]) -> None:
    bars = gbm_bars(500)
    first = load_or_build(bars, tmp_path)
    second = load_or_build(bars, tmp_path)
    third = load_or_build(gbm_bars(500), tmp_path)  # equal content, new object
    assert first.built and not second.built and not third.built
    assert builds == [500]
    assert first.path == second.path == third.path and first.path.suffix == ".safetensors"
    assert _same(first.features, second.features)
    assert second.features.names == first.features.names and second.features.warmup == first.features.warmup
    assert second.seconds >= 0 and first.seconds > 0


def test_changed_bars_rebuild_into_a_new_entry(tmp_path: Path, builds: list[int]) -> None:
    bars = gbm_bars(500)
    a = load_or_build(bars, tmp_path)
    c = bars.close.copy()
    c[-1] *= 1.001
    b = load_or_build(with_prices(bars, bars.open, np.maximum(bars.high, c), np.minimum(bars.low, c), c), tmp_path)
    assert b.built and b.path != a.path and len(builds) == 2
    assert not load_or_build(bars, tmp_path).built  # the old entry is still valid


def test_bumped_spec_version_rebuilds(tmp_path: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    bars = gbm_bars(500)
    a = load_or_build(bars, tmp_path)
    monkeypatch.setattr(spec, "FEATURE_SPEC_VERSION", spec.FEATURE_SPEC_VERSION + "-next")
    b = load_or_build(bars, tmp_path)
    assert b.built and b.path != a.path and b.features.spec_version.endswith("-next")
    assert not load_or_build(bars, tmp_path).built
    assert len(builds) == 2


def test_metadata_json_records_names_versions_hashes_and_sizes(tmp_path: Path) -> None:
    bars = gbm_bars(400, has_volume=False)
    res = load_or_build(bars, tmp_path)
    meta = json.loads(res.path.with_suffix(".json").read_text())
    assert meta["names"] == list(spec.feature_names())
    assert meta["spec_version"] == spec.FEATURE_SPEC_VERSION
    assert meta["source_sha256"] == bars.content_hash()
    assert meta["warmup"] == spec.WARMUP and meta["has_volume"] is False and meta["n_bars"] == 400
    assert meta["file_sha256"] == cache.file_sha256(res.path) and meta["created"]
    assert cache.cache_key(bars.content_hash(), spec.FEATURE_SPEC_VERSION) in res.path.name
    assert res.features.has_volume is False and read_cache(res.path).has_volume is False


def test_successful_write_leaves_exactly_the_two_entry_files(tmp_path: Path) -> None:
    res = load_or_build(gbm_bars(300), tmp_path / "nested" / "cache")
    assert _files(res.path.parent) == sorted([res.path.name, res.path.with_suffix(".json").name])


def test_failure_while_writing_tensors_leaves_no_entry_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def torn_save(tensors, filename, metadata=None):  # noqa: ANN001, ANN202
        Path(filename).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(cache, "save_file", torn_save)
    with pytest.raises(OSError, match="disk full"):
        load_or_build(gbm_bars(300), tmp_path)
    assert _files(tmp_path) == []
    monkeypatch.undo()
    assert load_or_build(gbm_bars(300), tmp_path).built


def test_failure_while_writing_metadata_leaves_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[int]) -> None:
    real_write_json = cache._write_json

    def torn_json(path, meta):  # noqa: ANN001, ANN202
        Path(path).write_text('{"format": ')
        raise KeyboardInterrupt  # even an interrupt cleans up

    monkeypatch.setattr(cache, "_write_json", torn_json)
    with pytest.raises(KeyboardInterrupt):
        load_or_build(gbm_bars(300), tmp_path)
    assert _files(tmp_path) == []
    monkeypatch.setattr(cache, "_write_json", real_write_json)
    assert load_or_build(gbm_bars(300), tmp_path).built and len(builds) == 2


def test_missing_json_means_absent_and_rebuilds(tmp_path: Path, builds: list[int]) -> None:
    bars = gbm_bars(300)
    res = load_or_build(bars, tmp_path)
    res.path.with_suffix(".json").unlink()
    with pytest.raises(CacheError, match=res.path.name):
        read_cache(res.path)
    again = load_or_build(bars, tmp_path)
    assert again.built and len(builds) == 2 and _same(again.features, res.features)
    assert not load_or_build(bars, tmp_path).built


def test_a_corrupted_byte_is_detected_by_read_cache_and_rebuilt_by_load_or_build(tmp_path: Path, builds: list[int]) -> None:
    bars = gbm_bars(300)
    res = load_or_build(bars, tmp_path)
    raw = bytearray(res.path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one flipped bit in the tensor data
    res.path.write_bytes(bytes(raw))
    with pytest.raises(CacheError, match=rf"{res.path.name}.*does not match"):
        read_cache(res.path)
    again = load_or_build(bars, tmp_path)
    assert again.built and len(builds) == 2 and _same(again.features, res.features)
    assert read_cache(again.path).features.shape == (300, 51)


def test_unreadable_metadata_is_treated_as_absent(tmp_path: Path, builds: list[int]) -> None:
    bars = gbm_bars(300)
    res = load_or_build(bars, tmp_path)
    res.path.with_suffix(".json").write_text("not json")
    assert load_or_build(bars, tmp_path).built and len(builds) == 2


def test_cache_is_read_without_pickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bars = gbm_bars(300)
    load_or_build(bars, tmp_path)

    def forbidden(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("pickle-based loading used")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr("pickle.load", forbidden)
    monkeypatch.setattr("pickle.loads", forbidden)
    assert not load_or_build(bars, tmp_path).built
