"""`foxhunt train --resume` reads a run directory as untrusted input: every damaged or out-of-range
value of a checkpoint manifest, folds.json, config.toml or saved tensor is one line naming the file,
key and rule, exit code 2, with nothing written: never a traceback, never silently accepted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from typer.testing import CliRunner

from foxhunt.cli import app
from foxhunt.train import checkpoint as ckpt
from tests.json_mutation import mutate
from tests.train.conftest import CLI, snapshot, tiny_config

MID = "f001-e00001-epoch"  # the checkpoint every test resumes from (inside fold 1; train.epochs = 2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run whose fold-end checkpoint is removed: --resume continues from MID."""
    root = tmp_path_factory.mktemp("manifest")
    cfg = tiny_config(root, epochs=2, every=1)
    res = CliRunner().invoke(app, ["train", "--config", str(cfg), "--name", "r"])
    assert res.exit_code == 0, res.output
    run = root / "runs" / "r"
    shutil.rmtree(run / "checkpoints" / "f001-e00002-end")
    assert ckpt.latest(run / "checkpoints").name == MID
    return run


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "r"
    shutil.copytree(trained, dst)
    return dst


def _edit_manifest(run: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    path = run / "checkpoints" / MID / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    return path


def _rewrite_tensors(run: Path, fname: str, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """Change a saved tensor file and record its new sha256, length and tensor count (an attacker's edit)."""
    path = run / "checkpoints" / MID / fname
    tensors = st_load(path.read_bytes())
    edit(tensors)
    data = st_save(tensors)
    path.write_bytes(data)
    import hashlib

    _edit_manifest(run, lambda m: m["files"][fname].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                                                                tensors=len(tensors)))


def _resume_refused(run: Path) -> str:
    before = snapshot(run)
    res = CliRunner().invoke(app, ["train", "--resume", str(run)])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    # One error line, last; before it at most the "resuming … from checkpoint …" and "accel: …" notices.
    assert lines[-1].startswith("error: ") and all(ln.startswith(("resuming ", "accel: ")) for ln in lines[:-1]), res.output
    assert len(lines) <= 3, res.output
    assert "Traceback" not in res.output
    assert snapshot(run) == before  # nothing written, nothing removed
    return lines[-1][len("error: "):]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(m: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = m
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


_DELETE = object()
_M = "checkpoint manifest {run}/checkpoints/" + MID + "/manifest.json: "
_C = "checkpoint {run}/checkpoints/" + MID + ": "
_F = "checkpoint file {run}/checkpoints/" + MID + "/"


@pytest.mark.parametrize("key, value, message", [
    ("files/trainer.safetensors", "x", _M + "files.trainer.safetensors: Input should be a valid dictionary or instance of FileEntry (got 'x')"),
    ("files/collector.safetensors", _DELETE, _M + "<top>: Value error, files must list exactly one <component>.safetensors per component (not 'collector.safetensors')"),
    ("files/rng.safetensors", {"sha256": "0" * 64, "bytes": 1, "tensors": 1},
     _M + "<top>: Value error, files must list exactly one <component>.safetensors per component (not 'rng.safetensors')"),
    ("files/replay.safetensors/bytes", "150656", _M + "files.replay.safetensors.bytes: Input should be a valid integer (got '150656')"),
    ("files/env.safetensors/sha256", "abc", _M + "files.env.safetensors.sha256: String should match pattern"),
    ("files/env.safetensors/tensors", 0, _M + "files.env.safetensors.tensors: Input should be greater than or equal to 1 (got 0)"),
    ("files/env.safetensors/tensors", 99, _F + "env.safetensors holds "),
    ("files/env.safetensors/extra", 1, _M + "files.env.safetensors.extra: unknown key"),
    ("components", _DELETE, _M + "components: Field required"),
    ("components", "learner", _M + "components: Input should be a valid list (got 'learner')"),
    ("components", [], _M + "components: List should have at least 1 item after validation"),
    ("components", ["collector", "env", "env", "monitor", "replay", "trainer"], _M + "components: Value error, names repeat"),
    ("components", ["collector", "env", "learner", "monitor", "replay"], _M + "<top>: Value error, files must list exactly one <component>.safetensors per component (not 'trainer.safetensors')"),
    ("components", ["../x", "env", "learner", "monitor", "replay", "trainer"], _M + "components.0: String should match pattern"),
    ("host", {"replay_size": 10**9}, _M + "host: unknown key"),  # a format-1 key is not read any more
    ("format", 3, "checkpoint manifest {run}/checkpoints/" + MID + "/manifest.json: unknown format 3 (expected 2)"),
    ("format", 1, "checkpoint {run}/checkpoints/" + MID + "/manifest.json: format 1 was written by an older foxhunt"),
    ("fold_done", _DELETE, _M + "fold_done: Field required"),
    ("fold_done", 1, _M + "fold_done: Input should be a valid boolean (got 1)"),
    ("fold", 1.5, _M + "fold: Input should be a valid integer (got 1.5)"),
    ("run/metrics_bytes", -1, _M + "run.metrics_bytes: Input should be greater than or equal to 0 (got -1)"),
    ("run/global_epoch", 1e9, _M + "run.global_epoch: Input should be a valid integer (got 1000000000.0)"),
    ("run/global_epoch", _DELETE, _C + "run.global_epoch is missing"),
    ("run/global_epoch", 7, _C + "run.global_epoch = 7 ≠ fold × train.epochs + epoch = 3"),
    ("epoch", -5, _M + "epoch: Input should be greater than or equal to 0 (got -5)"),
    ("epoch", 1e6, _M + "epoch: Input should be a valid integer (got 1000000.0)"),
    ("epoch", 2, _C + "epoch = 2 inside a fold must be in 1…1 (train.epochs = 2)"),
    ("fold", 7, _C + "fold = 7 is not one of this run's 2 folds (0…1)"),
    ("run/metrics_bytes", 10**9, _C + "run.metrics_bytes = 1000000000 exceeds the"),
    ("config_sha256", "0" * 64, _C + "written with another configuration"),
    ("surprise", 1, _M + "surprise: unknown key"),
])
def test_a_bad_manifest_value_is_one_line_and_writes_nothing(run, key, value, message):
    _edit_manifest(run, _set(key, value))
    assert _resume_refused(run).startswith(message.format(run=run))


def _put(key: str, value: torch.Tensor) -> Callable[[dict[str, torch.Tensor]], None]:
    return lambda t: t.update({key: value})


# Format 1 kept the host counters (replay pos / size, trainer epoch / rounds) in the manifest;
# format 2 keeps them in the component files as 0-d int64 tensors: each repro is an attacker's
# edit of that file with the manifest's sha256 / bytes / tensors updated, so only the value check can catch it.
@pytest.mark.parametrize("fname, edit, message", [
    ("replay.safetensors", _put("storage.size", torch.tensor(1e9, dtype=torch.float64)),
     _F + "replay.safetensors: tensor 'storage.size' is F64 [], this trainer has I64 []"),
    ("replay.safetensors", _put("storage.size", torch.tensor(10**9)),
     _C + "replay.safetensors storage.pos = {pos}, storage.size = 1000000000 do not fit a buffer of 2048 slots"),
    ("replay.safetensors", _put("storage.size", torch.tensor(2049)),
     _C + "replay.safetensors storage.pos = {pos}, storage.size = 2049 do not fit a buffer of 2048 slots"),
    ("replay.safetensors", _put("storage.pos", torch.tensor(-7)),
     _F + "replay.safetensors: component 'replay': ReplayStorage: host counter 'pos' = -7 is negative (a count is >= 0)"),
    ("replay.safetensors", _put("storage.size", torch.tensor(-1)),
     _F + "replay.safetensors: component 'replay': ReplayStorage: host counter 'size' = -1 is negative (a count is >= 0)"),
    ("replay.safetensors", _put("storage.pos", torch.tensor(3)),
     _C + "replay.safetensors storage.pos = 3, storage.size = {size} do not fit a buffer of 2048 slots"),
    ("replay.safetensors", _put("storage.size_t", torch.tensor(5)),
     _C + "replay.safetensors storage.size_t = 5 differs from storage.size = {size}"),
    ("replay.safetensors", _put("storage.pos", torch.tensor([0, 0])),
     _F + "replay.safetensors: tensor 'storage.pos' is I64 [2], this trainer has I64 []"),
    ("replay.safetensors", lambda t: t.pop("storage.size"),
     _F + "replay.safetensors: tensor set does not match this trainer (e.g. 'storage.size')"),
    ("replay.safetensors", _put("storage.surprise", torch.tensor(1)),
     _F + "replay.safetensors: tensor set does not match this trainer (e.g. 'storage.surprise')"),
    ("trainer.safetensors", _put("epoch", torch.tensor(5)),
     _C + "trainer.safetensors epoch = 5 differs from the manifest's epoch = 1"),
    ("trainer.safetensors", _put("epoch", torch.tensor(-5)),
     _F + "trainer.safetensors: component 'trainer': DQNTrainer: host counter 'epoch' = -5 is negative (a count is >= 0)"),
    ("trainer.safetensors", _put("epoch", torch.tensor(1e6, dtype=torch.float64)),
     _F + "trainer.safetensors: tensor 'epoch' is F64 [], this trainer has I64 []"),
    ("trainer.safetensors", _put("rounds", torch.tensor(10**6)),
     _C + "trainer.safetensors rounds = 1000000 ≠ epoch × rounds_per_epoch = 1 × "),
    ("trainer.safetensors", _put("rounds", torch.tensor(-1)),
     _F + "trainer.safetensors: component 'trainer': DQNTrainer: host counter 'rounds' = -1 is negative (a count is >= 0)"),
])
def test_a_bad_host_counter_in_a_component_file_is_one_line_and_writes_nothing(run, fname, edit, message):
    saved = st_load((run / "checkpoints" / MID / "replay.safetensors").read_bytes())
    pos, size = int(saved["storage.pos"]), int(saved["storage.size"])
    assert 3 != pos == size < 2048  # the buffer is not full yet: pos = size
    _rewrite_tensors(run, fname, edit)
    assert _resume_refused(run).startswith(message.format(run=run, pos=pos, size=size))


def test_a_manifest_that_is_a_list_or_not_json_is_one_line(run):
    path = run / "checkpoints" / MID / "manifest.json"
    path.write_text("[1, 2]")
    assert _resume_refused(run) == f"checkpoint manifest {path}: expected a JSON object, got list"
    path.write_bytes(b"\xff{")
    assert _resume_refused(run).startswith(f"checkpoint manifest {path}: not JSON (")


@pytest.mark.parametrize("fname, key", [("env.safetensors", "start_generator"), ("collector.safetensors", "generator"),
                                         ("replay.safetensors", "sampler.generator")])
def test_a_generator_state_of_the_wrong_dtype_is_refused_before_anything_is_restored(run, fname, key):
    _rewrite_tensors(run, fname, lambda t: t.update({key: t[key].float()}))
    text = _resume_refused(run)
    assert re.fullmatch(rf"checkpoint file {run}/checkpoints/{MID}/{fname}: tensor '{key}' is F32 "
                        r"\[\d+\], this trainer has U8 \[\d+\]", text), text


def test_a_saved_tensor_of_another_shape_is_refused_by_its_header(run):
    _rewrite_tensors(run, "replay.safetensors", lambda t: t.update({"storage.bar": t["storage.bar"][:-1].clone()}))
    assert _resume_refused(run) == (f"checkpoint file {run}/checkpoints/{MID}/replay.safetensors: tensor 'storage.bar' "
                                    f"is I64 [2047], this trainer has I64 [2048]")


@pytest.mark.parametrize("field, value", [("storage.bar", 10**9), ("storage.next_bar", -3), ("storage.action", 5)])
def test_out_of_range_replay_indices_are_refused(run, field, value):
    def edit(t: dict[str, torch.Tensor]) -> None:
        t[field][0] = value
    _rewrite_tensors(run, "replay.safetensors", edit)
    text = _resume_refused(run)
    assert re.fullmatch(rf"checkpoint {run}/checkpoints/{MID}: replay.safetensors {field} holds {value}, outside 0…\d+", text), text


def test_nan_weights_in_a_checkpoint_are_refused(run):
    def edit(t: dict[str, torch.Tensor]) -> None:
        k = next(k for k, v in t.items() if v.is_floating_point() and v.numel() > 1)
        t[k].view(-1)[0] = float("nan")
    _rewrite_tensors(run, "learner.safetensors", edit)
    assert re.fullmatch(rf"checkpoint {run}/checkpoints/{MID}: learner.safetensors tensor '.+' holds NaN or infinite values",
                        _resume_refused(run))


def test_the_monitors_inf_sentinels_resume_but_a_nan_in_it_is_refused(run):
    """The epoch monitor's min / max fields hold ±inf until a value arrives (an epoch without a train step
    leaves the Q monitor's there): a checkpoint with them is valid; a NaN is not."""
    def edit(t: dict[str, torch.Tensor]) -> None:
        t["buf"][0] = float("nan")
    _rewrite_tensors(run, "monitor.safetensors", edit)
    assert _resume_refused(run) == f"checkpoint {run}/checkpoints/{MID}: monitor.safetensors tensor 'buf' holds NaN or infinite values"


@pytest.mark.parametrize("content, message", [
    (b"not json", "not JSON ("),
    (b"{}", "expected a non-empty JSON list of folds"),
    (b'[{"fold": 0, "train_start": 1}]', "row 0: train_end: Field required"),
    (b'[{"fold": 0, "train_start": 1, "train_end": 2, "val_start": 3, "val_end": "9"}]', "row 0: val_end: Input should be a valid integer"),
])
def test_a_bad_folds_json_is_one_line(run, content, message):
    (run / "folds.json").write_bytes(content)
    assert _resume_refused(run).startswith(f"--resume: folds file {run}/folds.json: {message}")


def test_a_binary_config_toml_is_one_line(run):
    (run / "config.toml").write_bytes(b"\x00\x01\xfe\xff" * 8)
    assert _resume_refused(run) == f"--resume {run}: {run}/config.toml: not a TOML text file (byte 2 is not UTF-8)"


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["epoch", "folds", "replay"])
def test_the_cli_process_exits_2_with_one_line(run, damage):
    """The same refusals from a fresh `foxhunt` process: exit code 2, one line on stderr, no traceback."""
    if damage == "epoch":
        _edit_manifest(run, _set("epoch", -5))
    elif damage == "folds":
        (run / "folds.json").write_text("[")
    else:
        _rewrite_tensors(run, "replay.safetensors", lambda t: t["storage.bar"].fill_(-1))
    before = snapshot(run)
    res = subprocess.run(CLI + ["--resume", str(run)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stdout, res.stderr
    assert snapshot(run) == before


# --------------------------------------------------------------------------- property test
@pytest.fixture(scope="module")
def checkpoint_copy(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Any]:
    from foxhunt.config import load_config

    d = tmp_path_factory.mktemp("prop") / MID
    shutil.copytree(trained / "checkpoints" / MID, d)
    return d, json.loads((d / "manifest.json").read_text()), load_config(trained / "config.toml")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_manifest_validates_or_is_a_checkpoint_error(checkpoint_copy, trained, data):
    from foxhunt.train.manifest import check_manifest

    d, manifest, config = checkpoint_copy
    (d / "manifest.json").write_text(json.dumps(mutate(manifest, data)))
    try:
        m = ckpt.read_manifest(d)
        check_manifest(d, m, config, 2, trained / "metrics.jsonl")
    except ckpt.CheckpointError as exc:
        assert "\n" not in str(exc)
        return
    # Accepted: every counter is an int in range for this run (what decides how it continues).
    assert type(m["fold"]) is int and 0 <= m["fold"] < 2 and type(m["fold_done"]) is bool
    assert 1 <= m["epoch"] <= config.train.epochs and (m["epoch"] == config.train.epochs) == m["fold_done"]
    assert m["run"]["global_epoch"] == m["fold"] * config.train.epochs + m["epoch"]
    assert 0 <= m["run"]["metrics_bytes"] <= (trained / "metrics.jsonl").stat().st_size
    # The component files are the saved ones, byte for byte (their counters are checked after loading).
    assert m["components"] == manifest["components"] and m["files"] == manifest["files"]


@pytest.mark.slow
def test_a_checkpoint_recording_the_pre_canonical_config_hash_still_resumes(run):
    """Checkpoints written before the canonical hash recorded sha256(config.toml's bytes)."""
    import hashlib

    legacy = hashlib.sha256((run / "config.toml").read_bytes()).hexdigest()
    _edit_manifest(run, _set("config_sha256", legacy))
    res = CliRunner().invoke(app, ["train", "--resume", str(run)])
    assert res.exit_code == 0, res.output
    assert ckpt.latest(run / "checkpoints").name == "f001-e00002-end"
