"""Deterministic mode's plumbing: the scheduler, the store clock it drives, and the gates actors pass.

:class:`Virtual` ties a :class:`~kit.workload.scheduler.Scheduler` to the
store's *test clock* (``ClockMode.TEST``: a one-row table the kit advances).
Time moves only when the ``clock`` participant (:class:`ClockTicker`) is
chosen: it advances the store clock by a seeded amount, in a transaction of
its own, and records the reading as the free mode's clock sampler does. So
lease expiries, due timers, pauses and idle waits all happen at store-clock
instants fixed by the schedule. The history's ``t`` is store-clock seconds
since the run began.

Guarantees: every statement an actor's stores send passes :meth:`Virtual.gate`
first (then the fault hook); every wait of an actor is a park whose condition
is the store clock (never the wall clock); a thread that is not a participant
(the driver's setup) passes every gate at once.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from kit.clock import from_micros, to_micros
from kit.contract import Backend, ClockMode, Database, Storage
from kit.workload.history import INFO, OK, Recorder
from kit.workload.scheduler import BlockProbe, Halted, Participant, Scheduler

__all__ = ["ClockTicker", "Gate", "Virtual", "block_probe", "innodb_lock_wait", "session_of"]

TICK_FRACTION = 0.125
"""A clock step is 0.5-1.5x this fraction of the lease (seeded): eight steps a lease on average."""


class Virtual:
    """The scheduler and the store clock it controls (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, start_us: int = 0) -> None:
        self.scheduler = scheduler
        self.start_us = start_us
        self.now_us = start_us

    def seconds(self) -> float:
        """Store-clock seconds since the run began (the history's ``t``)."""
        return (self.now_us - self.start_us) / 1_000_000

    def now(self) -> datetime:
        return from_micros(self.now_us)

    def sleep(self, seconds: float, until: threading.Event | None = None, label: str = "sleep") -> None:
        """Park until the store clock passed ``seconds`` from now (or ``until`` is set)."""
        wake = self.now_us + max(1, int(seconds * 1_000_000))
        part = self.scheduler.current()
        if part is not None:
            part.meta["wake"] = wake
        self.scheduler.park(f"{label} {seconds:.3f} s", lambda: self.now_us >= wake or (
            until is not None and until.is_set()))
        if part is not None:
            part.meta.pop("wake", None)

    def join(self, part: Participant) -> None:
        """Park until participant ``part`` has finished."""
        self.scheduler.park(f"join {part.name}", lambda: part.state == "done")

    def run_thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        """A participant thread: registered now, parked before it does anything, unregistered at its end."""
        part = self.scheduler.register(name)

        def main() -> None:
            self.scheduler.attach(part)
            try:
                self.scheduler.park("begin")
                target()
            except Halted:
                pass
            finally:
                self.scheduler.leave()

        return threading.Thread(target=main, name=f"kit-stress-{name}", daemon=True)

    def gate(self, inner: Callable[[str], None] | None = None) -> Gate:
        return Gate(self.scheduler, inner)


class Gate:
    """A statement hook: park at the scheduler first, then run ``inner`` (the fault hook)."""

    def __init__(self, scheduler: Scheduler, inner: Callable[[str], None] | None) -> None:
        self.scheduler, self.inner = scheduler, inner
        self.store: Storage | None = None

    def __call__(self, statement: str) -> None:
        self.scheduler.statement(statement, self.store)
        if self.inner is not None:
            self.inner(statement)


class ClockTicker:
    """The ``clock`` participant: each of its turns advances the store clock by a seeded step."""

    name = "clock"

    def __init__(self, database: Database, tenant: str, virtual: Virtual, recorder: Recorder,
                 seed: int, lease_s: float) -> None:
        self.database, self.tenant, self.virtual, self.recorder = database, tenant, virtual, recorder
        self.rng = random.Random(f"clock/{seed}")
        self.tick_s = lease_s * TICK_FRACTION
        self.ticks = 0
        self.thread = virtual.run_thread(self.name, self._loop)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        gate = self.virtual.gate()
        store = self.database.open(self.tenant, clock=ClockMode.TEST, statement_hook=gate)
        gate.store = store
        try:
            while True:
                self.virtual.scheduler.park("tick")
                by = timedelta(seconds=self.tick_s * self.rng.uniform(0.5, 1.5))
                pending = self.recorder.invoke("clock", "now", self.tenant)
                try:
                    us = to_micros(store.advance_test_clock(by))
                except Exception as exc:
                    self.recorder.complete(pending, INFO, error=f"{type(exc).__name__}: {exc}")
                    raise
                self.virtual.now_us = us
                self.ticks += 1
                self.recorder.complete(pending, OK, us)
                self.recorder.sampled(us)
        finally:
            store.close()


