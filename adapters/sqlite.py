"""The SQLite adapter: the kit's embedded default.

A real file database in WAL mode. Python's implicit transactions are switched
off (``isolation_level=None``) and every write transaction starts with
``BEGIN IMMEDIATE``: a deferred transaction that reads then writes fails with
SQLITE_BUSY at once under WAL whatever the busy timeout, while an immediate
one waits its turn. SQLite serialises writers, so claimers never see each
other's locked rows (no ``skip_locked``): they queue for the write lock.

A writer waits at most ``BUSY_TIMEOUT_S`` for the write lock, once (never
retried: the budget is spent), then gets :class:`LockTimeout` naming what held
the lock: a store of this process (its tenant, thread and how long it has held
it) or another process. A write through a second store on the very thread
whose store holds the lock in an open ``transaction()`` could never get it, so
it is refused at once.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import sqlite3
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters._sql.dialect import Dialect
from adapters._sql.store import SqlStore, close_reset_store, reset_database
from kit.connections import ConnectionFactory
from kit.contract.capabilities import Capabilities, Capability
from kit.contract.entities import ClockMode
from kit.contract.errors import ConfigurationError, ConnectionLost, KitError, LockTimeout
from kit.contract.protocol import MigrationSpec, StatementHook, Storage
from kit.migrate import load_dialect
from kit.owners import Sweep, owner_of, owner_tag

__all__ = ["BUSY_TIMEOUT_S", "FOLDER_PREFIX", "SqliteBackend", "SqliteDatabase", "SqliteDialect", "SqliteStore"]

FOLDER_PREFIX = "kit_sqlite_"
"""Throw-away folders are ``kit_sqlite_<owner tag>_<random>`` (see :mod:`kit.owners`)."""

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for SQLite's write lock before giving up."""


class SqliteDialect(Dialect):
    name = "sqlite"
    migrations = "sqlite"
    paramstyle = "qmark"
    driver_errors = (sqlite3.Error,)
    begin_write = "BEGIN IMMEDIATE"
    begin_snapshot = "BEGIN"
    lock_rows = ""  # BEGIN IMMEDIATE already holds the database's single write lock
    skip_locked = ""
    # julianday('now') has millisecond resolution; round to whole ms before scaling so
    # floating point never yields ...999 microseconds.
    database_now = "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"

    def translate(self, error: BaseException) -> KitError | None:
        if isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error):
            return ConnectionLost(f"the SQLite connection is closed ({error})")
        if isinstance(error, sqlite3.OperationalError) and "interrupted" in str(error):
            return ConnectionLost(f"the statement was interrupted because the session was ended ({error})")
        if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
            return LockTimeout(
                f"SQLite's write lock stayed busy for {BUSY_TIMEOUT_S:g} s ({error}); nothing was written"
            )
        return None

    def table_exists(self, cursor: Any, table: str) -> bool:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class _Holder:
    """Which store of this process holds a file's write lock, on which thread, since when."""

    store: object
    tenant_id: str
    thread_id: int
    thread_name: str
    since: float
    unit_of_work: bool

    def describe(self) -> str:
        held = time.monotonic() - self.since
        inside = "an open transaction() block" if self.unit_of_work else "one operation"
        return (f"a store of tenant {self.tenant_id!r} on thread {self.thread_name!r}, for {held:.1f} s "
                f"({inside})")


_holders: dict[str, _Holder] = {}
"""Write-lock holders of this process, by database file."""


