"""What every family of the SQL store stands on: one connection, transactions with retries, the store
clock in SQL, and the run rows (read, locked, fenced, made runnable) that several families share."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from adapters._sql import rows as R
from adapters._sql.dialect import Dialect
from adapters._sql.pipeline import Pending, SecondStatement, StoreCursor, collect, row_reader
from kit.clock import to_micros
from kit.connections import ConnectionFactory
from kit.contract import validation as v
from kit.contract.entities import (
    ClockMode,
    Definition,
    Run,
    RunClaim,
    RunStatus,
)
from kit.contract.errors import (
    ClockModeError,
    ConnectionLost,
    KitError,
    LockTimeout,
    StorageError,
    TransactionRolledBack,
    TransientError,
)
from kit.contract.outcomes import Outcome
from kit.contract.protocol import MigrationSpec

__all__ = ["CORE_TABLES", "RETRIES", "TERMINAL", "FenceBroken", "SqlPlumbing", "UnitOfWork"]

T = TypeVar("T")

CORE_TABLES = ("kit_definitions", "kit_runs", "kit_events", "kit_commands", "kit_signals", "kit_timers")
TERMINAL = tuple(s.value for s in RunStatus if s.terminal)
RETRIES = 5


class UnitOfWork:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class FenceBroken(StorageError):
    """The final fenced UPDATE matched no row although the row lock was held."""


class SqlPlumbing:
    """One open store: one connection, one tenant, one clock mode (the families add the operations)."""

    def __init__(
        self,
        dialect: Dialect,
        connections: ConnectionFactory,
        tenant_id: str,
        clock: ClockMode,
        migrations: Sequence[MigrationSpec],
    ) -> None:
        self.tenant_id = v.check_text("tenant_id", tenant_id, v.MAX_TENANT_ID)
        self.clock_mode = ClockMode(clock)
        self.dialect = dialect
        self.connections = connections
        self.migrations = list(migrations)
        self._now_sql = dialect.test_now if self.clock_mode is ClockMode.TEST else dialect.database_now
        try:
            self._conn = connections.connect()
            raw_cursor = self._conn.cursor()
            self._cur: Any = (
                StoreCursor(raw_cursor, dialect.sender(self._conn, raw_cursor)) if dialect.fold_begin else raw_cursor
            )
        except dialect.driver_errors as exc:
            raise self._translate(exc) from exc
        self._depth = 0
        self._read_only = False
        """The open transaction is a snapshot read (:meth:`_read`): nothing it does needs committing."""
        self._uow: UnitOfWork | None = None
        self._rollback_only = False
        self._dead: str | None = None

    def q(self, sql: str) -> str:
        return self.dialect.sql(sql)

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run (or, inside ``_pipelined()``, queue) one statement; its result (fetch*, rowcount)."""
        result = cur.execute(self.q(sql), tuple(params))
        return result if isinstance(result, Pending) else cur

    def _query(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Like :meth:`_exec`, but the result stays readable after later statements: queued inside
        ``_pipelined()`` where the dialect pipelines, else run and read whole at once."""
        result = self._exec(cur, sql, params)
        return result if isinstance(result, Pending) else Pending.of(collect(result))

    def _pipelines(self) -> bool:
        """Whether statements queue inside ``_pipelined()`` (the dialect sends them together)."""
        return isinstance(self._cur, StoreCursor)

    @contextmanager
    def _pipelined(self, last_reads: bool = False) -> Iterator[None]:
        """Statements executed in the block are queued and sent together when a result is read and at
        the block's end (see :mod:`adapters._sql.pipeline`), inside the operation's one transaction;
        where the dialect cannot (no ``fold_begin``), they run one by one as usual.

        ``last_reads``: the block holds the last statements of the operation. If that operation is a
        snapshot read in a transaction of its own (:meth:`_read`, not joined into an open transaction),
        its COMMIT travels with them: the whole snapshot is one round trip."""
        if isinstance(self._cur, StoreCursor):
            end = self.dialect.commit if last_reads and self._depth == 1 and self._read_only else None
            with self._cur.batching(end):
                yield
        else:
            yield

    def _translate(self, exc: BaseException) -> KitError:
        translated = self.dialect.translate(exc)
        if translated is None:
            translated = StorageError(f"{type(exc).__name__}: {exc}")
        if isinstance(translated, ConnectionLost):
            self._dead = str(translated)
        return translated

    def _check_open(self) -> None:
        if self._dead is not None:
            raise ConnectionLost(
                f"this store's connection was lost ({self._dead}): open a new store from its Database"
            )

    @contextmanager
    def _tx(self, begin: str) -> Iterator[Any]:
        """A transaction (joining the open one if any); kit errors propagate unchanged."""
        if self._depth:
            self._depth += 1
            try:
                yield self._cur
            except BaseException:
                self._rollback_only = True
                raise
            finally:
                self._depth -= 1
            return
        self._check_open()
        cur = self._cur
        uow = UnitOfWork()
        self._uow, self._rollback_only = uow, False
        if isinstance(cur, StoreCursor):
            cur.pending = self.dialect.begin_statements(begin)  # sent with the transaction's first statement
        else:
            try:
                self.dialect.begin(cur, begin)
            except self.dialect.driver_errors as exc:
                self._uow = None
                self._quiet_rollback()
                raise self._translate(exc) from exc
        self._depth = 1
        self._read_only = begin == self.dialect.begin_snapshot != self.dialect.begin_write
        try:
            yield cur
            if self._rollback_only:
                raise TransactionRolledBack(
                    "an inner transaction() block failed, so the whole unit of work was rolled "
                    "back: let the exception propagate or handle it outside the unit"
                )
            if isinstance(cur, StoreCursor) and cur.ended:
                cur.ended = False  # a snapshot's COMMIT went with its last reads (_pipelined(last_reads=True))
            else:
                cur.execute(self.dialect.commit)
        except self.dialect.driver_errors as exc:
            self._quiet_rollback()
            raise self._translate(exc) from exc
        except BaseException:
            self._quiet_rollback()
            raise  # kit errors and the caller's own exceptions propagate unchanged
        finally:
            self._depth = 0
            self._uow = None
            self._read_only = False
        for callback in uow.callbacks:
            callback()

    def _quiet_rollback(self) -> None:
        if self._dead is not None:
            return
        if isinstance(self._cur, StoreCursor) and (self._cur.pending is not None or self._cur.ended):
            self._cur.pending, self._cur.ended = None, False  # never begun, or already committed (a snapshot)
            return
        with contextlib.suppress(Exception):  # no transaction, or the connection is gone
            self._cur.execute(self.dialect.rollback)

    def _write(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` in a write transaction, retrying only attempts known rolled back."""
        for attempt in range(RETRIES):
            try:
                with self._tx(self.dialect.begin_write) as cur:
                    return fn(cur)
            except LockTimeout:
                raise  # the wait budget is spent: retrying would multiply it
            except TransientError:
                if self._depth or attempt == RETRIES - 1:
                    raise
                time.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")

    def _read(self, fn: Callable[[Any], T]) -> T:
        for attempt in range(RETRIES):
            try:
                with self._tx(self.dialect.begin_snapshot) as cur:
                    return fn(cur)
            except TransientError:
                if self._depth or attempt == RETRIES - 1:
                    raise
                time.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")

    def _read_one(self, fn: Callable[[Any], T]) -> T:
        """A read that sends one statement as a rule: where the dialect queues (``fold_begin``) and no
        transaction is open, that statement runs alone, outside any transaction (one statement reads one
        consistent state), so the read is one round trip, with no BEGIN or COMMIT. If ``fn`` asks for a
        second statement after all (an override that reads more), nothing of that one is sent and ``fn``
        runs again, whole, in a snapshot transaction (:meth:`_read`): every answer comes from one
        snapshot either way."""
        cur = self._cur
        if self._depth or not isinstance(cur, StoreCursor):
            return self._read(fn)
        self._check_open()
        try:
            with cur.alone():
                return fn(cur)
        except SecondStatement:
            return self._read(fn)
        except self.dialect.driver_errors as exc:
            translated = self._translate(exc)
            if isinstance(translated, TransientError):
                return self._read(fn)  # which retries as every read does
            raise translated from exc

    def _now_us(self, cur: Any) -> int:
        return self._clock_value(self._clock(cur).fetchone())

    def _clock(self, cur: Any) -> Any:
        """The store clock's ``SELECT``, queued inside ``_pipelined()`` where the dialect queues (read its row
        with :meth:`_clock_value`); its result stays readable after later statements either way."""
        return self._query(cur, f"SELECT {self._now_sql}")

    def _clock_value(self, row: Any) -> int:
        """The store clock from the row of ``SELECT <now>``."""
        if row is None or row[0] is None:
            raise ClockModeError("the test clock table is empty: open the store through its Database")
        return int(row[0])

    def _in(self, values: Sequence[Any]) -> str:
        return "(" + ", ".join("?" for _ in values) + ")"

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead connection
            self._conn.close()
        self._dead = self._dead or "closed"

    def _require_test_clock(self) -> None:
        if self.clock_mode is not ClockMode.TEST:
            raise ClockModeError("this store runs on the database clock: open it with clock=TEST")

    def _definition(self, cur: Any, name: str, version: str) -> Definition | None:
        row = self._exec(
            cur,
            f"SELECT {R.DEFINITION_COLUMNS} FROM kit_definitions WHERE tenant_id = ? AND name = ? AND version = ?",
            (self.tenant_id, name, version),
        ).fetchone()
        return None if row is None else R.to_definition(row)

    def _run_by_key(self, cur: Any, key: str) -> Run | None:
        row = self._exec(
            cur,
            f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE tenant_id = ? AND idempotency_key = ?",
            (self.tenant_id, key),
        ).fetchone()
        return None if row is None else R.to_run(row)

    def _run(self, cur: Any, run_id: str) -> Run | None:
        row = self._exec(
            cur, f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
        ).fetchone()
        return None if row is None else R.to_run(row)

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        """Lock the run row until commit (the first lock of every run-scoped write); call what it returns
        for the locked run.

        Inside ``_pipelined()``, where the dialect queues, the lock is only queued: statements queued after
        it travel in its round trip, and the server runs them after the lock is granted (it runs a queue in
        order), so a clock read queued after it is read under the lock, as if sent after the wait. This is
        the one place the run lock is taken: an override here reaches every run-scoped write."""
        d = self.dialect
        locked = self._query(
            cur,
            f"SELECT {R.RUN_COLUMNS} FROM kit_runs{d.lock_hint} WHERE tenant_id = ? AND run_id = ?{d.lock_rows}",
            (self.tenant_id, run_id),
        )
        return row_reader(locked, R.to_run)

    def _locked_run(self, cur: Any, run_id: str) -> Run | None:
        """The run row, locked until commit: :meth:`_lock_run`, read at once."""
        return self._lock_run(cur, run_id)()

    def _locked_run_and_clock(self, cur: Any, run_id: str) -> tuple[Run | None, int]:
        """The run row, locked until commit, and the store clock read after the lock: one round trip (with
        the BEGIN) where the dialect queues."""
        with self._pipelined():
            locked = self._lock_run(cur, run_id)
            clock = self._clock(cur)
        return locked(), self._clock_value(clock.fetchone())

    def _make_runnable(self, cur: Any, run: Run, now: int) -> None:
        """Input arrived: a blocked (or later-waking) run runs now; a running one is marked."""
        if run.status.terminal:
            return
        if run.status is RunStatus.RUNNING:
            self._exec(
                cur,
                "UPDATE kit_runs SET wakeup_pending = 1, updated_at = ? WHERE tenant_id = ? AND run_id = ?",
                (now, self.tenant_id, run.run_id),
            )
            return
        wake = run.wake_at
        wake_us = now if wake is None or to_micros(wake) > now else to_micros(wake)
        self._exec(
            cur,
            "UPDATE kit_runs SET status = 'pending', wake_at = ?, due_at = ?, updated_at = ? "
            "WHERE tenant_id = ? AND run_id = ?",
            (wake_us, wake_us, now, self.tenant_id, run.run_id),
        )

    def _candidates(self, table: str, columns: str, where: str, order: str, count: int) -> str:
        """The SELECT that picks claimable rows, oldest due first, skipping locked ones."""
        d = self.dialect
        return d.limit(f"SELECT {columns} FROM {table}{d.claim_hint} WHERE {where} ORDER BY {order}", count) + d.skip_locked

    def _due(self, cur: Any, table: str, columns: str, order: str, count: int, extra: str = "",
             extra_params: Sequence[Any] = ()) -> tuple[int, list[Any]]:
        """The store clock, and the claimable rows of ``table`` due by it (``tenant_id`` is this store's,
        ``due_at`` at most the clock, and ``extra``), oldest due first, skipping locked ones.

        Where the dialect has a :attr:`~adapters._sql.dialect.Dialect.clock_variable` and queues, the clock
        is set into it, read back, and compared with by the candidates' SELECT, all in one round trip: the
        rows are due by exactly the clock returned. Elsewhere the clock is read first and passed."""
        variable = self.dialect.clock_variable if self._pipelines() else None
        select = self._candidates(table, columns, f"tenant_id = ? AND due_at <= {variable or '?'}{extra}", order, count)
        if variable is None:
            now = self._now_us(cur)
            return now, self._exec(cur, select, (self.tenant_id, now, *extra_params)).fetchall()
        with self._pipelined():
            # SELECT ... INTO, not SET @v = (SELECT ...): InnoDB reads a SET's subquery with a shared lock,
            # which would hold the test clock's row until the claim commits.
            self._exec(cur, f"SELECT {self._now_sql} INTO {variable}")
            clock = self._query(cur, f"SELECT {variable}")
            found = self._query(cur, select, (self.tenant_id, *extra_params))
        return self._clock_value(clock.fetchone()), found.fetchall()

    def run_fenced(self, run: Run, claim: RunClaim, now: int) -> bool:
        """The fence: same owner, same generation, and ``now`` strictly before expiry."""
        return (
            run.claim_owner == claim.worker_id
            and run.claim_generation == claim.generation
            and run.claim_expires_at is not None
            and now < to_micros(run.claim_expires_at)
        )

    def revision_current(self, run: Run, expected_revision: int) -> bool:
        """The decision was made on the run's current revision."""
        return run.revision == expected_revision

    def _refuse_run(self, run: Run | None, claim: RunClaim, now: int) -> Outcome | None:
        if run is None:
            return Outcome.NOT_FOUND
        if run.status.terminal:
            return Outcome.TERMINAL
        if not self.run_fenced(run, claim, now):
            return Outcome.CLAIM_LOST
        return None
