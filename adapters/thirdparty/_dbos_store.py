"""The DBOS adapter's store: the kit's workflow protocol over DBOS's own ``SystemDatabase``.

See :mod:`adapters.thirdparty.dbos` for the mapping; every write and state
read below is a call into DBOS (``dbos/_sys_db.py``), never a re-implementation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from dbos import _migration as dbos_migration
from dbos._error import (
    DBOSConflictingWorkflowError,
    DBOSInitializationError,
    DBOSNonExistentWorkflowError,
    DBOSQueueDeduplicatedError,
    DBOSStepNondeterminismError,
    DBOSWorkflowConflictIDError,
    DBOSWorkflowIDInUseError,
)
from dbos._queue import _INTERNAL_QUEUE_CONSTRUCTION, Queue
from dbos._serialization import DBOSPortableJSON, deserialize_value
from dbos._sys_db import SendMessage, SystemDatabase

from adapters.thirdparty._dbos_promises import NOT_PROMISED
from kit.contract import (
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
    SignalStatus,
    Snapshot,
    StartResult,
    Timer,
)
from kit.contract.capabilities import Promise
from kit.contract.errors import (
    ClockModeError,
    InvalidDecision,
    RunAlreadyExists,
    SchemaError,
    StorageError,
)
from kit.contract.outcomes import Outcome
from kit.contract.protocol import MigrationSpec, StatementHook, Transaction
from kit.contract.validation import (
    MAX_KEY,
    MAX_NAME,
    MAX_RUN_ID,
    MAX_WORKER_ID,
    check_claim,
    check_decision,
    check_json,
    check_limit,
    check_text,
)

if TYPE_CHECKING:
    from adapters.thirdparty.dbos import DbosDatabase

__all__ = ["APP_VERSION", "DECISION_STEP", "QUEUE", "DBOSPortableJSON", "DbosStore", "SystemDatabase", "dbos_migration"]

QUEUE = "kit"
"""The DBOS queue every kit run is enqueued on and dequeued from."""
APP_VERSION = "kit"
"""The application version the adapter dequeues as (DBOS dequeues only its own version)."""
DECISION_STEP = "kit.decision"
"""The ``function_name`` of the step that checkpoints one decision's events."""

_STATUS: dict[str, RunStatus] = {
    "ENQUEUED": RunStatus.PENDING,
    "DELAYED": RunStatus.PENDING,
    "PENDING": RunStatus.RUNNING,
    "SUCCESS": RunStatus.COMPLETED,
    "ERROR": RunStatus.FAILED,
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": RunStatus.FAILED,
    "CANCELLED": RunStatus.CANCELLED,
}
_TERMINAL_DBOS: dict[RunStatus, str] = {
    RunStatus.COMPLETED: "SUCCESS",
    RunStatus.FAILED: "ERROR",
    RunStatus.CANCELLED: "CANCELLED",
}


