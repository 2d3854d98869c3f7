"""The connection factory: the one way adapters get DB-API connections.

Every statement an adapter sends passes through :class:`HookedCursor`, which
calls the store's statement hook first. That hook is the fault layer's seam: it
may raise (a failed statement), block (a worker paused inside an open
transaction), or end the session. Two extra points are announced:
``"COMMIT"`` is the commit statement itself (raising there means the commit
never happened) and ``"COMMITTED"`` comes right after a commit returned
(raising there is a lost acknowledgement: the write is durable, the client saw
an error). A read-only transaction's COMMIT may travel with its reads, as part
of their one point (it commits nothing: see :meth:`HookedCursor.execute_batch`).

The proxies are hand-written rather than borrowed because what they intercept
is exactly the DB-API surface the kit's adapters use (``cursor().execute``,
``executemany``, fetches, ``close``); wrapping any more would hide driver
behaviour the suites are meant to observe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kit.contract.protocol import StatementHook

__all__ = ["COMMITTED_POINT", "COMMIT_POINT", "ConnectionFactory", "HookedConnection", "HookedCursor"]

T = TypeVar("T")

COMMIT_POINT = "COMMIT"
COMMITTED_POINT = "COMMITTED"

_COMMIT = re.compile(r"\s*COMMIT(\s+TRANSACTION|\s+WORK)?\s*;?\s*$", re.IGNORECASE)


class HookedCursor:
    def __init__(self, cursor: Any, hook: StatementHook) -> None:
        self._cursor = cursor
        self._hook = hook

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        is_commit = bool(_COMMIT.match(sql))
        self._hook(COMMIT_POINT if is_commit else sql)
        result = self._cursor.execute(sql) if params is None else self._cursor.execute(sql, params)
        if is_commit:
            self._hook(COMMITTED_POINT)
        return result

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> Any:
        self._hook(sql)
        return self._cursor.executemany(sql, seq)

    def execute_batch(self, statements: Sequence[str], send: Callable[[], T], ends_read: bool = False) -> T:
        """Statements the driver sends in one round trip (a pipeline): announced as *one* point, their
        texts joined by ``"; "`` (as a multi-statement string would be), before ``send`` sends them all.
        One point, so whoever parks or fails a worker at a point finds every earlier statement run.

        A write's COMMIT is never batched: its COMMIT and COMMITTED points stay its own. The one exception
        is ``ends_read``: the last statement is the COMMIT of a read-only transaction, which commits nothing
        (no write to lose, no acknowledgement to lose), so it is part of the batch's point."""
        if ends_read and not (statements and _COMMIT.match(statements[-1])):
            raise ValueError("ends_read: the batch's last statement must be the read-only transaction's COMMIT")
        if any(_COMMIT.match(sql) for sql in (statements[:-1] if ends_read else statements)):
            raise ValueError("a COMMIT is never batched: its COMMIT and COMMITTED points must stay its own")
        self._hook("; ".join(statements))
        return send()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return iter(self._cursor)


class HookedConnection:
    """A DB-API connection whose cursors announce every statement to ``hook``."""

    def __init__(self, connection: Any, hook: StatementHook) -> None:
        self.raw = connection
        self._hook = hook

    def cursor(self, *args: Any, **kwargs: Any) -> HookedCursor:
        return HookedCursor(self.raw.cursor(*args, **kwargs), self._hook)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _no_hook(point: str) -> None:
    return None


class ConnectionFactory:
    """Makes connections for one store; wraps each so the fault layer can intercept it."""

    def __init__(self, connect: Callable[[], Any], statement_hook: StatementHook | None = None) -> None:
        self._connect = connect
        self.statement_hook: StatementHook = statement_hook or _no_hook

    def connect(self) -> HookedConnection:
        return HookedConnection(self._connect(), self._hook)

    def _hook(self, point: str) -> None:
        # Looked up on every call so a hook installed after connecting still applies.
        self.statement_hook(point)
