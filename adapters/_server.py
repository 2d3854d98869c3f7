"""What every server-backed adapter shares: throw-away namespaces, stores on them, session kills.

A *namespace* is where one provisioned database lives: a schema on
PostgreSQL, a database on MySQL/MariaDB and SQL Server. The kit names each
``kit_<owner tag><random>`` (see :mod:`kit.owners`: host, pid and start time of
the creating process), creates it through an admin connection, and drops the
namespaces it created in this process; :meth:`ServerBackend.sweep` (``kit
clean``, and once before a backend's first provision) drops those whose owner
is provably dead, never anything else.

A dialect's backend subclasses :class:`ServerBackend` and fills in the
``_``-prefixed hooks (connect, create/drop a namespace, session id, kill).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from adapters._sql.dialect import Dialect
from adapters._sql.store import SqlStore, close_reset_store, reset_database
from kit.connections import ConnectionFactory
from kit.contract.capabilities import Capabilities, Capability
from kit.contract.entities import ClockMode
from kit.contract.errors import ConfigurationError
from kit.contract.protocol import MigrationSpec, StatementHook, Storage
from kit.discovery import ServerHandle
from kit.migrate import load_dialect
from kit.owners import TAG_LENGTH, Sweep, owner_of, owner_tag

__all__ = ["NAMESPACE_PREFIX", "SERVER_CAPABILITIES", "ServerBackend", "ServerDatabase", "Sweep"]

NAMESPACE_PREFIX = "kit_"
_RANDOM_HEX = 6
"""Random hex characters after the owner tag in a namespace name."""

#: What every server adapter of the kit declares (each adds its clock resolution and
#: any expected failures): real row locks, both clocks, sessions the kit can kill.
SERVER_CAPABILITIES: tuple[Capability, ...] = (
    Capability.SKIP_LOCKED,
    Capability.TEST_CLOCK,
    Capability.DATABASE_CLOCK,
    Capability.TENANCY,
    Capability.UNIT_OF_WORK,
    Capability.KILL_SESSION,
    Capability.CONCURRENT_CONNECTIONS,
    Capability.STATEMENT_FAULTS,
)


def sweep_names(names: list[str], prefix: str, random_hex: int) -> tuple[list[str], dict[str, str]]:
    """Split kit-prefixed names into those whose owner is dead and those to keep (with why)."""
    dead: list[str] = []
    kept: dict[str, str] = {}
    for name in sorted(names):
        rest = name.removeprefix(prefix)
        owner = owner_of(rest[:TAG_LENGTH]) if rest != name and len(rest) == TAG_LENGTH + random_hex else None
        verdict = owner.verdict() if owner is not None else "unmarked"
        if verdict == "dead":
            dead.append(name)
        else:
            kept[name] = {
                "alive": "its owner process is still running",
                "elsewhere": "created on another host",
                "unmarked": "no owner mark (an older kit, or not the kit's): drop it yourself if unused",
            }[verdict]
    return dead, kept


class ServerDatabase:
    """One kit-owned namespace on a server."""

    def __init__(self, backend: ServerBackend, namespace: str) -> None:
        self.backend = backend
        self.namespace = namespace
        self.label = f"{backend.name} {namespace} on {backend.handle}"
        self._clock_installed = False
        """The test clock's table and row exist (nothing the kit does removes them; reset rewinds the row)."""

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> SqlStore:
        backend = self.backend
        store = backend.store_class(
            backend.dialect,
            ConnectionFactory(lambda: backend._connect(self.namespace), statement_hook),
            tenant_id,
            clock,
            load_dialect(backend.dialect.migrations) if migrations is None else migrations,
        )
        store.session_id = backend._session_id(store._conn.raw)  # type: ignore[attr-defined]
        if store.clock_mode is ClockMode.TEST and not self._clock_installed:
            store.install_test_clock()  # once per database: later stores find it (one transaction less each)
            self._clock_installed = True
        return store

    def kill_session(self, store: Storage) -> None:
        """End the store's server session from the admin connection, as a crash would."""
        session = getattr(store, "session_id", None)
        if session is None:
            raise ConfigurationError("this store was not opened by a server backend: it has no session to kill")
        self.backend._with_admin(lambda cur: self.backend._kill(cur, session))

    def reset(self) -> None:
        """Empty the kit's tables and rewind the test clock, keeping the migrated schema."""
        reset_database(self)

    def drop(self) -> None:
        close_reset_store(self)
        self.backend._drop(self.namespace)


