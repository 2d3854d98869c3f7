"""The storage protocol: what every adapter implements (CONTRACT.md section 3).

Three layers, each with one job:

* :class:`Backend` -- an adapter bound to a server (or to nothing, for the
  embedded and in-memory ones). It declares capabilities and provisions
  isolated throw-away databases.
* :class:`Database` -- one such database. It opens stores on it, each with its
  own connection, for one tenant and one clock mode.
* :class:`Storage` -- one open store: every contract operation. Not
  thread-safe; threads open their own.

Unless an operation says otherwise it is one closed transaction, and inside a
``transaction()`` block it joins the open one instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from kit.contract.capabilities import Capabilities
from kit.contract.entities import (
    JSON,
    ClockMode,
    Command,
    CommandClaim,
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
from kit.contract.outcomes import Outcome

__all__ = [
    "Backend",
    "CancelStore",
    "ClockStore",
    "CommandStore",
    "Database",
    "DecisionStore",
    "DefinitionStore",
    "LeaseStore",
    "MigrationSpec",
    "SchemaStore",
    "SignalStore",
    "StatementHook",
    "Storage",
    "StorageCore",
    "TimerStore",
    "Transaction",
    "UnitOfWorkStore",
]

#: Called with each SQL statement (or, for non-SQL stores, each named write step)
#: before it runs; raising from it fails that statement. The fault layer's seam.
StatementHook = Callable[[str], None]


class MigrationSpec(Protocol):
    """One numbered migration file, read-only (the kit's own is a frozen dataclass)."""

    @property
    def version(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def sql(self) -> str: ...

    @property
    def checksum(self) -> str: ...


class Transaction(Protocol):
    """An open unit of work."""

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once after the outermost commit; never after a rollback."""


class StorageCore(Protocol):
    """What every store keeps: its identity, its lifecycle, runs started, read and listed.

    Each protocol below is one promise family (``kit.contract.Promise``) or
    capability; :class:`Storage` is all of them. A store that withholds a
    family still has its methods, but the kit never calls them.
    """

    tenant_id: str
    clock_mode: ClockMode

    def close(self) -> None: ...

    def start_run(
        self,
        run_id: str,
        definition: DefinitionRef,
        input: JSON = None,
        idempotency_key: str | None = None,
    ) -> StartResult: ...

    def get_run(self, run_id: str) -> Run | None: ...

    def list_runs(
        self, status: RunStatus | None = None, after: str | None = None, limit: int = 100
    ) -> list[Run]:
        """Runs ordered by run id (code point order); ``after`` is the last id of the previous page."""

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]: ...


class SchemaStore(Protocol):
    """Schema lifecycle (promise ``schema_checksums`` for verification)."""

    @property
    def migrations(self) -> Sequence[MigrationSpec]:
        """The migrations this store applies and verifies against, in order."""

    def migrate(self) -> list[str]:
        """Apply missing numbered migrations in order; return the names applied.

        Idempotent and safe when two processes run it at once.
        """

    def verify_schema(self) -> None:
        """Raise :class:`~kit.contract.errors.SchemaError` unless the schema is exactly current."""


class ClockStore(Protocol):
    """The store clock (capabilities ``test_clock`` and ``database_clock``)."""

    def now(self) -> datetime:
        """The store clock, read inside the database."""

    def set_test_clock(self, at: datetime) -> None: ...

    def advance_test_clock(self, by: timedelta) -> datetime: ...


class DefinitionStore(Protocol):
    """Promise ``definitions``."""

    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        """Insert if (name, version) is absent; always return the stored row, untouched."""

    def get_definition(self, name: str, version: str) -> Definition | None: ...


class CancelStore(Protocol):
    """Promise ``cancel_requests``."""

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome: ...


class DecisionStore(Protocol):
    """Claiming runs and committing decisions: the core, fenced by promises ``leases``,
    ``generation_fencing`` and ``expected_revision``, whole by ``atomic_decision``."""

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]: ...

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        """The snapshot, or the outcome (not_found / terminal / claim_lost) explaining why not."""

    def commit_decision(
        self, claim: RunClaim, expected_revision: int, decision: Decision
    ) -> Outcome: ...


class LeaseStore(Protocol):
    """Promise ``leases``: claims end by expiry, renewal extends them, release gives them back."""

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome: ...

    def release_run_claim(self, claim: RunClaim) -> Outcome: ...


class CommandStore(Protocol):
    """Promise ``commands`` (heartbeats also need ``leases``)."""

    def claim_commands(
        self,
        worker_id: str,
        lease: timedelta,
        limit: int = 1,
        queues: Sequence[str] | None = None,
    ) -> list[CommandClaim]: ...

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome: ...

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome: ...

    def fail_command(
        self,
        claim: CommandClaim,
        error: JSON = None,
        retry_after: timedelta | None = None,
        retryable: bool = True,
    ) -> Outcome: ...

    def get_command(self, command_id: str) -> Command | None: ...

    def list_commands(self, run_id: str) -> list[Command]: ...


class SignalStore(Protocol):
    """Promise ``signals``."""

    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt: ...

    def list_signals(self, run_id: str) -> list[Signal]: ...


class TimerStore(Protocol):
    """Promise ``timers``."""

    def fire_due_timers(self, limit: int = 100) -> list[Timer]: ...

    def list_timers(self, run_id: str) -> list[Timer]: ...


class UnitOfWorkStore(Protocol):
    """Promise ``unit_of_work``."""

    def transaction(self) -> AbstractContextManager[Transaction]: ...

    def lock_run(self, run_id: str) -> Run | None:
        """Row-lock a run inside an open transaction; raise NotInTransaction outside one."""


@runtime_checkable
class Storage(
    StorageCore,
    SchemaStore,
    ClockStore,
    DefinitionStore,
    CancelStore,
    DecisionStore,
    LeaseStore,
    CommandStore,
    SignalStore,
    TimerStore,
    UnitOfWorkStore,
    Protocol,
):
    """One open store: every promise family's operations."""


class Database(Protocol):
    """One isolated throw-away database (or schema) that the kit created and will drop."""

    label: str
    """A description safe to print (never contains a password)."""

    def open(
        self,
        tenant_id: str = "default",
        *,
        clock: ClockMode = ClockMode.TEST,
        migrations: Sequence[MigrationSpec] | None = None,
        statement_hook: StatementHook | None = None,
    ) -> Storage:
        """A new store with its own connection. ``migrations`` overrides the dialect's files."""

    def kill_session(self, store: Storage) -> None:
        """End ``store``'s server session from another connection (capability ``kill_session``)."""

    def drop(self) -> None: ...

    # Optional: ``reset()`` empties the kit's tables and rewinds the test clock while
    # keeping the migrated schema, so one database can serve many generated test cases.
    # Callers fall back to provision()/drop() when a database does not have it.


class Backend(Protocol):
    """An adapter bound to where its databases live."""

    name: str
    capabilities: Capabilities

    def describe(self) -> str:
        """Driver and server versions, safe to print."""

    def provision(self) -> Database:
        """A fresh, empty, unmigrated database owned by the kit."""

    def close(self) -> None: ...


def iter_pages(store: Storage, status: RunStatus | None = None, page: int = 100) -> Iterator[Run]:
    """Every run, page by page, through ``list_runs``' keyset pagination."""
    after: str | None = None
    while True:
        batch = store.list_runs(status=status, after=after, limit=page)
        yield from batch
        if len(batch) < page:
            return
        after = batch[-1].run_id
