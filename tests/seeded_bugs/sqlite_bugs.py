"""Seeded bugs in the SQLite adapter: each a small, plausible mistake the suite must catch."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

from adapters._sql import rows as R
from adapters.sqlite import SqliteBackend, SqliteDatabase, SqliteStore
from kit.clock import to_micros
from kit.contract import (
    ClockMode,
    Command,
    CommandClaim,
    Decision,
    Definition,
    MigrationSpec,
    Outcome,
    Run,
    RunClaim,
    SignalReceipt,
    StatementHook,
)
from kit.contract import validation as v
from kit.migrate import AppliedMigration, Migration, load_dialect
from tests.seeded_bugs._base import SeededBug, rewrite_migrations, rewrite_sql

__all__ = ["SQLITE_BUGS"]


def _backend(
    store_cls: type[SqliteStore] = SqliteStore,
    migrations: Callable[[list[Migration]], list[Migration]] | None = None,
) -> Callable[[], SqliteBackend]:
    def make() -> SqliteBackend:
        class Database(SqliteDatabase):
            store_class = store_cls

            def open(
                self,
                tenant_id: str = "default",
                *,
                clock: ClockMode = ClockMode.TEST,
                migrations_: Sequence[MigrationSpec] | None = None,
                statement_hook: StatementHook | None = None,
                **kwargs: Any,
            ) -> SqliteStore:
                chosen = kwargs.pop("migrations", migrations_)
                if chosen is None and migrations is not None:
                    chosen = migrations(load_dialect("sqlite"))
                return super().open(tenant_id, clock=clock, migrations=chosen, statement_hook=statement_hook)

        class Backend(SqliteBackend):
            database_class = Database

        return Backend()

    return make


# -- fences -----------------------------------------------------------------
class IgnoresGeneration(SqliteStore):
    """The fence checks owner and lease but forgets the generation."""

    def run_fenced(self, run: Run, claim: RunClaim, now: int) -> bool:
        return run.claim_owner == claim.worker_id and run.claim_expires_at is not None and now < to_micros(run.claim_expires_at)


IgnoresGeneration = rewrite_sql(IgnoresGeneration, {"AND claim_generation = ?": "AND ? IS NOT NULL"}, "IgnoresGeneration")


class LeaseComparedWithLessOrEqual(SqliteStore):
    """A lease is treated as live at its expiry instant (<= instead of <)."""

    def run_fenced(self, run: Run, claim: RunClaim, now: int) -> bool:
        return (
            run.claim_owner == claim.worker_id
            and run.claim_generation == claim.generation
            and run.claim_expires_at is not None
            and now <= to_micros(run.claim_expires_at)
        )

    def command_fenced(self, command: Command, claim: CommandClaim, now: int) -> bool:
        return (
            command.claim_owner == claim.worker_id
            and command.claim_generation == claim.generation
            and command.claim_expires_at is not None
            and now <= to_micros(command.claim_expires_at)
        )


class RevisionNotChecked(SqliteStore):
    """A decision made on an old revision is accepted."""

    def revision_current(self, run: Run, expected_revision: int) -> bool:
        return True


RevisionNotChecked = rewrite_sql(RevisionNotChecked, {"AND revision = ? AND": "AND ? IS NOT NULL AND"}, "RevisionNotChecked")


class StaleCompletionAccepted(SqliteStore):
    """Command completion only checks that the command is claimed, not by whom."""

    def command_fenced(self, command: Command, claim: CommandClaim, now: int) -> bool:
        return command.status.value == "claimed"


class CompletionAfterExpiryAccepted(SqliteStore):
    """A completion is fenced by owner and generation but not by the lease: late completions land."""

    def command_fenced(self, command: Command, claim: CommandClaim, now: int) -> bool:
        return (
            command.status.value == "claimed"
            and command.claim_owner == claim.worker_id
            and command.claim_generation == claim.generation
        )


class CompletionRetryAppliedTwice(SqliteStore):
    """A completion retried by its own claim (after a lost acknowledgement) is applied again.

    The store keeps the lease on completion and treats "completed by this very claim"
    as still fenced, so the retry overwrites the result and wakes the run a second time.
    """

    def _fenced_command(self, cur: Any, claim: CommandClaim) -> Any:
        run, command, now, refused = super()._fenced_command(cur, claim)
        if (
            refused is Outcome.TERMINAL and command is not None and command.status.value == "completed"
            and command.claim_owner == claim.worker_id and command.claim_generation == claim.generation
        ):
            return run, command, now, None
        return run, command, now, refused


CompletionRetryAppliedTwice = rewrite_sql(
    CompletionRetryAppliedTwice,
    {"SET status = 'completed', result = ?, claim_expires_at = NULL": "SET status = 'completed', result = ?, claim_expires_at = claim_expires_at"},
    "CompletionRetryAppliedTwice",
)


# -- atomicity and transactions ---------------------------------------------
class CommitSplitOverTwoTransactions(SqliteStore):
    """The decision commit commits its events before writing the rest."""

    def _append_events(self, cur: Any, run_id: str, revision: int, now: int, events: list[tuple[Any, str]]) -> None:
        super()._append_events(cur, run_id, revision, now, events)
        cur.execute(self.dialect.commit)
        cur.execute(self.dialect.begin_write)


class InnerFailureSwallowed(SqliteStore):
    """A failed inner unit-of-work block does not doom the outer one."""

    @property  # type: ignore[override]
    def _rollback_only(self) -> bool:
        return False

    @_rollback_only.setter
    def _rollback_only(self, value: bool) -> None:
        pass


# -- insert-if-absent and dedup ---------------------------------------------
class EnsureDefinitionOverwrites(SqliteStore):
    """ensure_definition() upserts instead of inserting if absent."""

    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        v.check_digest(digest, body)

        def ensure(cur: Any) -> Definition:
            self._exec(
                cur,
                "INSERT OR REPLACE INTO kit_definitions (tenant_id, name, version, digest, body, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (self.tenant_id, name, version, digest, bytes(body), self._now_us(cur)),
            )
            found = self._definition(cur, name, version)
            assert found is not None
            return found

        return self._write(ensure)


class SignalDedupMissing(SqliteStore):
    """send_signal() never looks for an earlier signal with the same dedup key."""

    def send_signal(self, run_id: str, name: str, payload: Any, dedup_key: str) -> SignalReceipt:
        text = v.encode_json(v.check_json("payload", payload))

        def send(cur: Any) -> SignalReceipt:
            run = self._locked_run(cur, run_id)
            if run is None:
                return SignalReceipt(Outcome.NOT_FOUND)
            if run.status.terminal:
                return SignalReceipt(Outcome.TERMINAL)
            now = self._now_us(cur)
            self._exec(
                cur,
                "INSERT INTO kit_signals (tenant_id, run_id, name, payload, dedup_key, status, consumed_revision, sent_at) "
                "VALUES (?, ?, ?, ?, ?, 'pending', NULL, ?)",
                (self.tenant_id, run_id, name, text, dedup_key, now),
            )
            row = self._exec(cur, f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals ORDER BY signal_id DESC LIMIT 1").fetchone()
            self._make_runnable(cur, run, now)
            return SignalReceipt(Outcome.COMMITTED, R.to_signal(row))

        return self._write(send)


def _no_signal_dedup_index(migrations: list[Migration]) -> list[Migration]:
    return rewrite_migrations(migrations, r"CREATE UNIQUE INDEX kit_signals_dedup ON kit_signals \(tenant_id, run_id, dedup_key\);", "")


def _no_idempotency_index(migrations: list[Migration]) -> list[Migration]:
    return rewrite_migrations(migrations, r"CREATE UNIQUE INDEX kit_runs_idempotency[^;]*;", "")


def _case_insensitive_keys(migrations: list[Migration]) -> list[Migration]:
    return rewrite_migrations(
        migrations, r"\b(run_id|dedup_key|idempotency_key|operation_key)(\s+)TEXT\b", r"\1\2TEXT COLLATE NOCASE"
    )


IdempotencyKeyIgnored = rewrite_sql(
    SqliteStore, {"AND idempotency_key = ?": "AND idempotency_key = ? AND 1 = 0"}, "IdempotencyKeyIgnored"
)


# -- time -------------------------------------------------------------------
SnapshotDropsFailedResults = rewrite_sql(
    SqliteStore,
    {"AND status IN ('completed', 'failed') AND consumed = 0 ORDER BY command_id":
     "AND status = 'completed' AND consumed = 0 ORDER BY command_id"},
    "SnapshotDropsFailedResults",
)

SeqIgnoresTenant = rewrite_sql(
    SqliteStore,
    {"SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE tenant_id = ? AND run_id = ?":
     "SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE ? IS NOT NULL AND run_id = ?"},
    "SeqIgnoresTenant",
)

ConsumeChecksOnlyOwnership = rewrite_sql(
    SqliteStore,
    {"AND status IN ('completed', 'failed') AND consumed = 0 AND command_id IN":
     "AND consumed = 0 AND command_id IN"},
    "ConsumeChecksOnlyOwnership",
)

TimerFiresEarly = rewrite_sql(
    SqliteStore,
    {
        "AND fire_at <= ? ORDER BY fire_at": "AND fire_at <= ? + 1000 ORDER BY fire_at",
        "AND status = 'scheduled' AND fire_at <= ?": "AND status = 'scheduled' AND fire_at <= ? + 1000",
    },
    "TimerFiresEarly",
)

# -- claims, wake-ups, pagination, tenancy ----------------------------------
GenerationNotBumped = rewrite_sql(
    SqliteStore,
    {"claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ?, wake_at": "claim_generation = claim_generation, claim_expires_at = ?, due_at = ?, wake_at"},
    "GenerationNotBumped",
)
WakeupMarkForgotten = rewrite_sql(
    SqliteStore, {"SET wakeup_pending = 1, updated_at = ?": "SET wakeup_pending = 0, updated_at = ?"}, "WakeupMarkForgotten"
)
PaginationInclusive = rewrite_sql(SqliteStore, {"run_id > ?": "run_id >= ?"}, "PaginationInclusive")
ClaimIgnoresTenant = rewrite_sql(
    SqliteStore, {"tenant_id = ? AND due_at <= ?": "? IS NOT NULL AND due_at <= ?"}, "ClaimIgnoresTenant"
)


# -- JSON type drift -------------------------------------------------------
def _drifting(drift: Callable[[Any], Any], name: str) -> type[SqliteStore]:
    """A store whose JSON encoder applies ``drift`` to every number or boolean it writes."""

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return drift(value)

    class Drifting(SqliteStore):
        def start_run(self, run_id: str, definition: Any, input: Any = None, idempotency_key: str | None = None) -> Any:
            return super().start_run(run_id, definition, walk(input), idempotency_key)

        def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Any) -> Outcome:
            if isinstance(decision, Decision):
                decision = replace(
                    decision,
                    events=tuple(replace(e, payload=walk(e.payload)) for e in decision.events),
                    commands=tuple(replace(c, input=walk(c.input)) for c in decision.commands),
                    output=walk(decision.output), error=walk(decision.error),
                )
            return super().commit_decision(claim, expected_revision, decision)

        def complete_command(self, claim: CommandClaim, result: Any = None) -> Outcome:
            return super().complete_command(claim, walk(result))

        def fail_command(self, claim: CommandClaim, error: Any = None, retry_after: Any = None, retryable: bool = True) -> Outcome:
            return super().fail_command(claim, walk(error), retry_after, retryable)

        def send_signal(self, run_id: str, name: str, payload: Any, dedup_key: str) -> SignalReceipt:
            return super().send_signal(run_id, name, walk(payload), dedup_key)

    Drifting.__name__ = Drifting.__qualname__ = name
    return Drifting


def _big_int_through_double(value: Any) -> Any:
    """A driver that parses integers into int64 and anything wider into a double."""
    wide = isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63
    return float(value) if wide else value


def _bool_as_int(value: Any) -> Any:
    """A boolean column type (TINYINT(1)-style) that keeps 1 and 0."""
    return int(value) if isinstance(value, bool) else value


def _integral_float_as_int(value: Any) -> Any:
    """An encoder that writes 1.0 as 1 (a JavaScript-style number printer)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