class ServerBackend:
    """An adapter bound to one discovered server."""

    name: str
    dialect: ClassVar[Dialect]
    store_class: ClassVar[type[SqlStore]] = SqlStore
    database_class: ClassVar[type[ServerDatabase]] = ServerDatabase
    capabilities: Capabilities

    def __init__(self, handle: ServerHandle, container: Any = None) -> None:
        self.handle = handle
        self._container = container
        self._lock = threading.Lock()
        self._admin: Any = None
        self._created: set[str] = set()
        self._swept = False

    # -- hooks a dialect fills in ------------------------------------------
    def _connect(self, namespace: str | None) -> Any:
        """A new autocommit DB-API connection, working inside ``namespace`` (None: the admin database)."""
        raise NotImplementedError

    def _create_namespace(self, cursor: Any, namespace: str) -> None:
        raise NotImplementedError

    def _drop_namespace(self, cursor: Any, namespace: str) -> None:
        raise NotImplementedError

    def _session_id(self, connection: Any) -> Any:
        raise NotImplementedError

    def _kill(self, cursor: Any, session_id: Any) -> None:
        raise NotImplementedError

    def _list_namespaces(self, cursor: Any) -> list[str]:
        """Every namespace on the server whose name starts with ``kit_``."""
        raise NotImplementedError

    # -- shared behaviour ---------------------------------------------------
    def describe(self) -> str:
        return str(self.handle)

    def _with_admin(self, fn: Any) -> Any:
        with self._lock:
            if self._admin is None:
                self._admin = self._connect(None)
            cursor = self._admin.cursor()
            try:
                return fn(cursor)
            finally:
                cursor.close()

    def sweep(self) -> Sweep:
        """Drop the namespaces of dead kit processes of this host; keep (and say why) every other one."""
        names = self._with_admin(self._list_namespaces)
        dead, kept = sweep_names([n for n in names if n not in self._created], NAMESPACE_PREFIX, _RANDOM_HEX)
        done = Sweep(kept=kept)
        for name in dead:
            try:
                self._with_admin(lambda cur, n=name: self._drop_namespace(cur, n))
                done.dropped.append(name)
            except Exception as exc:  # noqa: BLE001 - one namespace that will not drop never stops the rest
                done.kept[name] = f"dropping it failed: {str(exc).splitlines()[0][:160] if str(exc) else exc!r}"
        return done

    def provision(self) -> ServerDatabase:
        if not self._swept:
            self._swept = True
            with contextlib.suppress(Exception):  # best effort: a janitor never stops a run
                self.sweep()
        namespace = f"{NAMESPACE_PREFIX}{owner_tag()}{secrets.token_hex(_RANDOM_HEX // 2)}"
        self._with_admin(lambda cur: self._create_namespace(cur, namespace))
        self._created.add(namespace)
        return self.database_class(self, namespace)

    def _drop(self, namespace: str) -> None:
        if namespace not in self._created or not namespace.startswith(NAMESPACE_PREFIX):
            raise ConfigurationError(f"refusing to drop {namespace!r}: the kit did not create it in this run")
        self._with_admin(lambda cur: self._drop_namespace(cur, namespace))
        self._created.discard(namespace)

    def close(self) -> None:
        for namespace in sorted(self._created):
            with contextlib.suppress(Exception):  # best effort: the server may already be gone
                self._drop(namespace)
        with self._lock:
            if self._admin is not None:
                with contextlib.suppress(Exception):
                    self._admin.close()
                self._admin = None
        if self._container is not None:
            self._container.stop()
            self._container = None
