"""Optuna plumbing: storage from a URL, seeded sampler, fold pruner, the study itself.

Storages (``[tune] storage`` / ``--storage``):

* empty (default): ``sqlite:///<study dir>/study.db``, an RDBStorage with heartbeats;
* ``journal:PATH`` (``journal:`` alone: ``<study dir>/journal.log``): a JournalStorage on a file
  backend, for a few local processes (Optuna's journal storage has no heartbeat: a worker killed
  there leaves its trial RUNNING for ever, holding one of the ``trials`` places; the other workers
  stop rather than wait for it, so the study ends one finished trial short per lost trial, and a
  resume needs ``--trials`` raised by as many; use SQLite or PostgreSQL for fault tolerance);
* any other URL (``postgresql://user:pw@host/db``, ``mysql://…``, ``sqlite:///…``): an RDBStorage.

RDB storages get ``heartbeat_interval`` / ``grace_period`` and Optuna's
``RetryHeartbeatStaleTrialCallback``: a trial whose worker stopped beating is marked FAIL by the
next worker that looks (``optuna.storages.fail_stale_trials``) and re-queued as WAITING (its
parameters kept), up to ``max_retry`` times; a trial that never got a heartbeat (its worker died
between ask and first beat) is failed and re-queued the same way after the grace period
(foxhunt.tune.heartbeat.Liveness.sweep). Only Optuna's public storage API is used.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import optuna

from foxhunt.errors import ConfigError


def quiet_optuna() -> None:
    """Optuna logs every trial at INFO and warns on experimental APIs; we report ourselves."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    # Our ask-and-tell loop beats for its trials itself (foxhunt.tune.heartbeat.Heartbeat).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def storage_url(raw: str, study_dir: Path) -> str:
    """The resolved storage URL (default and relative journal paths made absolute)."""
    if not raw:
        return f"sqlite:///{(study_dir / 'study.db').resolve()}"
    if raw == "journal:" or raw == "journal":
        return f"journal:{(study_dir / 'journal.log').resolve()}"
    if raw.startswith("journal:"):
        return f"journal:{Path(raw[len('journal:'):]).expanduser().resolve()}"
    if "://" not in raw:
        raise ConfigError(f"tune.storage {raw!r}: expected a database URL (sqlite:///…, postgresql://…) or journal:PATH")
    return raw


def make_storage(url: str, tcfg: Any) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url`` (see the module docstring)."""
    quiet_optuna()
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    engine: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # timeout: several local processes wait for the file lock; factory: WAL (_WalConnection).
        engine = {"connect_args": {"timeout": 60, "factory": _WalConnection}}
    else:
        engine = {"pool_pre_ping": True}
    try:
        return optuna.storages.RDBStorage(
            url, engine_kwargs=engine, heartbeat_interval=tcfg.heartbeat_s, grace_period=tcfg.grace_s,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=tcfg.max_retry),
        )
    except ImportError as exc:
        raise ConfigError(f"tune.storage {_redact(url)}: the database driver is missing ({exc})") from None
    except Exception as exc:  # sqlalchemy.exc.OperationalError, ArgumentError …
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"tune.storage {_redact(url)}: cannot open the storage: {first}") from None


class _WalConnection(sqlite3.Connection):
    """SQLite in WAL mode with synchronous=NORMAL: a commit no longer waits for an fsync (measured
    ~22 ms each on a loaded disk, ~25 commits a trial); the file stays consistent when a process is
    killed (only a power loss can drop the last commits). Readers and one writer run concurrently.

    Passed as sqlite3.connect's ``factory`` through Optuna's ``engine_kwargs`` → SQLAlchemy's
    ``connect_args`` (public parameters of both), so every pooled connection gets the pragmas;
    Optuna's docs say its storage's attributes (its ``engine``) are not for users."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.execute("PRAGMA journal_mode=WAL").close()
        self.execute("PRAGMA synchronous=NORMAL").close()


def _redact(url: str) -> str:
    """The URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        user = cred.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def make_sampler(tcfg: Any, worker_index: int = 0) -> optuna.samplers.BaseSampler:
    """TPE (default), CMA-ES or random, seeded; each worker gets its own seed (seed + 7919·k) so
    that parallel workers do not draw the same random start-up trials."""
    seed = tcfg.seed + 7919 * worker_index
    if tcfg.sampler == "tpe":
        # constant_liar: running trials count as bad guesses, so parallel workers spread out.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tcfg.startup_trials, constant_liar=True)
    if tcfg.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=tcfg.startup_trials)
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(tcfg: Any) -> optuna.pruners.BasePruner:
    """Median pruner on the running objective, Wilcoxon on per-fold Sharpes, or none."""
    if tcfg.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=tcfg.startup_trials, n_warmup_steps=tcfg.prune_warmup_folds)
    if tcfg.pruner == "wilcoxon":
        return optuna.pruners.WilcoxonPruner(p_threshold=0.1, n_startup_steps=tcfg.prune_warmup_folds)
    return optuna.pruners.NopPruner()


def open_study(url: str, name: str, tcfg: Any, worker_index: int = 0, create: bool = True,
               storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """Create (or load) the study ``name`` in the storage at ``url`` (direction: maximise).

    storage: an already made ``make_storage(url, tcfg)`` (kept by the caller: Optuna's Study does
    not expose its storage publicly, and the heartbeats need it); None: made here."""
    storage = storage if storage is not None else make_storage(url, tcfg)
    sampler, pruner = make_sampler(tcfg, worker_index), make_pruner(tcfg)
    if create:
        return optuna.create_study(storage=storage, study_name=name, direction="maximize", sampler=sampler,
                                   pruner=pruner, load_if_exists=True)
    try:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    except KeyError:
        raise ConfigError(f"study {name!r} does not exist in {_redact(url)}") from None


FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials per state name (COMPLETE, PRUNED, RUNNING, WAITING, FAIL)."""
    out: dict[str, int] = {s.name: 0 for s in optuna.trial.TrialState}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] += 1
    return out
