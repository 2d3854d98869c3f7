"""Fault injection through the connection seam, deterministically.

A :class:`StatementFaults` is a statement hook (see :mod:`kit.connections`).
It can also pause a worker: ``park_commit`` holds its next COMMIT until another
worker, armed with ``notify_at(point)``, reaches a named point (its first
statement, or its first locking statement); that is how a step interleaves two
transactions at a named point instead of by timing luck.
Armed with ``fail_at(k)`` it lets ``k - 1`` statements through and, at the
k-th, raises :class:`InjectedFault` (the statement never runs) or runs an
action instead (for example: kill this store's server session, so the
statement fails as it would after a crash). Armed with ``lose_ack()`` it lets
the next commit happen and then raises :class:`LostAcknowledgement`: the write
is durable, the client saw an error. Counting statements, not seconds, is
what makes every injected fault reproducible.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from kit.connections import COMMIT_POINT, COMMITTED_POINT
from kit.contract.errors import StorageError

__all__ = ["NOTIFY_POINTS", "InjectedFault", "LostAcknowledgement", "StatementFaults"]

#: Where a paused worker's peer may be made to stop before releasing it (see ``notify_at``).
NOTIFY_POINTS = ("start", "first_lock")
_LOCKING = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|MERGE)\b|FOR\s+UPDATE|SKIP\s+LOCKED|UPDLOCK|HOLDLOCK|^\s*BEGIN\s+IMMEDIATE",
    re.IGNORECASE,
)


class InjectedFault(StorageError):
    """A fault the kit injected on purpose; the statement it names never ran."""


class LostAcknowledgement(InjectedFault):
    """The transaction committed, but the kit made the client see an error."""


class StatementFaults:
    """A statement hook that fails the k-th statement after arming, or loses the next commit's ack."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fail_at: int | None = None
        self._action: Callable[[str], None] | None = None
        self._lose_ack = False
        self._park: tuple[threading.Event, float, threading.Event | None] | None = None
        self._notify: tuple[str, threading.Event] | None = None
        self.seen: list[str] = []
        self.fired: str | None = None

    def fail_at(self, k: int, action: Callable[[str], None] | None = None) -> None:
        """Fail (or run ``action`` at) the k-th statement from now (1 = the next one)."""
        with self._lock:
            self.seen = []
            self.fired = None
            self._fail_at = k
            self._action = action

    def lose_ack(self) -> None:
        """Let the next commit land, then raise :class:`LostAcknowledgement`."""
        with self._lock:
            self.fired = None
            self._lose_ack = True

    def park_commit(self, until: threading.Event, timeout: float, parked: threading.Event | None = None) -> None:
        """Hold the next COMMIT until ``until`` is set (or ``timeout`` seconds pass): a paused worker.

        ``parked`` is set the moment the worker arrives at that COMMIT.
        """
        with self._lock:
            self._park = (until, timeout, parked)

    def notify_at(self, point: str, event: threading.Event) -> None:
        """Set ``event`` just before the worker's next statement at ``point`` runs.

        ``start``: its first statement. ``first_lock``: its first statement that takes a
        lock or writes (a locking SELECT, INSERT/UPDATE/DELETE, ``BEGIN IMMEDIATE``, or its
        COMMIT): by then it has done every plain read it does before locking anything.
        """
        if point not in NOTIFY_POINTS:
            raise ValueError(f"unknown point {point!r}: use one of {', '.join(NOTIFY_POINTS)}")
        with self._lock:
            self._notify = (point, event)

    def disarm(self) -> None:
        with self._lock:
            self._fail_at = None
            self._action = None
            self._lose_ack = False
            self._park = None
            if self._notify is not None:
                self._notify[1].set()  # never leave a parked peer waiting
            self._notify = None

    def __call__(self, statement: str) -> None:
        if statement == COMMITTED_POINT:
            with self._lock:
                if not self._lose_ack:
                    return
                self._lose_ack = False
                self.fired = statement
            raise LostAcknowledgement("injected lost acknowledgement: the commit landed, the client saw an error")
        with self._lock:
            park = self._park if statement == COMMIT_POINT else None
            if park is not None:
                self._park = None
            if self._notify is not None and (
                self._notify[0] == "start" or statement == COMMIT_POINT or _LOCKING.search(statement)
            ):
                self._notify[1].set()
                self._notify = None
        if park is not None:
            if park[2] is not None:
                park[2].set()
            park[0].wait(park[1])
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
