"""Liveness of running trials: heartbeats, stale trials, and trials that never got a heartbeat.

On an RDB storage with ``heartbeat_interval`` (SQLite, PostgreSQL …; see foxhunt.tune.study) a
worker's trial is alive while its heartbeat row is fresh. Optuna's ``fail_stale_trials`` marks a
RUNNING trial FAIL when its last beat is older than the grace period (both read on the database's
clock) and hands it to the storage's stale-trial callback (``RetryHeartbeatStaleTrialCallback``:
re-queued as WAITING with the same parameters). ``Heartbeat`` is the thread that beats for the
trial a worker runs.

The gap Optuna leaves: its stale check skips RUNNING trials that have **no** heartbeat row, and
``study.ask`` (which commits the trial as RUNNING, creating it or popping a WAITING one, then
samples its parameters) and the first ``record_heartbeat`` are separate transactions; Optuna has no
call that does both in one step. A worker killed between the two leaves a trial RUNNING for ever.

``Liveness.sweep`` closes it with Optuna's public API only: after ``fail_stale_trials``, it beats
**once** (``record_heartbeat``) for every RUNNING trial this process has seen RUNNING, look after
look, for ``grace_s + ADOPT_MARGIN_S`` seconds (this process's monotonic clock). A trial without a
heartbeat row thereby gets one, and if nobody beats again it goes stale one grace period later and
``fail_stale_trials`` fails and re-queues it like any other (``max_retry`` counts both). A trial
that has a row and a dead worker is already stale by then (its last beat came before this process
first saw it), so it is failed on its own schedule and never beaten: the wait keeps a sweeping
worker that starts after a crash from delaying the crashed trial's retry. The one beat is harmless
for a live trial (its worker beats anyway) and cannot keep a dead one alive (a process never beats
for a trial twice). The cost: a trial that never beat is failed after about two grace periods
(plus the margin) instead of one. A live worker's trial is without a heartbeat only during its
ask: the worker beats at once after asking, and local workers ask, beat and sweep under one file
lock (foxhunt.tune.worker), so the sweep can only take a live trial from a remote worker whose ask
took longer than the wait.

(An earlier version found the trials without a heartbeat row with a query through Optuna's private
RDB models and session; the public API cannot ask whether a row exists, hence the adopt-once rule.)

Journal storage (``journal:PATH``) has no heartbeats at all: nothing tells a dead worker's trial
from a live one, so neither Optuna nor this module fails it; it stays RUNNING (see
foxhunt.tune.worker for how workers avoid waiting on it).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import optuna
from optuna.trial import TrialState


def heartbeat_interval(storage: optuna.storages.BaseStorage) -> int | None:
    """Seconds between beats, or None when the storage has no heartbeats (journal, in-memory)."""
    return getattr(storage, "get_heartbeat_interval", lambda: None)()


ADOPT_MARGIN_S = 2.0
"""Seconds past the grace period before a sweep beats for a trial: SQLite stores heartbeat times in
whole seconds (up to 1 s of rounding in Optuna's stale test), plus 1 s of slack between looks."""


class Liveness:
    """One process's heartbeat bookkeeping for one study.

    storage: the storage object the study was opened on (``foxhunt.tune.study.open_study(...,
    storage=)``); every call here is a public method of Optuna's storage API. grace_s: the storage's
    grace period (``tune.grace_s``). clock: monotonic seconds (tests inject one)."""

    def __init__(self, storage: optuna.storages.BaseStorage, study: optuna.Study, grace_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.storage = storage
        self.study = study
        self.interval = heartbeat_interval(storage)
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.adopt_after = float(grace_s) + ADOPT_MARGIN_S
        self.clock = clock
        self.first_seen: dict[int, float] = {}  # trial number → when this process first saw it RUNNING
        self.adopted: set[int] = set()  # trial numbers this process has beaten for (never again in sweep())

    def trial_id(self, number: int) -> int:
        """The storage's id of the study's trial ``number``."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def beat(self, number: int) -> None:
        """One heartbeat for trial ``number`` (nothing without heartbeats)."""
        if self.interval:
            self.storage.record_heartbeat(self.trial_id(number))  # type: ignore[attr-defined]

    def sweep(self) -> list[int]:
        """One look: fail stale trials (retries queued by the storage's callback), then beat once for
        each RUNNING trial seen so for ``adopt_after`` seconds. Returns the numbers beaten for now."""
        if not self.interval:
            return []
        optuna.storages.fail_stale_trials(self.study)  # first: a trial already stale is failed, not revived
        now = self.clock()
        running = [t.number for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        # Trials that have since finished are forgotten; new ones start their wait now.
        self.first_seen = {n: self.first_seen.get(n, now) for n in running if n not in self.adopted}
        due = [n for n, seen in self.first_seen.items() if now - seen >= self.adopt_after]
        for number in due:
            self.beat(number)
            self.adopted.add(number)
            del self.first_seen[number]
        return due


class Heartbeat:
    """Beats for one running trial on a heartbeat-enabled storage (Optuna's record_heartbeat)."""

    def __init__(self, live: Liveness, trial: optuna.Trial) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if live.interval:
            trial_id, interval, storage = live.trial_id(trial.number), live.interval, live.storage

            def beat() -> None:
                while True:
                    storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
                    if self._stop.wait(interval):
                        return

            self._thread = threading.Thread(target=beat, daemon=True, name="foxhunt-heartbeat")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def first_beat(live: Liveness, trial: optuna.Trial) -> None:
    """Beat once for a trial just asked (before its heartbeat thread starts); the trial is this
    process's own, so its sweep need not beat for it."""
    live.adopted.add(trial.number)
    live.beat(trial.number)