def _ms(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(int(value) / 1000, UTC)


def _json(value: JSON) -> str:
    text: str = DBOSPortableJSON.serialize(value)
    return text


def _unjson(text: str | None, serialization: str | None) -> JSON:
    return deserialize_value(text, serialization, DBOSPortableJSON)


# -- the store ---------------------------------------------------------------


class _NoUnitOfWork(AbstractContextManager[Transaction]):
    def __enter__(self) -> Transaction:
        raise StorageError(f"not promised: {NOT_PROMISED[Promise.UNIT_OF_WORK]}")

    def __exit__(self, *exc: object) -> None:
        return None


class DbosStore:
    """One open DBOS ``SystemDatabase`` (its own engine and pool) seen through the kit protocol."""

    def __init__(self, database: DbosDatabase, tenant_id: str, statement_hook: StatementHook | None) -> None:
        self.tenant_id = tenant_id
        self.clock_mode = ClockMode.DATABASE
        self._db = database
        # Not installed: the adapter does not declare statement_faults (its stores share one engine).
        self._hook = statement_hook
        self._system: SystemDatabase | None = None
        self._queues: dict[int, Queue] = {}

    @property
    def _sys(self) -> SystemDatabase:
        """DBOS's SystemDatabase on this store's database, created on first use."""
        if self._system is None:
            self._db.materialise(migrated=False)
            self._system = self._db.system_database()
        return self._system

    @property
    def migrations(self) -> Sequence[MigrationSpec]:
        return self._db.migrations

    def close(self) -> None:
        if self._system is not None:
            self._system.destroy()
            self._system = None

    # -- schema -------------------------------------------------------------
    def _versions(self) -> tuple[int, int]:
        if self._db.is_sqlite:
            return dbos_migration.get_sqlite_migration_versions(self._sys.engine)
        return dbos_migration.get_migration_versions(self._sys.engine, self._db.schema, False)

    def migrate(self) -> list[str]:
        """DBOS's ``run_migrations``; the names are those DBOS's recorded version moved past.

        A database materialised from the backend's migrated template (see
        :meth:`DbosDatabase.materialise`) reports every DBOS migration on its first migrate().
        """
        if self._db.materialise(migrated=True):
            return [f"{m.version:03d}_{m.name}" for m in self._db.migrations]
        before, _ = self._versions()
        self._sys.run_migrations()
        after, _ = self._versions()
        return [f"{m.version:03d}_{m.name}" for m in self._db.migrations if before < m.version <= after]

    def verify_schema(self) -> None:
        try:
            self._sys.verify_migrations()
        except DBOSInitializationError as exc:
            current, _ = self._versions()
            raise SchemaError("absent" if current == 0 else "partial", str(exc)) from None

    # -- clock --------------------------------------------------------------
    def now(self) -> datetime:
        with self._sys.engine.connect() as c:
            value = c.execute(sa.select(self._sys._now_ms_sql())).scalar_one()
        return datetime.fromtimestamp(int(value) / 1000, UTC)

    def set_test_clock(self, at: datetime) -> None:
        raise ClockModeError("DBOS reads its own clock (the database's); it has no test clock")

    def advance_test_clock(self, by: timedelta) -> datetime:
        raise ClockModeError("DBOS reads its own clock (the database's); it has no test clock")

    # -- definitions (not promised) ------------------------------------------
    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        """DBOS stores no definitions: the reference is echoed, to be carried on the run row."""
        check_text("name", name, MAX_NAME)
        check_text("version", version, MAX_NAME)
        return Definition(name, version, digest, bytes(body), self.now())

    def get_definition(self, name: str, version: str) -> Definition | None:
        return None

    def list_definition_versions(self, name: str) -> list[Definition]:
        """DBOS stores no definitions (the definitions promise is withheld): nothing to list."""
        check_text("name", name, MAX_NAME)
        return []

    # -- runs ---------------------------------------------------------------
    def start_run(
        self, run_id: str, definition: DefinitionRef, input: JSON = None, idempotency_key: str | None = None
    ) -> StartResult:
        check_text("run_id", run_id, MAX_RUN_ID)
        check_json("input", input)
        if idempotency_key is not None:
            check_text("idempotency_key", idempotency_key, MAX_KEY)
        status: Any = {
            "workflow_uuid": run_id,
            "status": "ENQUEUED",
            "name": definition.name,
            "class_name": definition.version,
            "config_name": definition.digest,
            "authenticated_user": None,
            "assumed_role": None,
            "authenticated_roles": None,
            "created_at": None,
            "updated_at": None,
            "queue_name": QUEUE,
            "executor_id": None,
            "app_version": None,
            "app_id": None,
            "recovery_attempts": None,
            "workflow_timeout_ms": None,
            "workflow_deadline_epoch_ms": None,
            "deduplication_id": idempotency_key,
            "priority": 0,
            "inputs": _json(input),
            "queue_partition_key": None,
            "forked_from": None,
            "parent_workflow_id": None,
            "started_at_epoch_ms": None,
            "serialization": DBOSPortableJSON.name(),
            "delay_until_epoch_ms": None,
            "attributes": None,
            "schedule_name": None,
            "debounce_deadline_epoch_ms": None,
            "is_debounced": False,
            "application_name": None,
            "shard_key": None,
        }
        try:
            _, created = self._sys.init_workflow(
                status,
                creator_xid=str(uuid.uuid4()),
                reuse_policy="reject" if idempotency_key is None else None,
            )
        except (DBOSWorkflowIDInUseError, DBOSConflictingWorkflowError) as exc:
            raise RunAlreadyExists(f"run {run_id!r} exists ({exc}); repeat its idempotency key to get it back") from None
        except DBOSQueueDeduplicatedError:
            holder = self._sys.get_deduplicated_workflow(QUEUE, idempotency_key or "")
            run = self.get_run(holder) if holder is not None else None
            if run is None:  # the holder finished between the insert and the look-up
                raise StorageError(f"idempotency key {idempotency_key!r} was held by a run that just ended") from None
            return StartResult(run, False)
        run = self.get_run(run_id)
        assert run is not None, "DBOS init_workflow returned without a row"
        if not created and idempotency_key is not None and run.idempotency_key != idempotency_key:
            raise RunAlreadyExists(f"run {run_id!r} exists under another idempotency key: choose another run id")
        return StartResult(run, created)

    def _decision_steps(self, run_id: str) -> list[Any]:
        return [s for s in self._sys.list_workflow_steps(run_id) if s["function_name"] == DECISION_STEP]

    def _run(self, row: Any) -> Run:
        run_id = row["workflow_uuid"]
        # DBOS writes output and error only with a terminal status: read them only then.
        result = self._sys._read_workflow_result_row(run_id) if _STATUS[row["status"]].terminal else None
        output = error = None
        if result is not None:
            output = _unjson(result[1], result[3])
            error = _unjson(result[2], result[3])
        dbos_status = row["status"]
        status = _STATUS[dbos_status]
        return Run(
            run_id=run_id,
            tenant_id=self.tenant_id,
            definition=DefinitionRef(row["name"] or "", row["class_name"] or "", row["config_name"] or ""),
            status=status,
            revision=len(self._decision_steps(run_id)),
            claim_owner=row["executor_id"] if dbos_status == "PENDING" else None,
            claim_generation=int(row["recovery_attempts"] or 0),
            claim_expires_at=None,
            wake_at=_ms(row["delay_until_epoch_ms"]),
            wakeup_pending=False,
            cancel_requested=dbos_status == "CANCELLED",
            cancel_reason=None,
            input=_unjson(row["inputs"], row["serialization"]),
            output=output,
            error=error,
            idempotency_key=row["deduplication_id"],
            created_at=_ms(row["created_at"]) or datetime.fromtimestamp(0, UTC),
            updated_at=_ms(row["updated_at"]) or datetime.fromtimestamp(0, UTC),
        )

    def get_run(self, run_id: str) -> Run | None:
        row = self._sys.get_workflow_status(run_id)
        return None if row is None else self._run(row)

    def list_runs(self, status: RunStatus | None = None, after: str | None = None, limit: int = 100) -> list[Run]:
        check_limit(limit)
        wanted = None if status is None else [k for k, v in _STATUS.items() if v is status]
        listed = self._sys.list_workflows(status=wanted, load_input=False, load_output=False)
        ids = sorted(w.workflow_id for w in listed if after is None or w.workflow_id > after)[:limit]
        return [self._run(row) for row in self._sys.get_workflow_statuses(ids)]

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        row = self._sys.get_workflow_status(run_id)
        if row is None:
            return Outcome.NOT_FOUND
        if _STATUS[row["status"]].terminal:
            return Outcome.TERMINAL
        self._sys.cancel_workflows([run_id])
        return Outcome.COMMITTED

    def get_history(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        events: list[Event] = []
        for revision, step in enumerate(self._decision_steps(run_id), 1):
            stamp = _ms(step["completed_at_epoch_ms"]) or datetime.fromtimestamp(0, UTC)
            for item in step["output"] or []:
                seq = len(events) + 1
                events.append(Event(run_id, seq, item["kind"], item["key"], item["payload"], revision, stamp))
        chosen = [e for e in events if e.seq > after_seq]
        return chosen if limit is None else chosen[:limit]

    # -- decision claims ----------------------------------------------------
    def _queue(self, limit: int) -> Queue:
        queue = self._queues.get(limit)
        if queue is None:
            queue = Queue(QUEUE, worker_concurrency=limit, token=_INTERNAL_QUEUE_CONSTRUCTION)
            self._queues[limit] = queue
        return queue

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        check_claim(worker_id, lease, limit)
        check_text("worker_id", worker_id, MAX_WORKER_ID)
        token = str(uuid.uuid4())
        ids, _ = self._sys.start_queued_workflows(self._queue(limit), worker_id, APP_VERSION, None, owner_xid=token)
        expires = self.now() + lease  # informational only: DBOS ownership has no lease
        claims = []
        for row in self._sys.get_workflow_statuses(ids):
            revision = len(self._decision_steps(row["workflow_uuid"]))
            claims.append(
                RunClaim(row["workflow_uuid"], worker_id, int(row["recovery_attempts"] or 0), expires, revision, token)
            )
        return claims

    def _fence(self, claim: RunClaim) -> tuple[Outcome | None, Any]:
        """``not_found`` / ``terminal`` / ``claim_lost`` when the claim cannot act, else None and the row."""
        row = self._sys.get_workflow_status(claim.run_id)
        if row is None:
            return Outcome.NOT_FOUND, None
        if _STATUS[row["status"]].terminal:
            return Outcome.TERMINAL, row
        if (
            row["status"] != "PENDING"
            or row["executor_id"] != claim.worker_id
            or int(row["recovery_attempts"] or 0) != claim.generation
            or self._sys.get_workflow_owner(claim.run_id) != claim.token
        ):
            return Outcome.CLAIM_LOST, row
        return None, row

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        """Not a lease renewal (DBOS has none): ``renewed`` while the claim still owns the run."""
        refused, _ = self._fence(claim)
        return refused or Outcome.RENEWED

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        refused, _ = self._fence(claim)
        if refused is not None:
            return refused
        moved = self._sys.reenqueue_for_recovery(claim.run_id, [claim.worker_id], QUEUE)
        return Outcome.COMMITTED if moved else Outcome.CLAIM_LOST

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        refused, row = self._fence(claim)
        if refused is not None:
            return refused
        signals = tuple(s for s in self.list_signals(claim.run_id) if s.status is SignalStatus.PENDING)
        return Snapshot(self._run(row), tuple(self.get_history(claim.run_id)), (), signals, ())

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        check_decision(decision)
        self._refuse_unpromised(decision)
        refused, _ = self._fence(claim)
        if refused is not None:
            return refused
        pending = {s.signal_id: s for s in self.list_signals(claim.run_id) if s.status is SignalStatus.PENDING}
        for signal_id in decision.consume_signals:
            if signal_id not in pending:
                raise InvalidDecision(f"signal {signal_id!r} is not pending for run {claim.run_id!r}: consume only what load_claimed returned")
        _check_oldest_first(decision.consume_signals, list(pending.values()))
        with _acting_as(claim.run_id, claim.token):
            try:
                return self._write_decision(claim, decision, pending)
            except DBOSWorkflowConflictIDError:
                refused, _ = self._fence(claim)
                return refused or Outcome.CLAIM_LOST

    @staticmethod
    def _refuse_unpromised(decision: Decision) -> None:
        if decision.commands:
            raise InvalidDecision(f"not promised: commands ({NOT_PROMISED[Promise.COMMANDS]})")
        if decision.timers or decision.consume_timers or decision.cancel_timers:
            raise InvalidDecision(f"not promised: timers ({NOT_PROMISED[Promise.TIMERS]})")
        if decision.consume_commands:
            raise InvalidDecision(f"not promised: commands ({NOT_PROMISED[Promise.COMMANDS]})")
        if decision.next_status is RunStatus.BLOCKED:
            raise InvalidDecision(f"not promised: blocked runs ({NOT_PROMISED[Promise.WAKE_ON_INPUT]})")
        if decision.wake_at is not None or decision.wake_after is not None:
            raise InvalidDecision(f"not promised: delayed wake-ups ({NOT_PROMISED[Promise.TIMERS]})")

    def _write_decision(self, claim: RunClaim, decision: Decision, pending: dict[str, Signal]) -> Outcome:
        started = int(time.time() * 1000)
        steps = self._sys.list_workflow_steps(claim.run_id, load_output=False)
        function_id = max((s["function_id"] for s in steps), default=0)
        for signal_id in decision.consume_signals:  # DBOS consumes the oldest message of a topic
            function_id += 1
            self._sys.recv_consume(claim.run_id, function_id, pending[signal_id].name, started)
        events = [{"kind": e.kind, "key": e.operation_key, "payload": e.payload} for e in decision.events]
        function_id += 1
        try:
            self._sys.record_operation_result(
                {
                    "workflow_uuid": claim.run_id,
                    "function_id": function_id,
                    "function_name": DECISION_STEP,
                    "started_at_epoch_ms": started,
                    "output": _json(events),
                    "error": None,
                    "serialization": DBOSPortableJSON.name(),
                    "child_workflow_id": None,
                },
                owner_xid=claim.token,
            )
        except DBOSStepNondeterminismError:
            return Outcome.REVISION_MISMATCH
        if decision.next_status.terminal:
            landed = self._sys.update_workflow_outcome(
                claim.run_id,
                _TERMINAL_DBOS[decision.next_status],  # type: ignore[arg-type]
                output=_json(decision.output),
                error=_json(decision.error),
                owner_xid=claim.token,
            )
        else:
            landed = self._sys.reenqueue_for_recovery(claim.run_id, [claim.worker_id], QUEUE)
        if not landed:
            refused, _ = self._fence(claim)
            return refused or Outcome.CLAIM_LOST
        return Outcome.COMMITTED

    # -- commands (not promised) --------------------------------------------
    def claim_commands(
        self, worker_id: str, lease: timedelta, limit: int = 1, queues: Sequence[str] | None = None
    ) -> list[CommandClaim]:
        return []

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        return Outcome.NOT_FOUND

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        return Outcome.NOT_FOUND

    def fail_command(
        self, claim: CommandClaim, error: JSON = None, retry_after: timedelta | None = None, retryable: bool = True
    ) -> Outcome:
        return Outcome.NOT_FOUND

    def get_command(self, command_id: str) -> Command | None:
        return None

    def list_commands(self, run_id: str) -> list[Command]:
        return []

    # -- signals ------------------------------------------------------------
    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        check_text("name", name, MAX_NAME)
        check_json("payload", payload)
        check_text("dedup_key", dedup_key, MAX_KEY)
        message_uuid = f"{dedup_key}::{run_id}"  # DBOS's own per-destination idempotency id
        message = SendMessage(destination_id=run_id, message=payload, topic=name, idempotency_key=dedup_key)
        try:
            with self._sys.engine.begin() as c:
                self._sys.send_bulk_with_connection(
                    [message], c, serialization_type=None, function_name="DBOS.send", send_to_forks=False
                )
                created = bool(c.execute(self._inserted_by_this_transaction(), {"m": message_uuid}).scalar())
        except DBOSNonExistentWorkflowError:
            return SignalReceipt(Outcome.NOT_FOUND)
        return SignalReceipt(Outcome.COMMITTED if created else Outcome.DUPLICATE, self._signal(run_id, message_uuid))

    def _inserted_by_this_transaction(self) -> Any:
        """Whether DBOS's INSERT ... ON CONFLICT DO NOTHING just stored the message (DBOS's
        send returns nothing): SQLite's ``changes()``, PostgreSQL's ``xmin`` of the row."""
        if self._db.is_sqlite:
            return sa.text("SELECT changes()")
        return sa.text(
            f'SELECT xmin = pg_current_xact_id()::xid FROM "{self._db.schema}".notifications WHERE message_uuid = :m'
        )

    def _signals(self, run_id: str, message_uuid: str | None = None) -> list[Signal]:
        n = self._sys.tables.notifications
        # DBOS's own order (recv consumes the oldest by created_at_epoch_ms); ties stay as the database returns them.
        query = sa.select(n).where(n.c.destination_uuid == run_id).order_by(n.c.created_at_epoch_ms)
        if message_uuid is not None:
            query = query.where(n.c.message_uuid == message_uuid)
        with self._sys.engine.connect() as c:
            rows = c.execute(query).fetchall()
        suffix = f"::{run_id}"
        return [
            Signal(
                signal_id=r.message_uuid,
                run_id=run_id,
                name=r.topic,
                payload=_unjson(r.message, r.serialization),
                dedup_key=r.message_uuid.removesuffix(suffix),
                status=SignalStatus.CONSUMED if r.consumed else SignalStatus.PENDING,
                consumed_revision=r.consumed_by_function_id,
                sent_at=_ms(r.created_at_epoch_ms) or datetime.fromtimestamp(0, UTC),
            )
            for r in rows
        ]

    def _signal(self, run_id: str, message_uuid: str) -> Signal | None:
        found = self._signals(run_id, message_uuid)
        return found[0] if found else None

    def list_signals(self, run_id: str) -> list[Signal]:
        return self._signals(run_id)

    # -- timers (not promised) ----------------------------------------------
    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        return []

    def list_timers(self, run_id: str) -> list[Timer]:
        return []

    # -- unit of work (not promised) ----------------------------------------
    def transaction(self) -> AbstractContextManager[Transaction]:
        return _NoUnitOfWork()

    def lock_run(self, run_id: str) -> Run | None:
        raise StorageError(f"not promised: {NOT_PROMISED[Promise.UNIT_OF_WORK]}")


def _check_oldest_first(consumed: Sequence[str], pending: list[Signal]) -> None:
    """DBOS's recv consumes the oldest unconsumed message of a topic: a decision may consume a
    signal only after every older pending one of its name (else DBOS would consume another)."""
    chosen = set(consumed)
    for signal_id in consumed:
        name = next(s.name for s in pending if s.signal_id == signal_id)
        for older in pending:
            if older.signal_id == signal_id:
                break
            if older.name == name and older.signal_id not in chosen:
                raise InvalidDecision(
                    f"signal {signal_id!r} is not the oldest pending {name!r} signal ({older.signal_id!r} is): "
                    "DBOS consumes a topic's messages oldest first, so consume them in send order"
                )


class _acting_as(AbstractContextManager[None]):
    """Run DBOS calls as the execution owning ``run_id`` with ``token``.

    Some of DBOS's writes (``recv_consume``) take the ownership token from the
    calling workflow's context rather than an argument; this sets that context.
    """

    def __init__(self, run_id: str, token: str | None) -> None:
        from dbos._context import DBOSContext

        self._ctx = DBOSContext()
        self._ctx.workflow_id = run_id
        self._ctx.owner_xid = token
        self._previous: Any = None

    def __enter__(self) -> None:
        from dbos import _context

        self._previous = _context.get_local_dbos_context()
        _context._set_local_dbos_context(self._ctx)

    def __exit__(self, *exc: object) -> None:
        from dbos import _context

        if self._previous is None:
            _context._clear_local_dbos_context()
        else:
            _context._set_local_dbos_context(self._previous)
