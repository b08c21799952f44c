"""Content-hashed feature cache: one safetensors file + one JSON metadata file per (bars, spec).

Layout in ``cache_dir``::

    features-<key>.safetensors   features [T,F] f32, targets [T,4] f32, ohlc [T,4] f64,
                                 volume [T] f64, timestamps [T] i64
    features-<key>.json          names, spec version, source sha256, warm-up, has_volume, n_bars,
                                 created time, sha256 of the .safetensors file  (the commit marker)

``key`` = sha256(bars content hash, spec version)[:24]: new bars or a bumped
``FEATURE_SPEC_VERSION`` give a new key (rebuild); the same bars and spec always reuse the entry.

Writes are atomic: each file goes to a unique temporary name in the same directory and is renamed;
the safetensors file first, the JSON last. An entry whose JSON is missing, unreadable or whose
recorded file hash does not match is treated as absent and rebuilt. Nothing is pickled; tensors are
loaded only with ``safetensors.torch.load_file``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from foxhunt.data.bars import BarDataError, Bars
from foxhunt.errors import CacheError
from foxhunt.features import spec as _spec
from foxhunt.features.featureset import TARGET_HORIZONS, FeatureSet

CACHE_FORMAT = "foxhunt-features/1"
_TENSORS = ("features", "targets", "ohlc", "volume", "timestamps")


@dataclass(frozen=True)
class CacheResult:
    """What ``load_or_build`` returns.

    features: the FeatureSet (CPU tensors). path: the .safetensors file of the entry.
    built: True when the features were computed now, False when the cache entry was reused.
    seconds: wall time of the whole call (hashing + build/write or verify/load).
    """

    features: FeatureSet
    path: Path
    built: bool
    seconds: float


def cache_key(source_sha256: str, spec_version: str) -> str:
    """24 hex digits identifying (bar content, feature spec version)."""
    return hashlib.sha256(f"{source_sha256}\n{spec_version}".encode()).hexdigest()[:24]


def entry_paths(cache_dir: str | os.PathLike[str], key: str) -> tuple[Path, Path]:
    """(safetensors path, metadata JSON path) of the entry ``key``."""
    d = Path(cache_dir)
    return d / f"features-{key}.safetensors", d / f"features-{key}.json"


def metadata_path(path: str | os.PathLike[str]) -> Path:
    """The JSON metadata file beside a cache .safetensors file."""
    return Path(path).with_suffix(".json")


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """sha256 of a file's bytes, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def require_formed_rows(bars: Bars) -> None:
    """Raise BarDataError ('too-few-bars') unless the bars give at least one formed feature row:
    rows before the spec's warm-up are zeros, so fewer than warm-up + 1 bars give no features."""
    need = _spec.WARMUP + 1
    if len(bars) < need:
        raise BarDataError(
            "too-few-bars", f"{len(bars)} bars; the features need a {_spec.WARMUP}-bar warm-up, so at least {need} bars",
            path=bars.source,
        )


def load_or_build(bars: Bars, cache_dir: str | os.PathLike[str], device: torch.device | str | None = None) -> CacheResult:
    """The features of ``bars``: from the cache when a valid entry exists, else built and cached.

    device: where to build (the cache itself is device-independent). A present but invalid entry
    (missing JSON, hash mismatch, unreadable file, metadata that does not match the bars) is
    rebuilt and overwritten.
    """
    t0 = time.perf_counter()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    source = bars.content_hash()
    version = _spec.FEATURE_SPEC_VERSION
    path, meta_path = entry_paths(cache_dir, cache_key(source, version))

    if path.exists() and meta_path.exists():
        try:
            fs = read_cache(path)
            if fs.source_sha256 == source and fs.spec_version == version and len(fs) == len(bars):
                return CacheResult(fs, path, built=False, seconds=time.perf_counter() - t0)
        except CacheError:
            pass  # torn or tampered: rebuild below

    fs = _spec.build_features(bars, device, source_sha256=source)
    write_cache(fs, path, extra={"source": bars.source, "device": str(device or "cpu")})
    return CacheResult(fs, path, built=True, seconds=time.perf_counter() - t0)


