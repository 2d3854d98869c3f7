"""Every contract operation, written once in SQL, for every dialect.

How the guarantees are kept:

* Each operation is one transaction (or joins the open unit of work).
* Writers that touch a run's data lock the run row first (``SELECT ... FOR
  UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serialises writers instead), then the
  command/timer rows: one lock order everywhere, so no deadlock cycles, and
  "select then insert" under the run lock is race-free.
* The store clock is read once per operation, after those locks are held, and
  every comparison and expiry of the operation uses that one instant.
* Fences (owner, generation, live lease, revision) are decided on the locked
  row, and the final UPDATE repeats the revision and generation in its WHERE
  clause and checks it matched exactly one row.
* Claims take candidates oldest-due first with the dialect's SKIP LOCKED.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from adapters._sql import rows as R
from adapters._sql.dialect import Dialect
from kit.clock import TEST_CLOCK_START, ensure_utc, from_micros, micros, to_micros
from kit.connections import ConnectionFactory
from kit.contract import validation as v
from kit.contract.entities import (
    JSON,
    ClockMode,
    Command,
    CommandClaim,
    CommandStatus,
    Decision,
    Definition,
    DefinitionRef,
    Event,
    Run,
    RunClaim,
    RunStatus,
    Signal,
    SignalReceipt,
    Snapshot,
    StartResult,
    Timer,
)
from kit.contract.errors import (
    ClockModeError,
    ConnectionLost,
    DefinitionMismatch,
    DefinitionNotFound,
    InvalidArgument,
    InvalidDecision,
    KitError,
    LockTimeout,
    NotInTransaction,
    RunAlreadyExists,
    StorageError,
    TransactionRolledBack,
    TransientError,
)
from kit.contract.outcomes import Outcome
from kit.contract.protocol import MigrationSpec
from kit.migrate import AppliedMigration, pending, split_statements, verify

__all__ = ["CORE_TABLES", "SqlStore", "reset_database"]

T = TypeVar("T")

CORE_TABLES = ("kit_definitions", "kit_runs", "kit_events", "kit_commands", "kit_signals", "kit_timers")
_TERMINAL = tuple(s.value for s in RunStatus if s.terminal)
_RETRIES = 5


class _UnitOfWork:
    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)


class _FenceBroken(StorageError):
    """The final fenced UPDATE matched no row although the row lock was held."""


class SqlStore:
    """One open store: one connection, one tenant, one clock mode."""

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
            self._cur = self._conn.cursor()
        except dialect.driver_errors as exc:
            raise self._translate(exc) from exc
        self._depth = 0
        self._uow: _UnitOfWork | None = None
        self._rollback_only = False
        self._dead: str | None = None

    # ==================================================================
    # plumbing
    # ==================================================================
    def q(self, sql: str) -> str:
        return self.dialect.sql(sql)

    def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self.q(sql), tuple(params))
        return cur

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
        uow = _UnitOfWork()
        self._uow, self._rollback_only = uow, False
        try:
            self.dialect.begin(cur, begin)
        except self.dialect.driver_errors as exc:
            self._uow = None
            self._quiet_rollback()
            raise self._translate(exc) from exc
        self._depth = 1
        try:
            yield cur
            if self._rollback_only:
                raise TransactionRolledBack(
                    "an inner transaction() block failed, so the whole unit of work was rolled "
                    "back: let the exception propagate or handle it outside the unit"
                )
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
        for callback in uow.callbacks:
            callback()

    def _quiet_rollback(self) -> None:
        if self._dead is not None:
            return
        with contextlib.suppress(Exception):  # no transaction, or the connection is gone
            self._cur.execute(self.dialect.rollback)

    def _write(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` in a write transaction, retrying only attempts known rolled back."""
        for attempt in range(_RETRIES):
            try:
                with self._tx(self.dialect.begin_write) as cur:
                    return fn(cur)
            except LockTimeout:
                raise  # the wait budget is spent: retrying would multiply it
            except TransientError:
                if self._depth or attempt == _RETRIES - 1:
                    raise
                time.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")

    def _read(self, fn: Callable[[Any], T]) -> T:
        for attempt in range(_RETRIES):
            try:
                with self._tx(self.dialect.begin_snapshot) as cur:
                    return fn(cur)
            except TransientError:
                if self._depth or attempt == _RETRIES - 1:
                    raise
                time.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")

    def _now_us(self, cur: Any) -> int:
        row = self._exec(cur, f"SELECT {self._now_sql}").fetchone()
        if row is None or row[0] is None:
            raise ClockModeError("the test clock table is empty: open the store through its Database")
        return int(row[0])

    def _in(self, values: Sequence[Any]) -> str:
        return "(" + ", ".join("?" for _ in values) + ")"

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead connection
            self._conn.close()
        self._dead = self._dead or "closed"

    # ==================================================================
    # unit of work
    # ==================================================================
    @contextmanager
    def transaction(self) -> Iterator[_UnitOfWork]:
        with self._tx(self.dialect.begin_write):
            assert self._uow is not None
            yield self._uow

    def lock_run(self, run_id: str) -> Run | None:
        if not self._depth:
            raise NotInTransaction("lock_run() needs an open transaction(): call it inside one")
        return self._write(lambda cur: self._locked_run(cur, run_id))

    # ==================================================================
    # schema lifecycle
    # ==================================================================
    def migrate(self) -> list[str]:
        if self._depth:
            raise InvalidArgument("migrate() cannot run inside a transaction(): call it on its own")
        applied_names: list[str] = []
        if self.dialect.ddl_is_transactional:
            def run_all(cur: Any) -> None:
                self.dialect.lock_migrations(cur)
                applied_names.extend(self._apply_pending(cur))

            self._write(run_all)
            return applied_names
        # DDL commits implicitly: hold a session lock and apply one file per transaction.
        self._check_open()
        try:
            self.dialect.lock_migrations(self._cur)
        except self.dialect.driver_errors as exc:
            raise self._translate(exc) from exc
        try:
            while True:
                step = self._write(lambda cur: self._apply_pending(cur, only_first=True))
                if not step:
                    return applied_names
                applied_names.extend(step)
        finally:
            with contextlib.suppress(Exception):  # the lock dies with the session anyway
                self.dialect.unlock_migrations(self._cur)

    def _apply_pending(self, cur: Any, only_first: bool = False) -> list[str]:
        cur.execute(self.dialect.migrations_table_ddl)
        todo = pending(self._applied(cur), self.migrations)
        if only_first:
            todo = todo[:1]
        names = []
        for m in todo:
            for statement in split_statements(m.sql):
                cur.execute(statement)
            self._exec(
                cur,
                "INSERT INTO kit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
                (m.version, m.name, m.checksum, self._wall_us()),
            )
            names.append(f"{m.version:03d}_{m.name}")
        return names

    def _wall_us(self) -> int:
        return time.time_ns() // 1000

    def _applied(self, cur: Any) -> list[AppliedMigration]:
        rows = self._exec(cur, "SELECT version, name, checksum FROM kit_schema_migrations ORDER BY version").fetchall()
        return [AppliedMigration(int(r[0]), r[1], r[2]) for r in rows]

    def verify_schema(self) -> None:
        def check(cur: Any) -> None:
            if not self.dialect.table_exists(cur, "kit_schema_migrations"):
                verify(None, self.migrations)
            verify(self._applied(cur), self.migrations)
            missing = [t for t in CORE_TABLES if not self.dialect.table_exists(cur, t)]
            if missing:
                from kit.contract.errors import SchemaError

                raise SchemaError(
                    "partial",
                    f"the schema is partly applied: tables {missing} are missing although every "
                    "migration is recorded; restore them from the migration files",
                )

        self._read(check)

    # ==================================================================
    # store clock
    # ==================================================================
    def now(self) -> datetime:
        return from_micros(self._read(self._now_us))

    def _require_test_clock(self) -> None:
        if self.clock_mode is not ClockMode.TEST:
            raise ClockModeError("this store runs on the database clock: open it with clock=TEST")

    def install_test_clock(self) -> None:
        """Create and seed the kit's test-clock table (test mode only; never in migrations)."""
        self._require_test_clock()

        def install(cur: Any) -> None:
            cur.execute(self.dialect.test_clock_ddl)
            self.dialect.insert_if_absent(cur, "kit_test_clock", ("id", "now_us"), (1, to_micros(TEST_CLOCK_START)))

        self._write(install)

    def empty_all_tables(self) -> None:
        """Delete every row of every tenant from the kit's tables (schema kept) and rewind the test clock.

        For reusing one kit-owned database between test cases; never call it on data you keep.
        """
        self._require_test_clock()

        def empty(cur: Any) -> None:
            for table in reversed(CORE_TABLES):
                cur.execute(f"DELETE FROM {table}")
            self._exec(cur, "UPDATE kit_test_clock SET now_us = ? WHERE id = 1", (to_micros(TEST_CLOCK_START),))

        self._write(empty)

    def set_test_clock(self, at: datetime) -> None:
        self._require_test_clock()
        us = to_micros(at)
        self._write(lambda cur: self._exec(cur, "UPDATE kit_test_clock SET now_us = ? WHERE id = 1", (us,)))

    def advance_test_clock(self, by: timedelta) -> datetime:
        self._require_test_clock()
        delta = micros(by)

        def advance(cur: Any) -> int:
            self._exec(cur, "UPDATE kit_test_clock SET now_us = now_us + ? WHERE id = 1", (delta,))
            return self._now_us(cur)

        return from_micros(self._write(advance))

    # ==================================================================
    # definitions
    # ==================================================================
    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        v.check_text("name", name, v.MAX_NAME)
        v.check_text("version", version, v.MAX_NAME)
        v.check_digest(digest, body)

        def ensure(cur: Any) -> Definition:
            now = self._now_us(cur)
            self.dialect.insert_if_absent(
                cur,
                "kit_definitions",
                ("tenant_id", "name", "version", "digest", "body", "created_at"),
                (self.tenant_id, name, version, digest, bytes(body), now),
            )
            found = self._definition(cur, name, version)
            assert found is not None, "insert-if-absent left no row"
            return found

        return self._write(ensure)

    def _definition(self, cur: Any, name: str, version: str) -> Definition | None:
        row = self._exec(
            cur,
            f"SELECT {R.DEFINITION_COLUMNS} FROM kit_definitions WHERE tenant_id = ? AND name = ? AND version = ?",
            (self.tenant_id, name, version),
        ).fetchone()
        return None if row is None else R.to_definition(row)

    def get_definition(self, name: str, version: str) -> Definition | None:
        return self._read(lambda cur: self._definition(cur, name, version))

    def list_definition_versions(self, name: str) -> list[Definition]:
        """Plain equality on the name, then an exact comparison and a code-point sort in Python: a
        dialect's collation may pad, fold or order by UTF-16 code units; the contract does none of it."""
        v.check_text("name", name, v.MAX_NAME)

        def versions(cur: Any) -> list[Definition]:
            rows = self._exec(
                cur, f"SELECT {R.DEFINITION_COLUMNS} FROM kit_definitions WHERE tenant_id = ? AND name = ?",
                (self.tenant_id, name),
            ).fetchall()
            found = [R.to_definition(row) for row in rows]
            return sorted((d for d in found if d.name == name), key=lambda d: d.version)

        return self._read(versions)

    # ==================================================================
    # runs
    # ==================================================================
    def start_run(
        self,
        run_id: str,
        definition: DefinitionRef,
        input: JSON = None,
        idempotency_key: str | None = None,
    ) -> StartResult:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("definition.name", definition.name, v.MAX_NAME)
        v.check_text("definition.version", definition.version, v.MAX_NAME)
        v.check_json("input", input)
        if idempotency_key is not None:
            v.check_text("idempotency_key", idempotency_key, v.MAX_KEY)
        input_text = v.encode_json(input)

        def start(cur: Any) -> StartResult:
            if idempotency_key is not None:
                existing = self._run_by_key(cur, idempotency_key)
                if existing is not None:
                    return StartResult(existing, created=False)
            stored = self._definition(cur, definition.name, definition.version)
            if stored is None:
                raise DefinitionNotFound(
                    f"definition {definition.name!r} version {definition.version!r} is unknown: "
                    "call ensure_definition() first"
                )
            if stored.digest != definition.digest:
                raise DefinitionMismatch(
                    f"definition {definition.name!r} version {definition.version!r} is stored with "
                    f"digest {stored.digest[:12]}..., not {definition.digest[:12]}...: register the "
                    "changed body under a new version"
                )
            now = self._now_us(cur)
            inserted = self.dialect.insert_if_absent(
                cur,
                "kit_runs",
                (
                    "tenant_id", "run_id", "def_name", "def_version", "def_digest", "status",
                    "revision", "claim_owner", "claim_generation", "claim_expires_at", "wake_at",
                    "due_at", "wakeup_pending", "cancel_requested", "cancel_reason", "input",
                    "output", "error", "idempotency_key", "created_at", "updated_at",
                ),
                (
                    self.tenant_id, run_id, stored.name, stored.version, stored.digest, "pending",
                    0, None, 0, None, now, now, 0, 0, None, input_text, "null", "null",
                    idempotency_key, now, now,
                ),
            )
            if not inserted:
                if idempotency_key is not None:
                    existing = self._run_by_key(cur, idempotency_key)
                    if existing is not None:
                        return StartResult(existing, created=False)
                raise RunAlreadyExists(
                    f"run {run_id!r} already exists: use a new run id, or repeat the original "
                    "idempotency key to get the existing run back"
                )
            run = self._run(cur, run_id)
            assert run is not None
            return StartResult(run, created=True)

        return self._write(start)

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

    def _locked_run(self, cur: Any, run_id: str) -> Run | None:
        """The run row, locked until commit (the first lock of every run-scoped write)."""
        d = self.dialect
        row = self._exec(
            cur,
            f"SELECT {R.RUN_COLUMNS} FROM kit_runs{d.lock_hint} WHERE tenant_id = ? AND run_id = ?{d.lock_rows}",
            (self.tenant_id, run_id),
        ).fetchone()
        return None if row is None else R.to_run(row)

    def get_run(self, run_id: str) -> Run | None:
        return self._read(lambda cur: self._run(cur, run_id))

    def list_runs(
        self, status: RunStatus | None = None, after: str | None = None, limit: int = 100
    ) -> list[Run]:
        v.check_limit(limit)
        where, params = ["tenant_id = ?"], [self.tenant_id]
        if status is not None:
            where.append("status = ?")
            params.append(RunStatus(status).value)
        if after is not None:
            where.append("run_id > ?")
            params.append(after)
        sql = self.dialect.limit(
            f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE {' AND '.join(where)} ORDER BY run_id", limit
        )
        return self._read(lambda cur: [R.to_run(r) for r in self._exec(cur, sql, params).fetchall()])

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        sql = f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq"
        if limit is not None:
            sql = self.dialect.limit(sql, v.check_limit(limit))
        return self._read(
            lambda cur: [R.to_event(r) for r in self._exec(cur, sql, (self.tenant_id, run_id, after_seq)).fetchall()]
        )

    def export_state(self) -> dict[str, Any]:
        """The tenant's whole observable state (see kit.inspect) in one snapshot of five queries."""
        from kit.inspect import assemble

        def export(cur: Any) -> dict[str, Any]:
            t = (self.tenant_id,)
            runs = [R.to_run(r) for r in self._exec(
                cur, f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE tenant_id = ? ORDER BY run_id", t).fetchall()]
            parts: dict[str, tuple[list[Any], list[Any], list[Any], list[Any]]] = {r.run_id: ([], [], [], []) for r in runs}
            queries = (
                (0, f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? ORDER BY run_id, seq", R.to_event),
                (1, f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? ORDER BY command_id", R.to_command),
                (2, f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? ORDER BY signal_id", R.to_signal),
                (3, f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? ORDER BY timer_id", R.to_timer),
            )
            for slot, sql, convert in queries:
                for row in self._exec(cur, sql, t).fetchall():
                    item = convert(row)
                    if item.run_id in parts:
                        parts[item.run_id][slot].append(item)
            return {r.run_id: assemble(r, *parts[r.run_id]) for r in runs}

        return self._read(export)

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_optional_text("reason", reason, v.MAX_REASON)

        def cancel(cur: Any) -> Outcome:
            run = self._locked_run(cur, run_id)
            if run is None:
                return Outcome.NOT_FOUND
            if run.status.terminal:
                return Outcome.TERMINAL
            if run.cancel_requested:
                return Outcome.DUPLICATE
            now = self._now_us(cur)
            self._exec(
                cur,
                "UPDATE kit_runs SET cancel_requested = 1, cancel_reason = ? WHERE tenant_id = ? AND run_id = ?",
                (reason, self.tenant_id, run_id),
            )
            self._make_runnable(cur, run, now)
            return Outcome.COMMITTED

        return self._write(cancel)

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

    # ==================================================================
    # decision claims
    # ==================================================================
    def _candidates(self, table: str, columns: str, where: str, order: str, count: int) -> str:
        """The SELECT that picks claimable rows, oldest due first, skipping locked ones."""
        d = self.dialect
        return d.limit(f"SELECT {columns} FROM {table}{d.claim_hint} WHERE {where} ORDER BY {order}", count) + d.skip_locked

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)

        def claim(cur: Any) -> list[RunClaim]:
            now = self._now_us(cur)
            found = self._exec(
                cur,
                self._candidates(
                    "kit_runs",
                    "run_id, claim_generation, revision",
                    "tenant_id = ? AND due_at <= ?",
                    "due_at, run_id",
                    limit,
                ),
                (self.tenant_id, now),
            ).fetchall()
            if not found:
                return []
            expires = now + lease_us
            ids = [r[0] for r in found]
            self._exec(
                cur,
                "UPDATE kit_runs SET status = 'running', claim_owner = ?, "
                "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ?, "
                f"wake_at = NULL, wakeup_pending = 0, updated_at = ? WHERE tenant_id = ? AND run_id IN {self._in(ids)}",
                (worker_id, expires, expires, now, self.tenant_id, *ids),
            )
            at = from_micros(expires)
            return [RunClaim(r[0], worker_id, int(r[1]) + 1, at, int(r[2])) for r in found]

        return self._write(claim)

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

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def renew(cur: Any) -> Outcome:
            run = self._locked_run(cur, claim.run_id)
            now = self._now_us(cur)
            refused = self._refuse_run(run, claim, now)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_runs SET claim_expires_at = ?, due_at = ?, updated_at = ? "
                "WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?",
                (now + lease_us, now + lease_us, now, self.tenant_id, claim.run_id, claim.generation),
            )
            return Outcome.RENEWED

        return self._write(renew)

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        def release(cur: Any) -> Outcome:
            run = self._locked_run(cur, claim.run_id)
            now = self._now_us(cur)
            refused = self._refuse_run(run, claim, now)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_runs SET status = 'pending', claim_owner = NULL, claim_expires_at = NULL, "
                "wake_at = ?, due_at = ?, wakeup_pending = 0, updated_at = ? "
                "WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?",
                (now, now, now, self.tenant_id, claim.run_id, claim.generation),
            )
            return Outcome.COMMITTED

        return self._write(release)

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        def load(cur: Any) -> Snapshot | Outcome:
            run = self._run(cur, claim.run_id)
            refused = self._refuse_run(run, claim, self._now_us(cur))
            if refused:
                return refused
            assert run is not None
            key = (self.tenant_id, run.run_id)
            history = self._exec(
                cur, f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? AND run_id = ? ORDER BY seq", key
            ).fetchall()
            results = self._exec(
                cur,
                f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? "
                "AND status IN ('completed', 'failed') AND consumed = 0 ORDER BY command_id",
                key,
            ).fetchall()
            signals = self._exec(
                cur,
                f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? "
                "AND status = 'pending' ORDER BY signal_id",
                key,
            ).fetchall()
            timers = self._exec(
                cur,
                f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? "
                "AND status = 'fired' ORDER BY timer_id",
                key,
            ).fetchall()
            return Snapshot(
                run,
                tuple(R.to_event(r) for r in history),
                tuple(R.to_command(r) for r in results),
                tuple(R.to_signal(r) for r in signals),
                tuple(R.to_timer(r) for r in timers),
            )

        return self._read(load)

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        v.check_decision(decision)
        encoded_events = [(e, v.encode_json(e.payload)) for e in decision.events]
        encoded_commands = [(c, v.encode_json(c.input)) for c in decision.commands]
        output, error = v.encode_json(decision.output), v.encode_json(decision.error)

        def commit(cur: Any) -> Outcome:
            run = self._locked_run(cur, claim.run_id)
            now = self._now_us(cur)
            refused = self._refuse_run(run, claim, now)
            if refused:
                return refused
            assert run is not None
            if not self.revision_current(run, expected_revision):
                return Outcome.REVISION_MISMATCH
            self._check_consumable(cur, run.run_id, decision)
            revision = run.revision + 1
            self._append_events(cur, run.run_id, revision, now, encoded_events)
            self._schedule(cur, run.run_id, now, encoded_commands, decision)
            self._consume(cur, revision, decision)
            status = decision.next_status
            wake = self._resolve_wake(decision, now)
            if status is RunStatus.PENDING and wake is None:
                wake = now
            if status is RunStatus.BLOCKED and run.wakeup_pending:
                status, wake = RunStatus.PENDING, now  # no lost wake-up
            if status.terminal:
                wake = None
                self._close_outstanding(cur, run.run_id)
            done = self._exec(
                cur,
                "UPDATE kit_runs SET status = ?, revision = ?, claim_owner = NULL, "
                "claim_expires_at = NULL, wake_at = ?, due_at = ?, wakeup_pending = 0, output = ?, "
                "error = ?, updated_at = ? "
                "WHERE tenant_id = ? AND run_id = ? AND revision = ? AND claim_generation = ?",
                (
                    status.value, revision, wake, wake, output, error, now,
                    self.tenant_id, run.run_id, expected_revision, claim.generation,
                ),
            ).rowcount
            if done != 1:
                raise _FenceBroken(f"the fenced update of run {run.run_id!r} matched {done} rows")
            return Outcome.COMMITTED

        return self._write(commit)

    def _resolve_wake(self, decision: Decision, now: int) -> int | None:
        if decision.wake_at is not None:
            return to_micros(ensure_utc(decision.wake_at))
        if decision.wake_after is not None:
            return now + micros(decision.wake_after)
        return None

    def _ids(self, label: str, values: Sequence[str]) -> list[int]:
        out = []
        for value in values:
            if not value.isdigit():
                raise InvalidDecision(f"{label}: {value!r} is not an id this store issued")
            out.append(int(value))
        return out

    def _count_matching(self, cur: Any, table: str, id_column: str, ids: list[int], run_id: str, condition: str) -> int:
        row = self._exec(
            cur,
            f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND run_id = ? AND {condition} "
            f"AND {id_column} IN {self._in(ids)}",
            (self.tenant_id, run_id, *ids),
        ).fetchone()
        return int(row[0])

    def _check_consumable(self, cur: Any, run_id: str, d: Decision) -> None:
        checks = (
            ("consume_signals", d.consume_signals, "kit_signals", "signal_id", "status = 'pending'",
             "pending signals"),
            ("consume_commands", d.consume_commands, "kit_commands", "command_id",
             "status IN ('completed', 'failed') AND consumed = 0", "unconsumed command results"),
            ("consume_timers", d.consume_timers, "kit_timers", "timer_id", "status = 'fired'", "fired timers"),
            ("cancel_timers", d.cancel_timers, "kit_timers", "timer_id", "status IN ('scheduled', 'fired')",
             "open timers"),
        )
        for label, values, table, column, condition, what in checks:
            if not values:
                continue
            ids = self._ids(label, values)
            if self._count_matching(cur, table, column, ids, run_id, condition) != len(ids):
                raise InvalidDecision(f"{label} names ids that are not {what} of run {run_id!r}: {list(values)}")
        keys = [e.operation_key for e in d.events if e.operation_key is not None]
        if keys:
            clash = self._exec(
                cur,
                f"SELECT operation_key FROM kit_events WHERE tenant_id = ? AND run_id = ? AND operation_key IN {self._in(keys)}",
                (self.tenant_id, run_id, *keys),
            ).fetchall()
            if clash:
                raise InvalidDecision(
                    f"events with operation keys {[r[0] for r in clash]} are already in the history"
                )

    def _append_events(self, cur: Any, run_id: str, revision: int, now: int, events: list[tuple[Any, str]]) -> None:
        if not events:
            return
        row = self._exec(
            cur, "SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
        ).fetchone()
        seq = int(row[0])
        for event, payload in events:
            seq += 1
            self._exec(
                cur,
                "INSERT INTO kit_events (tenant_id, run_id, seq, kind, operation_key, payload, revision, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.tenant_id, run_id, seq, event.kind, event.operation_key, payload, revision, now),
            )

    def _schedule(
        self, cur: Any, run_id: str, now: int, commands: list[tuple[Any, str]], decision: Decision
    ) -> None:
        """Insert commands and timers; an operation key already present for the run is kept (first wins)."""
        if commands:
            taken = {r[0] for r in self._exec(
                cur, "SELECT operation_key FROM kit_commands WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
            ).fetchall()}
            for command, input_text in commands:
                if command.operation_key in taken:
                    continue
                taken.add(command.operation_key)
                not_before = now + micros(command.delay)
                self._exec(
                    cur,
                    "INSERT INTO kit_commands (tenant_id, run_id, operation_key, name, queue, input, status, "
                    "attempt, max_attempts, not_before, claim_owner, claim_generation, claim_expires_at, "
                    "due_at, result, error, consumed, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, NULL, 0, NULL, ?, 'null', 'null', 0, ?)",
                    (self.tenant_id, run_id, command.operation_key, command.name, command.queue, input_text,
                     command.max_attempts, not_before, not_before, now),
                )
        if decision.timers:
            taken = {r[0] for r in self._exec(
                cur, "SELECT operation_key FROM kit_timers WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
            ).fetchall()}
            for timer in decision.timers:
                if timer.operation_key in taken:
                    continue
                taken.add(timer.operation_key)
                fire_at = (
                    to_micros(timer.fire_at) if timer.fire_at is not None else now + micros(timer.delay)  # type: ignore[arg-type]
                )
                self._exec(
                    cur,
                    "INSERT INTO kit_timers (tenant_id, run_id, operation_key, fire_at, status, created_at) "
                    "VALUES (?, ?, ?, ?, 'scheduled', ?)",
                    (self.tenant_id, run_id, timer.operation_key, fire_at, now),
                )

    def _consume(self, cur: Any, revision: int, d: Decision) -> None:
        updates = (
            (d.consume_signals, ("UPDATE kit_signals SET status = 'consumed', consumed_revision = ? "
                                 "WHERE tenant_id = ? AND signal_id IN {ids}"), True),
            (d.consume_commands, "UPDATE kit_commands SET consumed = 1 WHERE tenant_id = ? AND command_id IN {ids}", False),
            (d.consume_timers, "UPDATE kit_timers SET status = 'consumed' WHERE tenant_id = ? AND timer_id IN {ids}", False),
            (d.cancel_timers, "UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND timer_id IN {ids}", False),
        )
        for values, sql, with_revision in updates:
            if not values:
                continue
            ids = [int(x) for x in values]
            params: tuple[Any, ...] = (self.tenant_id, *ids)
            if with_revision:
                params = (revision, *params)
            self._exec(cur, sql.format(ids=self._in(ids)), params)

    def _close_outstanding(self, cur: Any, run_id: str) -> None:
        """A run going terminal cancels its unfinished commands and unfired timers."""
        self._exec(
            cur,
            "UPDATE kit_commands SET status = 'cancelled', claim_expires_at = NULL, due_at = NULL "
            "WHERE tenant_id = ? AND run_id = ? AND status IN ('pending', 'claimed')",
            (self.tenant_id, run_id),
        )
        self._exec(
            cur,
            "UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND run_id = ? AND status = 'scheduled'",
            (self.tenant_id, run_id),
        )

    # ==================================================================
    # commands
    # ==================================================================
    def claim_commands(
        self,
        worker_id: str,
        lease: timedelta,
        limit: int = 1,
        queues: Sequence[str] | None = None,
    ) -> list[CommandClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        queue_list = v.check_queues(queues)
        if queue_list == []:
            return []

        def claim(cur: Any) -> list[CommandClaim]:
            now = self._now_us(cur)
            where, params = "tenant_id = ? AND due_at <= ?", [self.tenant_id, now]
            if queue_list is not None:
                where += f" AND queue IN {self._in(queue_list)}"
                params.extend(queue_list)
            found = self._exec(
                cur,
                self._candidates("kit_commands", "command_id", where, "due_at, command_id", limit),
                params,
            ).fetchall()
            if not found:
                return []
            ids = [int(r[0]) for r in found]
            expires = now + lease_us
            self._exec(
                cur,
                "UPDATE kit_commands SET status = 'claimed', attempt = attempt + 1, claim_owner = ?, "
                "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ? "
                f"WHERE tenant_id = ? AND command_id IN {self._in(ids)}",
                (worker_id, expires, expires, self.tenant_id, *ids),
            )
            rows = {
                int(r[0]): R.to_command(r)
                for r in self._exec(
                    cur,
                    f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND command_id IN {self._in(ids)}",
                    (self.tenant_id, *ids),
                ).fetchall()
            }
            at = from_micros(expires)
            return [
                CommandClaim(c.command_id, c.run_id, worker_id, c.claim_generation, at, c.attempt, c.name,
                             c.queue, c.input, c.operation_key)
                for c in (rows[i] for i in ids)
            ]

        return self._write(claim)

    def _locked_command(self, cur: Any, command_id: str) -> Command | None:
        if not command_id.isdigit():
            return None
        d = self.dialect
        row = self._exec(
            cur,
            f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands{d.lock_hint} WHERE tenant_id = ? AND command_id = ?{d.lock_rows}",
            (self.tenant_id, int(command_id)),
        ).fetchone()
        return None if row is None else R.to_command(row)

    def command_fenced(self, command: Command, claim: CommandClaim, now: int) -> bool:
        return (
            command.status is CommandStatus.CLAIMED
            and command.claim_owner == claim.worker_id
            and command.claim_generation == claim.generation
            and command.claim_expires_at is not None
            and now < to_micros(command.claim_expires_at)
        )

    def _fenced_command(self, cur: Any, claim: CommandClaim) -> tuple[Run | None, Command | None, int, Outcome | None]:
        """Lock the run, then the command (the one lock order), and apply the fence."""
        run = self._locked_run(cur, claim.run_id)
        command = self._locked_command(cur, claim.command_id)
        now = self._now_us(cur)
        if command is None or command.run_id != claim.run_id:
            return run, None, now, Outcome.NOT_FOUND
        if command.status.terminal:
            return run, command, now, Outcome.TERMINAL
        if not self.command_fenced(command, claim, now):
            return run, command, now, Outcome.CLAIM_LOST
        return run, command, now, None

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def beat(cur: Any) -> Outcome:
            _, _, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_commands SET claim_expires_at = ?, due_at = ? WHERE tenant_id = ? AND command_id = ?",
                (now + lease_us, now + lease_us, self.tenant_id, int(claim.command_id)),
            )
            return Outcome.RENEWED

        return self._write(beat)

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        v.check_json("result", result)
        text = v.encode_json(result)

        def complete(cur: Any) -> Outcome:
            run, _, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_commands SET status = 'completed', result = ?, claim_expires_at = NULL, due_at = NULL "
                "WHERE tenant_id = ? AND command_id = ?",
                (text, self.tenant_id, int(claim.command_id)),
            )
            if run is not None:
                self._make_runnable(cur, run, now)
            return Outcome.COMPLETED

        return self._write(complete)

    def fail_command(
        self,
        claim: CommandClaim,
        error: JSON = None,
        retry_after: timedelta | None = None,
        retryable: bool = True,
    ) -> Outcome:
        v.check_json("error", error)
        delay = 0 if retry_after is None else v.check_nonnegative("retry_after", retry_after)
        text = v.encode_json(error)

        def fail(cur: Any) -> Outcome:
            run, command, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            assert command is not None
            if retryable and command.attempt < command.max_attempts:
                self._exec(
                    cur,
                    "UPDATE kit_commands SET status = 'pending', error = ?, claim_owner = NULL, "
                    "claim_expires_at = NULL, not_before = ?, due_at = ? WHERE tenant_id = ? AND command_id = ?",
                    (text, now + delay, now + delay, self.tenant_id, int(claim.command_id)),
                )
                return Outcome.RETRY_SCHEDULED
            self._exec(
                cur,
                "UPDATE kit_commands SET status = 'failed', error = ?, claim_expires_at = NULL, due_at = NULL "
                "WHERE tenant_id = ? AND command_id = ?",
                (text, self.tenant_id, int(claim.command_id)),
            )
            if run is not None:
                self._make_runnable(cur, run, now)
            return Outcome.FAILED

        return self._write(fail)

    def get_command(self, command_id: str) -> Command | None:
        if not command_id.isdigit():
            return None

        def get(cur: Any) -> Command | None:
            row = self._exec(
                cur,
                f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND command_id = ?",
                (self.tenant_id, int(command_id)),
            ).fetchone()
            return None if row is None else R.to_command(row)

        return self._read(get)

    def list_commands(self, run_id: str) -> list[Command]:
        return self._read(lambda cur: [R.to_command(r) for r in self._exec(
            cur,
            f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? ORDER BY command_id",
            (self.tenant_id, run_id),
        ).fetchall()])

    # ==================================================================
    # signals
    # ==================================================================
    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("name", name, v.MAX_NAME)
        v.check_json("payload", payload)
        v.check_text("dedup_key", dedup_key, v.MAX_KEY)
        text = v.encode_json(payload)

        def send(cur: Any) -> SignalReceipt:
            run = self._locked_run(cur, run_id)
            if run is None:
                return SignalReceipt(Outcome.NOT_FOUND)
            existing = self._signal_by_key(cur, run_id, dedup_key)
            if existing is not None:
                return SignalReceipt(Outcome.DUPLICATE, existing)
            if run.status.terminal:
                return SignalReceipt(Outcome.TERMINAL)
            now = self._now_us(cur)
            self._exec(
                cur,
                "INSERT INTO kit_signals (tenant_id, run_id, name, payload, dedup_key, status, consumed_revision, sent_at) "
                "VALUES (?, ?, ?, ?, ?, 'pending', NULL, ?)",
                (self.tenant_id, run_id, name, text, dedup_key, now),
            )
            signal = self._signal_by_key(cur, run_id, dedup_key)
            self._make_runnable(cur, run, now)
            return SignalReceipt(Outcome.COMMITTED, signal)

        return self._write(send)

    def _signal_by_key(self, cur: Any, run_id: str, dedup_key: str) -> Signal | None:
        row = self._exec(
            cur,
            f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? AND dedup_key = ?",
            (self.tenant_id, run_id, dedup_key),
        ).fetchone()
        return None if row is None else R.to_signal(row)

    def list_signals(self, run_id: str) -> list[Signal]:
        return self._read(lambda cur: [R.to_signal(r) for r in self._exec(
            cur,
            f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? ORDER BY signal_id",
            (self.tenant_id, run_id),
        ).fetchall()])

    # ==================================================================
    # timers
    # ==================================================================
    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        v.check_limit(limit)

        def fire(cur: Any) -> list[Timer]:
            now = self._now_us(cur)
            fired: list[int] = []
            lost: list[int] = []
            while len(fired) < limit:
                # Candidates are read without locks; one lost to a concurrent firer is skipped
                # and the search goes on, so a firer returns fewer than `limit` only when
                # fewer timers are due.
                skip = f" AND timer_id NOT IN {self._in(lost)}" if lost else ""
                due = self._exec(
                    cur,
                    self.dialect.limit(
                        "SELECT timer_id, run_id FROM kit_timers WHERE tenant_id = ? AND status = 'scheduled' "
                        f"AND fire_at <= ?{skip} ORDER BY fire_at, timer_id",
                        limit - len(fired),
                    ),
                    (self.tenant_id, now, *lost),
                ).fetchall()
                if not due:
                    break
                for timer_id, run_id in due:
                    run = self._locked_run(cur, run_id)  # the run first: the one lock order
                    changed = self._exec(
                        cur,
                        "UPDATE kit_timers SET status = 'fired' WHERE tenant_id = ? AND timer_id = ? "
                        "AND status = 'scheduled' AND fire_at <= ?",
                        (self.tenant_id, timer_id, now),
                    ).rowcount
                    if changed != 1:
                        lost.append(int(timer_id))  # a concurrent firer (or a terminal commit) got there first
                        continue
                    if run is not None:
                        self._make_runnable(cur, run, now)
                    fired.append(int(timer_id))
            if not fired:
                return []
            rows = self._exec(
                cur,
                f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND timer_id IN {self._in(fired)}",
                (self.tenant_id, *fired),
            ).fetchall()
            by_id = {int(r[0]): R.to_timer(r) for r in rows}
            return [by_id[i] for i in fired]

        return self._write(fire)

    def list_timers(self, run_id: str) -> list[Timer]:
        return self._read(lambda cur: [R.to_timer(r) for r in self._exec(
            cur,
            f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? ORDER BY timer_id",
            (self.tenant_id, run_id),
        ).fetchall()])


def reset_database(database: Any) -> None:
    """Empty a kit-owned database's tables and rewind its test clock, keeping the migrated schema."""
    store = database.open(clock=ClockMode.TEST)
    try:
        store.empty_all_tables()
    finally:
        store.close()