BigIntThroughDouble = _drifting(_big_int_through_double, "BigIntThroughDouble")
BoolsStoredAsInts = _drifting(_bool_as_int, "BoolsStoredAsInts")
IntegralFloatsAsInts = _drifting(_integral_float_as_int, "IntegralFloatsAsInts")


class VerifyIgnoresChecksums(SqliteStore):
    """verify_schema() compares migration numbers but not their checksums."""

    def _applied(self, cur: Any) -> list[AppliedMigration]:
        code = {m.version: m.checksum for m in self.migrations}
        return [AppliedMigration(a.version, a.name, code.get(a.version, a.checksum)) for a in super()._applied(cur)]


# -- queues, callbacks, nested units of work ------------------------------------
class ClaimIgnoresQueueFilter(SqliteStore):
    """claim_commands() drops a non-empty queue filter: a worker for one queue takes every queue's commands."""

    def claim_commands(
        self, worker_id: str, lease: timedelta, limit: int = 1, queues: Sequence[str] | None = None
    ) -> list[CommandClaim]:
        return super().claim_commands(worker_id, lease, limit, None if queues else queues)


class _RunsAtOnce:
    """A unit of work whose on_commit() runs the callback at once instead of after the commit."""

    def __init__(self, unit: Any) -> None:
        self._unit = unit

    def on_commit(self, callback: Callable[[], None]) -> None:
        callback()


