"""SQL Server's T-SQL for the generic store, and the session it runs in.

Guarantees, and the SQL Server choice behind each (pitfalls numbered as in
``DIALECTS.md``):

* Writes run at locking READ COMMITTED, set explicitly in every ``BEGIN``:
  READPAST (the claims' SKIP LOCKED) works only at READ COMMITTED or
  REPEATABLE READ, and kit databases are created with READ_COMMITTED_SNAPSHOT
  OFF so "read committed" really locks (pitfall 11). Row locks are taken with
  ``WITH (UPDLOCK, ROWLOCK)`` table hints (T-SQL has no ``FOR UPDATE``) and
  held to commit.
* Reads run in one SNAPSHOT transaction (kit databases allow snapshot
  isolation): ``load_claimed`` is one consistent view and a reader never waits
  for, nor sees, a writer's uncommitted rows.
* The store clock is ``SYSUTCDATETIME()`` as integer microseconds since the
  epoch (``DATEDIFF_BIG``), evaluated per statement, so it moves inside a
  transaction; never ``DATETIME``/``GETDATE()`` (1/300 s, pitfall 3).
* First-wins inserts are one ``INSERT ... SELECT ... WHERE NOT EXISTS (SELECT
  ... WITH (UPDLOCK, HOLDLOCK) ...)``: HOLDLOCK keeps a key-range lock on the
  absent key until commit, so nobody inserts it meanwhile; UPDLOCK makes two
  racing callers queue on that range instead of both holding shared range
  locks and deadlocking on their inserts. A unique violation would doom the
  transaction under XACT_ABORT, so it is never used as the signal.
* Sessions run with ``XACT_ABORT ON`` (any run-time error rolls the whole
  transaction back, pitfall 12), the ANSI options filtered indexes require,
  and a bounded ``LOCK_TIMEOUT``. Only 1205 (deadlock victim) and 3960
  (snapshot update conflict) become :class:`TransientError`: the server has
  rolled those attempts back, so retrying is safe.
* ``NOCOUNT`` stays OFF, deliberately (the DIALECTS pattern says ON): with
  NOCOUNT ON the server sends no row counts and ODBC's ``SQLRowCount`` (pyodbc's
  ``rowcount``) reports 0 or -1, while the store reads row counts: the fenced
  commit's final UPDATE, ``fire_due_timers`` and ``insert_if_absent`` would all
  misread them (every commit "fence broken", no timer ever fired, every start
  "already exists"). NOCOUNT ON protects multi-statement batches whose
  counts would hide a later result set (pitfall 18); this dialect sends none:
  its only batches are ``SET``s, ``BEGIN``, DDL, and the migration lock, which
  skips any leading count with ``nextset()``.
"""

from __future__ import annotations

from typing import Any

from adapters._mssql.odbc import error_facts, resolve_driver_errors
from adapters._sql.dialect import Dialect
from kit.contract.errors import ConnectionLost, KitError, LockTimeout, StorageError, TransientError

__all__ = [
    "LOCK_TIMEOUT_MS",
    "MIGRATION_LOCK_TIMEOUT_MS",
    "RETRYABLE_ERRORS",
    "SESSION_SETUP",
    "UNIQUE_KEYS",
    "MssqlDialect",
]

LOCK_TIMEOUT_MS = 20_000
"""How long a statement waits for a lock before error 1222. Longer than the lock
monitor's 5 s deadlock search, so a deadlock is reported as 1205 (retryable), not
as a lock timeout."""
MIGRATION_LOCK_TIMEOUT_MS = 60_000
"""How long ``migrate()`` waits for another process's migration to finish."""

DEADLOCK_VICTIM = 1205
SNAPSHOT_CONFLICT = 3960
RETRYABLE_ERRORS = frozenset({DEADLOCK_VICTIM, SNAPSHOT_CONFLICT})
"""The errors after which the server guarantees the transaction was rolled back."""
_LOCK_TIMEOUT = 1222
_SNAPSHOT_DDL = 3961
_DUPLICATE_KEY = frozenset({2601, 2627})
_SET_OPTIONS = 1934
# Sessions killed or links broken: 596 "session is in the kill state", 233/10053/10054
# transport errors, 6005 shutdown in progress, 4060 database gone.
_LOST = frozenset({596, 233, 10053, 10054, 10060, 6005, 4060})
_LOST_TEXT = (
    "communication link failure",
    "closed connection",
    "connection is closed",
    "connection has been closed",
    "tcp provider",
    "session is in the kill state",
    "connection is busy",
)

