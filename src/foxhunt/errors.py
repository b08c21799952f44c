"""Errors that the CLI turns into one clear line and exit code 2."""

from __future__ import annotations

import os


class FoxhuntError(Exception):
    """Base class for user-facing errors (bad data, bad config, bad run directory, bad paths)."""


class ConfigError(FoxhuntError):
    """A configuration file or override broke a rule (unknown key, out-of-range value...)."""


class CacheError(FoxhuntError):
    """A feature cache or checkpoint file is missing, torn or does not match its hash."""


class PathError(FoxhuntError):
    """A path the user gave cannot be used as asked (a file where a directory is needed, a
    directory where a file is, no permission, a NUL byte...). ``what`` names where the path came
    from (an option such as ``--out`` or a config key such as ``run.out_dir``)."""

    def __init__(self, what: str, path: str | os.PathLike[str], rule: str) -> None:
        self.what, self.path, self.rule = what, str(path), rule
        super().__init__(f"{what} {self.path}: {rule}")


class ReportError(FoxhuntError):
    """A report (``report.html``) could not be written after the work it reports was committed: the
    run's results, models and summary are complete on disk; the message says what failed and where
    the traceback was saved. Exit code 1 (the input was fine; the report is the bug)."""

    exit_code = 1

    def __init__(self, message: str, results: object = None) -> None:
        super().__init__(message)
        self.results = results
