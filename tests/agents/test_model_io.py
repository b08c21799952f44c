"""Model files are untrusted input: metadata parsed by a strict schema, tensors checked against the
declared architecture and the device memory before anything is allocated, a sha256 content hash
over metadata and tensors, finite weights and a usable std; every failure is one ModelFileError
line naming the file and the rule (exit code 2 from `foxhunt backtest --model`, nothing written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from safetensors.torch import load_file, save_file

from foxhunt.agents import model_io
from foxhunt.agents.model_io import ModelFileError, content_sha256, load_model, save_model
from foxhunt.agents.networks import DuelingQNet
from foxhunt.market import NormStats
from tests.json_mutation import mutate

NAMES = ("f_a", "f_b", "f_c", "f_d")
ENV = {"cost_bps": 1.0, "action_mode": "exposure"}
MEDIANS = {"abs_return": 1e-3, "range": 2e-3, "volume": 100.0}


def _save(path: Path, seed: int = 0) -> tuple[DuelingQNet, NormStats]:
    torch.manual_seed(seed)
    net = DuelingQNet(len(NAMES) + 3, 5, (8, 6), 4)
    norm = NormStats(torch.randn(len(NAMES), dtype=torch.float64), torch.rand(len(NAMES), dtype=torch.float64) + 0.5)
    save_model(path, net, norm, feature_names=NAMES, spec_version="1", env=ENV,
               extra={"medians": MEDIANS, "data_sha256": "a" * 64, "run": "r",
                      "fold": {"fold": 0, "train_start": 0, "train_end": 10, "val_start": 12, "val_end": 20}})
    return net, norm


def _parts(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = json.loads(fh.metadata()["foxhunt"])
    return meta, load_file(str(path))


def _write(path: Path, meta: Any, tensors: dict[str, torch.Tensor], *, hashed: bool = True) -> Path:
    """A model file with this metadata and these tensors (and a valid content hash: an attacker's file)."""
    text = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    header = {"foxhunt": text}
    if hashed:
        header["foxhunt_sha256"] = content_sha256(text, tensors)
    save_file(tensors, str(path), metadata=header)
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ModelFileError) as exc:
        load_model(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"model file {path}")
    return msg[len(f"model file {path}"):]