SESSION_SETUP = (
    # The options filtered indexes (and indexed computed columns) demand for any DML on
    # their table (else error 1934); ODBC drivers set most of them, FreeTDS not always.
    "SET ANSI_NULLS ON; SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; "
    "SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF; "
    # Any run-time error rolls the whole transaction back (pitfall 12).
    "SET XACT_ABORT ON; "
    # Row counts stay on: the store's fences read them (see the module docstring).
    "SET NOCOUNT OFF; "
    # Transactions are explicit BEGIN/COMMIT; a lock wait is bounded.
    f"SET IMPLICIT_TRANSACTIONS OFF; SET LOCK_TIMEOUT {LOCK_TIMEOUT_MS}"
)
"""Sent once on every new connection, before any other statement."""

UNIQUE_KEYS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "kit_definitions": ((("tenant_id", "name", "version"), ""),),
    "kit_runs": (
        (("tenant_id", "run_id"), ""),
        # The filtered unique index's own filter, spelled out, so the optimizer seeks that
        # index (and range-locks one key) whatever the parameter's value.
        (("tenant_id", "idempotency_key"), "idempotency_key IS NOT NULL"),
    ),
    "kit_test_clock": ((("id",), ""),),
}
"""Every unique key (columns, index filter) of each table the store inserts into "if absent"."""

_TEST_CLOCK_TABLE = (
    "CREATE TABLE kit_test_clock (id INT NOT NULL PRIMARY KEY, now_us BIGINT NOT NULL)"
)


