"""The PostgreSQL adapter (psycopg 3), on a server the kit discovers.

Guarantees, and the PostgreSQL-specific choice behind each (the pitfalls are
numbered as in ``DIALECTS.md``):

* The store clock is ``clock_timestamp()`` in integer microseconds, never
  ``now()``, which is frozen at transaction start (pitfall 1): a lease computed
  late in a long transaction would already be short.
* Claims are one ``UPDATE ... FROM unnest(ARRAY(SELECT ... ORDER BY due, id
  LIMIT n FOR UPDATE SKIP LOCKED)) ... RETURNING``: the locking clause sits in
  the subquery itself, not in a CTE the outer query merely references (pitfall
  6), so concurrent claimers skip each other's rows instead of queueing behind
  them; the ARRAY makes the subquery run exactly once (see :func:`_once`).
* Write transactions are explicitly READ COMMITTED, whatever the server's
  ``default_transaction_isolation``: each statement sees what committed before
  it, so ``ON CONFLICT DO NOTHING`` followed by a re-select finds the winner's
  row instead of failing with a serialization error (pitfall 14). Reads are one
  REPEATABLE READ READ ONLY snapshot (``load_claimed`` is one consistent view).
* Nested units of work reuse the outer transaction: the generic store tracks
  the depth and the adapter never uses psycopg's ``transaction()`` blocks, which
  would be savepoints (pitfall 22).
* Only deadlock victims (40P01) and serialization failures (40001) are
  :class:`TransientError` (retried): PostgreSQL has rolled those attempts back.
  A lost session (``pg_terminate_backend`` gives ``AdminShutdown``, pitfall 23)
  is :class:`ConnectionLost`; a lock wait past ``lock_timeout`` is a
  :class:`LockTimeout` (rolled back; safe to retry, but not retried by the store).
* Lock waits are bounded (``lock_timeout``, ``statement_timeout``): a claimer
  that would block errors out after a few seconds instead of hanging a worker.
* Each provisioned database is a schema ``kit_<hex>`` carrying a COMMENT that
  marks it kit-owned; connections set ``search_path`` to it alone, ``migrate()``
  refuses a schema without the mark, and only marked schemas are dropped.
* JSON columns are ``jsonb`` read back as text (the shared row mapping parses
  it itself and refuses driver-parsed JSON); keys are ``COLLATE "C"``.

How sessions are opened, probed and discovered lives in
:mod:`adapters._postgres_connect`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import psycopg
from psycopg import pq
from psycopg import sql as pgsql

from adapters._postgres_connect import (
    APP_PREFIX,
    CONTAINER_IMAGE,
    DRIVERS,
    EXAMPLE,
    KILL_TIMEOUT_MS,
    LOCK_TIMEOUT_MS,
    STATEMENT_TIMEOUT_MS,
    application_name,
    check_namespace,
    connect_params,
    first_line,
    open_connection,
)
from adapters._postgres_connect import probe as _probe
from adapters._postgres_connect import start_container as _start_container
from adapters._server import SERVER_CAPABILITIES, ServerBackend
from adapters._sql import rows as R
from adapters._sql.dialect import Dialect
from adapters._sql.pipeline import Sender, Sent, Statement
from adapters._sql.store import SqlStore
from kit.clock import from_micros
from kit.contract import validation as v
from kit.contract.capabilities import Capabilities
from kit.contract.entities import CommandClaim, RunClaim
from kit.contract.errors import (
    ConfigurationError,
    ConnectionLost,
    KitError,
    LockTimeout,
    StorageError,
    TransientError,
)
from kit.discovery import ServerHandle
from kit.discovery import discover as discover_server

__all__ = [
    "CONTAINER_IMAGE",
    "LOCAL_DEFAULTS",
    "LOCK_TIMEOUT_MS",
    "SCHEMA_MARK",
    "STATEMENT_TIMEOUT_MS",
    "PostgresBackend",
    "PostgresDialect",
    "PostgresStore",
    "discover",
]

LOCAL_DEFAULTS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "postgresql+psycopg://postgres@/postgres?host=/var/run/postgresql",
)
"""Where discovery looks when no URL is given: TCP on the default port, then the Unix socket."""
SCHEMA_MARK = "durable-storage-kit: kit-owned throw-away schema, dropped by the kit"
"""The COMMENT ON SCHEMA that marks a schema as created by the kit (and safe to drop)."""
_MIGRATION_LOCK = 7039348  # 0x6b6974, "kit": the advisory-lock class of the kit's DDL
_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05"})


# ======================================================================
# dialect
# ======================================================================
class PostgresDialect(Dialect):
    """PostgreSQL's SQL for the generic store."""

    name = "postgres"
    migrations = "postgres"
    paramstyle = "format"
    driver_errors = (psycopg.Error,)

    # Explicit levels: the server's default_transaction_isolation must not change semantics.
    begin_write = "BEGIN ISOLATION LEVEL READ COMMITTED"
    begin_snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    lock_rows = " FOR UPDATE"
    fold_begin = True  # BEGIN with the first statement; queued statements in one pipeline (see sender)
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # clock_timestamp() moves inside a transaction; now() does not (pitfall 1). EXTRACT
    # returns exact numeric since PostgreSQL 14, so the microseconds are never rounded.
    database_now = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint"

    def insert_if_absent(
        self, cursor: Any, table: str, columns: tuple[str, ...], values: tuple[Any, ...]
    ) -> bool:
        """``INSERT ... ON CONFLICT DO NOTHING``: True if this call inserted the row.

        A conflicting concurrent insert is waited for, then yields nothing (rowcount
        0) without aborting the transaction; under READ COMMITTED the caller's next
        statement (the re-select) sees the winner's committed row.
        """
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        cursor.execute(
            self.sql(f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"), values
        )
        return bool(cursor.rowcount == 1)

    def sender(self, connection: Any, cursor: Any) -> Sender:
        """One round trip per send. A single statement with no BEGIN goes on its own, parameters bound on
        the server; a BEGIN with one parameterless statement goes as one simple query through the statement
        hook, as it always did (so an empty transaction's ``BEGIN; COMMIT`` is one string). Anything else
        (a BEGIN with statements, several statements) is one simple query: the statements' parameters
        merged in client-side by psycopg's own literal quoting (``ClientCursor.mogrify``), the texts joined
        by ``"; "``. The server runs them in order inside the
        open (or just begun) transaction and stops at the first that fails, whose error is raised here;
        every statement's result comes back (``nextset``). A read-only transaction's COMMIT (``end``) ends
        the string: the server runs it only if every statement before it succeeded.

        Why not psycopg's pipeline mode: it sends and polls once per statement, and cost 40% more client
        CPU per batch here (about 400 against 240 us for a BEGIN and four statements), and the kit's
        actors share one interpreter lock. A batch is announced to the statement hook as one point
        (``HookedCursor.execute_batch``, with the placeholders, never the values) and sent on a cursor below
        the hook."""
        raw = getattr(connection, "raw", connection)  # below the statement hook
        below: list[Any] = []  # the plain cursor and the quoting one, made on the first batch

        def send(begins: Sequence[str], statements: Sequence[Statement], end: str | None = None) -> list[Sent]:
            if len(statements) == 1 and len(begins) <= 1 and end is None:
                sql, params = statements[0]
                if not begins:
                    cursor.execute(sql) if params is None else cursor.execute(sql, params)
                    return [_collect(cursor)]
                if params is None and ";" not in sql:
                    cursor.execute(f"{begins[0]}; {sql}")
                    cursor.nextset()  # past the BEGIN's result, onto the statement's
                    return [_collect(cursor)]
            if not below:
                below.extend((raw.cursor(), psycopg.ClientCursor(raw)))
            plain, quoting = below
            ends = [] if end is None else [end]
            text = "; ".join([*begins, *(sql if params is None else quoting.mogrify(sql, params)
                                         for sql, params in statements), *ends])
            count = len(begins) + len(statements) + len(ends)

            def run() -> list[Sent]:
                plain.execute(text)
                out: list[Sent] = []
                for i in range(count):
                    if i and not plain.nextset():
                        raise StorageError(f"PostgreSQL answered {i} results to {count} statements")
                    if len(begins) <= i < len(begins) + len(statements):
                        out.append(_collect(plain))
                return out

            if hasattr(cursor, "execute_batch"):
                return cast(list[Sent], cursor.execute_batch([*begins, *(sql for sql, _ in statements), *ends], run,
                                                             ends_read=end is not None))
            return run()

        return send

    def translate(self, error: BaseException) -> KitError | None:
        state = getattr(error, "sqlstate", None)
        detail = f"{type(error).__name__}: {first_line(error)}"
        if state in ("40P01", "40001"):
            return TransientError(
                f"PostgreSQL rolled the attempt back ({detail}); it is safe to retry"
            )
        if state == "55P03":
            return LockTimeout(
                f"a lock wait timed out after lock_timeout ({LOCK_TIMEOUT_MS} ms; {detail}): another "
                "transaction held a lock this operation needed (a row, or the migration lock); the "
                "operation was rolled back: retry it later, or end the blocking transaction (find it "
                "in pg_stat_activity)"
            )
        if state == "57014":
            return StorageError(
                f"the statement was cancelled ({detail}): it ran past statement_timeout "
                f"({STATEMENT_TIMEOUT_MS} ms) or was cancelled; the operation was rolled back"
            )
        lost = (state is not None and (state.startswith("08") or state in _CONNECTION_STATES)) or (
            state is None and isinstance(error, psycopg.OperationalError | psycopg.InterfaceError)
        )
        if lost:
            return ConnectionLost(
                f"the PostgreSQL session ended ({detail}); whether the last write landed is unknown"
            )
        return None

    def table_exists(self, cursor: Any, table: str) -> bool:
        """Whether ``table`` exists in the current schema (never another schema on the path)."""
        cursor.execute(
            self.sql(
                "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = ? AND c.relkind IN ('r', 'p')"
            ),
            (table,),
        )
        return cursor.fetchone() is not None

    def lock_migrations(self, cursor: Any) -> None:
        """A transaction-scoped advisory lock per schema: concurrent migrate() calls queue."""
        cursor.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK}, hashtext(current_schema()))")