def write_cache(fs: FeatureSet, path: str | os.PathLike[str], extra: dict[str, object] | None = None) -> Path:
    """Write ``fs`` to ``path`` (.safetensors) and its metadata JSON, atomically. Returns the JSON path.

    Order: remove any old JSON (the entry stops existing), write the tensors to a temporary file and
    rename it, hash it, then write the JSON to a temporary file and rename it (the commit). On any
    failure every file written here is removed, so no entry (complete or partial) is left behind.
    """
    path = Path(path)
    meta_path = metadata_path(path)
    tag = uuid.uuid4().hex[:12]
    tmp = path.with_name(f".{path.name}.{tag}.tmp")
    meta_tmp = meta_path.with_name(f".{meta_path.name}.{tag}.tmp")
    tensors = {name: getattr(fs, name).contiguous() for name in _TENSORS}
    header = {"format": CACHE_FORMAT, "spec_version": fs.spec_version, "source_sha256": fs.source_sha256}
    renamed = False
    try:
        meta_path.unlink(missing_ok=True)
        save_file(tensors, tmp, metadata=header)
        _fsync(tmp)
        os.replace(tmp, path)
        renamed = True
        meta = {
            "format": CACHE_FORMAT,
            "file": path.name,
            "file_sha256": file_sha256(path),
            "names": list(fs.names),
            "spec_version": fs.spec_version,
            "source_sha256": fs.source_sha256,
            "warmup": int(fs.warmup),
            "has_volume": bool(fs.has_volume),
            "n_bars": len(fs),
            "n_features": fs.n_features,
            "target_horizons": list(TARGET_HORIZONS),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **(extra or {}),
        }
        _write_json(meta_tmp, meta)
        os.replace(meta_tmp, meta_path)
    except BaseException:
        for p in (tmp, meta_tmp, *((path,) if renamed else ())):
            p.unlink(missing_ok=True)
        raise
    return meta_path


def _write_json(path: Path, meta: dict[str, object]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def read_metadata(path: str | os.PathLike[str]) -> dict[str, object]:
    """The metadata JSON of a cache file; CacheError naming the file if missing or unreadable."""
    meta_path = metadata_path(path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CacheError(f"feature cache {path}: metadata file {meta_path.name} is missing (entry incomplete)") from None
    except (OSError, ValueError) as e:
        raise CacheError(f"feature cache {path}: metadata file {meta_path.name} is unreadable: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        raise CacheError(f"feature cache {path}: metadata file {meta_path.name} is not a {CACHE_FORMAT} record")
    return meta


def read_cache(path: str | os.PathLike[str]) -> FeatureSet:
    """Load a cache entry after verifying the file's sha256 against its metadata.

    Raises CacheError naming the file when the file or its JSON is missing, the hash does not
    match, or the tensors do not have the recorded layout.
    """
    path = Path(path)
    meta = read_metadata(path)
    if not path.exists():
        raise CacheError(f"feature cache {path}: file is missing")
    actual = file_sha256(path)
    if actual != meta.get("file_sha256"):
        raise CacheError(
            f"feature cache {path}: sha256 {actual[:16]}… does not match the recorded {str(meta.get('file_sha256'))[:16]}… "
            "(file corrupted or replaced)"
        )
    try:
        t = load_file(path)
        names = tuple(str(n) for n in meta["names"])  # type: ignore[union-attr]
        fs = FeatureSet(
            features=t["features"], targets=t["targets"], ohlc=t["ohlc"], volume=t["volume"], timestamps=t["timestamps"],
            names=names, warmup=int(meta["warmup"]), has_volume=bool(meta["has_volume"]),  # type: ignore[arg-type]
            spec_version=str(meta["spec_version"]), source_sha256=str(meta["source_sha256"]),
        )
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise CacheError(f"feature cache {path}: unreadable entry: {e!r}") from None
    _check_layout(path, fs, int(meta.get("n_bars", -1)))  # type: ignore[arg-type]
    return fs


def _check_layout(path: Path, fs: FeatureSet, n_bars: int) -> None:
    T, F = n_bars, len(fs.names)
    want = {
        "features": ((T, F), torch.float32),
        "targets": ((T, len(TARGET_HORIZONS)), torch.float32),
        "ohlc": ((T, 4), torch.float64),
        "volume": ((T,), torch.float64),
        "timestamps": ((T,), torch.int64),
    }
    for name, (shape, dtype) in want.items():
        x = getattr(fs, name)
        if tuple(x.shape) != shape or x.dtype != dtype:
            raise CacheError(f"feature cache {path}: tensor '{name}' is {tuple(x.shape)} {x.dtype}, expected {shape} {dtype}")