class CallbacksRunAtRegistration(SqliteStore):
    """After-commit callbacks run when registered, before (and whether or not) the unit commits."""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with super().transaction() as unit:
            yield _RunsAtOnce(unit)


class _Remembering:
    def __init__(self, unit: Any, kept: list[Callable[[], None]]) -> None:
        self._unit, self._kept = unit, kept

    def on_commit(self, callback: Callable[[], None]) -> None:
        self._kept.append(callback)
        self._unit.on_commit(callback)


class CallbacksRunAfterRollback(SqliteStore):
    """A unit that rolls back (its block raised, or its COMMIT failed) still runs its after-commit callbacks."""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        kept: list[Callable[[], None]] = []
        try:
            with super().transaction() as unit:
                yield _Remembering(unit, kept)
        except BaseException:
            for callback in kept:  # the bug: "after commit" read as "after the block"
                callback()
            raise


class NestedBlockCommitsOnItsOwn(SqliteStore):
    """A nested transaction() block commits what the unit wrote so far when it exits: an outer block that
    fails afterwards cannot roll that part back."""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        nested = bool(self._depth)
        with super().transaction() as unit:
            yield unit
        if nested and not self._rollback_only:
            self._cur.execute(self.dialect.commit)
            self._cur.execute(self.dialect.begin_write)


