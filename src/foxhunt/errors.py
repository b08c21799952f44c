"""Errors that the CLI turns into one clear line and exit code 2."""

from __future__ import annotations


class FoxhuntError(Exception):
    """Base class for user-facing errors (bad data, bad config, bad run directory)."""


class ConfigError(FoxhuntError):
    """A configuration file or override broke a rule (unknown key, out-of-range value...)."""


class CacheError(FoxhuntError):
    """A feature cache or checkpoint file is missing, torn or does not match its hash."""
