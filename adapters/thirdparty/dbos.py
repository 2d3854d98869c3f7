"""DBOS Transact's system database as a kit workflow store (``pip install -e '.[dbos]'``).

A thin adapter: every write and every state read goes through DBOS's own
``SystemDatabase`` (``dbos/_sys_db.py`` with its SQLite and PostgreSQL
subclasses, its own migrations and its own tables). Nothing DBOS does is
re-implemented here; what DBOS does not do is declared as not promised.

How the kit's vocabulary maps onto DBOS:

===================  =====================================================
kit                  DBOS system database
===================  =====================================================
run                  a ``workflow_status`` row started ``ENQUEUED`` on the
                     queue ``kit`` (``init_workflow``); the definition's
                     name, version and digest are the row's ``name``,
                     ``class_name`` and ``config_name``, which DBOS itself
                     checks when a workflow id is started twice
claim_runs           ``start_queued_workflows`` (dequeue: ``PENDING``, the
                     worker as ``executor_id``, a fresh ``owner_xid``)
claim token          ``owner_xid``, DBOS's ownership token; generation is
                     ``recovery_attempts`` (bumped by every dequeue)
commit_decision      one checkpointed step (``record_operation_result``,
                     fenced by ``owner_xid``) holding the decision's events,
                     then ``reenqueue_for_recovery`` (pending) or
                     ``update_workflow_outcome`` (terminal, fenced)
history              the decision steps of ``operation_outputs``, flattened
signals              ``notifications`` (``send_bulk``; dedup key = DBOS's
                     message idempotency key; consumed by ``recv_consume``)
request_cancel       ``cancel_workflows``
release_run_claim    ``reenqueue_for_recovery`` (DBOS's recovery hand-off)
schema               DBOS's numbered migrations (``run_migrations``,
                     ``verify_migrations``)
store clock          DBOS's own ``_now_ms_sql()`` (the database clock)
===================  =====================================================

Factories: :func:`sqlite_backend`, :func:`postgres_backend` and
:func:`make_backend` (picks by URL), e.g.
``kit check adapters.thirdparty.dbos:postgres_backend``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.thirdparty._dbos_promises import DBOS_PROMISES, EXPECTED_FAILURES, NOT_PROMISED
from kit.contract import Backend, Capabilities, Capability, ClockMode
from kit.contract.errors import (
    BackendUnavailable,
    ClockModeError,
    ConfigurationError,
    InvalidArgument,
    StorageError,
)
from kit.contract.protocol import MigrationSpec, StatementHook

try:
    import sqlalchemy as sa

    from adapters.thirdparty._dbos_store import (
        DBOSPortableJSON,
        DbosStore,
        SystemDatabase,
        dbos_migration,
    )
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    _IMPORT_ERROR: ImportError | None = _missing
else:
    _IMPORT_ERROR = None

__all__ = [
    "DBOS_PROMISES",
    "EXPECTED_FAILURES",
    "NOT_PROMISED",
    "DbosBackend",
    "DbosDatabase",
    "DbosMigration",
    "make_backend",
    "postgres_backend",
    "sqlite_backend",
]

_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _require_dbos() -> None:
    if _IMPORT_ERROR is not None:
        raise BackendUnavailable(
            "dbos", f"the dbos package is not importable ({_IMPORT_ERROR})", "install it: pip install -e '.[dbos]'"
        )


# -- migrations --------------------------------------------------------------


@dataclass(frozen=True)
class DbosMigration:
    """One of DBOS's own numbered migrations, as the kit's MigrationSpec."""

    version: int
    name: str
    sql: str
    checksum: str


def _dbos_migrations(is_sqlite: bool, schema: str | None) -> tuple[DbosMigration, ...]:
    texts: list[str] = (
        list(dbos_migration.sqlite_migrations)
        if is_sqlite
        else list(dbos_migration.get_dbos_migrations(schema or "dbos", False, False))
    )
    return tuple(
        DbosMigration(i, "dbos", sql, hashlib.sha256(sql.encode()).hexdigest())
        for i, sql in enumerate(texts, 1)
    )


# -- databases and backends --------------------------------------------------


class DbosDatabase:
    """One kit-owned DBOS system database: a SQLite file, or a ``kit_dbos_`` database on PostgreSQL.

    It is created on first use (:meth:`materialise`). DBOS's migrations take
    about 1.5 s on PostgreSQL, so when the first use is a ``migrate()`` the
    database is created as a copy of a template DBOS migrated once for the whole
    backend (``CREATE DATABASE ... TEMPLATE``); any other first use creates it
    empty, and a later ``migrate()`` runs DBOS's migrations on it for real.
    """

    def __init__(self, backend: DbosBackend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.is_sqlite = backend.is_sqlite
        self.schema = "dbos"
        self.migrations: tuple[DbosMigration, ...] = backend.migrations
        self.label = f"{backend.name} {name}"
        self._created = False
        self._recyclable = False
        self._primary: SystemDatabase | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.backend.url_of(self.name)

    def materialise(self, migrated: bool) -> bool:
        """Create the database if it does not exist yet; True when this call created it migrated."""
        with self._lock:
            if self._created:
                return False
            if migrated:
                self.name = self.backend.migrated_database()
                self._recyclable = True
            else:
                self.backend.create_database(self.name)
            self._created = True
            return migrated

    def system_database(self) -> SystemDatabase:
        """A DBOS SystemDatabase on this database, sharing one engine (DBOS's own, with its
        connection settings) among all the stores opened here, as one DBOS process does."""
        with self._lock:
            if self._primary is None:
                self._primary = self._create()
            engine = self._primary.engine
        return self._create(engine)

    def _create(self, engine: Any = None) -> SystemDatabase:
        return SystemDatabase.create(
            self.url,
            dict(self.backend.engine_kwargs),
            engine,
            None if self.is_sqlite else self.schema,
            DBOSPortableJSON,
            None,
            use_listen_notify=False,
            retry_connection_errors=False,
        )

    def _dispose(self) -> None:
        if self._primary is not None:
            self._primary.destroy()
            self._primary = None

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.DATABASE,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> DbosStore:
        if clock is not ClockMode.DATABASE:
            raise ClockModeError("DBOS reads its own clock (the database's): open with clock=ClockMode.DATABASE")
        if migrations is not None and [m.sql for m in migrations] != [m.sql for m in self.migrations]:
            raise InvalidArgument("DBOS applies its own migrations: open without migrations=")
        return DbosStore(self, tenant_id, statement_hook)

    def kill_session(self, store: Any) -> None:
        raise StorageError("capability kill_session is not declared by the DBOS adapter")

    def reset(self) -> None:
        """Empty every DBOS table (DBOS's own ``reset_system_database(truncate=True)``), keeping
        the migrated schema, so the fault machines reuse one database across examples."""
        with self._lock:
            if self._created:
                self._dispose()
                SystemDatabase.reset_system_database(self.url, truncate=True, schema=self.schema)

    def drop(self) -> None:
        with self._lock:
            self._dispose()
            if self._created:
                self.backend.give_back(self.name, self._recyclable)
                self._created = False


class DbosBackend:
    """DBOS Transact's system database on SQLite (files in a temporary folder) or PostgreSQL
    (``kit_dbos_`` databases the kit creates on the server and drops)."""

    def __init__(self, url: str) -> None:
        _require_dbos()
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.name = "dbos-sqlite" if self.is_sqlite else "dbos-postgres"
        self.engine_kwargs: dict[str, Any] = {} if self.is_sqlite else {"pool_size": 2, "max_overflow": 8}
        self.migrations = _dbos_migrations(self.is_sqlite, "dbos")
        self._prefix = f"kit_dbos_{secrets.token_hex(4)}"
        self._tmp: str | None = None
        self._template: str | None = None
        self._template_lock = threading.Lock()
        self._spare: list[str] = []
        supported = [Capability.DATABASE_CLOCK, Capability.CONCURRENT_CONNECTIONS]
        if not self.is_sqlite:
            supported.append(Capability.SKIP_LOCKED)
            self._admin("SELECT 1")  # not reachable: BackendUnavailable now, not mid-check
        self.capabilities = Capabilities.of(
            *supported,
            # DBOS's clock is epoch milliseconds; on SQLite before Python 3.12 it reads whole seconds.
            clock_resolution_us=1000 if not self.is_sqlite or _sqlite_subsec() else 1_000_000,
            promises=DBOS_PROMISES,
            expected_failures=dict(EXPECTED_FAILURES),
        )

    def describe(self) -> str:
        from importlib.metadata import version

        return f"DBOS Transact {version('dbos')} system database on {'SQLite' if self.is_sqlite else 'PostgreSQL'}"

    def provision(self) -> DbosDatabase:
        return DbosDatabase(self, f"{self._prefix}_{secrets.token_hex(6)}")

    # -- where databases live ---------------------------------------------
    def url_of(self, name: str) -> str:
        if self.is_sqlite:
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="kit_dbos_")
            return f"sqlite:///{os.path.join(self._tmp, name + '.sqlite')}"
        rendered: str = sa.make_url(self.url).set(database=name).render_as_string(hide_password=False)
        return rendered

    def create_database(self, name: str, template: str | None = None) -> None:
        """An empty database, or a copy of ``template``."""
        if self.is_sqlite:
            if template is not None:
                shutil.copyfile(self._path(template), self._path(name))
            return
        clause = f' TEMPLATE "{template}"' if template is not None else ""
        self._admin(f'CREATE DATABASE "{name}"{clause}')

    def _path(self, name: str) -> str:
        return sa.make_url(self.url_of(name)).database or ""

    def migrated_database(self) -> str:
        """A database DBOS has migrated: an emptied one given back earlier, else a copy of the template."""
        with self._template_lock:
            if self._spare:
                return self._spare.pop()
        name = f"{self._prefix}_{secrets.token_hex(6)}"
        self.create_database(name, self._migrated_template())
        return name

    def give_back(self, name: str, migrated: bool) -> None:
        """Drop a database, or keep a migrated one for the next check after DBOS empties it.

        ``reset_system_database(truncate=True)`` is DBOS's own reset: it ends the
        sessions left on the database and empties every DBOS table but the migration version.
        """
        if migrated:
            SystemDatabase.reset_system_database(self.url_of(name), truncate=True, schema="dbos")
            with self._template_lock:
                self._spare.append(name)
            return
        self.drop_database(name)

    def drop_database(self, name: str) -> None:
        if self.is_sqlite:
            for suffix in ("", "-wal", "-shm", "-journal"):
                if os.path.exists(self._path(name) + suffix):
                    os.remove(self._path(name) + suffix)
            return
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _migrated_template(self) -> str:
        """The backend's template database, created and migrated by DBOS on first need."""
        with self._template_lock:
            if self._template is None:
                name = f"{self._prefix}_template"
                self.create_database(name)
                system = DbosDatabase(self, name)
                system._created = True
                sys_db = system._create()
                try:
                    sys_db.run_migrations()
                finally:
                    sys_db.destroy()
                self._template = name
            return self._template

    def _admin(self, statement: str) -> None:
        base = sa.make_url(self.url)
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        try:
            with admin.connect() as c:
                c.execute(sa.text(statement))
        except sa.exc.OperationalError as exc:
            raise BackendUnavailable(
                self.name,
                f"PostgreSQL at {base.render_as_string(hide_password=True)} did not run "
                f"{' '.join(statement.split()[:2])!r} ({str(exc.orig).splitlines()[0]})",
                "start it or pass --url postgresql+psycopg://user@host:port/postgres",
            ) from None
        finally:
            admin.dispose()

    def close(self) -> None:
        while self._spare:
            self.drop_database(self._spare.pop())
        if self._template is not None:
            self.drop_database(self._template)
            self._template = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _sqlite_subsec() -> bool:
    import sys

    return sys.version_info >= (3, 12)


def sqlite_backend(url: str | None = None) -> Backend:
    """DBOS on SQLite: each provisioned database is a new file in a temporary folder."""
    if url is not None and not url.startswith("sqlite"):
        raise ConfigurationError(f"sqlite_backend takes a sqlite:/// URL, not {url.split(':', 1)[0]}:")
    return DbosBackend("sqlite://")


def postgres_backend(url: str | None = None) -> Backend:
    """DBOS on PostgreSQL: each provisioned database is a ``kit_dbos_`` database the kit creates and drops."""
    chosen = url or os.environ.get("KIT_POSTGRES_URL") or _PG_URL
    if not chosen.startswith("postgresql"):
        raise ConfigurationError("postgres_backend takes a postgresql+psycopg:// URL")
    return DbosBackend(chosen)


def make_backend(url: str | None = None) -> Backend:
    """DBOS on the database ``url`` names (``sqlite:///`` or ``postgresql+psycopg://``); SQLite by default."""
    if url is None or url.startswith("sqlite"):
        return sqlite_backend(url)
    return postgres_backend(url)
