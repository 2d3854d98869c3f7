"""Claiming runs and the fenced decision commit (promises ``generation_fencing``, ``expected_revision``, ``atomic_decision``)."""

from __future__ import annotations

from collections.abc import Sequence
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


class DecisionSql(SqlPlumbing):
    """Claiming runs and the fenced decision commit (promises ``generation_fencing``, ``expected_revision``, ``atomic_decision``)."""

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)

        def claim(cur: Any) -> list[RunClaim]:
            now = self._now_us(cur)
            found = self._exec(
                cur,
                self._candidates(
                    "kit_runs",
                    "run_id, claim_generation, revision",
                    "tenant_id = ? AND due_at <= ?",
                    "due_at, run_id",
                    limit,
                ),
                (self.tenant_id, now),
            ).fetchall()
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
        def load(cur: Any) -> Snapshot | Outcome:
            run = self._run(cur, claim.run_id)
            refused = self._refuse_run(run, claim, self._now_us(cur))
            if refused:
                return refused
            assert run is not None
            key = (self.tenant_id, run.run_id)
            history = self._exec(
                cur, f"SELECT {R.EVENT_COLUMNS} FROM kit_events WHERE tenant_id = ? AND run_id = ? ORDER BY seq", key
            ).fetchall()
            results = self._exec(
                cur,
                f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? "
                "AND status IN ('completed', 'failed') AND consumed = 0 ORDER BY command_id",
                key,
            ).fetchall()
            signals = self._exec(
                cur,
                f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? "
                "AND status = 'pending' ORDER BY signal_id",
                key,
            ).fetchall()
            timers = self._exec(
                cur,
                f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? "
                "AND status = 'fired' ORDER BY timer_id",
                key,
            ).fetchall()
            return Snapshot(
                run,
                tuple(R.to_event(r) for r in history),
                tuple(R.to_command(r) for r in results),
                tuple(R.to_signal(r) for r in signals),
                tuple(R.to_timer(r) for r in timers),
            )

        return self._read(load)

    def commit_decision(self, claim: RunClaim, expected_revision: int, decision: Decision) -> Outcome:
        v.check_decision(decision)
        encoded_events = [(e, v.encode_json(e.payload)) for e in decision.events]
        encoded_commands = [(c, v.encode_json(c.input)) for c in decision.commands]
        output, error = v.encode_json(decision.output), v.encode_json(decision.error)

        def commit(cur: Any) -> Outcome:
            run = self._locked_run(cur, claim.run_id)
            now = self._now_us(cur)
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
            ).rowcount
            if done != 1:
                raise FenceBroken(f"the fenced update of run {run.run_id!r} matched {done} rows")
            return Outcome.COMMITTED

        return self._write(commit)

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

    def _count_matching(self, cur: Any, table: str, id_column: str, ids: list[int], run_id: str, condition: str) -> int:
        row = self._exec(
            cur,
            f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND run_id = ? AND {condition} "
            f"AND {id_column} IN {self._in(ids)}",
            (self.tenant_id, run_id, *ids),
        ).fetchone()
        return int(row[0])

    def _check_consumable(self, cur: Any, run_id: str, d: Decision) -> None:
        checks = (
            ("consume_signals", d.consume_signals, "kit_signals", "signal_id", "status = 'pending'",
             "pending signals"),
            ("consume_commands", d.consume_commands, "kit_commands", "command_id",
             "status IN ('completed', 'failed') AND consumed = 0", "unconsumed command results"),
            ("consume_timers", d.consume_timers, "kit_timers", "timer_id", "status = 'fired'", "fired timers"),
            ("cancel_timers", d.cancel_timers, "kit_timers", "timer_id", "status IN ('scheduled', 'fired')",
             "open timers"),
        )
        for label, values, table, column, condition, what in checks:
            if not values:
                continue
            ids = self._ids(label, values)
            if self._count_matching(cur, table, column, ids, run_id, condition) != len(ids):
                raise InvalidDecision(f"{label} names ids that are not {what} of run {run_id!r}: {list(values)}")
        keys = [e.operation_key for e in d.events if e.operation_key is not None]
        if keys:
            clash = self._exec(
                cur,
                f"SELECT operation_key FROM kit_events WHERE tenant_id = ? AND run_id = ? AND operation_key IN {self._in(keys)}",
                (self.tenant_id, run_id, *keys),
            ).fetchall()
            if clash:
                raise InvalidDecision(
                    f"events with operation keys {[r[0] for r in clash]} are already in the history"
                )

    def _append_events(self, cur: Any, run_id: str, revision: int, now: int, events: list[tuple[Any, str]]) -> None:
        if not events:
            return
        row = self._exec(
            cur, "SELECT COALESCE(MAX(seq), 0) FROM kit_events WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
        ).fetchone()
        seq = int(row[0])
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
        if commands:
            taken = {r[0] for r in self._exec(
                cur, "SELECT operation_key FROM kit_commands WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
            ).fetchall()}
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
            taken = {r[0] for r in self._exec(
                cur, "SELECT operation_key FROM kit_timers WHERE tenant_id = ? AND run_id = ?", (self.tenant_id, run_id)
            ).fetchall()}
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
