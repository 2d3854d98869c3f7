"""Fault injection: faults raised through the connection seam, deterministically.

A :class:`StatementFaults` is a statement hook (see :mod:`kit.connections`):
armed with ``fail_at(k)``, it lets ``k - 1`` statements through and fails the
k-th with :class:`InjectedFault`. Counting statements, not seconds, is what
makes every injected fault reproducible.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kit.connections import COMMITTED_POINT
from kit.contract.errors import StorageError

__all__ = ["InjectedFault", "StatementFaults"]


class InjectedFault(StorageError):
    """A fault the kit injected on purpose; the statement it names never ran."""


class StatementFaults:
    """A statement hook that fails the k-th statement after arming, and counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fail_at: int | None = None
        self._action: Callable[[str], None] | None = None
        self.seen: list[str] = []
        self.fired: str | None = None

    def fail_at(self, k: int, action: Callable[[str], None] | None = None) -> None:
        """Fail (or run ``action`` at) the k-th statement from now (1 = the next one)."""
        with self._lock:
            self.seen = []
            self.fired = None
            self._fail_at = k
            self._action = action

    def disarm(self) -> None:
        with self._lock:
            self._fail_at = None
            self._action = None

    def __call__(self, statement: str) -> None:
        if statement == COMMITTED_POINT:
            return  # after the commit: failing there is a lost acknowledgement, not a failed statement
        with self._lock:
            if self._fail_at is None:
                return
            self.seen.append(statement)
            if len(self.seen) != self._fail_at:
                return
            self.fired = statement
            self._fail_at = None
            action = self._action
        if action is not None:
            action(statement)
            return
        raise InjectedFault(f"injected fault before statement #{len(self.seen)}: {statement[:80]}")
