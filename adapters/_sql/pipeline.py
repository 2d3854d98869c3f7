"""Statements queued and sent together: fewer round trips, the same transaction, the same order.

:class:`StoreCursor` is the store's cursor on a dialect with ``fold_begin``. It guarantees:

* A transaction's BEGIN is never sent on its own: it travels with the transaction's first
  statement (how depends on the driver: :meth:`~adapters._sql.dialect.Dialect.send_batch`).
* Inside :meth:`StoreCursor.batching` (the store's ``_pipelined()``), ``execute`` only queues:
  the queue is sent in one round trip where the driver can (one multi-statement string:
  on PostgreSQL with the parameters quoted in by psycopg, on MySQL by PyMySQL), in order,
  when a result of any queued statement is read, when the block ends, or before any
  statement sent outside the queue. The server runs them in the order they were queued, in
  the open transaction, so every lock and every read happens in the same order as one
  statement at a time would have them.
* A queued statement that fails raises when the queue is sent, before anything after it runs
  (PostgreSQL and MySQL both stop a multi-statement string at the first failed
  statement), inside the operation's transaction, which the store then rolls back whole. A
  block that raises drops what it queued and never sent: its transaction is rolled back.
* Reading a result (``fetchone``, ``fetchall``, ``rowcount``, ``description``) has the DB-API
  meaning: the result of that statement (the handle ``execute`` returned), or of the cursor's
  last statement.
* Inside :meth:`StoreCursor.alone` (a read outside any transaction) at most one statement is sent:
  a second raises :class:`SecondStatement` before it is queued or sent.
* A read-only transaction's last statements may carry its COMMIT (``batching(end=...)``): one round
  trip for the whole snapshot. A failed statement stops the string before the COMMIT, as above.

The statement hook (the fault layer, :mod:`kit.connections`) still sees every statement, just
before it is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = [
    "Pending", "SecondStatement", "Sender", "Sent", "Statement", "StoreCursor", "collect", "row_reader", "send_one_by_one",
]

T = TypeVar("T")

Statement = tuple[str, Sequence[Any] | None]
"""(sql in the driver's paramstyle, parameters or None)."""


@dataclass
class Sent:
    """What one statement answered: its rows (None: no result set), rowcount, and the driver's description
    where the sender read it (None otherwise)."""

    rows: list[Any] | None
    rowcount: int
    description: Any = None


class Sender(Protocol):
    """Sends the BEGIN statements (possibly none), then the statements, then ``end`` (a read-only
    transaction's COMMIT, passed only when there is one), in order, in as few round trips as the driver
    allows; returns one :class:`Sent` per statement (the BEGINs and the end answer nothing)."""

    def __call__(self, begins: Sequence[str], statements: Sequence[Statement], end: str | None = None, /
                 ) -> list[Sent]: ...


def collect(cursor: Any) -> Sent:
    """The current result of a DB-API cursor, read whole."""
    description = cursor.description
    rows = list(cursor.fetchall()) if description is not None else None
    return Sent(rows, cursor.rowcount, description)


def send_one_by_one(cursor: Any) -> Sender:
    """A sender that sends each statement on its own (one round trip each)."""

    def send(begins: Sequence[str], statements: Sequence[Statement], end: str | None = None) -> list[Sent]:
        for begin in begins:
            cursor.execute(begin)
        out = []
        for sql, params in statements:
            cursor.execute(sql) if params is None else cursor.execute(sql, params)
            out.append(collect(cursor))
        if end is not None:
            cursor.execute(end)
        return out

    return send


def row_reader(result: Any, convert: Callable[[Any], T]) -> Callable[[], T | None]:
    """A function that reads ``result``'s first row (a :class:`Pending` sends its queue first, if still
    queued) and converts it (None: no row); the same answer however often it is called, so a result can be
    queued now and read later, by whoever needs it first."""
    read: list[T | None] = []

    def once() -> T | None:
        if not read:
            row = result.fetchone()
            read.append(None if row is None else convert(row))
        return read[0]

    return once


class SecondStatement(Exception):
    """A block that may send one statement (:meth:`StoreCursor.alone`) asked for a second; nothing of it was sent."""


class Pending:
    """One queued statement's result: reading it sends the queue first (if it is still queued)."""

    def __init__(self, cursor: StoreCursor) -> None:
        self._cursor: StoreCursor | None = cursor
        self._sent: Sent | None = None
        self._next = 0

    @classmethod
    def of(cls, sent: Sent) -> Pending:
        """A handle on a result already read."""
        handle = cls.__new__(cls)
        handle._cursor, handle._sent, handle._next = None, sent, 0
        return handle

    def _result(self) -> Sent:
        if self._sent is None and self._cursor is not None:
            self._cursor.flush()
        if self._sent is None:
            raise RuntimeError("this statement was never sent: its transaction failed before it")
        return self._sent

    def fetchone(self) -> Any:
        rows = self._result().rows or []
        if self._next >= len(rows):
            return None
        self._next += 1
        return rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rows = self._result().rows or []
        rest, self._next = rows[self._next:], len(rows)
        return rest

    @property
    def rowcount(self) -> int:
        return self._result().rowcount

    @property
    def description(self) -> Any:
        return self._result().description


class StoreCursor:
    """See the module docstring. ``cursor`` is the (hooked) driver cursor, ``send`` the dialect's sender."""

    def __init__(self, cursor: Any, send: Sender) -> None:
        self._cursor = cursor
        self._send = send
        self.pending: tuple[str, ...] | None = None
        """The BEGIN statements of the open transaction, while none of its statements was sent."""
        self._queue: list[tuple[Statement, Pending]] = []
        self._batching = False
        self._last: Pending | None = None
        self._alone: int | None = None
        """Inside :meth:`alone`: how many statements the block has sent or queued (0 or 1)."""
        self.ended = False
        """A read-only transaction's COMMIT was sent with its last statements (:meth:`batching`): whoever
        would commit it next resets this instead."""

    @contextmanager
    def alone(self) -> Iterator[None]:
        """A block that sends at most one statement, as it is: no BEGIN may be pending (the statement runs
        outside any transaction). A second ``execute`` raises :class:`SecondStatement` before anything of it
        is queued or sent (a :meth:`batching` block it leaves drops the first, if still queued)."""
        if self.pending is not None or self._queue:
            raise RuntimeError("alone() inside an open transaction: its statement would join it")
        self._alone = 0
        try:
            yield
        finally:
            self._alone = None

    def _count_alone(self) -> None:
        if self._alone is not None:
            if self._alone:
                raise SecondStatement("a second statement in a block that sends one")
            self._alone = 1

    @contextmanager
    def batching(self, end: str | None = None) -> Iterator[None]:
        """Queue the statements executed in the block; send them when needed and at its end.

        ``end``: the open transaction is read-only and the block holds its last statements: at the block's
        end, its COMMIT (``end``) travels with what is still queued, and :attr:`ended` says so (nothing
        was queued by then: nothing sent, :attr:`ended` stays false and the transaction stays open)."""
        if self._batching:
            yield
            return
        self._batching = True
        try:
            yield
            self.flush(end)
        finally:
            self._batching = False
            self._queue = []  # only when the block raised: never sent, rolled back with its transaction

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        if self.ended:
            raise RuntimeError("this snapshot was committed with its last reads: a statement after them would "
                               "run outside it (read it inside the last_reads block)")
        self._count_alone()
        if not self._batching and self.pending is None and not self._queue:
            self._last = None  # the common case: straight to the driver
            self._cursor.execute(sql, params) if params else self._cursor.execute(sql)
            return self
        handle = Pending(self)
        self._queue.append(((sql, tuple(params) if params else None), handle))
        self._last = handle
        if not self._batching:
            self.flush()
        return handle

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> Any:
        self._count_alone()
        self.flush()
        begins, self.pending = self.pending, None
        for begin in begins or ():
            self._cursor.execute(begin)
        self._last = None
        return self._cursor.executemany(sql, seq)

    def flush(self, end: str | None = None) -> None:
        """Send the queued statements (with the pending BEGIN, and ``end`` after them) now."""
        if not self._queue:
            return
        queue, self._queue = self._queue, []
        begins, self.pending = self.pending or (), None
        statements = [statement for statement, _ in queue]
        results = self._send(begins, statements) if end is None else self._send(begins, statements, end)
        self.ended = end is not None
        if len(results) != len(queue):
            raise RuntimeError(f"{len(queue)} statements sent, {len(results)} results back")
        for (_, handle), sent in zip(queue, results):
            handle._sent = sent

    def _current(self) -> Any:
        self.flush()
        return self._cursor if self._last is None else self._last

    def fetchone(self) -> Any:
        return self._current().fetchone()

    def fetchall(self) -> Any:
        return self._current().fetchall()

    @property
    def rowcount(self) -> int:
        return int(self._current().rowcount)

    @property
    def description(self) -> Any:
        return self._current().description

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return iter(self._current().fetchall())