# ======================================================================
# store
# ======================================================================
class PostgresStore(SqlStore):
    """The generic SQL store with PostgreSQL's single-statement claims and schema guard."""

    session_id: int | None = None
    """The server process id (``pg_backend_pid()``) of this store's session."""

    def migrate(self) -> list[str]:
        """Apply missing migrations, only into a schema that carries the kit's mark."""
        if not self._depth:
            self._read(self._require_kit_schema)
        return super().migrate()

    def _require_kit_schema(self, cur: Any) -> None:
        row = self._exec(
            cur,
            "SELECT n.nspname, obj_description(n.oid, 'pg_namespace') FROM pg_catalog.pg_namespace n "
            "WHERE n.nspname = current_schema()",
        ).fetchone()
        if row is None:
            raise ConfigurationError(
                "no schema to migrate into: the connection's search_path names no existing schema; "
                "open stores through a Database the backend provisioned"
            )
        if row[1] != SCHEMA_MARK:
            raise ConfigurationError(
                f"refusing to migrate into schema {row[0]!r}: it does not carry the kit's ownership "
                "mark (COMMENT ON SCHEMA), so the kit did not create it; provision a kit-owned "
                "schema with backend.provision() instead"
            )

    def install_test_clock(self) -> None:
        """Create and seed the test clock under the DDL lock (concurrent CREATE TABLE IF NOT
        EXISTS can fail on PostgreSQL's catalog unique indexes)."""
        with self.transaction():
            self.dialect.lock_migrations(self._cur)
            super().install_test_clock()

    def _clock_cte(self) -> str:
        """``WITH clock``: the store clock read once, at the start of the claim's one statement (so the claim
        needs no round trip of its own to read it); :data:`_NOW` is its value."""
        return f"WITH clock AS MATERIALIZED (SELECT {self._now_sql} AS now_us)"

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        """One statement (the clock folded in), sent with the BEGIN; then the COMMIT."""
        lease_us, limit = v.check_claim(worker_id, lease, limit)

        def claim(cur: Any) -> list[RunClaim]:
            picked = self._candidates(
                "kit_runs", "run_id", f"tenant_id = ? AND due_at <= {_NOW}", "due_at, run_id", limit
            )
            rows = self._exec(
                cur,
                f"{self._clock_cte()} UPDATE kit_runs AS r SET status = 'running', claim_owner = ?, "
                f"claim_generation = r.claim_generation + 1, claim_expires_at = {_NOW} + ?, "
                f"due_at = {_NOW} + ?, wake_at = NULL, wakeup_pending = 0, updated_at = {_NOW} "
                f"FROM {_once(picked)} WHERE r.tenant_id = ? AND r.run_id = picked.id "
                "RETURNING r.run_id, r.claim_generation, r.revision, picked.position, r.claim_expires_at",
                (worker_id, lease_us, lease_us, self.tenant_id, self.tenant_id),
            ).fetchall()
            _check_batch(rows, limit)
            rows.sort(key=lambda r: int(r[3]))  # the candidates' (due_at, run_id) order
            return [RunClaim(r[0], worker_id, int(r[1]), from_micros(int(r[4])), int(r[2])) for r in rows]

        return self._write(claim)

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
            where, params = f"tenant_id = ? AND due_at <= {_NOW}", [self.tenant_id]
            if queue_list is not None:
                where += f" AND queue IN {self._in(queue_list)}"
                params.extend(queue_list)
            picked = self._candidates("kit_commands", "command_id", where, "due_at, command_id", limit)
            rows = self._exec(
                cur,
                f"{self._clock_cte()} UPDATE kit_commands AS c SET status = 'claimed', attempt = c.attempt + 1, "
                f"claim_owner = ?, claim_generation = c.claim_generation + 1, claim_expires_at = {_NOW} + ?, "
                f"due_at = {_NOW} + ? FROM {_once(picked)} WHERE c.tenant_id = ? AND c.command_id = picked.id "
                f"RETURNING {_COMMAND_RETURNING}, picked.position",
                (worker_id, lease_us, lease_us, *params, self.tenant_id),
            ).fetchall()
            _check_batch(rows, limit)
            rows.sort(key=lambda r: int(r[-1]))  # the candidates' (due_at, command_id) order
            claims = []
            for row in rows:
                c = R.to_command(row[:-1])
                assert c.claim_expires_at is not None
                claims.append(
                    CommandClaim(c.command_id, c.run_id, worker_id, c.claim_generation, c.claim_expires_at,
                                 c.attempt, c.name, c.queue, c.input, c.operation_key)
                )
            return claims

        return self._write(claim)