class SqliteStore(SqlStore):
    """A store on one SQLite file."""

    lock_key = ""
    """The database file this store writes (set by :meth:`SqliteDatabase.open`)."""
    _unit_open = False

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        outer = not self._depth
        if outer:
            self._unit_open = True
        try:
            with super().transaction() as unit:
                yield unit
        finally:
            if outer:
                self._unit_open = False

    @contextmanager
    def _tx(self, begin: str) -> Iterator[Any]:
        """The base transaction, with the write lock's holder recorded and named when a writer times out."""
        if self._depth or begin != self.dialect.begin_write:
            with super()._tx(begin) as cur:
                yield cur
            return
        holder = _holders.get(self.lock_key)
        if holder is not None and holder.store is not self and holder.thread_id == threading.get_ident():
            raise LockTimeout(
                f"SQLite's write lock is held by {holder.describe()}, on this same thread: it cannot be "
                "released while this call waits. Commit or roll back that unit of work first, or make "
                "this call through its store; nothing was written"
            )
        entered = False
        try:
            with super()._tx(begin) as cur:
                entered = True
                me = threading.current_thread()
                _holders[self.lock_key] = _Holder(self, self.tenant_id, me.ident or 0, me.name,
                                                  time.monotonic(), self._unit_open)
                try:
                    yield cur
                finally:
                    if _holders.get(self.lock_key, None) is not None and _holders[self.lock_key].store is self:
                        del _holders[self.lock_key]
        except LockTimeout as exc:
            if entered:
                raise
            other = _holders.get(self.lock_key)
            where = other.describe() if other is not None else "another process (no store of this one held it)"
            raise LockTimeout(f"{exc}; the lock was held by {where}") from exc


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(
        str(path),
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,  # no implicit transactions: the store issues BEGIN/COMMIT itself
        check_same_thread=False,  # a store may be opened in one thread and used in another
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


class _Session:
    """The kill switch of one store's connection, checked before each of its statements.

    The store holds its session (its statement hook and ``kill_switch``); the session refers back
    to the store weakly, so a store nobody uses any more is freed when dropped, not left in a
    reference cycle (with its connection) until the cyclic collector runs.
    """

    def __init__(self, statement_hook: StatementHook | None) -> None:
        self.statement_hook = statement_hook
        self._store: weakref.ref[SqlStore] | None = None
        self.killed = threading.Event()

    @property
    def store(self) -> SqlStore | None:
        return None if self._store is None else self._store()

    @store.setter
    def store(self, store: SqlStore) -> None:
        self._store = weakref.ref(store)

    def kill(self) -> None:
        self.killed.set()
        store = self.store
        if store is not None:
            store._conn.raw.interrupt()  # thread-safe: aborts a running statement, if any

    def hook(self, statement: str) -> None:
        if self.statement_hook is not None:
            self.statement_hook(statement)
        if self.killed.is_set():
            store = self.store
            if store is not None:
                store._conn.raw.close()  # in the connection's own thread: safe; rolls back
                raise ConnectionLost("the SQLite connection was ended (kill_session): reopen the store")


class SqliteDatabase:
    """One SQLite file owned by the kit."""

    store_class: type[SqliteStore] = SqliteStore
    dialect: Dialect = SqliteDialect()

    def __init__(self, path: Path, owned_dir: Path | None = None) -> None:
        self.path = path
        self.label = f"sqlite file {path}"
        self._owned_dir = owned_dir

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> SqliteStore:
        session = _Session(statement_hook)
        store = self.store_class(
            self.dialect,
            ConnectionFactory(lambda: _connect(self.path), session.hook),
            tenant_id,
            clock,
            load_dialect(self.dialect.migrations) if migrations is None else migrations,
        )
        session.store = store
        store.lock_key = str(self.path)
        store.kill_switch = session  # type: ignore[attr-defined]
        if store.clock_mode is ClockMode.TEST:
            store.install_test_clock()
        return store

    def kill_session(self, store: Storage) -> None:
        """End the store's "session" as a crash would: its open transaction rolls back.

        SQLite has no server session; the connection is the session. It may be in use
        by another thread, and closing a connection under a running statement is not
        safe, so the kill interrupts whatever runs now and the connection is closed by
        its own thread before its next statement (which then fails as ConnectionLost).
        """
        switch = getattr(store, "kill_switch", None)
        if not isinstance(switch, _Session):
            raise ConfigurationError("this store was not opened by a SqliteDatabase: it has no session to kill")
        switch.kill()

    def reset(self) -> None:
        """Empty the kit's tables and rewind the test clock, keeping the migrated schema."""
        reset_database(self)

    def drop(self) -> None:
        close_reset_store(self)
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)


def _directory_from_url(url: str) -> str:
    """``sqlite:///some/dir`` names the folder where the kit creates its throw-away files."""
    from kit.discovery import parse_url

    parsed = parse_url(url, "sqlite", ("sqlite",), example="sqlite:///path/to/folder")
    if not parsed.database:
        raise ConfigurationError(f"{url!r} names no folder: write sqlite:///path/to/folder")
    return str(parsed.database)


class SqliteBackend:
    """Makes throw-away SQLite files under a kit-owned temporary folder (or ``directory``)."""

    name = "sqlite"
    database_class: type[SqliteDatabase] = SqliteDatabase
    capabilities = Capabilities.of(
        Capability.TEST_CLOCK,
        Capability.DATABASE_CLOCK,
        Capability.TENANCY,
        Capability.UNIT_OF_WORK,
        Capability.CONCURRENT_CONNECTIONS,
        Capability.STATEMENT_FAULTS,
        Capability.KILL_SESSION,
        clock_resolution_us=1000,
    )

    _swept = False

    def __init__(self, directory: str | Path | None = None, url: str | None = None) -> None:
        if url is not None:
            directory = _directory_from_url(url)
        self._directory = Path(directory) if directory is not None else None
        if self._directory is not None and not self._directory.is_dir():
            raise ConfigurationError(
                f"SQLite directory {self._directory} does not exist: create it or pass another"
            )
        self._counter = itertools.count(1)

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version} (Python sqlite3)"

    def provision(self) -> SqliteDatabase:
        if not self._swept:
            self._swept = True
            with contextlib.suppress(Exception):  # best effort: a janitor never stops a run
                self.sweep()
        owned = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{owner_tag()}_", dir=self._directory))
        return self.database_class(owned / "kit.db", owned_dir=owned)

    def sweep(self) -> Sweep:
        """Remove the folders of dead kit processes of this host; keep (and say why) every other one.

        A folder is removed only when its name carries a dead owner's mark and it holds
        nothing but the kit's own database files.
        """
        root = self._directory or Path(tempfile.gettempdir())
        done = Sweep()
        folders = {p.name: p for p in root.iterdir() if p.name.startswith(FOLDER_PREFIX) and p.is_dir()}
        tags = {name: name.removeprefix(FOLDER_PREFIX).split("_", 1)[0] for name in folders}
        for name, folder in sorted(folders.items()):
            owner = owner_of(tags[name])
            verdict = owner.verdict() if owner is not None else "unmarked"
            foreign = [p.name for p in folder.iterdir() if not p.name.startswith("kit.db")]
            if verdict == "dead" and not foreign:
                shutil.rmtree(folder, ignore_errors=True)
                done.dropped.append(str(folder))
            elif verdict == "dead":
                done.kept[str(folder)] = f"it holds files the kit did not create ({', '.join(sorted(foreign)[:3])})"
            else:
                done.kept[str(folder)] = {
                    "alive": "its owner process is still running", "elsewhere": "created on another host",
                    "unmarked": "no owner mark (an older kit): remove it yourself if unused",
                }[verdict]
        return done

    def close(self) -> None:
        pass
