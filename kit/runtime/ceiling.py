"""The speed of the database alone: replay exactly the statements a workload sent (a benchmark tool).

:class:`RecordingBackend` wraps a server backend (one with ``_connect``) so every
connection the kit opens on a provisioned database records each statement with
its parameters, grouped into transactions (``BEGIN``/``START TRANSACTION`` ...
``COMMIT``/``ROLLBACK``; a statement outside one is a unit of its own). Units are
numbered in the order they ended, which is an order the database itself
serialised them in. :func:`replay` then runs every unit, in that order, on one
raw connection to a fresh database of the same server, with no kit code in the
loop, each unit in one round trip where the driver allows it: the time it takes
is what the same work costs the database and the driver, the ceiling the kit's decisions per second are compared with.

A replayed statement may fail where the original did not (a claim that skipped
a row locked at the time takes it now, say); its unit is rolled back and counted,
so a ceiling with many such failures is flagged by the caller, never hidden.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = ["RecordingBackend", "Replay", "replay"]

_OPENS = ("BEGIN", "START TRANSACTION", "SET TRANSACTION")
_ENDS = ("COMMIT", "ROLLBACK")

Statement = tuple[str, Any]
"""(sql, parameters or None) exactly as the adapter handed them to the driver."""


class _Log:
    """Every finished unit of every recorded connection, in the order they finished, and how many round
    trips they took (each statement sent on its own is one; a psycopg pipeline is one however many
    statements it carries; one string of several statements is one)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.units: list[list[Statement]] = []
        self.recording = True
        self.round_trips = 0

    def trip(self) -> None:
        with self.lock:
            if self.recording:
                self.round_trips += 1

    def add(self, unit: list[Statement]) -> None:
        with self.lock:
            if self.recording and unit:
                self.units.append(unit)


class _Cursor:
    def __init__(self, cursor: Any, session: _Session) -> None:
        self._cursor = cursor
        self._session = session

    def execute(self, sql: str, params: Any = None) -> Any:
        self._session.note(sql, params)
        self._session.trip()
        return self._cursor.execute(sql) if params is None else self._cursor.execute(sql, params)

    def executemany(self, sql: str, seq: Sequence[Any]) -> Any:
        for params in seq:
            self._session.note(sql, params)
        self._session.trip()
        return self._cursor.executemany(sql, seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()


class _Session:
    """One recorded connection: the statements of its open unit."""

    def __init__(self, log: _Log) -> None:
        self._log = log
        self._open: list[Statement] = []
        self._in_tx = False
        self.pipelined = 0
        """Open ``pipeline()`` blocks: their statements travel in the block's one round trip."""

    def trip(self) -> None:
        if not self.pipelined:
            self._log.trip()

    def note(self, sql: str, params: Any) -> None:
        head = sql.lstrip().upper()
        self._open.append((sql, None if params is None else tuple(params)))
        if head.startswith(_OPENS):
            self._in_tx = True
        last = head.rstrip().rstrip(";").rsplit(";", 1)[-1].strip()  # a snapshot's reads may carry its COMMIT
        if head.startswith(_ENDS) or last.startswith(_ENDS) or not self._in_tx:
            self._log.add(self._open)
            self._open, self._in_tx = [], False


class _Connection:
    def __init__(self, connection: Any, log: _Log) -> None:
        self._connection = connection
        self._session = _Session(log)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self._connection.cursor(*args, **kwargs), self._session)

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:
        """psycopg's pipeline mode: one round trip for the block (its Sync), not one per statement."""
        if not self._session.pipelined:
            self._session.trip()
        self._session.pipelined += 1
        try:
            with self._connection.pipeline() as pipeline:
                yield pipeline
        finally:
            self._session.pipelined -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class RecordingBackend:
    """``backend`` whose connections into provisioned databases record their statements."""

    def __init__(self, backend: Any) -> None:
        if not hasattr(backend, "_connect"):
            raise TypeError(f"backend {backend.name!r} has no server connections to record")
        self._backend = backend
        self.log = _Log()
        self._original = original = backend._connect

        def connect(namespace: str | None) -> Any:
            connection = original(namespace)
            return connection if namespace is None else _Connection(connection, self.log)

        backend._connect = connect

    @property
    def round_trips(self) -> int:
        """Round trips the recorded connections took so far (see :class:`_Log`)."""
        return self.log.round_trips

    def stop(self) -> list[list[Statement]]:
        """Stop recording (connections opened from now on are plain); the units recorded so far."""
        with self.log.lock:
            self.log.recording = False
            self._backend.__dict__.pop("_connect", None)
            return list(self.log.units)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@dataclass
class Replay:
    """How long one raw connection took to replay the units, and how many failed."""

    seconds: float = 0.0
    statements: int = 0
    units: int = 0
    failed_units: int = 0
    first_failure: str = field(default="")


def replay(backend: Any, units: Sequence[Sequence[Statement]]) -> Replay:
    """Replay ``units`` in order on one raw connection to a fresh database of ``backend``
    (``backend`` unwrapped: its ``_connect`` is the plain one), then drop that database.

    Each unit is one round trip where the driver allows: on psycopg the unit's statements, their parameters
    merged in by psycopg's own quoting, as one simple query (the cheapest way the driver has to send them);
    elsewhere statement by statement."""
    database = backend.provision()
    result = Replay(units=len(units))
    try:
        connection = backend._connect(database.namespace)
        cursor = connection.cursor()
        quoting = _psycopg_quoting(connection)
        started = time.perf_counter()
        for unit in units:
            result.statements += len(unit)
            try:
                if quoting is not None:
                    cursor.execute("; ".join(sql if params is None else quoting.mogrify(sql, params)
                                             for sql, params in unit))
                else:
                    for sql, params in unit:
                        cursor.execute(sql) if params is None else cursor.execute(sql, params)
            except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                result.failed_units += 1
                result.first_failure = result.first_failure or f"{type(exc).__name__}: {str(exc)[:120]}"
                with contextlib.suppress(Exception):  # no transaction may be open
                    cursor.execute("ROLLBACK")
        result.seconds = time.perf_counter() - started
        connection.close()
    finally:
        database.drop()
    return result


def _psycopg_quoting(connection: Any) -> Any:
    """A psycopg ``ClientCursor`` on ``connection`` (for its ``mogrify``), or None for another driver."""
    if not hasattr(connection, "pipeline"):
        return None
    import psycopg

    return psycopg.ClientCursor(connection)
