"""What differs between SQL dialects, gathered in one overridable class.

:class:`~adapters._sql.store.SqlStore` writes every operation once, in SQL
with ``?`` placeholders, and asks its dialect for the parts that differ:
transaction statements, the store clock, row locks, insert-if-absent, limits,
error classification, the migration lock. A new dialect overrides only those.
"""

from __future__ import annotations

from typing import Any

from adapters._sql.pipeline import Sender, send_one_by_one
from kit.contract.errors import KitError

__all__ = ["Dialect"]


class Dialect:
    name = "sql"
    migrations = "sql"
    """The folder under ``migrations/`` with this dialect's numbered files."""
    paramstyle = "qmark"
    """``qmark`` (``?``) or ``format`` (``%s``)."""
    driver_errors: tuple[type[BaseException], ...] = ()
    """The driver's exception classes: only these are translated into kit errors."""

    begin_write = "BEGIN"
    begin_snapshot = "BEGIN"
    commit = "COMMIT"
    rollback = "ROLLBACK"

    lock_rows = " FOR UPDATE"
    """Appended to a SELECT that must lock the rows it returns until commit."""
    skip_locked = " FOR UPDATE SKIP LOCKED"
    """Appended to a claim's candidate SELECT: lock what is free, skip what is locked."""
    lock_hint = ""
    """Written after a table name in a locking SELECT (SQL Server's table hints)."""
    claim_hint = ""
    """Written after the table name in a claim's candidate SELECT (SQL Server: READPAST)."""

    database_now = ""
    """An SQL expression for the server's current time in integer microseconds."""
    test_now = "(SELECT now_us FROM kit_test_clock WHERE id = 1)"

    def begin(self, cursor: Any, statement: str) -> None:
        """Start a transaction with ``statement`` (``begin_write`` or ``begin_snapshot``).

        A dialect that needs more than one statement to start a transaction
        (MySQL: ``SET TRANSACTION ISOLATION LEVEL ...`` first) overrides this.
        """
        cursor.execute(statement)

    def begin_statements(self, statement: str) -> tuple[str, ...]:
        """The statements that start a transaction with ``statement``, as :meth:`begin` sends them
        (where ``fold_begin`` sends them with the transaction's first statement instead)."""
        return (statement,)

    def sender(self, connection: Any, cursor: Any) -> Sender:
        """How a ``fold_begin`` store sends queued statements (see :mod:`adapters._sql.pipeline`): in as
        few round trips as the driver allows, in order, stopping at the first that fails. This one
        sends them one by one."""
        return send_one_by_one(cursor)

    def sql(self, text: str) -> str:
        """``text`` with ``?`` placeholders rewritten for the driver."""
        if self.paramstyle == "format":
            if "%" in text:
                raise AssertionError(f"literal % in SQL would break format paramstyle: {text}")
            return text.replace("?", "%s")
        return text

    def limit(self, select: str, count: int) -> str:
        """``select`` (ending in its ORDER BY) restricted to ``count`` rows."""
        return f"{select} LIMIT {int(count)}"

    def insert_if_absent(self, cursor: Any, table: str, columns: tuple[str, ...], values: tuple[Any, ...]) -> bool:
        """Insert one row unless it would violate a unique key; True if it was inserted.

        Never raises for the conflict and never leaves the transaction aborted.
        """
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        cursor.execute(self.sql(f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"), values)
        return bool(cursor.rowcount == 1)

    def translate(self, error: BaseException) -> KitError | None:
        """The kit error a driver error stands for (ConnectionLost, TransientError...), if any."""
        return None

    def table_exists(self, cursor: Any, table: str) -> bool:
        raise NotImplementedError

    def lock_migrations(self, cursor: Any) -> None:
        """Serialise concurrent migrate() calls (inside the migration transaction)."""

    def unlock_migrations(self, cursor: Any) -> None:
        """Release what :meth:`lock_migrations` took, if it outlives the transaction."""

    migrations_table_ddl = (
        "CREATE TABLE IF NOT EXISTS kit_schema_migrations ("
        "version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, "
        "checksum VARCHAR(64) NOT NULL, applied_at BIGINT NOT NULL)"
    )
    test_clock_ddl = (
        "CREATE TABLE IF NOT EXISTS kit_test_clock ("
        "id INTEGER NOT NULL PRIMARY KEY, now_us BIGINT NOT NULL)"
    )
    ddl_is_transactional = True
    """False where DDL commits implicitly (MySQL): migrations must then be idempotent files."""
    fold_begin = False
    """True where :meth:`sender` can send a transaction's BEGIN together with its first statement, and
    several statements in one round trip (one multi-statement string on PostgreSQL and MySQL): the store
    then uses :class:`~adapters._sql.pipeline.StoreCursor`."""
    clock_variable: str | None = None
    """A session variable a ``fold_begin`` dialect can set to the store clock and compare with in the
    next statement of the same round trip (MySQL: ``@kit_now``); None where there is none."""