def test_a_model_round_trips_bitwise_with_its_metadata_and_a_verified_hash(tmp_path):
    net, norm = _save(tmp_path / "m.safetensors")
    net2, norm2, meta = load_model(tmp_path / "m.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), net2.state_dict().values()))
    assert torch.equal(norm.mean, norm2.mean) and torch.equal(norm.std, norm2.std)
    assert meta.verified and meta.hidden == (8, 6) and meta.extra["medians"] == MEDIANS and meta.env == ENV


@pytest.mark.parametrize("edit, message", [
    (lambda m: ["not", "an", "object"], ": metadata must be a JSON object, got list"),
    (lambda m: {k: v for k, v in m.items() if k != "obs_dim"}, ": metadata obs_dim: Field required"),
    (lambda m: {**m, "hidden": [-1]}, ": metadata hidden.0: Input should be greater than or equal to 1 (got -1)"),
    (lambda m: {**m, "hidden": "abc"}, ": metadata hidden: Input should be a valid list (got 'abc')"),
    (lambda m: {**m, "hidden": [200000, 200000]}, ": metadata hidden.0: Input should be less than or equal to 65536 (got 200000)"),
    (lambda m: {**m, "obs_dim": 8.0}, ": metadata obs_dim: Input should be a valid integer (got 8.0)"),
    (lambda m: {**m, "obs_dim": 9}, ": metadata <top>: Value error, obs_dim = 9 must be len(feature_names) + 3 = 7"),
    (lambda m: {**m, "n_actions": 7}, ": metadata n_actions: Input should be 5 or 45 (got 7)"),
    (lambda m: {**m, "format": "foxhunt-model/9"}, ": format 'foxhunt-model/9', expected 'foxhunt-model/2'"),
    (lambda m: {**m, "env": {"cost_bps": -1.0}}, ": metadata env.cost_bps: Value error, cost_bps = -1.0 breaks the rule"),
    (lambda m: {**m, "env": {"cost_bps": 1.0}}, ": n_actions = 5 but env.action_mode = 'factored' has 45 actions"),
    (lambda m: {**m, "env": "x"}, ": metadata env: Input should be a valid dictionary (got 'x')"),
    (lambda m: {**m, "extra": {**m["extra"], "medians": {**MEDIANS, "range": -1.0}}},
     ": metadata extra.medians.range: Input should be greater than 0 (got -1.0)"),
    (lambda m: {**m, "extra": {**m["extra"], "medians": {**MEDIANS, "volume": "abc"}}},
     ": metadata extra.medians.volume: Input should be a valid number (got 'abc')"),
    (lambda m: {**m, "extra": {**m["extra"], "medians": {"abs_return": 1.0}}}, ": metadata extra.medians.range: Field required"),
    (lambda m: {**m, "extra": {**m["extra"], "fold": {"fold": 0, "train_start": 5, "train_end": 1, "val_start": 6, "val_end": 9}}},
     ": metadata extra.fold: Value error, needs train_start < train_end <= val_start < val_end"),
])
def test_bad_metadata_is_one_line_naming_the_key(tmp_path, edit, message):
    _save(tmp_path / "m.safetensors")
    meta, tensors = _parts(tmp_path / "m.safetensors")
    path = _write(tmp_path / "bad.safetensors", edit(meta), tensors)
    assert _refused(path).startswith(message)


def test_a_declared_architecture_unlike_the_tensors_is_refused_before_any_network_is_allocated(tmp_path, monkeypatch):
    _save(tmp_path / "m.safetensors")
    meta, tensors = _parts(tmp_path / "m.safetensors")
    path = _write(tmp_path / "big.safetensors", {**meta, "hidden": [60000, 60000]}, tensors)

    def no_network(*a: Any, **k: Any) -> None:
        raise AssertionError("a network was allocated")

    monkeypatch.setattr(model_io, "q_network", no_network)
    assert _refused(path) == (": tensor 'net.trunk.0.weight' is F32 [8, 7], the metadata's architecture needs F32 [60000, 7]")


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("norm.mean"), ": tensor 'norm.mean' is missing (metadata: hidden=[8, 6], head_hidden=4, n_actions=5, head=flat)"),
    (lambda t: t.update({"norm.mean": torch.zeros(3, dtype=torch.float64)}),
     ": tensor 'norm.mean' is F64 [3], the metadata's architecture needs F64 [4]"),
    (lambda t: t.update({"norm.std": t["norm.std"].float()}), ": tensor 'norm.std' is F32 [4], the metadata's architecture needs F64 [4]"),
    (lambda t: t.update({"extra": torch.zeros(1)}), ": tensor 'extra' is not part of the architecture"),
    (lambda t: t["net.trunk.0.weight"].view(-1).__setitem__(3, float("nan")), ": tensor 'net.trunk.0.weight' holds NaN or infinite values"),
    (lambda t: t["norm.mean"].__setitem__(0, float("inf")), ": tensor 'norm.mean' holds NaN or infinite values"),
    (lambda t: t["norm.std"].zero_(), ": norm.std must be >= 0 with at least one feature above 1e-08 (min 0, max 0)"),
    (lambda t: t["norm.std"].__setitem__(1, -0.5), ": norm.std must be >= 0 with at least one feature above 1e-08 (min -0.5,"),
])
def test_bad_tensors_are_refused_even_with_a_valid_hash(tmp_path, edit, message):
    _save(tmp_path / "m.safetensors")
    meta, tensors = _parts(tmp_path / "m.safetensors")
    edit(tensors)
    assert _refused(_write(tmp_path / "bad.safetensors", meta, tensors)).startswith(message)