_NOW = "(SELECT now_us FROM clock)"
"""The store clock inside a claim statement (see ``PostgresStore._clock_cte``)."""

_COMMAND_RETURNING = ", ".join(f"c.{column.strip()}" for column in R.COMMAND_COLUMNS.split(","))


def _collect(cursor: Any) -> Sent:
    """A psycopg cursor's current result, read whole; its description is not built (no caller reads it,
    and psycopg builds one Column object per column each time it is asked)."""
    result = cursor.pgresult
    rows = cursor.fetchall() if result is not None and result.status == pq.ExecStatus.TUPLES_OK else None
    return Sent(rows, cursor.rowcount)


def _once(candidates: str) -> str:
    """The claim's candidates as a FROM item ``picked(id, position)``, evaluated exactly once.

    ``ARRAY(SELECT ... FOR UPDATE SKIP LOCKED)`` is an uncorrelated InitPlan: it runs
    once, before the UPDATE, and keeps its ORDER BY in the array (``position`` is
    the candidate's rank, 1 = oldest due). The obvious forms, ``WHERE id IN (SELECT
    ... LIMIT n FOR UPDATE SKIP LOCKED)`` or ``FROM (SELECT ...)``, may be planned as
    the inner side of a nested loop and re-run for every outer row; each re-run skips
    the rows this very UPDATE already changed and returns the next ones, so a claim
    with ``limit=3`` on a fresh (un-analysed) table was seen to claim all 50 runs.
    """
    return f"unnest(ARRAY({candidates})) WITH ORDINALITY AS picked(id, position)"


