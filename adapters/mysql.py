"""The MySQL 8 / MariaDB >= 10.6 adapter, through PyMySQL.

Guarantees, and the MySQL-specific choice behind each (DIALECTS.md pitfalls):

* Write transactions run at READ COMMITTED, set explicitly on every session
  (InnoDB defaults to REPEATABLE READ). Under RR a locking read also takes
  gap / next-key locks, so a claimer holding its transaction open would block
  concurrent inserts into the claim index's range, and the store's plain reads
  after a duplicate-key conflict (``start_run`` re-selecting the winner of a
  race) would see the transaction's old snapshot instead of the committed
  row. RC takes record locks only, releases rows a locking read examined but
  did not return, and every read sees the latest committed data: exactly what
  "lock the run row, then read and decide" and SKIP LOCKED queues need.
* Read-only operations run in ``START TRANSACTION WITH CONSISTENT SNAPSHOT,
  READ ONLY`` at REPEATABLE READ (set for that one transaction), so
  ``load_claimed`` and the other multi-statement reads see one snapshot.
* Claims are two statements in one transaction: ``SELECT ... ORDER BY due_at,
  id LIMIT n FOR UPDATE SKIP LOCKED`` then ``UPDATE ... WHERE id IN (...)``
  (MySQL cannot select from the table it updates in a subquery; MariaDB has
  no ``UPDATE ... RETURNING``). The composite claim indexes of
  ``migrations/mysql/001_init.sql`` make the SELECT read, and lock, only the
  rows it returns.
* Row counts are matched rows, not changed rows: sessions connect with
  ``CLIENT.FOUND_ROWS`` (PyMySQL does not by default), so a fenced UPDATE that
  writes the values already stored still counts the row it matched.
* First-wins inserts are a plain INSERT whose duplicate-key error (1062, which
  InnoDB rolls back for that statement only) is caught. Never ``INSERT
  IGNORE`` (it also downgrades truncation and NOT NULL errors to warnings, so
  two long keys could be cut into one), never ``ON DUPLICATE KEY UPDATE``
  (with FOUND_ROWS a no-op update reports 1 row, like an insert). Sessions run
  in strict SQL mode, so an over-long value is an error, never truncated.
* The store clock is ``UTC_TIMESTAMP(6)`` in integer microseconds, exact and
  independent of the session time zone (which is UTC anyway); never ``NOW()``
  without ``(6)``, which drops the fraction.
* Faults: 1213 (deadlock victim: InnoDB rolled the transaction back) and 1205
  (lock wait timeout: InnoDB rolls back only the statement) become
  :class:`~kit.contract.errors.TransientError` only after the generic store
  has issued ROLLBACK for the whole transaction, so the attempt left nothing
  behind and may be retried. Deadlocks are retried inside the store; a lock
  wait timeout (:class:`LockWaitTimeout`) is raised at once, because the wait
  budget (``innodb_lock_wait_timeout`` = :data:`LOCK_WAIT_TIMEOUT_S` s, set low
  so a blocked write errors instead of hanging) is already spent and the
  holder is likely stuck. A killed or dropped session becomes
  :class:`~kit.contract.errors.ConnectionLost`.
* A transaction is never left open: most InnoDB errors undo only their
  statement, and MySQL's START TRANSACTION silently commits an open
  transaction, so a store whose ROLLBACK fails closes its session.
* Migrations: MySQL commits DDL implicitly, so files are applied one per
  transaction under a ``GET_LOCK`` session lock and written to be re-runnable.

Behaviour that differs between MariaDB and MySQL 8, and how it is handled:

1. SKIP LOCKED exists from MySQL 8.0.1 and MariaDB 10.6: older servers are
   refused at discovery with a message naming the versions.
2. The isolation variable is ``transaction_isolation`` on MySQL 8 and
   ``tx_isolation`` on MariaDB before 11.1: the portable ``SET [SESSION]
   TRANSACTION ISOLATION LEVEL`` statement is used instead.
3. JSON: MySQL 8's binary JSON type turns integers beyond 64 bits into
   doubles, MariaDB's JSON is LONGTEXT: payloads are LONGTEXT on both.
4. ``JSON_VALID`` answers 0 from nesting depth 32 on MariaDB and raises beyond
   depth 100 on MySQL: no JSON_VALID CHECK, so deep JSON values are kept.
5. ``utf8mb4_bin`` is PAD SPACE on both ('k' = 'k '), and the NO PAD binary
   collations differ (``utf8mb4_0900_bin`` on MySQL 8, ``utf8mb4_nopad_bin``
   on MariaDB): key columns are VARBINARY (UTF-8 bytes) on both, read back as
   ``str`` by this module's converters.
6. Default collations are case-insensitive (``utf8mb4_0900_ai_ci`` on MySQL 8,
   ``utf8mb4_general_ci`` on MariaDB): kit databases are created with a binary
   default, and the schema never relies on the default.
7. ``CREATE INDEX IF NOT EXISTS`` exists only on MariaDB: indexes are declared
   inside ``CREATE TABLE IF NOT EXISTS``, which both run idempotently.
8. CHECK constraint names are unique per database on MySQL 8, per table on
   MariaDB: each name carries its table's name.
9. A killed session is reported differently (MariaDB 1927 "Connection was
   killed"; MySQL 1317 "Query execution was interrupted" or 3169 "Session was
   killed" when the kill lands mid-statement, 4031 after an idle timeout; both
   2013 / 2006 on the next use): all are ConnectionLost.
10. The default ``sql_mode`` differs (MariaDB's includes
    ``NO_AUTO_CREATE_USER``, which MySQL 8 rejects): sessions set one explicit
    strict mode valid on both, without ``NO_BACKSLASH_ESCAPES`` or
    ``ANSI_QUOTES``, which PyMySQL's escaping and this SQL do not support.
11. MariaDB >= 11.6 may raise 1020 ("record has changed since last read",
    ``innodb_snapshot_isolation``) for a locking read in a REPEATABLE READ
    transaction: writes run at READ COMMITTED; 1020 is still mapped to a
    TransientError should a server configuration produce it.
12. MySQL 8's default authentication (``caching_sha2_password``) needs the
    ``cryptography`` package for PyMySQL over plain TCP: the testcontainers
    server is reached over TLS (``?ssl=true``), which needs no extra package,
    and discovery names the fix when a given server needs it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import pymysql

from adapters._mysql_connect import (
    DRIVERS,
    EXAMPLE,
    LOCAL_URLS,
    LOCK_WAIT_TIMEOUT_S,
    connect,
    connect_params,
    error_code,
    probe,
    server_version,
    session_id,
    start_container,
)
from adapters._server import SERVER_CAPABILITIES, ServerBackend
from adapters._sql.dialect import Dialect
from adapters._sql.pipeline import Sender, Sent, Statement, StoreCursor, collect
from adapters._sql.store import SqlStore
from kit.contract.capabilities import Capabilities
from kit.contract.errors import (
    ConfigurationError,
    ConnectionLost,
    KitError,
    LockTimeout,
    StorageError,
    TransientError,
)
from kit.discovery import ServerHandle, env_url
from kit.discovery import discover as discover_server

__all__ = [
    "LOCK_WAIT_TIMEOUT_S",
    "LockWaitTimeout",
    "MysqlBackend",
    "MysqlDialect",
    "MysqlStore",
    "connect",
    "connect_params",
    "discover",
    "server_version",
]


MIGRATION_LOCK_WAIT_S = 60
"""How long ``migrate()`` waits for another process's migration lock."""
"""Attempts of a write whose earlier attempts were deadlock victims (rolled back by InnoDB)."""
KILL_WAIT_S = 10.0
"""How long ``kill_session`` waits for the killed session to disappear (its rollback to finish)."""
SNAPSHOT_ISOLATION = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
"""Without SESSION: applies to the next transaction only (a snapshot read); sessions stay READ COMMITTED."""

