"""The statement hook a stress worker installs on each of its stores.

:class:`StressFaults` is :class:`~kit.faults.StatementFaults` (fail or run an
action at the k-th statement, lose the next commit's acknowledgement) plus a
*pause* at the k-th fault point, where points are every statement the store
announces *including* ``"COMMITTED"`` (right after a commit returned). A pause
at a ``COMMITTED`` point of an operation that commits more than once is a
pause *between* its transactions: exactly where a check-then-act store is
exposed, while a single-transaction store only sees a slow acknowledgement.

Guarantees: at most one pause and one statement fault are armed at a time;
``disarm()`` clears both; the hook counts every committed transaction
(``committed``) and those that wrote (``writes``), which is how the stress
benchmark measures transaction rates.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from kit.connections import COMMITTED_POINT
from kit.faults import StatementFaults

__all__ = ["StressFaults", "can_drop", "drop_connection"]

Sleeper = Callable[[float], None]
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE"})


def _sleep(seconds: float) -> None:
    threading.Event().wait(seconds)


class StressFaults(StatementFaults):
    """StatementFaults plus a pause at a counted point (``COMMITTED`` points counted too)."""

    def __init__(self, sleep: Sleeper = _sleep) -> None:
        super().__init__()
        self._sleep = sleep
        self._pause_at: int | None = None
        self._pause_s = 0.0
        self._points = 0
        self._pause_point: str | None = None
        self.paused_at: str | None = None
        """The point a pause fired at (``None``: the operation ended before reaching it)."""
        self.committed = 0
        """Transactions committed through this store (every ``COMMITTED`` point)."""
        self.writes = 0
        """Of those, the ones that wrote (an INSERT, UPDATE or DELETE ran in them)."""
        self._dirty = False

    def pause_at(self, k: int, seconds: float, point: str | None = None) -> None:
        """Sleep ``seconds`` at the k-th point from now (1 = the next one); only ``point`` counts if given."""
        with self._lock:
            self._pause_at, self._pause_s, self._points, self.paused_at = k, seconds, 0, None
            self._pause_point = point

    def disarm(self) -> None:
        """Clear every armed fault and what fired (read ``fired`` / ``paused_at`` before)."""
        super().disarm()
        with self._lock:
            self._pause_at = None
            self.fired = None
            self.paused_at = None

    def __call__(self, statement: str) -> None:
        pause = 0.0
        with self._lock:
            if statement == COMMITTED_POINT:
                self.committed += 1
                self.writes += self._dirty
                self._dirty = False
            elif statement[:6].upper() in _WRITES:
                self._dirty = True
            elif statement[:5].upper() in ("BEGIN", "START", "ROLLB"):
                self._dirty = False
            if self._pause_at is not None and self._pause_point in (None, statement):
                self._points += 1
                if self._points == self._pause_at:
                    pause, self._pause_at, self.paused_at = self._pause_s, None, statement[:80]
        if pause:
            self._sleep(pause)
        super().__call__(statement)


def _raw_connection(store: Any) -> Any:
    connection = getattr(store, "_conn", None)
    return getattr(connection, "raw", None)


def can_drop(store: Any) -> bool:
    """Whether :func:`drop_connection` can act on ``store`` (stores built on the kit's connection factory)."""
    return _raw_connection(store) is not None


def drop_connection(store: Any) -> None:
    """Close ``store``'s DB-API connection from the client side, as a network drop would.

    The server rolls the open transaction back when it sees the socket close;
    the store's next statement fails with ``ConnectionLost``.
    """
    raw = _raw_connection(store)
    if raw is None:
        raise NotImplementedError(
            f"{type(store).__name__} does not expose its DB-API connection: drop faults need a store "
            "built on kit.connections.ConnectionFactory"
        )
    with contextlib.suppress(Exception):  # an already broken connection is dropped enough
        raw.close()
