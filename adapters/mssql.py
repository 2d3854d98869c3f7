"""The SQL Server adapter (pyodbc), on a server the kit discovers.

Guarantees, and the SQL Server choice behind each (pitfalls numbered as in
``DIALECTS.md``; the details live in :mod:`adapters._mssql.dialect`,
:mod:`adapters._mssql.store` and ``migrations/mssql/001_init.sql``):

* Each provisioned database is a throw-away database ``kit_<hex>`` created
  through the admin connection with ALLOW_SNAPSHOT_ISOLATION ON (readers use
  one snapshot and never wait for writers) and READ_COMMITTED_SNAPSHOT OFF
  (writers' READ COMMITTED locks, which READPAST needs, pitfall 11). Only
  databases created by this process are dropped.
* Claims are one ``WITH ... SELECT TOP (n) ... WITH (ROWLOCK, UPDLOCK,
  READPAST) ... UPDATE ... OUTPUT`` statement: concurrent claimers skip each
  other's rows; batches are capped below lock escalation.
* The store clock is ``SYSUTCDATETIME()`` in integer microseconds; the test
  clock is a one-row table the kit drives.
* Keys compare code point by code point, case- and accent-sensitively, through
  ``Latin1_General_100_BIN2`` columns (pitfall 19; but see the trailing-space
  limit below), JSON is ``NVARCHAR(MAX)`` checked with ``ISJSON(c, VALUE)``,
  nullable unique keys are filtered unique indexes.
* ``SET XACT_ABORT ON`` on every session; only 1205 and 3960 are retried.
* ``kill_session`` is ``KILL <spid>`` from the admin connection, after
  checking the session is still the store's (same spid *and* login time, as
  spids are reused), and waits until the session is gone.
* The ODBC driver is Microsoft's ODBC Driver 18/17 or FreeTDS (Debian's
  ``tdsodbc``); pyodbc is imported only when connecting.

Known limits (not covered by the conformance suite today):

* SQL Server compares strings with trailing-space padding under every
  collation, BIN2 included: keys differing only by trailing spaces (``'k'`` and
  ``'k '``) are equal here. Exact comparison needs VARBINARY key columns with
  binary parameters, which the generic store's ``str`` parameters cannot give.
* BIN2 orders characters beyond the BMP by UTF-16 code unit, so ids mixing
  them with U+E000..U+FFFF sort differently from Python's code point order.
* Needs SQL Server 2022 (16.x) or newer: ``ISJSON(c, VALUE)``.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from typing import Any

from adapters._mssql.dialect import SESSION_SETUP, MssqlDialect
from adapters._mssql.odbc import (
    CONNECT_TIMEOUT_S,
    EXAMPLE,
    OdbcTarget,
    error_facts,
    first_line,
    import_pyodbc,
)
from adapters._mssql.store import MAX_CLAIM_BATCH, MssqlStore
from adapters._server import NAMESPACE_PREFIX, SERVER_CAPABILITIES, ServerBackend
from kit.contract.capabilities import Capabilities
from kit.contract.errors import BackendUnavailable, ConfigurationError, StorageError
from kit.discovery import ServerHandle, env_url
from kit.discovery import discover as discover_server

__all__ = [
    "CONTAINER_IMAGE",
    "EXAMPLE",
    "KILL_TIMEOUT_S",
    "MAX_CLAIM_BATCH",
    "MIN_MAJOR_VERSION",
    "MssqlBackend",
    "MssqlDialect",
    "MssqlSession",
    "MssqlStore",
    "admin_statements",
    "discover",
]

CONTAINER_IMAGE = "mcr.microsoft.com/mssql/server:2022-latest"
MIN_MAJOR_VERSION = 16
"""SQL Server 2022: ``ISJSON(expression, VALUE)`` (older servers accept only objects/arrays)."""
KILL_TIMEOUT_S = 10.0
"""How long ``kill_session`` waits for the killed session (and its rollback) to be gone."""
_NAMESPACE = re.compile(rf"{NAMESPACE_PREFIX}[0-9a-f]+")
_NOT_ACTIVE = 6106  # KILL: "Process ID n is not an active process ID"

SESSION_SQL = (
    "SELECT @@SPID, CONVERT(NVARCHAR(33), login_time, 126) FROM sys.dm_exec_sessions "
    "WHERE session_id = @@SPID"
)
ALIVE_SQL = (
    "SELECT COUNT(*) FROM sys.dm_exec_sessions "
    "WHERE session_id = ? AND CONVERT(NVARCHAR(33), login_time, 126) = ?"
)
PROBE_SQL = (
    "SELECT CAST(SERVERPROPERTY('ProductMajorVersion') AS INT), "
    "CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(128)), "
    "CAST(SERVERPROPERTY('Edition') AS NVARCHAR(128)), "
    "HAS_PERMS_BY_NAME(NULL, NULL, 'CREATE ANY DATABASE')"
)


@dataclass(frozen=True)
class MssqlSession:
    """One server session: ``@@SPID`` plus its login time, since spids are reused."""

    spid: int
    login_time: str

    def __int__(self) -> int:
        return self.spid

    def __str__(self) -> str:
        return str(self.spid)


def _check_namespace(namespace: str) -> str:
    """``namespace`` if it is a kit database name (``kit_<hex>``), the only names ever interpolated."""
    if not _NAMESPACE.fullmatch(namespace):
        raise ConfigurationError(f"{namespace!r} is not a kit database name (kit_<hex>)")
    return namespace


def admin_statements(namespace: str) -> dict[str, list[str]]:
    """The T-SQL the admin connection runs to create and drop ``namespace`` (a database).

    CREATE/ALTER/DROP DATABASE take no parameters, hence the validated name.
    """
    db = f"[{_check_namespace(namespace)}]"
    return {
        "create": [
            f"CREATE DATABASE {db}",
            # Readers: one snapshot per read transaction, never blocked by writers.
            f"ALTER DATABASE {db} SET ALLOW_SNAPSHOT_ISOLATION ON",
            # Writers: locking READ COMMITTED, which READPAST requires (not RCSI).
            f"ALTER DATABASE {db} SET READ_COMMITTED_SNAPSHOT OFF",
            # A throw-away database needs no log backups.
            f"ALTER DATABASE {db} SET RECOVERY SIMPLE",
            # SQL Server 2022's T-SQL (ISJSON(..., VALUE)) whatever level the model database has.
            f"ALTER DATABASE {db} SET COMPATIBILITY_LEVEL = 160",
        ],
        "drop": [
            # SINGLE_USER ends any session still in the database (a store someone forgot
            # to close, a killed session still rolling back) so DROP does not fail as "in
            # use"; one batch, so no new session slips in between the two.
            f"ALTER DATABASE {db} SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE {db}",
        ],
    }


class MssqlBackend(ServerBackend):
    """SQL Server on one discovered server; each provisioned database is a kit-owned database."""

    name = "mssql"
    dialect = MssqlDialect()
    store_class = MssqlStore
    capabilities = Capabilities.of(
        *SERVER_CAPABILITIES,
        # SYSUTCDATETIME()'s resolution is documented as host dependent (100 ns values,
        # ~1 ms ticks on some Windows hosts); 1 ms is the bound the kit can promise.
        clock_resolution_us=1000,
        expected_failures={
            "keys_and_payloads.trailing_spaces_are_significant": (
                "SQL Server compares strings with trailing spaces ignored (ANSI padding), even under "
                "binary collations, so 'k' and 'k ' collide on key columns"
            ),
        },
    )

    def __init__(self, handle: ServerHandle, container: Any = None) -> None:
        super().__init__(handle, container)
        self._target = OdbcTarget.from_url(handle.url)
        self._driver: str | None = None

    def _pyodbc(self) -> Any:
        pyodbc = import_pyodbc()
        if self._driver is None:
            self._driver = self._target.choose_driver(pyodbc.drivers)
        return pyodbc

    def describe(self) -> str:
        pyodbc = self._pyodbc()
        return f"{self.handle}; pyodbc {pyodbc.version}, {self._driver}"

    def _connect(self, namespace: str | None) -> Any:
        """An autocommit connection (the store sends BEGIN/COMMIT itself) with the session setup."""
        pyodbc = self._pyodbc()
        assert self._driver is not None
        database = None if namespace is None else _check_namespace(namespace)
        app = f"kit:{namespace or 'admin'}"
        conn = pyodbc.connect(
            self._target.connection_string(self._driver, database, app),
            autocommit=True,
            timeout=CONNECT_TIMEOUT_S,
        )
        try:
            cursor = conn.cursor()
            cursor.execute(SESSION_SETUP)
            cursor.close()
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_namespace(self, cursor: Any, namespace: str) -> None:
        """CREATE DATABASE and its options; a database whose options failed is dropped again."""
        create, *options = admin_statements(namespace)["create"]
        cursor.execute(create)
        try:
            for statement in options:
                cursor.execute(statement)
        except BaseException:
            with contextlib.suppress(Exception):
                self._drop_namespace(cursor, namespace)
            raise

    def _drop_namespace(self, cursor: Any, namespace: str) -> None:
        cursor.execute("SELECT DB_ID(?)", (_check_namespace(namespace),))
        row = cursor.fetchone()
        if row is None or row[0] is None:
            return  # already gone
        for statement in admin_statements(namespace)["drop"]:
            cursor.execute(statement)

    def _list_namespaces(self, cursor: Any) -> list[str]:
        cursor.execute("SELECT name FROM sys.databases WHERE name LIKE 'kit[_]%'")
        return [str(row[0]) for row in cursor.fetchall()]

    def _session_id(self, connection: Any) -> MssqlSession:
        cursor = connection.cursor()
        try:
            cursor.execute(SESSION_SQL)
            row = cursor.fetchone()
        finally:
            cursor.close()
        return MssqlSession(int(row[0]), str(row[1]))

    def _kill(self, cursor: Any, session_id: Any) -> None:
        """``KILL`` the store's session, if it is still that session, and wait until it is gone
        (its transaction rolled back, its locks released)."""
        if not isinstance(session_id, MssqlSession):
            raise ConfigurationError(f"{session_id!r} is not a SQL Server session of this backend")
        if not self._alive(cursor, session_id):
            return  # already gone; its spid may belong to someone else by now
        try:
            cursor.execute(f"KILL {int(session_id.spid)}")  # KILL takes no parameter
        except Exception as exc:
            if _NOT_ACTIVE not in error_facts(exc).codes:
                raise
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while self._alive(cursor, session_id):
            if time.monotonic() > deadline:
                raise StorageError(
                    f"SQL Server session {session_id.spid} was still there {KILL_TIMEOUT_S:.0f} s after KILL "
                    "(a long rollback?): check KILL <spid> WITH STATUSONLY on the server"
                )
            time.sleep(0.02)

    @staticmethod
    def _alive(cursor: Any, session: MssqlSession) -> bool:
        cursor.execute(ALIVE_SQL, (session.spid, session.login_time))
        row = cursor.fetchone()
        return row is not None and int(row[0]) > 0


# ======================================================================
# discovery
# ======================================================================
def _probe(url: str) -> str:
    """Connect once to the URL's database; the server's version, or an error naming the problem."""
    target = OdbcTarget.from_url(url)
    pyodbc = import_pyodbc()
    driver = target.choose_driver(pyodbc.drivers)
    conn = pyodbc.connect(target.connection_string(driver, app="kit:probe"), autocommit=True,
                          timeout=CONNECT_TIMEOUT_S)
    try:
        cursor = conn.cursor()
        cursor.execute(PROBE_SQL)
        row = cursor.fetchone()
    finally:
        conn.close()
    major, version, edition, can_create = int(row[0]), str(row[1]), str(row[2]), row[3]
    if major < MIN_MAJOR_VERSION:
        raise ConfigurationError(
            f"SQL Server {version} is too old: the kit needs SQL Server 2022 (16.x) or newer "
            "(ISJSON(..., VALUE))"
        )
    if not can_create:
        raise ConfigurationError(
            "the URL's login cannot CREATE DATABASE, and the kit makes a throw-away database per "
            "check: use a login with the dbcreator role (and ALTER ANY CONNECTION for kill_session)"
        )
    return f"SQL Server {version} ({edition}) via {driver}"


def _start_container() -> tuple[str, Any]:
    """A throw-away SQL Server container (only called when a Docker engine answers)."""
    # Nothing could talk to the container without pyodbc and an ODBC driver: say so before
    # pulling and starting a 1.5 GB image.
    OdbcTarget.from_url("mssql+pyodbc://sa@localhost/master").choose_driver(import_pyodbc().drivers)
    try:  # testcontainers >= 4.10 moved the module (pitfall 24); the old path warns
        from testcontainers.community.mssql import SqlServerContainer
    except ImportError:
        from testcontainers.mssql import SqlServerContainer
    container = SqlServerContainer(CONTAINER_IMAGE, dialect="mssql+pyodbc", dbname="master")
    try:
        container.start()
        # A test container's certificate is self-signed (pitfall 21); FreeTDS drops this keyword.
        return f"{container.get_connection_url()}?TrustServerCertificate=yes", container
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported as unavailable
        with contextlib.suppress(Exception):  # it may never have started
            container.stop()
        raise BackendUnavailable(
            "mssql",
            f"testcontainers could not start {CONTAINER_IMAGE} ({first_line(exc)})",
            "Check that the Docker engine can pull and run x86-64 images, or give --url / KIT_MSSQL_URL",
        ) from None


def _driver_problem() -> str | None:
    """What is missing on the client side (pyodbc, unixODBC, a SQL Server ODBC driver), or None."""
    try:
        pyodbc = import_pyodbc()
    except BackendUnavailable as exc:
        return f"{exc.reason}. {exc.fix}"
    drivers = [d for d in pyodbc.drivers() if "SQL Server" in d or "FreeTDS" in d]
    if not drivers:
        return ("no SQL Server ODBC driver is registered with unixODBC. Install Microsoft's msodbcsql18, "
                "or FreeTDS (`apt-get install tdsodbc`)")
    return None


def discover(url: str | None = None) -> MssqlBackend:
    """The SQL Server backend: ``url`` or ``KIT_MSSQL_URL`` (``mssql+pyodbc://``), else a
    testcontainers SQL Server when a Docker engine answers; otherwise
    :class:`BackendUnavailable` naming both ways. There is no local default (SQL Server
    has no conventional passwordless local login). Passwords are never printed.

    A malformed URL, or one for another driver than pyodbc, is a ConfigurationError."""
    given = url or env_url("mssql")
    if given:
        OdbcTarget.from_url(given)  # bad input fails here, before any connection attempt
        import_pyodbc()  # a missing driver is named as such, not as "cannot connect"
    try:
        handle, container = discover_server(
            "mssql",
            url,
            drivers=("mssql",),
            example=EXAMPLE,
            local=(),
            probe=_probe,
            start_container=_start_container,
        )
    except BackendUnavailable as exc:
        if given or not exc.reason.startswith("no server found"):
            raise  # an explicit URL, the driver or the container failed: its own message says why
        driver = _driver_problem()
        raise BackendUnavailable(
            "mssql",
            exc.reason,
            f"Give --url / KIT_MSSQL_URL (like {EXAMPLE}), or run a Docker engine so testcontainers "
            f"can start {CONTAINER_IMAGE}" + (f". Either way the driver is missing too: {driver}" if driver else ""),
        ) from None
    try:
        return MssqlBackend(handle, container)
    except Exception:
        if container is not None:
            container.stop()
        raise