def block_probe(backend: Backend, database: Database) -> BlockProbe | None:
    """How to ask the server whether a participant's session waits on a lock (``None``: no way to ask).

    SQLite never blocks under the scheduler (its write lock is modelled), so its probe always says no.
    A server probe asks on a connection of its own (close it with ``probe.close()``), so an
    interrupted probe never breaks the connection the kit drops the database with.
    """
    name = str(getattr(backend, "name", ""))
    if name == "sqlite":
        return lambda part, cursor: False
    server = getattr(database, "backend", None)
    if server is None or not hasattr(server, "_connect"):
        return None
    if name == "postgres":
        sql = "SELECT cardinality(pg_blocking_pids(%s::integer))"
    elif name == "mysql":
        return _InnodbProbe(server, _PROCESS_WAIT)
    else:
        return None
    return _ServerProbe(server, sql)


class _ServerProbe:
    """Asks the server about one session's lock waits, on its own autocommit connection."""

    def __init__(self, server: Any, sql: str) -> None:
        self.server, self.sql = server, sql
        self._conn: Any = None

    def __call__(self, part: Participant, cursor: Any) -> bool | None:
        session = part.meta.get("session") or getattr(part.session, "session_id", None)
        if session is None:
            return None
        try:
            if self._conn is None:
                self._conn = self.server._connect(None)
            cur = self._conn.cursor()
            try:
                return self._ask(cur, int(session))
            finally:
                cur.close()
        except Exception:  # noqa: BLE001 - an unanswered probe falls back to the short wait
            self.close()
            return None

    def _ask(self, cur: Any, session: int) -> bool | None:
        """Whether ``session`` waits on a lock, asked on the probe's own cursor."""
        cur.execute(self.sql, (session,))
        row = cur.fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


_PROCESS_WAIT = ("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s AND "
                 "(STATE LIKE 'Waiting for%%lock%%' OR STATE IN ('User lock', 'Locked'))")
"""A session waiting on a lock outside InnoDB's row locks: metadata (DDL), table, backup or ``GET_LOCK``."""


class _InnodbProbe(_ServerProbe):
    """MySQL / MariaDB: a server-level lock wait (the process list), else an InnoDB row-lock wait.

    Row-lock waits are read from ``SHOW ENGINE INNODB STATUS``, which InnoDB writes live. Never from
    ``information_schema.INNODB_TRX`` / ``INNODB_LOCK_WAITS``: those are served from a cache that
    InnoDB refreshes only after 0.1 s without a reader, so a probe asking every few milliseconds (or
    any other client polling them) keeps reading a snapshot taken before the wait began, and a
    blocked statement is taken for a running one until the server's lock wait timeout ends it.
    """

    def _ask(self, cur: Any, session: int) -> bool | None:
        if super()._ask(cur, session):  # the process list: a server-level lock wait
            return True
        cur.execute("SHOW ENGINE INNODB STATUS")
        status = cur.fetchone()
        return innodb_lock_wait(str(status[2]) if status else "", session)


def innodb_lock_wait(status: str, session: int) -> bool | None:
    """Whether ``SHOW ENGINE INNODB STATUS`` text shows ``session``'s transaction waiting on a lock.

    ``None`` when the transaction list was cut short (the server caps the text) before naming it.
    """
    start = status.find("\nTRANSACTIONS\n")
    if start < 0:
        return None
    section = status[start:]
    end = section.find("\n--------\nFILE I/O")
    section = section if end < 0 else section[:end]
    marker = f" thread id {session},"
    for block in section.split("\n---TRANSACTION ")[1:]:
        if marker in block:
            return "\nLOCK WAIT " in block
    if "truncated" in section.lower():
        return None
    return False  # no transaction of that session is open in InnoDB: nothing it could wait on there


def session_of(cursor: Any) -> int | None:
    """The server session id behind a hooked cursor (psycopg: backend pid; PyMySQL: thread id)."""
    connection = getattr(getattr(cursor, "_cursor", None), "connection", None)
    info = getattr(connection, "info", None)
    pid = getattr(info, "backend_pid", None)
    if pid is not None:
        return int(pid)
    thread_id = getattr(connection, "thread_id", None)
    if callable(thread_id):
        try:
            return int(thread_id())
        except Exception:  # noqa: BLE001 - fall back to the store's own session id
            return None
    return None
