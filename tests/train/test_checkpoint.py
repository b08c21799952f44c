"""Checkpoints: safetensors + manifest, committed by rename, verified on load, resumed bitwise."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from foxhunt.agents.dqn.config import DQNConfig
from foxhunt.agents.dqn.trainer import DQNTrainer
from foxhunt.env import EnvParams
from foxhunt.errors import CacheError
from foxhunt.folds import FoldRange
from foxhunt.market import MarketData
from foxhunt.train import checkpoint as ckpt
from tests.helpers import random_feature_set

FOLDS = [FoldRange(0, 0, 600, 620, 800), FoldRange(1, 0, 800, 820, 1000)]


def _trainer(sampler: str = "proportional", curiosity: bool = False, seed: int = 3) -> DQNTrainer:
    market = MarketData(random_feature_set(1_000, 6, seed=1), "cpu")
    market.set_fold(FOLDS[0])
    cfg = DQNConfig(n_envs=8, rollout_len=4, rounds_per_epoch=3, train_steps_per_round=2, batch_size=16,
                    hidden=(16,), head_hidden=8, buffer_capacity=256, warmup_transitions=32, sampler=sampler,
                    curiosity=curiosity, curiosity_every=1, curiosity_batch=16, rank_refresh=2)
    env = EnvParams(episode_length=32, action_mode="exposure", reward_scale=100.0)
    tr = DQNTrainer(market, env, cfg, seed=seed)
    tr.reset_for_fold(FOLDS[0])
    return tr


def _save(tr: DQNTrainer, d: Path, epoch: int, done: bool = False) -> Path:
    return ckpt.save(d, tr, fold=0, epoch=epoch, fold_done=done, config_hash="c" * 64, data_hash="d" * 64,
                     extra={"metrics_bytes": 0})


def _state(tr: DQNTrainer) -> dict[str, torch.Tensor]:
    return {f"{c}.{k}": v.clone() for c, group in tr.state_dict().items() for k, v in group.items()}


@pytest.mark.parametrize("sampler, curiosity", [("proportional", False), ("rank", True), ("uniform", False)])
def test_restored_trainer_continues_bitwise_like_the_uninterrupted_one(tmp_path, sampler, curiosity):
    a = _trainer(sampler, curiosity)
    for _ in range(2):
        a.train_epoch()
    path = _save(a, tmp_path, a.epoch)
    b = _trainer(sampler, curiosity)  # fresh, as a new process would build it
    b.reset_for_fold(FOLDS[0])
    ckpt.restore(path, b, ckpt.read_manifest(path))
    assert (b.epoch, b.rounds, b.replay.storage.pos, b.replay.storage.size) == (a.epoch, a.rounds, a.replay.storage.pos, a.replay.storage.size)
    sa, sb = a.train_epoch(), b.train_epoch()
    assert sa.values == sb.values
    for k, v in _state(a).items():
        assert torch.equal(v, _state(b)[k]), k


def test_checkpoint_holds_every_component_state_dict_and_nothing_else(tmp_path):
    tr = _trainer("rank", curiosity=True)
    tr.train_epoch()
    path = _save(tr, tmp_path, 1)
    m = ckpt.read_manifest(path)
    comps = ["collector", "curiosity", "env", "learner", "monitor", "replay", "trainer"]
    assert m["components"] == comps and set(m["files"]) == {f"{c}.safetensors" for c in comps}
    assert {"config_sha256", "data_sha256", "versions", "fold", "epoch", "fold_done"} <= set(m)
    from safetensors.torch import load_file

    live = tr.state_dict()
    for c in comps:
        saved = load_file(path / f"{c}.safetensors")
        assert set(saved) == set(live[c]), c
        for k, v in live[c].items():
            assert torch.equal(saved[k], v.cpu()), (c, k)
    assert {"generator", "n_updates", "priorities", "order"} <= {k.split(".", 1)[1] for k in live["replay"]}
    assert {"weights", "adam_m", "adam_v", "adam_step", "generator"} == set(live["curiosity"])
    assert int(load_file(path / "trainer.safetensors")["epoch"]) == 1


def test_a_checkpoint_of_the_old_format_is_refused_with_a_clear_message(tmp_path):
    """Checkpoints written before components saved their own state (format 1: trainer / replay / rng
    files) cannot be resumed; the message says so, for the run and for --resume."""
    tr = _trainer()
    path = _save(tr, tmp_path, 1)
    m = json.loads((path / ckpt.MANIFEST).read_text())
    old = {"format": 1, "files": {}, "host": {"trainer_epoch": 1}, "generators": ["collector"]}
    (path / ckpt.MANIFEST).write_text(json.dumps({**m, **old}))
    with pytest.raises(CacheError, match="format 1 was written by an older foxhunt .*cannot resume it: start a new run"):
        ckpt.read_manifest(path)


def test_a_state_dict_of_another_shape_is_refused_naming_the_component(tmp_path):
    a, b = _trainer("proportional"), _trainer("uniform")
    path = _save(a, tmp_path, 1)
    with pytest.raises(CacheError, match="replay.safetensors: tensor set does not match this trainer \\(e.g. 'sampler.max_priority'\\)"):
        ckpt.restore(path, b, ckpt.read_manifest(path))
    state = a.state_dict()
    state["learner"] = {**state["learner"], "online": torch.zeros(3)}
    with pytest.raises(ValueError, match="component 'learner': QLearner: tensor 'online' is torch.float32 \\[3\\]"):
        _trainer("proportional").load_state_dict(state)


def test_a_corrupt_file_is_named_in_the_error(tmp_path):
    tr = _trainer()
    path = _save(tr, tmp_path, 1)
    target = path / "replay.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="replay.safetensors"):
        ckpt.read_manifest(path)


def test_a_checkpoint_without_manifest_is_torn_and_never_listed_as_committed(tmp_path):
    tr = _trainer()
    path = _save(tr, tmp_path, 1)
    (path / ckpt.MANIFEST).unlink()
    with pytest.raises(CacheError, match="manifest.json is missing"):
        ckpt.read_manifest(path)
    (tmp_path / ".tmp-f000-e00002-epoch-123").mkdir()
    assert [p.name for p in ckpt.committed(tmp_path)] == [path.name]


def test_leftover_temporaries_are_removed_at_start(tmp_path):
    (tmp_path / ".tmp-f000-e00001-epoch-9").mkdir()
    (tmp_path / ".trash-f000-e00000-epoch-9").mkdir()
    assert sorted(ckpt.clean_temporaries(tmp_path)) == [".tmp-f000-e00001-epoch-9", ".trash-f000-e00000-epoch-9"]
    assert list(tmp_path.iterdir()) == []


def test_prune_keeps_the_newest_and_a_fold_end_sorts_after_its_last_epoch(tmp_path):
    tr = _trainer()
    for e in (1, 2, 3):
        _save(tr, tmp_path, e)
    _save(tr, tmp_path, 3, done=True)
    assert ckpt.latest(tmp_path).name == "f000-e00003-end"
    ckpt.prune(tmp_path, 2)
    assert [p.name for p in ckpt.committed(tmp_path)] == ["f000-e00003-epoch", "f000-e00003-end"]


def test_a_checkpoint_of_another_config_or_data_is_refused(tmp_path):
    tr = _trainer()
    path = _save(tr, tmp_path, 1)
    m = ckpt.read_manifest(path)
    with pytest.raises(CacheError, match="another configuration"):
        ckpt.check_identity(path, m, "x" * 64, "d" * 64)
    with pytest.raises(CacheError, match="other data"):
        ckpt.check_identity(path, m, "c" * 64, "x" * 64)


def test_a_trainer_of_another_shape_is_refused_naming_file_and_tensor(tmp_path):
    path = _save(_trainer(), tmp_path, 1)
    other = _trainer()
    other.replay.storage.reward = torch.zeros(128)  # a different capacity
    with pytest.raises(CacheError, match=r"replay.safetensors: tensor 'storage.reward' is F32 \[256\], this trainer has F32 \[128\]"):
        ckpt.restore(path, other, ckpt.read_manifest(path))


def test_manifest_is_plain_json_and_nothing_is_pickled(tmp_path):
    path = _save(_trainer(), tmp_path, 1)
    json.loads((path / ckpt.MANIFEST).read_text())
    src_dir = Path(ckpt.__file__).parent
    for f in src_dir.glob("*.py"):
        tree = ast.parse(f.read_text())
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        imports = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        assert "pickle" not in imports and not ({"load"} & names and "torch.load" in f.read_text()), f
