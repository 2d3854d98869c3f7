"""Claiming runs and the fenced decision commit (promises ``generation_fencing``, ``expected_revision``, ``atomic_decision``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import FenceBroken, SqlPlumbing
from kit.clock import ensure_utc, from_micros, micros, to_micros
from kit.contract import validation as v
from kit.contract.entities import (
    Decision,
    RunClaim,
    RunStatus,
    Snapshot,
)
from kit.contract.errors import (
    InvalidDecision,
)
from kit.contract.outcomes import Outcome

__all__ = ["DecisionSql"]


_LAST_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE tenant_id = ? AND run_id = ?"
_COMMAND_KEYS = "SELECT operation_key FROM kit_commands WHERE tenant_id = ? AND run_id = ?"
_TIMER_KEYS = "SELECT operation_key FROM kit_timers WHERE tenant_id = ? AND run_id = ?"
_CONSUMABLE = (
    ("consume_signals", "kit_signals", "signal_id", "status = 'pending'"),
    ("consume_commands", "kit_commands", "command_id", "status IN ('completed', 'failed') AND consumed = 0"),
    ("consume_timers", "kit_timers", "timer_id", "status = 'fired'"),
    ("cancel_timers", "kit_timers", "timer_id", "status IN ('scheduled', 'fired')"),
)


def _count_sql(table: str, column: str, condition: str, marks: str) -> str:
    return f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND run_id = ? AND {condition} AND {column} IN {marks}"


def _clash_sql(marks: str) -> str:
    return f"SELECT operation_key FROM kit_events WHERE tenant_id = ? AND run_id = ? AND operation_key IN {marks}"


@dataclass
class _CommitReads:
    """Every read a decision commit decides on, queued at once under the run lock (results read later):
    the consumable-id counts, the history's clashing operation keys, the last seq, the taken command and
    timer keys. Only what the decision needs is read; a list with an id that is not a number is not
    queried (the check refuses it by itself)."""

    run_id: str
    decision: Decision
    counts: dict[str, Any]
    clash: Any
    last_seq: Any
    command_keys: Any
    timer_keys: Any

    @classmethod
    def queue(cls, store: DecisionSql, cur: Any, run_id: str, d: Decision) -> _CommitReads:
        key = (store.tenant_id, run_id)
        counts: dict[str, Any] = {}
        for label, table, column, condition in _CONSUMABLE:
            values = getattr(d, label)
            if values and all(value.isdigit() for value in values):
                ids = [int(value) for value in values]
                counts[label] = store._exec(cur, _count_sql(table, column, condition, store._in(ids)), (*key, *ids))
        keys = [e.operation_key for e in d.events if e.operation_key is not None]
        clash = store._exec(cur, _clash_sql(store._in(keys)), (*key, *keys)) if keys else None
        return cls(
            run_id, d, counts, clash,
            store._exec(cur, _LAST_SEQ, key) if d.events else None,
            store._exec(cur, _COMMAND_KEYS, key) if d.commands else None,
            store._exec(cur, _TIMER_KEYS, key) if d.timers else None,
        )


class DecisionSql(SqlPlumbing):
    """Claiming runs and the fenced decision commit (promises ``generation_fencing``, ``expected_revision``, ``atomic_decision``)."""

    _reads: _CommitReads | None = None
    """The reads the running commit_decision() queued (None outside one)."""

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)

        def claim(cur: Any) -> list[RunClaim]:
            now, found = self._due(cur, "kit_runs", "run_id, claim_generation, revision", "due_at, run_id", limit)
            if not found:
                return []
            expires = now + lease_us
            ids = [r[0] for r in found]
            self._exec(
                cur,
                "UPDATE kit_runs SET status = 'running', claim_owner = ?, "
                "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ?, "
                f"wake_at = NULL, wakeup_pending = 0, updated_at = ? WHERE tenant_id = ? AND run_id IN {self._in(ids)}",
                (worker_id, expires, expires, now, self.tenant_id, *ids),
            )
            at = from_micros(expires)
            return [RunClaim(r[0], worker_id, int(r[1]) + 1, at, int(r[2])) for r in found]

        return self._write(claim)

    def load_claimed(self, claim: RunClaim) -> Snapshot | Outcome:
        """One snapshot, read in one round trip where the dialect pipelines: the run, the clock and the
        four lists are queued together, with the snapshot's BEGIN and its COMMIT (the fence is judged on
        the run and clock read in that snapshot; the lists are simply dropped when it refuses)."""

        def load(cur: Any) -> Snapshot | Outcome:
            key = (self.tenant_id, claim.run_id)
            with self._pipelined(last_reads=True):
                run_row = self._query(
                    cur, f"SELECT {R.RUN_COLUMNS} FROM kit_runs WHERE tenant_id = ? AND run_id = ?", key
                )
                clock = self._clock(cur)
                history = self._query(
                    cur, f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? AND run_id = ? ORDER BY seq",
                    key,
                )
                results = self._query(
                    cur,
                    f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? "
                    "AND status IN ('completed', 'failed') AND consumed = 0 ORDER BY command_id",
                    key,
                )
                signals = self._query(
                    cur,
                    f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? "
                    "AND status = 'pending' ORDER BY signal_id",
                    key,
                )
                timers = self._query(
                    cur,
                    f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? "
                    "AND status = 'fired' ORDER BY timer_id",
                    key,
                )
            found = run_row.fetchone()
            run = None if found is None else R.to_run(found)
            refused = self._refuse_run(run, claim, self._clock_value(clock.fetchone()))
            if refused:
                return refused
            assert run is not None
            return Snapshot(
                run,
                tuple(R.to_event(r) for r in history.fetchall()),
                tuple(R.to_command(r) for r in results.fetchall()),
                tuple(R.to_signal(r) for r in signals.fetchall()),
                tuple(R.to_timer(r) for r in timers.fetchall()),
            )

        return self._read(load)

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        """Three round trips where the dialect pipelines: the run lock with the BEGIN, and queued after it
        the clock and every read the commit decides on (the server runs them once the lock is granted); every
        write and the fenced UPDATE, queued together; the COMMIT on its own (after the fenced UPDATE was seen
        to match one row). All in one transaction: a failure anywhere rolls the whole commit back."""
        v.check_decision(decision)
        encoded_events = [(e, v.encode_json(e.payload)) for e in decision.events]
        encoded_commands = [(c, v.encode_json(c.input)) for c in decision.commands]
        output, error = v.encode_json(decision.output), v.encode_json(decision.error)

        def commit(cur: Any) -> Outcome:
            with self._pipelined():
                locked = self._lock_run(cur, claim.run_id)
                clock = self._clock(cur)
                if self._pipelines():  # queued: read together with the clock (else each is read when needed)
                    self._reads = _CommitReads.queue(self, cur, claim.run_id, decision)
                run = locked()
                now = self._clock_value(clock.fetchone())
                refused = self._refuse_run(run, claim, now)
                if refused:
                    return refused
                assert run is not None
                if not self.revision_current(run, expected_revision):
                    return Outcome.REVISION_MISMATCH
                self._check_consumable(cur, run.run_id, decision)
                revision = run.revision + 1
                self._append_events(cur, run.run_id, revision, now, encoded_events)
                self._schedule(cur, run.run_id, now, encoded_commands, decision)
                self._consume(cur, revision, decision)
                status = decision.next_status
                wake = self._resolve_wake(decision, now)
                if status is RunStatus.PENDING and wake is None:
                    wake = now
                if status is RunStatus.BLOCKED and run.wakeup_pending:
                    status, wake = RunStatus.PENDING, now  # no lost wake-up
                if status.terminal:
                    wake = None
                    self._close_outstanding(cur, run.run_id)
                done = self._exec(
                    cur,
                    "UPDATE kit_runs SET status = ?, revision = ?, claim_owner = NULL, "
                    "claim_expires_at = NULL, wake_at = ?, due_at = ?, wakeup_pending = 0, output = ?, "
                    "error = ?, updated_at = ? "
                    "WHERE tenant_id = ? AND run_id = ? AND revision = ? AND claim_generation = ?",
                    (
                        status.value, revision, wake, wake, output, error, now,
                        self.tenant_id, run.run_id, expected_revision, claim.generation,
                    ),
                ).rowcount  # sends the queued writes: a failed one raises here, before the COMMIT
                if done != 1:
                    raise FenceBroken(f"the fenced update of run {run.run_id!r} matched {done} rows")
                return Outcome.COMMITTED

        try:
            return self._write(commit)
        finally:
            self._reads = None

    def _resolve_wake(self, decision: Decision, now: int) -> int | None:
        if decision.wake_at is not None:
            return to_micros(ensure_utc(decision.wake_at))
        if decision.wake_after is not None:
            return now + micros(decision.wake_after)
        return None

    def _ids(self, label: str, values: Sequence[str]) -> list[int]:
        out = []
        for value in values:
            if not value.isdigit():
                raise InvalidDecision(f"{label}: {value!r} is not an id this store issued")
            out.append(int(value))
        return out

    def _check_consumable(self, cur: Any, run_id: str, d: Decision) -> None:
        """InvalidDecision unless every id the decision consumes or cancels is open for it and no event
        repeats an operation key of the history (on the reads the commit queued, else read now)."""
        reads = self._reads_for(run_id, d)
        key = (self.tenant_id, run_id)
        for (label, table, column, condition), what in zip(
            _CONSUMABLE, ("pending signals", "unconsumed command results", "fired timers", "open timers")
        ):
            values = getattr(d, label)
            if not values:
                continue
            ids = self._ids(label, values)
            count = reads.counts[label] if reads is not None else self._exec(
                cur, _count_sql(table, column, condition, self._in(ids)), (*key, *ids)
            )
            if int(count.fetchone()[0]) != len(ids):
                raise InvalidDecision(f"{label} names ids that are not {what} of run {run_id!r}: {list(values)}")
        keys = [e.operation_key for e in d.events if e.operation_key is not None]
        if keys:
            found = reads.clash if reads is not None else self._exec(cur, _clash_sql(self._in(keys)), (*key, *keys))
            clash = found.fetchall()
            if clash:
                raise InvalidDecision(
                    f"events with operation keys {[r[0] for r in clash]} are already in the history"
                )

    def _reads_for(self, run_id: str, d: Decision) -> _CommitReads | None:
        reads = self._reads
        return reads if reads is not None and reads.run_id == run_id and reads.decision is d else None

    def _append_events(self, cur: Any, run_id: str, revision: int, now: int, events: list[tuple[Any, str]]) -> None:
        if not events:
            return
        reads = self._reads_for(run_id, self._reads.decision) if self._reads is not None else None
        last = reads.last_seq if reads is not None and reads.last_seq is not None else self._exec(
            cur, _LAST_SEQ, (self.tenant_id, run_id)
        )
        seq = int(last.fetchone()[0])
        for event, payload in events:
            seq += 1
            self._exec(
                cur,
                "INSERT INTO kit_events (tenant_id, run_id, seq, kind, operation_key, payload, revision, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.tenant_id, run_id, seq, event.kind, event.operation_key, payload, revision, now),
            )

    def _schedule(
        self, cur: Any, run_id: str, now: int, commands: list[tuple[Any, str]], decision: Decision
    ) -> None:
        """Insert commands and timers; an operation key already present for the run is kept (first wins)."""
        reads = self._reads_for(run_id, decision)
        if commands:
            keys = reads.command_keys if reads is not None and reads.command_keys is not None else self._exec(
                cur, _COMMAND_KEYS, (self.tenant_id, run_id)
            )
            taken = {r[0] for r in keys.fetchall()}
            for command, input_text in commands:
                if command.operation_key in taken:
                    continue
                taken.add(command.operation_key)
                not_before = now + micros(command.delay)
                self._exec(
                    cur,
                    "INSERT INTO kit_commands (tenant_id, run_id, operation_key, name, queue, input, status, "
                    "attempt, max_attempts, not_before, claim_owner, claim_generation, claim_expires_at, "
                    "due_at, result, error, consumed, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, NULL, 0, NULL, ?, 'null', 'null', 0, ?)",
                    (self.tenant_id, run_id, command.operation_key, command.name, command.queue, input_text,
                     command.max_attempts, not_before, not_before, now),
                )
        if decision.timers:
            keys = reads.timer_keys if reads is not None and reads.timer_keys is not None else self._exec(
                cur, _TIMER_KEYS, (self.tenant_id, run_id)
            )
            taken = {r[0] for r in keys.fetchall()}
            for timer in decision.timers:
                if timer.operation_key in taken:
                    continue
                taken.add(timer.operation_key)
                fire_at = (
                    to_micros(timer.fire_at) if timer.fire_at is not None else now + micros(timer.delay)  # type: ignore[arg-type]
                )
                self._exec(
                    cur,
                    "INSERT INTO kit_timers (tenant_id, run_id, operation_key, fire_at, status, created_at) "
                    "VALUES (?, ?, ?, ?, 'scheduled', ?)",
                    (self.tenant_id, run_id, timer.operation_key, fire_at, now),
                )

    def _consume(self, cur: Any, revision: int, d: Decision) -> None:
        updates = (
            (d.consume_signals, ("UPDATE kit_signals SET status = 'consumed', consumed_revision = ? "
                                 "WHERE tenant_id = ? AND signal_id IN {ids}"), True),
            (d.consume_commands, "UPDATE kit_commands SET consumed = 1 WHERE tenant_id = ? AND command_id IN {ids}", False),
            (d.consume_timers, "UPDATE kit_timers SET status = 'consumed' WHERE tenant_id = ? AND timer_id IN {ids}", False),
            (d.cancel_timers, "UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND timer_id IN {ids}", False),
        )
        for values, sql, with_revision in updates:
            if not values:
                continue
            ids = [int(x) for x in values]
            params: tuple[Any, ...] = (self.tenant_id, *ids)
            if with_revision:
                params = (revision, *params)
            self._exec(cur, sql.format(ids=self._in(ids)), params)

    def _close_outstanding(self, cur: Any, run_id: str) -> None:
        """A run going terminal cancels its unfinished commands and unfired timers."""
        self._exec(
            cur,
            "UPDATE kit_commands SET status = 'cancelled', claim_expires_at = NULL, due_at = NULL "
            "WHERE tenant_id = ? AND run_id = ? AND status IN ('pending', 'claimed')",
            (self.tenant_id, run_id),
        )
        self._exec(
            cur,
            "UPDATE kit_timers SET status = 'cancelled' WHERE tenant_id = ? AND run_id = ? AND status = 'scheduled'",
            (self.tenant_id, run_id),
        )
