"""Liveness of running trials: heartbeats, stale trials, and trials that never got a heartbeat.

On an RDB storage with ``heartbeat_interval`` (SQLite, PostgreSQL …; see foxhunt.tune.study) a
worker's trial is alive while its heartbeat row is fresh. Optuna's ``fail_stale_trials`` marks a
RUNNING trial FAIL when its last beat is older than the grace period and hands it to the storage's
stale-trial callback (``RetryHeartbeatStaleTrialCallback``: re-queued as WAITING with the same
parameters). ``Heartbeat`` is the thread that beats for the trial a worker runs.

The gap Optuna leaves: ``_get_stale_trial_ids`` skips RUNNING trials that have **no** heartbeat row,
and ``study.ask`` (which commits the trial as RUNNING, creating it or popping a WAITING one, then
samples its parameters) and the first ``record_heartbeat`` are separate transactions; Optuna has no
call that does both in one step. A worker killed between the two leaves a trial RUNNING for ever.
``OrphanSweep`` closes it: a RUNNING trial with no heartbeat that this process has seen in that
state, look after look, for at least the grace period is marked FAIL and handed to the same
callback as a stale one (so it is retried like one, and ``max_retry`` counts both). Only this
process's monotonic clock is used (trial start times are written with each worker's own wall
clock, which may differ across machines). A live worker's trial is without a heartbeat only during
its ask: the worker beats at once after asking, and local workers ask, beat and sweep under one
file lock (foxhunt.tune.worker), so the sweep can only take a live trial from a remote worker
whose ask took longer than the grace period.

Journal storage (``journal:PATH``) has no heartbeats at all: nothing tells a dead worker's trial
from a live one, so neither Optuna nor this module fails it; it stays RUNNING (see
foxhunt.tune.worker for how workers avoid waiting on it).
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Callable

import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState


def heartbeat_interval(storage: optuna.storages.BaseStorage) -> int | None:
    """Seconds between beats, or None when the storage has no heartbeats (journal, in-memory)."""
    return getattr(storage, "get_heartbeat_interval", lambda: None)()


class Heartbeat:
    """Beats for one running trial on a heartbeat-enabled storage (Optuna's record_heartbeat)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial) -> None:
        storage = study._storage
        interval = heartbeat_interval(storage)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval:
            trial_id = trial._trial_id

            def beat() -> None:
                while True:
                    storage.record_heartbeat(trial_id)
                    if self._stop.wait(interval):
                        return

            self._thread = threading.Thread(target=beat, daemon=True, name="foxhunt-heartbeat")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def first_beat(study: optuna.Study, trial: optuna.Trial) -> None:
    """Beat once for a trial just asked (before its heartbeat thread starts)."""
    storage = study._storage
    if heartbeat_interval(storage):
        storage.record_heartbeat(trial._trial_id)


def running_without_heartbeat(storage: RDBStorage, study_id: int) -> list[int]:
    """Trial ids of the study's RUNNING trials that have no heartbeat row (Optuna's own query in
    ``RDBStorage._get_stale_trial_ids``, for the trials it skips)."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(storage.scoped_session, True) as session:
        rows = (session.query(models.TrialModel.trial_id)
                .filter(models.TrialModel.study_id == study_id)
                .filter(models.TrialModel.state == TrialState.RUNNING)
                .filter(~models.TrialModel.heartbeats.any())
                .all())
    return sorted(int(r[0]) for r in rows)


class OrphanSweep:
    """Fails RUNNING trials that never got a heartbeat (see the module docstring).

    grace_s: seconds a trial must be seen without a heartbeat before it is failed (the storage's
    grace period). clock: monotonic seconds (tests inject one)."""

    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = float(grace_s)
        self.clock = clock
        self.first_seen: dict[int, float] = {}

    def __call__(self, study: optuna.Study) -> list[int]:
        """One look: returns the ids of the trials this call failed (their callback has run)."""
        storage = study._storage  # Optuna wraps an RDBStorage in its trial cache (_CachedStorage)
        rdb = getattr(storage, "_backend", storage)
        if not isinstance(rdb, RDBStorage) or not heartbeat_interval(rdb):
            return []
        now = self.clock()
        # Trials that have since beaten or finished are forgotten; new ones start their wait now.
        self.first_seen = {i: self.first_seen.get(i, now) for i in running_without_heartbeat(rdb, study._study_id)}
        failed = []
        for trial_id, seen in list(self.first_seen.items()):
            if now - seen < self.grace_s:
                continue
            del self.first_seen[trial_id]
            try:
                if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                    failed.append(trial_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # another worker failed (or its owner finished) it first: not ours to retry
        callback = storage.get_heartbeat_stale_trial_callback()
        if callback is not None:
            for trial_id in failed:
                callback(study, copy.deepcopy(storage.get_trial(trial_id)))
        return failed