def test_a_flipped_data_byte_or_edited_metadata_fails_the_content_hash(tmp_path):
    path = tmp_path / "m.safetensors"
    _save(path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10  # inside the last tensor's bytes
    path.write_bytes(bytes(data))
    assert _refused(path).startswith(" is corrupt: content sha256 ")
    _save(path)
    meta, tensors = _parts(path)
    text = json.dumps({**meta, "spec_version": "2"}, sort_keys=True, separators=(",", ":"))
    save_file(tensors, str(path), metadata={"foxhunt": text, "foxhunt_sha256": content_sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")), tensors)})
    assert _refused(path).startswith(" is corrupt: content sha256 ")
    save_file(tensors, str(path), metadata={"foxhunt": text})
    assert _refused(path) == ": no content hash (foxhunt_sha256) in its header"


def test_an_old_unhashed_model_file_loads_only_when_every_check_passes(tmp_path):
    _save(tmp_path / "m.safetensors")
    meta, tensors = _parts(tmp_path / "m.safetensors")
    old = _write(tmp_path / "old.safetensors", {**meta, "format": "foxhunt-model/1"}, tensors, hashed=False)
    _, _, info = load_model(old)
    assert not info.verified
    bad = _write(tmp_path / "oldbad.safetensors", {**meta, "format": "foxhunt-model/1", "hidden": [-1]}, tensors, hashed=False)
    assert _refused(bad).endswith("(an old model file without a content hash: re-export it by re-running foxhunt train)")


def test_a_network_larger_than_the_free_memory_is_refused_before_reading_its_weights(tmp_path, monkeypatch):
    _save(tmp_path / "m.safetensors")
    monkeypatch.setattr("foxhunt.budget.available_bytes", lambda device: 1000)
    assert _refused(tmp_path / "m.safetensors").startswith(": its network needs ~0.00 GiB, more than the 0.00 GiB available on cpu")


def test_not_a_model_file_is_one_line(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    assert _refused(tmp_path / "x.safetensors") == " is not a foxhunt model (no 'foxhunt' metadata in its header)"
    (tmp_path / "y.safetensors").write_bytes(b"garbage")
    assert _refused(tmp_path / "y.safetensors").startswith(" is not a foxhunt model (")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["list", "flip"])
def test_backtest_cli_refuses_a_bad_model_file_with_exit_2_and_writes_nothing(tmp_path, damage):
    path = tmp_path / "m.safetensors"
    _save(path)
    if damage == "list":
        _, tensors = _parts(path)
        _write(path, [1, 2], tensors)
    else:
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
    out = tmp_path / "bt"
    cmd = [sys.executable, "-c", "import sys; from foxhunt.cli import main; sys.exit(main())", "backtest", "--model", str(path),
           "--out", str(out), "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr + res.stdout
    want = {"list": "metadata must be a JSON object, got list", "flip": "is corrupt: content sha256"}[damage]
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and want in res.stderr and str(path) in res.stderr
    assert not out.exists() and not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------- property tests
@pytest.fixture(scope="module")
def model_parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, torch.Tensor], Path]:
    d = tmp_path_factory.mktemp("model")
    _save(d / "m.safetensors")
    meta, tensors = _parts(d / "m.safetensors")
    return meta, tensors, d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_model_metadata_loads_and_validates_or_is_a_model_file_error(model_parts, data):
    meta, tensors, d = model_parts
    bad = mutate(meta, data)
    path = _write(d / "mut.safetensors", bad, tensors, hashed=data.draw(st.booleans()))
    try:
        net, norm, info = load_model(path)
    except ModelFileError as exc:
        assert "\n" not in str(exc)
        return
    # Loaded: the network is the one the (valid) metadata describes, every value finite.
    assert info.obs_dim == len(info.feature_names) + 3 and net.n_actions == info.n_actions in (5, 45)
    assert all(bool(torch.isfinite(p).all()) for p in net.parameters()) and bool((norm.std >= 0).all())
    assert all(1 <= h <= 65_536 for h in info.hidden)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_model_file_with_any_flipped_byte_loads_identically_or_is_refused(model_parts, data):
    _, _, d = model_parts
    raw = bytearray((d / "m.safetensors").read_bytes())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    (d / "flip.safetensors").write_bytes(bytes(raw))
    try:
        net, norm, _ = load_model(d / "flip.safetensors")
    except ModelFileError:
        return
    ref, ref_norm, _ = load_model(d / "m.safetensors")  # only a byte that changes nothing may pass
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), ref.state_dict().values()))
    assert torch.equal(norm.std, ref_norm.std) and torch.equal(norm.mean, ref_norm.mean)
