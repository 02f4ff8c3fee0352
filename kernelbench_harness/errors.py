"""The few exception types a kbench user sees.

Candidate failures are never exceptions: they are outcomes (see :class:`~kernelbench_harness.core.Outcome`).
Provider failures go through the adapter's retry classifier and then become a sample's error outcome.
Only the conditions below, and harness bugs, raise.
"""

from __future__ import annotations

__all__ = [
    "KbenchError",
    "PrerequisiteError",
    "ConfigError",
    "ProblemLoadError",
    "StoreError",
    "AdapterError",
]


class KbenchError(Exception):
    """Base class of errors kbench reports to a user without a traceback.

    Args:
        message: what went wrong, in one sentence.
        fix: what the user should do about it (printed after the message), or None.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class PrerequisiteError(KbenchError):
    """A missing package, API key, server or GPU. The ``fix`` names the command or variable."""


class ConfigError(KbenchError):
    """Bad command-line arguments or configuration (kbench.toml, -M options, protocol settings)."""


class ProblemLoadError(KbenchError):
    """A problem file or problem source that cannot be used (syntax error, no ``Model``, ...).

    Attributes:
        path: the offending file or source, as given.
        reason: why it was rejected.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}", fix=None)
        self.path = path
        self.reason = reason


class StoreError(KbenchError):
    """The results store cannot be opened, is from an unknown schema, or a run is missing."""


class AdapterError(KbenchError):
    """A model adapter failed in a way retries did not cure (becomes the sample's error outcome)."""

    def __init__(self, message: str, fix: str | None = None, *, kind: str = "fatal") -> None:
        super().__init__(message, fix)
        self.kind = kind