_CONNECTION_LOST = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1317, 1927, 3169, 4031})
"""Can't connect, gone away, lost during query, server shutdown, killed (MariaDB 1927, MySQL 1317/3169/4031)."""
_DUPLICATE_KEY = frozenset({1062, 1586})
_DEADLOCK = 1213
_LOCK_WAIT_TIMEOUT = 1205
_RECORD_CHANGED = 1020
_UNKNOWN_THREAD = 1094
_ACCESS_DENIED = frozenset({1044, 1045, 1142, 1227})


class LockWaitTimeout(LockTimeout):
    """1205: a row lock stayed held for ``innodb_lock_wait_timeout``; the attempt was rolled back in full."""


class MysqlDialect(Dialect):
    """What MySQL / MariaDB does differently from the generic SQL store."""

    name = "mysql"
    migrations = "mysql"
    paramstyle = "format"
    driver_errors = (pymysql.err.Error,)
    begin_write = "START TRANSACTION READ WRITE"
    begin_snapshot = "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"
    lock_rows = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # Exact integer microseconds, whatever the session time zone; UTC_TIMESTAMP(6) keeps the fraction.
    database_now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
    ddl_is_transactional = False

    fold_begin = True  # BEGIN with the first statement; queued statements as one multi-statement string
    clock_variable = "@kit_now"  # a claim sets it to the clock, reads it and picks what is due by it, at once

    def begin(self, cursor: Any, statement: str) -> None:
        for each in self.begin_statements(statement):
            cursor.execute(each)

    def begin_statements(self, statement: str) -> tuple[str, ...]:
        return (SNAPSHOT_ISOLATION, statement) if statement == self.begin_snapshot else (statement,)

    def sender(self, connection: Any, cursor: Any) -> Sender:
        """One round trip per send: the BEGIN statements and the queued ones joined into one
        multi-statement string (PyMySQL interpolates the parameters client-side; the connection has
        ``CLIENT.MULTI_STATEMENTS``). The server runs them in order and stops at the first that fails;
        its error is raised here, when its result is reached, so no result is left unread. A read-only
        transaction's COMMIT (``end``) ends the string: the server runs it only if every statement before it
        succeeded."""

        def send(begins: Sequence[str], statements: Sequence[Statement], end: str | None = None) -> list[Sent]:
            ends = [] if end is None else [end]
            text = "; ".join([*begins, *(sql for sql, _ in statements), *ends])
            params = tuple(p for _, each in statements for p in (each or ()))
            cursor.execute(text, params) if params else cursor.execute(text)
            out: list[Sent] = []
            count = len(begins) + len(statements) + len(ends)
            for i in range(count):
                if i and not cursor.nextset():
                    raise StorageError(f"MySQL answered {i} results to {count} statements")
                if len(begins) <= i < len(begins) + len(statements):
                    out.append(collect(cursor))
            return out

        return send

    def insert_if_absent(self, cursor: Any, table: str, columns: tuple[str, ...], values: tuple[Any, ...]) -> bool:
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        try:
            cursor.execute(self.sql(f"INSERT INTO {table} ({cols}) VALUES ({marks})"), values)
        except pymysql.err.IntegrityError as exc:
            if error_code(exc) in _DUPLICATE_KEY:
                return False  # InnoDB rolled back this statement only; the transaction goes on
            raise
        return True

    def translate(self, error: BaseException) -> KitError | None:
        code = error_code(error)
        if isinstance(error, pymysql.err.InterfaceError) or code in _CONNECTION_LOST:
            return ConnectionLost(f"the MySQL session ended ({error}); whether its last commit landed is unknown")
        if code == _DEADLOCK:
            return TransientError(f"deadlock victim: InnoDB rolled the whole transaction back ({error})")
        if code == _LOCK_WAIT_TIMEOUT:
            return LockWaitTimeout(
                f"a lock stayed held for {LOCK_WAIT_TIMEOUT_S} s ({error}); InnoDB rolled back the "
                "statement and the store rolled back the rest of the transaction, so nothing was written"
            )
        if code == _RECORD_CHANGED:
            return TransientError(f"a row changed since this transaction's snapshot ({error}); rolled back")
        return None

    def table_exists(self, cursor: Any, table: str) -> bool:
        cursor.execute(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (table,),
        )
        return cursor.fetchone() is not None

    _migration_lock = "CONCAT('kit_migrate_', MD5(DATABASE()))"  # lock names are limited to 64 characters

    def lock_migrations(self, cursor: Any) -> None:
        cursor.execute(f"SELECT GET_LOCK({self._migration_lock}, %s)", (MIGRATION_LOCK_WAIT_S,))
        row = cursor.fetchone()
        if row is None or row[0] != 1:
            raise StorageError(
                f"another process held this database's migration lock for {MIGRATION_LOCK_WAIT_S} s: "
                "let it finish (or end it), then run migrate() again"
            )

    def unlock_migrations(self, cursor: Any) -> None:
        cursor.execute(f"SELECT RELEASE_LOCK({self._migration_lock})")
        cursor.fetchone()


