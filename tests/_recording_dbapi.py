"""A recording DB-API 2.0 connection: records every (sql, params) and answers from a script.

A test double, not a database. It lets the real store code run every
operation, end to end, without a server, so the SQL each call site sends and
the parameters it binds can be checked. It proves nothing about what a server
would do with them: the canned answers are what the test says they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "FakeDriverError", "Recorded", "RecordingConnection", "RecordingDatabase"]


class FakeDriverError(Exception):
    """Shaped like a pyodbc error: ``args == (sqlstate, message)``."""


@dataclass(frozen=True)
class Recorded:
    sql: str
    params: tuple[Any, ...]
    operation: str
    """What the test was doing when the statement was sent (set with ``RecordingDatabase.doing``)."""


@dataclass
class Answer:
    rows: list[tuple[Any, ...]] | None = None
    """Rows for a statement that returns a result set; None for one that does not."""
    rowcount: int = -1


Responder = Callable[[str, tuple[Any, ...]], "Answer | None"]


@dataclass
class RecordingDatabase:
    """The shared log and script of every connection a test opens."""

    responders: list[tuple[re.Pattern[str], Responder]] = field(default_factory=list)
    log: list[Recorded] = field(default_factory=list)
    operation: str = "setup"
    fail: list[tuple[re.Pattern[str], BaseException]] = field(default_factory=list)
    """(pattern, error): the next statement matching ``pattern`` raises ``error`` (once)."""

    def doing(self, operation: str) -> None:
        self.operation = operation

    def on(self, pattern: str, responder: Responder | Answer) -> None:
        """Answer statements matching ``pattern`` (searched, case-insensitive); later rules win."""
        fn: Responder = (lambda _sql, _params, a=responder: a) if isinstance(responder, Answer) else responder
        self.responders.insert(0, (re.compile(pattern, re.IGNORECASE | re.DOTALL), fn))

    def fail_once(self, pattern: str, error: BaseException) -> None:
        self.fail.append((re.compile(pattern, re.IGNORECASE | re.DOTALL), error))

    def answer(self, sql: str, params: tuple[Any, ...]) -> Answer:
        for i, (pattern, error) in enumerate(self.fail):
            if pattern.search(sql):
                del self.fail[i]
                raise error
        for pattern, responder in self.responders:
            if pattern.search(sql):
                found = responder(sql, params)
                if found is not None:
                    return found
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if verb in ("INSERT", "UPDATE", "DELETE"):
            return Answer(None, 1)
        if verb == "SELECT":
            return Answer([], -1)
        return Answer(None, -1)

    def connect(self) -> RecordingConnection:
        return RecordingConnection(self)

    def statements(self, operation: str | None = None) -> list[Recorded]:
        return [r for r in self.log if operation is None or r.operation == operation]


class RecordingCursor:
    def __init__(self, db: RecordingDatabase) -> None:
        self._db = db
        self._rows: list[tuple[Any, ...]] = []
        self.description: list[tuple[str]] | None = None
        self.rowcount = -1
        self.closed = False

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> RecordingCursor:
        if self.closed:
            raise FakeDriverError("HY010", "[HY010] Attempt to use a closed cursor. (0) (SQLExecDirectW)")
        bound = tuple(params or ())
        self._db.log.append(Recorded(sql, bound, self._db.operation))
        answer = self._db.answer(sql, bound)
        self._rows = list(answer.rows or [])
        self.description = None if answer.rows is None else [("column",)]
        self.rowcount = answer.rowcount
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class RecordingConnection:
    def __init__(self, db: RecordingDatabase) -> None:
        self._db = db
        self.closed = False

    def cursor(self) -> RecordingCursor:
        return RecordingCursor(self._db)

    def close(self) -> None:
        self.closed = True