class MssqlDialect(Dialect):
    """T-SQL for :class:`~adapters._sql.store.SqlStore` (and :class:`MssqlStore`)."""

    name = "mssql"
    migrations = "mssql"
    paramstyle = "qmark"

    # The isolation level is part of each BEGIN: a session keeps the last level set,
    # and a write after a SNAPSHOT read must not run in SNAPSHOT (READPAST is refused there).
    begin_write = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN TRANSACTION"
    begin_snapshot = "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; BEGIN TRANSACTION"
    commit = "COMMIT TRANSACTION"
    # XACT_ABORT may already have rolled the transaction back: roll back only what is open.
    rollback = "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION"

    lock_rows = ""  # T-SQL locks through table hints, not a FOR UPDATE suffix
    lock_hint = " WITH (UPDLOCK, ROWLOCK)"
    """U locks: compatible with readers, exclusive among writers, held to commit."""
    claim_hint = " WITH (ROWLOCK, UPDLOCK, READPAST)"
    """Lock what is free, skip (READPAST) what another transaction holds."""
    skip_locked = ""

    database_now = (
        "DATEDIFF_BIG(MICROSECOND, CAST('1970-01-01T00:00:00' AS DATETIME2(7)), SYSUTCDATETIME())"
    )

    migrations_table_ddl = (
        "IF OBJECT_ID(N'kit_schema_migrations', N'U') IS NULL "
        "CREATE TABLE kit_schema_migrations (version INT NOT NULL PRIMARY KEY, "
        "name NVARCHAR(200) NOT NULL, checksum NVARCHAR(64) NOT NULL, applied_at BIGINT NOT NULL)"
    )
    # Two stores opening at once must not both try to create the table: an application
    # lock, released at commit, serialises the check-then-create.
    test_clock_ddl = (
        "EXEC sp_getapplock @Resource = N'kit_test_clock', @LockMode = N'Exclusive', "
        f"@LockOwner = N'Transaction', @LockTimeout = {MIGRATION_LOCK_TIMEOUT_MS}; "
        f"IF OBJECT_ID(N'kit_test_clock', N'U') IS NULL {_TEST_CLOCK_TABLE}"
    )
    ddl_is_transactional = True

    def __init__(self, driver_errors: tuple[type[BaseException], ...] | None = None) -> None:
        """``driver_errors`` defaults to ``(pyodbc.Error,)``, resolved on first use."""
        self._driver_errors = driver_errors

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        if self._driver_errors is None:
            self._driver_errors = resolve_driver_errors()
        return self._driver_errors

    @driver_errors.setter
    def driver_errors(self, value: tuple[type[BaseException], ...]) -> None:
        self._driver_errors = value

    def limit(self, select: str, count: int) -> str:
        """OFFSET/FETCH (T-SQL has no LIMIT); it needs the ORDER BY every caller writes."""
        if " ORDER BY " not in select.upper():
            raise AssertionError(f"OFFSET ... FETCH needs an ORDER BY: {select}")
        return f"{select} OFFSET 0 ROWS FETCH NEXT {int(count)} ROWS ONLY"

    def insert_if_absent(
        self, cursor: Any, table: str, columns: tuple[str, ...], values: tuple[Any, ...]
    ) -> bool:
        """Insert one row unless one of ``table``'s unique keys already holds its values.

        Returns True if this call inserted the row. A key with a NULL part cannot
        collide (nullable keys are filtered unique indexes). NULL values are written
        as literals, so no untyped NULL parameter ever reaches the driver.
        """
        keys = UNIQUE_KEYS.get(table)
        if keys is None:
            raise AssertionError(f"insert_if_absent: add {table}'s unique keys to UNIQUE_KEYS")
        row = dict(zip(columns, values, strict=True))
        probes: list[str] = []
        params: list[Any] = [v for v in values if v is not None]
        for key, index_filter in keys:
            if any(row[c] is None for c in key):
                continue
            where = " AND ".join([*(f"{c} = ?" for c in key), *([index_filter] if index_filter else [])])
            probes.append(f"NOT EXISTS (SELECT 1 FROM {table} WITH (UPDLOCK, HOLDLOCK) WHERE {where})")
            params.extend(row[c] for c in key)
        select_list = ", ".join("NULL" if v is None else "?" for v in values)
        condition = f" WHERE {' AND '.join(probes)}" if probes else ""
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select_list}{condition}", tuple(params)
        )
        return bool(cursor.rowcount == 1)

    def translate(self, error: BaseException) -> KitError | None:
        facts = error_facts(error)
        detail = _detail(error, facts.text)
        if facts.codes & RETRYABLE_ERRORS or facts.sqlstate == "40001":
            return TransientError(f"SQL Server rolled the attempt back ({detail}); it is safe to retry")
        if _LOCK_TIMEOUT in facts.codes:
            return LockTimeout(
                f"a lock wait exceeded LOCK_TIMEOUT ({LOCK_TIMEOUT_MS} ms; {detail}): another transaction "
                "held the row too long; XACT_ABORT rolled the operation back; retry it or end the "
                "blocking session (see sys.dm_exec_requests.blocking_session_id)"
            )
        lowered = facts.text.lower()
        if (
            (facts.sqlstate is not None and facts.sqlstate.startswith("08"))
            or facts.codes & _LOST
            or any(marker in lowered for marker in _LOST_TEXT)
        ):
            return ConnectionLost(f"the SQL Server session ended ({detail}); whether the last write landed is unknown")
        if _SNAPSHOT_DDL in facts.codes:
            return StorageError(
                f"a snapshot read met a table changed by DDL after it began ({detail}): run migrate() "
                "before opening readers"
            )
        if facts.codes & _DUPLICATE_KEY:
            return StorageError(
                f"a unique key was violated ({detail}); XACT_ABORT rolled the operation back. "
                "insert_if_absent and the store's run locks should prevent this: report it"
            )
        if _SET_OPTIONS in facts.codes:
            return StorageError(
                f"the session's SET options do not allow writing to a table with a filtered index "
                f"({detail}): open connections through the kit, which sends SESSION_SETUP first"
            )
        return None

    def table_exists(self, cursor: Any, table: str) -> bool:
        """Whether ``table`` exists in the database's default schema (a metadata function:
        safe in a SNAPSHOT transaction)."""
        cursor.execute("SELECT CASE WHEN OBJECT_ID(?, N'U') IS NULL THEN 0 ELSE 1 END", (table,))
        row = cursor.fetchone()
        return row is not None and int(row[0]) == 1

    def lock_migrations(self, cursor: Any) -> None:
        """An exclusive application lock owned by the migration transaction: concurrent
        ``migrate()`` calls queue, and the lock is released at commit or rollback."""
        cursor.execute(
            "DECLARE @granted INT; "
            "EXEC @granted = sp_getapplock @Resource = N'kit_schema_migrations', @LockMode = N'Exclusive', "
            f"@LockOwner = N'Transaction', @LockTimeout = {MIGRATION_LOCK_TIMEOUT_MS}; "
            "SELECT @granted"
        )
        # Counts the procedure may report come first with NOCOUNT OFF: skip to the result set.
        while cursor.description is None and cursor.nextset():
            pass
        row = cursor.fetchone()
        if row is None or int(row[0]) < 0:
            raise StorageError(
                f"the migration lock was not granted (sp_getapplock returned {None if row is None else row[0]}): "
                f"another migrate() held it for {MIGRATION_LOCK_TIMEOUT_MS} ms or was chosen as a deadlock "
                "victim; retry migrate()"
            )


def _detail(error: BaseException, text: str) -> str:
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:240] if lines else ''}"