SQLITE_BUGS: tuple[SeededBug, ...] = (
    SeededBug("commit_ignores_generation", "the fence forgets the claim generation", _backend(IgnoresGeneration),
              ("claims.stale_generation_with_same_owner_is_refused",), "claims"),
    SeededBug("lease_compared_with_le", "a lease is live at its expiry instant", _backend(LeaseComparedWithLessOrEqual),
              ("claims.lease_is_lost_exactly_at_expiry", "commands.heartbeat_at_expiry_is_lost"), "claims or commands"),
    SeededBug("revision_not_checked", "a decision on an old revision is accepted", _backend(RevisionNotChecked),
              ("commit.revision_mismatch_changes_nothing", "commit.outcome_precedence"), "commit"),
    SeededBug("stale_completion_accepted", "completion ignores owner, generation and lease", _backend(StaleCompletionAccepted),
              ("commands.stale_completion_changes_nothing", "commands.completion_after_expiry_is_refused"), "commands"),
    SeededBug("commit_split_over_two_transactions", "events commit before the rest of the decision",
              _backend(CommitSplitOverTwoTransactions), ("commit.commit_is_all_or_nothing",), "commit"),
    SeededBug("inner_failure_swallowed", "a failed inner block lets the outer unit commit", _backend(InnerFailureSwallowed),
              ("unit_of_work.inner_failure_rolls_back_the_whole_unit",), "unit_of_work"),
    SeededBug("ensure_definition_overwrites", "ensure_definition upserts", _backend(EnsureDefinitionOverwrites),
              ("definitions.ensure_never_overwrites",), "definitions"),
    SeededBug("signal_dedup_missing", "signals are never deduplicated",
              _backend(SignalDedupMissing, _no_signal_dedup_index),
              ("signals.duplicate_returns_existing_and_keeps_payload", "signals.concurrent_duplicates_store_one_signal"), "signals"),
    SeededBug("idempotency_key_ignored", "start_run never finds the run an idempotency key already started",
              _backend(IdempotencyKeyIgnored, _no_idempotency_index),
              ("runs.repeated_idempotency_key_returns_existing_run", "runs.concurrent_starts_with_one_key_create_one_run"), "runs"),
    SeededBug("keys_case_folded", "key columns compare case-insensitively", _backend(SqliteStore, _case_insensitive_keys),
              ("keys_and_payloads.run_ids_are_byte_exact", "keys_and_payloads.dedup_keys_are_byte_exact"), "keys_and_payloads"),
    SeededBug("timer_fires_early", "timers fire up to 1 ms early", _backend(TimerFiresEarly),
              ("timers.timer_never_fires_early",), "timers"),
    SeededBug("generation_not_bumped", "claims reuse the previous generation", _backend(GenerationNotBumped),
              ("claims.claim_sets_owner_generation_and_lease", "claims.generations_only_grow"), "claims"),
    SeededBug("wakeup_mark_forgotten", "input landing on a running run leaves no mark", _backend(WakeupMarkForgotten),
              ("commit.signal_during_decision_is_not_lost",), "commit"),
    SeededBug("pagination_inclusive", "list_runs(after=...) repeats the last run", _backend(PaginationInclusive),
              ("runs.pagination_is_stable",), "runs"),
    SeededBug("claim_ignores_tenant", "claims see every tenant's runs", _backend(ClaimIgnoresTenant),
              ("tenancy.other_tenants_runs_are_unclaimable",), "tenancy"),
    SeededBug("completion_after_expiry_accepted", "a completion after its lease expired lands if nobody reclaimed",
              _backend(CompletionAfterExpiryAccepted), ("commands.completion_after_expiry_is_refused",), "commands"),
    SeededBug("completion_retry_applied_twice", "a completion retried after a lost ack is applied again",
              _backend(CompletionRetryAppliedTwice),
              ("commands.second_completion_is_terminal_and_keeps_first_result",), "commands"),
    SeededBug("snapshot_drops_failed_results", "load_claimed omits permanently failed commands",
              _backend(SnapshotDropsFailedResults), ("claims.load_claimed_returns_exactly_the_waiting_input",), "claims"),
    SeededBug("consume_checks_only_ownership", "a decision may consume a command that has no result yet",
              _backend(ConsumeChecksOnlyOwnership), ("commit.consuming_unfinished_or_foreign_work_is_refused",),
              "commit"),
    SeededBug("seq_ignores_tenant", "the next history seq is counted over every tenant's run of that id",
              _backend(SeqIgnoresTenant), ("tenancy.colliding_run_id_keeps_keys_per_tenant",), "tenancy"),
    SeededBug("big_int_through_double", "integers beyond int64 are stored as doubles (10**30 becomes 1e30)",
              _backend(BigIntThroughDouble),
              ("keys_and_payloads.json_values_round_trip",
               "keys_and_payloads.numbers_at_every_boundary_round_trip_at_top_level"), "keys_and_payloads"),
    SeededBug("bools_stored_as_ints", "booleans are stored as 1 and 0", _backend(BoolsStoredAsInts),
              ("keys_and_payloads.json_values_round_trip", "commit.terminal_commit_records_output_and_error"),
              "keys_and_payloads or commit"),
    SeededBug("integral_floats_as_ints", "integral floats come back as integers (1.0 becomes 1)",
              _backend(IntegralFloatsAsInts),
              ("keys_and_payloads.json_values_round_trip",
               "keys_and_payloads.numbers_at_every_boundary_round_trip_at_top_level"), "keys_and_payloads"),
    SeededBug("claim_ignores_queue_filter", "claim_commands drops a non-empty queue filter",
              _backend(ClaimIgnoresQueueFilter), ("commands.claim_filters_by_queue",), "commands"),
    SeededBug("callbacks_run_at_registration", "after-commit callbacks run when registered, before the commit",
              _backend(CallbacksRunAtRegistration),
              ("unit_of_work.callbacks_run_once_in_order_after_outermost_commit",
               "unit_of_work.callbacks_never_run_after_rollback"), "unit_of_work"),
    SeededBug("callbacks_run_after_rollback", "a unit that rolls back (or whose COMMIT fails) still runs its callbacks",
              _backend(CallbacksRunAfterRollback),
              ("unit_of_work.callbacks_never_run_after_rollback", "unit_of_work.callbacks_never_run_when_commit_fails"),
              "unit_of_work"),
    SeededBug("nested_block_commits_on_its_own", "a nested block commits the unit so far; a later outer failure keeps it",
              _backend(NestedBlockCommitsOnItsOwn), ("unit_of_work.nested_blocks_reuse_the_outer_transaction",),
              "unit_of_work"),
    SeededBug("verify_ignores_checksums", "verify_schema never compares checksums", _backend(VerifyIgnoresChecksums),
              ("schema.verify_fails_closed_on_tampered_migration",), "schema"),
)