class MysqlStore(SqlStore):
    """A store on one MySQL / MariaDB database (one connection, one tenant)."""

    def _quiet_rollback(self) -> None:
        """Roll back; if ROLLBACK itself fails on a live session, end the session.

        InnoDB undoes only the failed statement of most errors (1205, 1062, 1406...), so
        the transaction stays open until ROLLBACK; and MySQL's START TRANSACTION silently
        COMMITS a transaction still open. A store whose ROLLBACK failed therefore closes
        its connection (the server rolls back on disconnect) and reports ConnectionLost
        from then on, rather than let its next operation commit half a transaction.
        """
        if self._dead is not None:
            return
        if isinstance(self._cur, StoreCursor) and (self._cur.pending is not None or self._cur.ended):
            self._cur.pending, self._cur.ended = None, False  # never started, or already committed (a snapshot)
            return
        try:
            self._cur.execute(self.dialect.rollback)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the session's state is unknown
            self._dead = f"ROLLBACK failed ({type(exc).__name__}: {exc}), so the session was closed"
            with contextlib.suppress(Exception):
                self._conn.raw.close()


# -- the backend ------------------------------------------------------------------
class MysqlBackend(ServerBackend):
    """Throw-away ``kit_<hex>`` databases on one MySQL / MariaDB server."""

    name = "mysql"
    dialect = MysqlDialect()
    store_class = MysqlStore
    capabilities = Capabilities.of(
        *SERVER_CAPABILITIES,
        clock_resolution_us=1,
    )

    def __init__(self, handle: ServerHandle, container: Any = None) -> None:
        super().__init__(handle, container)
        self._params = connect_params(handle.url)

    def describe(self) -> str:
        return f"{self.handle} through PyMySQL {pymysql.VERSION_STRING}"  # __version__ mimics mysqlclient

    def _connect(self, namespace: str | None) -> Any:
        return connect(self._params, namespace)

    def _create_namespace(self, cursor: Any, namespace: str) -> None:
        try:
            # A binary default collation: nothing created in it compares case-insensitively.
            cursor.execute(f"CREATE DATABASE `{namespace}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        except pymysql.err.Error as exc:
            if error_code(exc) in _ACCESS_DENIED:
                raise ConfigurationError(
                    f"the MySQL user of {self.handle} may not create databases ({exc}): "
                    "GRANT ALL ON `kit\\_%`.* TO that user, or give another user in the URL"
                ) from None
            raise

    def _drop_namespace(self, cursor: Any, namespace: str) -> None:
        cursor.execute(f"DROP DATABASE IF EXISTS `{namespace}`")

    def _list_namespaces(self, cursor: Any) -> list[str]:
        cursor.execute("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'kit\\_%%'")
        return [str(row[0]) for row in cursor.fetchall()]

    def _session_id(self, connection: Any) -> int:
        return session_id(connection)  # read in the connect's one setup round trip

    def _kill(self, cursor: Any, session_id: Any) -> None:
        """``KILL CONNECTION``, then wait until the session is gone (its rollback done)."""
        try:
            cursor.execute("KILL CONNECTION %s", (int(session_id),))
        except pymysql.err.OperationalError as exc:
            if error_code(exc) != _UNKNOWN_THREAD:
                raise
            return  # already gone: that is what a kill wants
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (int(session_id),))
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.01)


def discover(url: str | None = None, *, backend_class: type[MysqlBackend] = MysqlBackend) -> MysqlBackend:
    """A backend on the server ``url`` / ``KIT_MYSQL_URL`` names, a local one, or a testcontainer.

    ``backend_class`` lets a subclass (another store, dialect or schema) reuse discovery.
    Raises :class:`~kit.contract.errors.BackendUnavailable` naming all three ways when none answers.
    """
    given = url or env_url("mysql")
    if given:
        connect_params(given)  # a malformed URL is bad input (ConfigurationError), not an unreachable server
    handle, container = discover_server(
        "mysql",
        url,
        drivers=DRIVERS,
        example=EXAMPLE,
        local=LOCAL_URLS,
        probe=probe,
        start_container=start_container,
    )
    try:
        return backend_class(handle, container)
    except BaseException:
        if container is not None:
            container.stop()
        raise