def _check_batch(rows: Sequence[Any], limit: int) -> None:
    # Belt and braces for the property _once() guarantees: never more than `limit`
    # claims; raising rolls the whole claim back.
    if len(rows) > limit:
        raise StorageError(
            f"a claim updated {len(rows)} rows for a limit of {limit}: the claim was rolled back; "
            "report this plan (EXPLAIN the claim statement) to the kit"
        )


# ======================================================================
# backend
# ======================================================================
class PostgresBackend(ServerBackend):
    """PostgreSQL on one discovered server; each provisioned database is a kit-owned schema."""

    name = "postgres"
    dialect = PostgresDialect()
    store_class = PostgresStore
    capabilities = Capabilities.of(
        *SERVER_CAPABILITIES,
        clock_resolution_us=1,
    )

    def __init__(self, handle: ServerHandle, container: Any = None) -> None:
        super().__init__(handle, container)
        self._params = connect_params(handle.url)

    def describe(self) -> str:
        return f"{self.handle}; psycopg {psycopg.__version__}"

    def _connect(self, namespace: str | None) -> psycopg.Connection[Any]:
        return open_connection(self._params, namespace)

    def _create_namespace(self, cursor: Any, namespace: str) -> None:
        check_namespace(namespace)
        schema = pgsql.Identifier(namespace)
        with cursor.connection.transaction():  # the schema never exists without its mark
            cursor.execute(pgsql.SQL("CREATE SCHEMA {}").format(schema))
            cursor.execute(pgsql.SQL("COMMENT ON SCHEMA {} IS {}").format(schema, pgsql.Literal(SCHEMA_MARK)))

    def _drop_namespace(self, cursor: Any, namespace: str) -> None:
        check_namespace(namespace)
        if not self._owned(cursor, namespace):
            return  # already gone
        # Sessions still open on the schema (a store a caller forgot to close) would hold
        # locks the DROP waits for: end them first, only the kit's own sessions of this schema.
        cursor.execute(
            "SELECT pg_terminate_backend(pid, %s::bigint) FROM pg_catalog.pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (KILL_TIMEOUT_MS, application_name(namespace)),
        )
        with cursor.connection.transaction():
            if self._owned(cursor, namespace):
                cursor.execute(pgsql.SQL("DROP SCHEMA {} CASCADE").format(pgsql.Identifier(namespace)))

    def _list_namespaces(self, cursor: Any) -> list[str]:
        cursor.execute("SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname LIKE 'kit\\_%' ESCAPE '\\'")
        return [str(row[0]) for row in cursor.fetchall()]

    @staticmethod
    def _owned(cursor: Any, namespace: str) -> bool:
        """True if the schema exists with the kit's mark, False if it is gone; raises if unmarked."""
        cursor.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = %s",
            (namespace,),
        )
        row = cursor.fetchone()
        if row is None:
            return False
        if row[0] != SCHEMA_MARK:
            raise ConfigurationError(
                f"refusing to drop schema {namespace!r}: it does not carry the kit's ownership mark "
                "(COMMENT ON SCHEMA), so the kit did not create it; drop it yourself if it is yours"
            )
        return True

    def _session_id(self, connection: Any) -> int:
        # libpq's backend PID is pg_backend_pid() of the session, without a round trip.
        return int(connection.info.backend_pid)

    def _kill(self, cursor: Any, session_id: Any) -> None:
        """End one of the kit's sessions and wait until its backend is gone (its transaction
        rolled back, its locks released) before returning."""
        cursor.execute(
            "SELECT pg_terminate_backend(pid, %s::bigint) FROM pg_catalog.pg_stat_activity "
            "WHERE pid = %s::integer AND starts_with(application_name, %s)",
            (KILL_TIMEOUT_MS, int(session_id), APP_PREFIX),
        )
        row = cursor.fetchone()
        if row is None:
            return  # the session is already gone
        if not row[0]:
            raise StorageError(
                f"PostgreSQL session {session_id} did not end within {KILL_TIMEOUT_MS} ms of "
                "pg_terminate_backend: check the server's load"
            )


# ======================================================================
# discovery
# ======================================================================
def discover(url: str | None = None, backend_class: type[PostgresBackend] = PostgresBackend) -> PostgresBackend:
    """The PostgreSQL backend on the first server found: ``url`` or ``KIT_POSTGRES_URL``,
    else 127.0.0.1:5432, else the Unix socket in /var/run/postgresql, else a
    testcontainers container when a Docker engine answers; otherwise
    :class:`BackendUnavailable` naming all three ways. Passwords are never printed.

    ``backend_class`` lets a subclass (a variant adapter) reuse the same discovery.
    """
    handle, container = discover_server(
        "postgres",
        url,
        drivers=DRIVERS,
        example=EXAMPLE,
        local=LOCAL_DEFAULTS,
        probe=_probe,
        start_container=_start_container,
    )
    try:
        return backend_class(handle, container)
    except Exception:
        if container is not None:
            container.stop()
        raise
