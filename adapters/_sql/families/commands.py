"""Promise ``commands``: a fenced work queue with attempts, retries, heartbeats and results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import SqlPlumbing
from adapters._sql.pipeline import row_reader
from kit.clock import from_micros, to_micros
from kit.contract import validation as v
from kit.contract.entities import (
    JSON,
    Command,
    CommandClaim,
    CommandStatus,
    Run,
)
from kit.contract.outcomes import Outcome

__all__ = ["CommandSql"]


class CommandSql(SqlPlumbing):
    """Promise ``commands``: a fenced work queue with attempts, retries, heartbeats and results."""

    def claim_commands(
        self,
        worker_id: str,
        lease: timedelta,
        limit: int = 1,
        queues: Sequence[str] | None = None,
    ) -> list[CommandClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        queue_list = v.check_queues(queues)
        if queue_list == []:
            return []

        def claim(cur: Any) -> list[CommandClaim]:
            extra = "" if queue_list is None else f" AND queue IN {self._in(queue_list)}"
            now, found = self._due(cur, "kit_commands", "command_id", "due_at, command_id", limit, extra,
                                   queue_list or ())
            if not found:
                return []
            ids = [int(r[0]) for r in found]
            expires = now + lease_us
            self._exec(
                cur,
                "UPDATE kit_commands SET status = 'claimed', attempt = attempt + 1, claim_owner = ?, "
                "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ? "
                f"WHERE tenant_id = ? AND command_id IN {self._in(ids)}",
                (worker_id, expires, expires, self.tenant_id, *ids),
            )
            rows = {
                int(r[0]): R.to_command(r)
                for r in self._exec(
                    cur,
                    f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND command_id IN {self._in(ids)}",
                    (self.tenant_id, *ids),
                ).fetchall()
            }
            at = from_micros(expires)
            return [
                CommandClaim(c.command_id, c.run_id, worker_id, c.claim_generation, at, c.attempt, c.name,
                             c.queue, c.input, c.operation_key)
                for c in (rows[i] for i in ids)
            ]

        return self._write(claim)

    def _lock_command(self, cur: Any, command_id: str) -> Callable[[], Command | None]:
        """Lock the command row until commit; call what it returns for the locked command. Queued inside
        ``_pipelined()`` where the dialect queues, as :meth:`_lock_run`."""
        if not command_id.isdigit():
            return lambda: None
        d = self.dialect
        locked = self._query(
            cur,
            f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands{d.lock_hint} WHERE tenant_id = ? AND command_id = ?{d.lock_rows}",
            (self.tenant_id, int(command_id)),
        )
        return row_reader(locked, R.to_command)

    def _locked_command(self, cur: Any, command_id: str) -> Command | None:
        """The command row, locked until commit: :meth:`_lock_command`, read at once."""
        return self._lock_command(cur, command_id)()

    def command_fenced(self, command: Command, claim: CommandClaim, now: int) -> bool:
        return (
            command.status is CommandStatus.CLAIMED
            and command.claim_owner == claim.worker_id
            and command.claim_generation == claim.generation
            and command.claim_expires_at is not None
            and now < to_micros(command.claim_expires_at)
        )

    def _fenced_command(self, cur: Any, claim: CommandClaim) -> tuple[Run | None, Command | None, int, Outcome | None]:
        """Lock the run, then the command (the one lock order), read the clock after both locks, and apply
        the fence. Where the dialect queues, the two locks and the clock travel in one round trip (with the
        BEGIN): the server runs them in that order, so the clock is still read after every lock wait."""
        with self._pipelined():
            locked_run = self._lock_run(cur, claim.run_id)
            locked_command = self._lock_command(cur, claim.command_id)
            clock = self._clock(cur)
        run, command = locked_run(), locked_command()
        now = self._clock_value(clock.fetchone())
        if command is None or command.run_id != claim.run_id:
            return run, None, now, Outcome.NOT_FOUND
        if command.status.terminal:
            return run, command, now, Outcome.TERMINAL
        if not self.command_fenced(command, claim, now):
            return run, command, now, Outcome.CLAIM_LOST
        return run, command, now, None

    def _finish(self, cur: Any, claim: CommandClaim, run: Run | None, now: int, status: str, column: str,
                text: str) -> None:
        """The fenced command ends (``status``, with ``text`` in ``column``: its result or its error) and its
        run is woken: both writes in one round trip where the dialect queues."""
        with self._pipelined():
            self._exec(
                cur,
                f"UPDATE kit_commands SET status = '{status}', {column} = ?, claim_expires_at = NULL, due_at = NULL "
                "WHERE tenant_id = ? AND command_id = ?",
                (text, self.tenant_id, int(claim.command_id)),
            )
            if run is not None:
                self._make_runnable(cur, run, now)

    def heartbeat_command(self, claim: CommandClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def beat(cur: Any) -> Outcome:
            _, _, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_commands SET claim_expires_at = ?, due_at = ? WHERE tenant_id = ? AND command_id = ?",
                (now + lease_us, now + lease_us, self.tenant_id, int(claim.command_id)),
            )
            return Outcome.RENEWED

        return self._write(beat)

    def complete_command(self, claim: CommandClaim, result: JSON = None) -> Outcome:
        v.check_json("result", result)
        text = v.encode_json(result)

        def complete(cur: Any) -> Outcome:
            run, _, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            self._finish(cur, claim, run, now, "completed", "result", text)
            return Outcome.COMPLETED

        return self._write(complete)

    def fail_command(
        self,
        claim: CommandClaim,
        error: JSON = None,
        retry_after: timedelta | None = None,
        retryable: bool = True,
    ) -> Outcome:
        v.check_json("error", error)
        delay = 0 if retry_after is None else v.check_nonnegative("retry_after", retry_after)
        text = v.encode_json(error)

        def fail(cur: Any) -> Outcome:
            run, command, now, refused = self._fenced_command(cur, claim)
            if refused:
                return refused
            assert command is not None
            if retryable and command.attempt < command.max_attempts:
                self._exec(
                    cur,
                    "UPDATE kit_commands SET status = 'pending', error = ?, claim_owner = NULL, "
                    "claim_expires_at = NULL, not_before = ?, due_at = ? WHERE tenant_id = ? AND command_id = ?",
                    (text, now + delay, now + delay, self.tenant_id, int(claim.command_id)),
                )
                return Outcome.RETRY_SCHEDULED
            self._finish(cur, claim, run, now, "failed", "error", text)
            return Outcome.FAILED

        return self._write(fail)

    def get_command(self, command_id: str) -> Command | None:
        if not command_id.isdigit():
            return None

        def get(cur: Any) -> Command | None:
            row = self._exec(
                cur,
                f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND command_id = ?",
                (self.tenant_id, int(command_id)),
            ).fetchone()
            return None if row is None else R.to_command(row)

        return self._read_one(get)

    def list_commands(self, run_id: str) -> list[Command]:
        return self._read_one(lambda cur: [R.to_command(r) for r in self._exec(
            cur,
            f"SELECT {R.COMMAND_COLUMNS} FROM kit_commands WHERE tenant_id = ? AND run_id = ? ORDER BY command_id",
            (self.tenant_id, run_id),
        ).fetchall()])
