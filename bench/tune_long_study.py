"""The study side of bench/bench_tune_long.py: one Optuna study in a directory, advanced in chunks.

A chunk is one process (``bench_tune_long study``) that may run on a machine the previous chunk
never saw: everything the study needs is in its directory (``--storage``, default ``.tune_long/``):

    journal.log        Optuna's journal file storage (text; the study, its trials, its user attrs)
    config.toml        the resolved trial configuration (rewritten by every chunk, with this
                       machine's paths; workers read it)
    logs/chunk<k>-w<i>.log / .out   each worker's stderr and its final report (JSON)
    .ask.lock, .chunk.lock          file locks (the ask lock is run_worker's; the chunk lock keeps
                                    two chunks, or a chunk and ``compare``, off one directory)

What defines the study (scenario, size, epochs, base config, overrides, pruner, device kind) is
stored in the study's user attr ``settings`` at creation; a later chunk must resolve to the same
settings and the same configuration (``foxhunt tune``'s rule: equal except the run-time keys, and
here the paths), else it is a one-line error. The untuned configuration is enqueued as trial 0.

Time accounting: the study's user attr ``chunks`` holds one entry per chunk, keyed by a random id:
its wall seconds from the moment it starts its workers to the moment the last one has exited
(worker start-up counts: it is part of what a chunked study costs), rewritten every
``UPDATE_S`` seconds while the chunk runs and once at its end. The accumulated study time is the
sum over the entries, so a resumed study adds a new entry and never re-counts an old one; a chunk
killed outright keeps its last update (at most ``UPDATE_S`` seconds undercounted).

Stopping: a chunk of length L gives each worker ``--stop-at`` = start + L − half a trial (the
study's mean complete-trial duration so far): the worker asks no trial after that and finishes the
one it runs (``run_worker``'s timeout: the graceful stop, which leaves no trial RUNNING). A worker
still alive at start + L + max(30 s, 3 trials) is terminated (SIGTERM, then SIGKILL): its trial
stays RUNNING, because journal storage has no heartbeats. Such trials are handled by
``fail_stale``: when a chunk has no worker left (its end) and when a chunk or ``compare`` starts
(no chunk can run beside it: the chunk lock; a worker whose chunk process died gets SIGTERM from
the kernel, PR_SET_PDEATHSIG), every RUNNING trial of the study is stale by construction; it is
marked FAIL and re-queued as WAITING with its parameters by Optuna's
``RetryHeartbeatStaleTrialCallback`` (``tune.max_retry``), as a heartbeat-stale trial would be.

``python -m bench.tune_long_study worker DIR --index I --stop-at EPOCH`` is one worker process
(``run_worker`` on the scenario's market: ``bench.tune_scorecard.ScenarioEvaluator``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import optuna
from filelock import FileLock, Timeout

from bench import common
from foxhunt.config import Config, load_config
from foxhunt.errors import ConfigError
from foxhunt.tune.session import _first_difference, _identity
from foxhunt.tune.study import counts, make_storage, open_study, quiet_optuna

ROOT = common.ROOT
STUDY = "tune_long"
JOURNAL = "journal.log"
UPDATE_S = 5.0
PATH_KEYS = (("features", "cache_dir"), ("run", "out_dir"), ("tune", "out_dir"))
"""Keys that name this machine's directories: not part of what defines the study."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """What defines the study (stored at creation; see the module docstring)."""

    scenario: str = "edge_daily"
    quick: bool = False
    device: str = "cuda"  # resolved device kind: "cuda" | "cpu"
    config: str = "configs/h200-fast.toml"  # base configuration, relative to the repository root
    epochs: int = 3  # train.epochs of every trial (and of both sides of ``compare``)
    sets: tuple[str, ...] = ()  # --set on the base configuration
    sc_set: tuple[str, ...] = ()  # overrides on the scenario configuration (bench_tune --sc-set)
    pruner: str = "none"
    holdout: float = 0.2

    def to_attr(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_attr(cls, d: dict[str, Any]) -> "Settings":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def size_of(st: Settings) -> Any:
    from bench.tune_scorecard import QUICK_SIZE
    from foxhunt.scorecard.build import SIZES

    return QUICK_SIZE if st.quick else SIZES["gpu"]


def base_dict(st: Settings) -> dict[str, Any]:
    """The base configuration as bench_tune part (c) builds it (quick overrides, --set, device)."""
    from bench.bench_tune import base_dict as bt_base

    ns = argparse.Namespace(config=str(ROOT / st.config), quick=st.quick, bars=None, device=st.device, overrides=list(st.sets))
    return bt_base(ns)


def study_config(st: Settings, d: Path) -> tuple[Config, Any]:
    """(trial configuration with [tune], scenario) of the study in ``d``, with this machine's paths."""
    from bench.bench_tune import CACHE
    from bench.tune_scorecard import scenario_cfg

    tune = {"study": STUDY, "storage": f"journal:{(d / JOURNAL).resolve()}", "pruner": st.pruner}
    return scenario_cfg(base_dict(st), st.scenario, size_of(st), st.epochs, d, CACHE, st.holdout, list(st.sc_set), tune)


def identity(cfg: Config) -> dict[str, Any]:
    """The configuration without run-time keys and paths (what must not change across chunks)."""
    d = _identity(cfg)
    for section, key in PATH_KEYS:
        d.get(section, {}).pop(key, None)
    return d


def journal_url(d: Path) -> str:
    return f"journal:{(d / JOURNAL).resolve()}"


def open_dir(d: Path, st: Settings | None) -> tuple[Config, optuna.Study, Settings]:
    """Create the study in ``d`` (``st`` required) or resume it (``st``, when given, must equal the
    stored settings). Writes config.toml with this machine's paths. ConfigError on a mismatch."""
    d.mkdir(parents=True, exist_ok=True)
    exists = (d / JOURNAL).is_file() and (d / "config.toml").is_file()
    if exists:
        study = optuna.load_study(study_name=STUDY, storage=journal_storage(d))
        stored = Settings.from_attr(study.user_attrs["settings"])
        if st is not None and st != stored:
            diff = next(f for f in dataclasses.fields(Settings) if getattr(st, f.name) != getattr(stored, f.name))
            raise ConfigError(f"{d}: the study was created with {diff.name}={getattr(stored, diff.name)!r} "
                              f"({getattr(st, diff.name)!r} now); use another --storage for a new study")
        st = stored
        cfg, _ = study_config(st, d)
        old = load_config(d / "config.toml")
        if identity(old) != identity(cfg):
            raise ConfigError(f"{d}: the study's configuration changed: {_first_difference(identity(old), identity(cfg))}")
    elif st is None:
        raise ConfigError(f"{d}: no study there (run `python -m bench.bench_tune_long study --storage {d}` first)")
    else:
        cfg, _ = study_config(st, d)
    cfg.write(d)
    study = open_study(journal_url(d), STUDY, cfg.tune, create=True)
    if not exists:
        untuned = {k: _get(cfg, k) for k in cfg.tune.entries()}
        study.set_user_attr("settings", st.to_attr())
        study.set_user_attr("untuned", untuned)
        study.set_user_attr("created", {"utc": _utc(), "revision": common.git_revision()})
        study.set_user_attr("chunks", [])
        study.enqueue_trial(untuned)  # trial 0: the configuration as it stands
    return cfg, study, st


def journal_storage(d: Path) -> optuna.storages.BaseStorage:
    """The study's journal storage in ``d`` (foxhunt.tune.study.make_storage; a journal needs no tune settings)."""
    return make_storage(journal_url(d), None)


def _get(cfg: Config, key: str) -> Any:
    section, field = key.split(".", 1)
    return cfg.to_dict()[section][field]


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def chunk_lock(d: Path) -> FileLock:
    """The directory's chunk lock, taken at once or a ConfigError (another chunk / compare runs)."""
    lock = FileLock(str(d / ".chunk.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(f"{d}: another chunk or compare holds {d / '.chunk.lock'}") from None
    return lock


def chunks(study: optuna.Study) -> list[dict[str, Any]]:
    return list(study.user_attrs.get("chunks", []))


def accumulated_s(study: optuna.Study) -> float:
    """The study's accumulated seconds: the sum of its chunks' wall seconds."""
    return float(sum(c.get("wall_s", 0.0) for c in chunks(study)))


def _record(study: optuna.Study, entry: dict[str, Any]) -> None:
    cs = [c for c in chunks(study) if c["id"] != entry["id"]]
    cs.append(dict(entry))
    study.set_user_attr("chunks", sorted(cs, key=lambda c: c["index"]))


def fail_stale(study: optuna.Study, storage: optuna.storages.BaseStorage, max_retry: int) -> list[int]:
    """Mark every RUNNING trial FAIL and re-queue it (see the module docstring: called only when
    no worker of the study can be alive), through Optuna's public storage API. storage: the study's
    (``journal_storage``). Returns the failed trial numbers."""
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
    study_id = storage.get_study_id_from_name(study.study_name)
    failed = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        if storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.FAIL):
            retry(study, copy.deepcopy(storage.get_trial(trial_id)))
            failed.append(t.number)
    return failed


def mean_trial_s(study: optuna.Study, default: float) -> float:
    from foxhunt.tune.worker import result_attrs

    d = [result_attrs(t).get("duration_s") for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
    d = [x for x in d if x]
    return sum(d) / len(d) if d else default


def run_chunk(d: Path, st: Settings, chunk_s: float, total_s: float, workers: int, min_chunk_s: float,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    """One chunk (module docstring); returns its entry (``{"done": True, …}`` when the study had
    already reached ``total_s`` within ``min_chunk_s``)."""
    quiet_optuna()
    if not d.exists():
        study_config(st, d)  # a bad setting is an error before anything is written
    d.mkdir(parents=True, exist_ok=True)
    lock = chunk_lock(d)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cfg, study, st = open_dir(d, st)
        stale = fail_stale(study, journal_storage(d), cfg.tune.max_retry)
        acc = accumulated_s(study)
        remaining = total_s - acc
        if remaining < min_chunk_s:
            return {"done": True, "accumulated_s": acc, "stale_failed": stale}
        length = min(chunk_s, remaining)
        trial_est = mean_trial_s(study, 3.0 if st.quick else 10.0)
        c0 = counts(study)
        index = len(chunks(study))
        entry: dict[str, Any] = {"id": uuid.uuid4().hex, "index": index, "started_utc": _utc(), "planned_s": length,
                                 "workers": workers, "wall_s": 0.0, "state": "running", "stale_failed_at_start": stale,
                                 "revision": common.git_revision(), "trial_estimate_s": trial_est,
                                 "finished_before": c0["COMPLETE"] + c0["PRUNED"]}
        say(f"chunk {index}: {length:.0f} s of the study's remaining {remaining:.0f} s (accumulated {acc:.0f} of "
            f"{total_s:.0f} s), {workers} worker(s); {c0['COMPLETE']} complete trials so far"
            + (f"; stale trials failed and re-queued: {stale}" if stale else ""))
        t0 = time.monotonic()
        _record(study, entry)
        stop_at = time.time() + max(0.0, length - 0.5 * trial_est)
        procs = _spawn(d, workers, index, stop_at)
        cap = t0 + length + max(30.0, 3.0 * trial_est)
        last = t0
        killed = 0
        prev = {s: signal.signal(s, _raise_exit) for s in (signal.SIGTERM, signal.SIGHUP)}
        interrupted = False
        try:
            while any(p.poll() is None for p in procs):
                now = time.monotonic()
                if now > cap:
                    killed = _stop(procs)
                    break
                if now - last >= UPDATE_S:
                    entry["wall_s"] = now - t0
                    _record(study, entry)
                    last = now
                time.sleep(0.5)
        except BaseException:
            interrupted = True
            raise
        finally:
            for s in prev:  # the clean-up below must not be cut short by a second signal
                signal.signal(s, signal.SIG_IGN)
            killed += _stop(procs)  # only if interrupted (SIGTERM, Ctrl-C, an error): workers still alive
            entry["wall_s"] = time.monotonic() - t0
            entry["stale_failed_at_end"] = fail_stale(study, journal_storage(d), cfg.tune.max_retry)
            entry["killed_workers"] = killed
            entry["reports"] = _reports(d, index, procs)
            c1 = counts(study)
            entry["finished_after"] = c1["COMPLETE"] + c1["PRUNED"]
            entry["state"] = "done" if all(p.returncode == 0 for p in procs) and not killed else "interrupted"
            _record(study, entry)
            for s, h in prev.items():
                signal.signal(s, h)
            if interrupted:
                say(f"chunk {index}: interrupted after {entry['wall_s']:.1f} s (counted); workers stopped {killed}; "
                    f"RUNNING trials failed and re-queued {entry['stale_failed_at_end']}")
        acc = accumulated_s(study)
        entry.update(accumulated_s=acc, done=total_s - acc < min_chunk_s, counts=c1)
        say(f"chunk {index}: {entry['wall_s']:.1f} s, {entry['finished_after'] - entry['finished_before']} trials finished "
            f"({entry['state']}; workers killed {killed}; stale trials failed at the end {entry['stale_failed_at_end']}); "
            f"study: {acc:.0f} of {total_s:.0f} s over {index + 1} chunk(s), {c1['COMPLETE']} complete, {c1['PRUNED']} pruned, "
            f"{c1['FAIL']} failed")
        return entry
    finally:
        lock.release()


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _spawn(d: Path, k: int, chunk: int, stop_at: float) -> list[subprocess.Popen[bytes]]:
    logs = d / "logs"
    logs.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = []
    for i in range(k):
        # Worker ids are unique across the study's chunks: each seeds its own sampler (seed + 7919 id).
        cmd = [sys.executable, "-m", "bench.tune_long_study", "worker", str(d), "--index", str(chunk * k + i),
               "--stop-at", repr(stop_at)]
        with open(logs / f"chunk{chunk}-w{i}.out", "wb") as out, open(logs / f"chunk{chunk}-w{i}.log", "wb") as err:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=err, cwd=str(ROOT)))
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> int:
    """SIGTERM the workers still alive, SIGKILL them after 10 s; returns how many were stopped."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        p.terminate()
    end = time.monotonic() + 10.0
    for p in alive:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return len(alive)


def _reports(d: Path, chunk: int, procs: list[subprocess.Popen[bytes]]) -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(procs):
        lines = (d / "logs" / f"chunk{chunk}-w{i}.out").read_text().strip().splitlines()
        try:
            rep = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            rep = {}
        err = (d / "logs" / f"chunk{chunk}-w{i}.log").read_text().strip().splitlines()
        out.append({"returncode": p.returncode, **{k: rep.get(k) for k in ("finished", "pruned", "failed", "lost", "stats")},
                    "trial_s_sum": sum(rep.get("trial_s", [])), **({"last_error": err[-1]} if p.returncode and err else {})})
    return out


def _die_with_parent() -> None:
    """SIGTERM this process when its parent (the chunk) dies (Linux PR_SET_PDEATHSIG; no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker_main(d: Path, index: int, stop_at: float) -> int:
    """One worker process: run_worker on the scenario's market until ``stop_at`` (epoch seconds)."""
    _die_with_parent()
    quiet_optuna()
    from bench.tune_scorecard import ScenarioEvaluator
    from foxhunt.scorecard.build import prepare_scenario
    from foxhunt.tune.worker import WorkerReport, run_worker

    cfg = load_config(d / "config.toml")
    if cfg.train.threads:
        import torch

        torch.set_num_threads(cfg.train.threads)
    st = Settings.from_attr(optuna.load_study(study_name=STUDY, storage=journal_storage(d)).user_attrs["settings"])
    _, scenario = study_config(st, d)
    ev = ScenarioEvaluator(cfg, prepare_scenario(cfg, scenario))
    left = stop_at - time.time()
    # run_worker's timeout 0 means "none": a worker that started after its deadline asks nothing.
    rep = run_worker(cfg, journal_url(d), d, 10**9, left, index, ev) if left > 0 else WorkerReport()
    print(json.dumps(dataclasses.asdict(rep)))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tune_long_study")
    p.add_argument("command", choices=["worker"])
    p.add_argument("dir", type=Path)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--stop-at", type=float, required=True)
    a = p.parse_args(argv)
    return worker_main(a.dir, a.index, a.stop_at)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
