"""Typed errors: genuine faults and misuse, raised (protocol results are outcomes).

Every message names the problem and the fix. ``TransientError`` is the only
error a caller may retry blindly: the store guarantees the failed attempt left
nothing behind.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "ClockModeError",
    "ConfigurationError",
    "ConnectionLost",
    "DefinitionMismatch",
    "DefinitionNotFound",
    "InvalidArgument",
    "InvalidDecision",
    "KitError",
    "LockTimeout",
    "NotInTransaction",
    "RunAlreadyExists",
    "SchemaError",
    "StorageError",
    "TransactionRolledBack",
    "TransientError",
]


class KitError(Exception):
    """Base of every error the kit and its adapters raise on purpose."""


class ConfigurationError(KitError):
    """Bad input to the kit itself: an unknown backend, a malformed URL or import path."""


class BackendUnavailable(KitError):
    """A backend cannot be used here; ``reason`` says why, ``fix`` says what to provide."""

    def __init__(self, backend: str, reason: str, fix: str) -> None:
        super().__init__(f"{backend}: {reason}. {fix}")
        self.backend = backend
        self.reason = reason
        self.fix = fix


class StorageError(KitError):
    """A fault in the store (as opposed to a protocol outcome)."""


class ConnectionLost(StorageError):
    """The connection or server session died; whether the last write landed is unknown."""


class TransientError(StorageError):
    """A deadlock victim or serialization failure; the attempt was rolled back and may be retried."""


class LockTimeout(TransientError):
    """A lock wait ran past the store's bound; the attempt was rolled back in full.

    Retrying is safe, but the store does not retry it itself: the wait budget is
    already spent and the holder (often a stuck or paused worker) may keep its lock.
    """


class SchemaError(StorageError):
    """The schema is absent, partly applied, newer than this code, or was changed after applying.

    ``problem`` is one of ``absent``, ``partial``, ``newer``, ``tampered``.
    """

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class InvalidArgument(KitError, ValueError):
    """An argument breaks the contract's limits (length, type, JSON-ness, range)."""


class InvalidDecision(InvalidArgument):
    """A decision is malformed or consumes something that is not there; nothing was written."""


class DefinitionNotFound(StorageError):
    """``start_run`` named a definition that was never ensured for this tenant."""


class DefinitionMismatch(StorageError):
    """``start_run`` named a definition whose stored digest differs from the caller's."""


class RunAlreadyExists(StorageError):
    """A run with this id exists and the call did not repeat its idempotency key."""


class NotInTransaction(StorageError):
    """An operation that needs an open ``transaction()`` was called outside one."""


class TransactionRolledBack(StorageError):
    """An inner block of a unit of work failed, so the whole unit was rolled back."""


class ClockModeError(StorageError):
    """The test clock was driven on a store opened with the database clock, or vice versa."""
