"""Seeded bugs in the MySQL / MariaDB adapter: the classic InnoDB / PyMySQL mistakes.

Each bug is a small variant of :mod:`adapters.mysql` (another schema, dialect,
store or connection setting). ``make_backend`` discovers the server like the
real adapter and raises :class:`~kit.contract.errors.BackendUnavailable` when
none answers, so the kit's tests can skip (or fail, when required) cleanly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from adapters._server import ServerDatabase
from adapters.mysql import MysqlBackend, MysqlDialect, MysqlStore, connect, discover
from kit.contract import (
    JSON,
    ClockMode,
    CommandClaim,
    Decision,
    MigrationSpec,
    Outcome,
    Run,
    RunClaim,
    SignalReceipt,
    StatementHook,
    Timer,
)
from kit.contract import validation as v
from kit.migrate import Migration, load_dialect
from tests.seeded_bugs._base import SeededBug, rewrite_migrations, rewrite_sql

__all__ = ["MYSQL_BUGS"]

Schema = Callable[[list[Migration]], list[Migration]]
T = TypeVar("T")


def _backend(
    store: type[MysqlStore] = MysqlStore,
    *,
    dialect: MysqlDialect | None = None,
    schema: Schema | None = None,
    found_rows: bool = True,
    session_setup: Sequence[str] = (),
) -> Callable[[], MysqlBackend]:
    """A factory for the adapter with one thing changed (the server is discovered as usual)."""

    def make() -> MysqlBackend:
        class Database(ServerDatabase):
            def open(
                self,
                tenant_id: str = "default",
                *,
                clock: ClockMode = ClockMode.TEST,
                migrations: Sequence[MigrationSpec] | None = None,
                statement_hook: StatementHook | None = None,
            ) -> MysqlStore:
                if migrations is None and schema is not None:
                    migrations = schema(load_dialect("mysql"))
                return super().open(tenant_id, clock=clock, migrations=migrations, statement_hook=statement_hook)  # type: ignore[return-value]

        class Backend(MysqlBackend):
            store_class = store
            database_class = Database

            def _connect(self, namespace: str | None) -> Any:
                conn = connect(self._params, namespace, found_rows=found_rows)
                with conn.cursor() as cur:
                    for statement in session_setup:
                        cur.execute(statement)
                return conn

        if dialect is not None:
            Backend.dialect = dialect
        return discover(backend_class=Backend)

    return make


# -- locks ------------------------------------------------------------------------
def _no_claim_indexes(migrations: list[Migration]) -> list[Migration]:
    """The claim indexes are forgotten: a claim sorts the whole tenant, locking every due row."""
    return rewrite_migrations(migrations, r"\n\s*KEY kit_(runs|commands)_due \([^)]*\),", "")


# -- keys -------------------------------------------------------------------------
def _case_insensitive_keys(migrations: list[Migration]) -> list[Migration]:
    """Key columns use the server's usual case-insensitive collation (MariaDB's default)."""
    return rewrite_migrations(
        migrations,
        r"\b(run_id|idempotency_key|operation_key|dedup_key)(\s+)VARBINARY\((\d+)\)",
        r"\1\2VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
    )


def _keys_of_191_characters(migrations: list[Migration]) -> list[Migration]:
    """Key columns sized VARCHAR(191), the old utf8mb4 idiom for a 767-byte index limit."""
    return rewrite_migrations(
        migrations,
        r"\b(run_id|idempotency_key|operation_key|dedup_key)(\s+)VARBINARY\((\d+)\)",
        r"\1\2VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    )


class InsertIgnoreDialect(MysqlDialect):
    """First-wins inserts with INSERT IGNORE: a conflict is ignored, and so is truncation."""

    def insert_if_absent(self, cursor: Any, table: str, columns: tuple[str, ...], values: tuple[Any, ...]) -> bool:
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        cursor.execute(self.sql(f"INSERT IGNORE INTO {table} ({cols}) VALUES ({marks})"), values)
        return bool(cursor.rowcount == 1)


InsertIgnoreStore = rewrite_sql(
    MysqlStore, {"INSERT INTO kit_signals": "INSERT IGNORE INTO kit_signals"}, "InsertIgnoreStore"
)


# -- row counts -------------------------------------------------------------------
class RenewalJudgedByRowCount(MysqlStore):
    """Renewals and heartbeats as one fenced UPDATE judged by its row count.

    Correct while row counts are matched rows (CLIENT.FOUND_ROWS); the seeded bug
    connects without it, so an UPDATE writing the stored values counts 0 rows.
    """

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def renew(cur: Any) -> Outcome:
            now = self._now_us(cur)
            matched = self._exec(
                cur,
                "UPDATE kit_runs SET claim_expires_at = ?, due_at = ?, updated_at = ? WHERE tenant_id = ? "
                "AND run_id = ? AND claim_owner = ? AND claim_generation = ? AND claim_expires_at > ? "
                "AND status NOT IN ('completed', 'failed', 'cancelled')",
                (now + lease_us, now + lease_us, now, self.tenant_id, claim.run_id, claim.worker_id,
                 claim.generation, now),
            ).rowcount
            if matched == 1:
                return Outcome.RENEWED
            return self._refuse_run(self._run(cur, claim.run_id), claim, now) or Outcome.CLAIM_LOST

        return self._write(renew)

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def beat(cur: Any) -> Outcome:
            _, _, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            matched = self._exec(
                cur,
                "UPDATE kit_commands SET claim_expires_at = ?, due_at = ? WHERE tenant_id = ? AND command_id = ? "
                "AND claim_owner = ? AND claim_generation = ? AND claim_expires_at > ?",
                (now + lease_us, now + lease_us, self.tenant_id, int(claim.command_id), claim.worker_id,
                 claim.generation, now),
            ).rowcount
            return Outcome.RENEWED if matched == 1 else Outcome.CLAIM_LOST

        return self._write(beat)


# -- time and isolation -------------------------------------------------------------
class WholeSecondClockDialect(MysqlDialect):
    """The store clock from NOW() without (6): the fraction of a second is dropped."""

    database_now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW())"


# -- reads taken before the lock ------------------------------------------------------
class NextSeqBeforeRunLock(MysqlStore):
    """commit_decision() reads the run and computes the next history number first, then takes the run's
    lock and writes with what it read before it: two deliveries of one decision both pass the fence and
    both number their events from the same seq."""

    _in_commit = False
    _early_seq: int | None = None

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        self._in_commit = True
        try:
            return super().commit_decision(claim, expected_revision, decision)
        finally:
            self._in_commit, self._early_seq = False, None

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        if not self._in_commit:
            return super()._lock_run(cur, run_id)
        early = self._run(cur, run_id)
        row = self._exec(cur, "SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE tenant_id = ? AND run_id = ?",
                         (self.tenant_id, run_id)).fetchone()
        self._early_seq = int(row[0])
        super()._lock_run(cur, run_id)  # the lock, taken after the reads the commit decides on
        return lambda: early

    def _append_events(self, cur: Any, run_id: str, revision: int, now: int, events: list[tuple[Any, str]]) -> None:
        seq = self._early_seq or 0
        for event, payload in events:
            seq += 1
            self._exec(
                cur,
                "INSERT INTO kit_events (tenant_id, run_id, seq, kind, operation_key, payload, revision, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.tenant_id, run_id, seq, event.kind, event.operation_key, payload, revision, now),
            )


class WakingWritesReadRunUnlocked(MysqlStore):
    """Signals, completions, timer firings and cancels read the run with a plain SELECT and mark or wake it
    by what that read showed: beside a blocking commit they mark a run that is blocked by then."""

    _waking = False

    def _unlocked(self, fn: Callable[[], T]) -> T:
        self._waking = True
        try:
            return fn()
        finally:
            self._waking = False

    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        return self._unlocked(lambda: super(WakingWritesReadRunUnlocked, self).send_signal(run_id, name, payload, dedup_key))

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        return self._unlocked(lambda: super(WakingWritesReadRunUnlocked, self).request_cancel(run_id, reason))

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        return self._unlocked(lambda: super(WakingWritesReadRunUnlocked, self).complete_command(claim, result))

    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        return self._unlocked(lambda: super(WakingWritesReadRunUnlocked, self).fire_due_timers(limit))

    def _lock_run(self, cur: Any, run_id: str) -> Callable[[], Run | None]:
        if not self._waking:
            return super()._lock_run(cur, run_id)
        run = self._run(cur, run_id)
        return lambda: run


MYSQL_BUGS: tuple[SeededBug, ...] = (
    SeededBug(
        "missing_claim_index", "no index serves the claim: the first claimer locks every due row",
        _backend(schema=_no_claim_indexes),
        ("claims.claimers_skip_rows_locked_by_an_open_claim",), "claimers_skip", backend="mysql",
    ),
    SeededBug(
        "keys_case_insensitive", "key columns use a case-insensitive collation",
        _backend(schema=_case_insensitive_keys),
        ("keys_and_payloads.run_ids_are_byte_exact", "keys_and_payloads.idempotency_keys_are_byte_exact",
         "keys_and_payloads.dedup_keys_are_byte_exact", "keys_and_payloads.operation_keys_are_byte_exact"),
        "byte_exact", backend="mysql",
    ),
    SeededBug(
        "changed_rows_counted", "no CLIENT.FOUND_ROWS: a fenced UPDATE writing the stored values counts 0 rows",
        _backend(RenewalJudgedByRowCount, found_rows=False),
        ("claims.renewal_writing_unchanged_values_is_renewed",
         "commands.heartbeat_writing_unchanged_values_is_renewed"),
        "writing_unchanged_values", backend="mysql",
    ),
    SeededBug(
        "insert_ignore_short_keys", "INSERT IGNORE into VARCHAR(191) keys: long keys are truncated into one",
        _backend(InsertIgnoreStore, dialect=InsertIgnoreDialect(), schema=_keys_of_191_characters),
        ("keys_and_payloads.long_keys_differing_at_the_end_stay_distinct",), "long_keys", backend="mysql",
    ),
    SeededBug(
        "clock_without_fraction", "the store clock is NOW() without (6): whole seconds",
        _backend(dialect=WholeSecondClockDialect()),
        ("clock.database_clock_has_declared_resolution", "clock.database_clock_moves_inside_a_transaction"),
        "database_clock", backend="mysql",
    ),
    SeededBug(
        "repeatable_read_writes", "writes keep InnoDB's REPEATABLE READ: a race's loser re-reads an old snapshot",
        _backend(session_setup=("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",)),
        ("runs.concurrent_starts_with_one_key_create_one_run", "definitions.racing_first_calls_store_one_row"),
        "concurrent_starts or racing_first", backend="mysql",
    ),
    SeededBug(
        "next_seq_before_run_lock", "the commit reads the run and the next history number before locking the run",
        _backend(NextSeqBeforeRunLock),
        ("commit.overlapping_duplicate_deliveries_commit_once",), "overlapping_duplicate", backend="mysql",
    ),
    SeededBug(
        "waking_writes_read_run_unlocked", "signals, completions, firings and cancels decide on a plain read of the run",
        _backend(WakingWritesReadRunUnlocked),
        ("commit.waking_write_beside_a_blocking_commit_is_not_lost",), "waking_write_beside", backend="mysql",
    ),
)
