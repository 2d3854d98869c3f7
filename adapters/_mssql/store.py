"""The generic SQL store with SQL Server's one-statement claims.

Guarantees of both claims (identical to the generic store's): up to ``limit``
claimable rows (capped at :data:`MAX_CLAIM_BATCH`), oldest due first with ties
broken by id, each with its generation bumped by exactly one and its lease set
to store now + lease; rows another transaction holds are skipped, never waited
for; the claims are returned in that (due_at, id) order.

How: one statement, ``WITH candidates AS (SELECT TOP (n) ... FROM t WITH
(INDEX(claim index), ROWLOCK, UPDLOCK, READPAST) WHERE ... ORDER BY due_at, id)
UPDATE candidates SET ... OUTPUT inserted..., deleted.due_at``. The CTE's TOP +
ORDER BY picks the rows in queue order, READPAST skips rows locked by other
transactions, UPDLOCK locks the picked rows until the UPDATE turns the lock
exclusive; OUTPUT returns the claimed rows without a second round trip.

The INDEX hint pins the plan to an ordered seek of the claim index
(``tenant_id, due_at, id``) feeding TOP: the claim then reads, and locks, only
the rows it takes. UPDLOCK holds its U locks to commit even on rows read but
not updated, so a plan that scanned and sorted (which the optimizer may pick
for a small table) would lock every due row and make concurrent claimers skip
rows nobody claimed while a claim runs inside a longer unit of work.
OUTPUT does not promise an order, so the rows are sorted by (old due_at, id)
here, ids compared as SQL Server's BIN2 collation does (UTF-16 code units).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from adapters._sql import rows as R
from adapters._sql.store import SqlStore
from kit.clock import from_micros
from kit.contract import validation as v
from kit.contract.entities import CommandClaim, RunClaim

__all__ = ["MAX_CLAIM_BATCH", "MssqlStore", "claim_commands_sql", "claim_runs_sql"]

MAX_CLAIM_BATCH = 1000
"""The most rows one claim takes. Each claimed row holds about three key locks (the
clustered row and the claim index's old and new keys); SQL Server tries to escalate
to a table lock at about 5,000 locks in one statement, and a table lock would make
every other claimer wait instead of skipping (pitfall 11). The claim tables also
disable lock escalation (see the migration); the cap keeps the bound if they don't."""

_RUN_CLAIM_COLUMNS = (
    "run_id, revision, status, claim_owner, claim_generation, claim_expires_at, due_at, "
    "wake_at, wakeup_pending, updated_at"
)
_COMMAND_COLUMNS = [c.strip() for c in R.COMMAND_COLUMNS.split(",")]


def claim_runs_sql(batch: int) -> str:
    """The run claim; parameters: tenant_id, now (candidates), then worker, expires, expires, now."""
    return (
        f"WITH candidates AS (SELECT TOP ({int(batch)}) {_RUN_CLAIM_COLUMNS} "
        "FROM kit_runs WITH (INDEX(kit_runs_due), ROWLOCK, UPDLOCK, READPAST) "
        "WHERE tenant_id = ? AND due_at <= ? ORDER BY due_at, run_id) "
        "UPDATE candidates SET status = 'running', claim_owner = ?, "
        "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ?, "
        "wake_at = NULL, wakeup_pending = 0, updated_at = ? "
        "OUTPUT inserted.run_id, inserted.claim_generation, inserted.revision, deleted.due_at"
    )


def claim_commands_sql(batch: int, queues: int | None) -> str:
    """The command claim; parameters: tenant_id, now, each queue (candidates), then worker,
    expires, expires. Outputs the command's columns (``R.COMMAND_COLUMNS``), then its old due_at."""
    queue_filter = "" if queues is None else " AND queue IN (" + ", ".join("?" for _ in range(queues)) + ")"
    outputs = ", ".join(f"inserted.{c}" for c in _COMMAND_COLUMNS)
    return (
        f"WITH candidates AS (SELECT TOP ({int(batch)}) {R.COMMAND_COLUMNS}, due_at "
        "FROM kit_commands WITH (INDEX(kit_commands_due), ROWLOCK, UPDLOCK, READPAST) "
        f"WHERE tenant_id = ? AND due_at <= ?{queue_filter} ORDER BY due_at, command_id) "
        "UPDATE candidates SET status = 'claimed', attempt = attempt + 1, claim_owner = ?, "
        "claim_generation = claim_generation + 1, claim_expires_at = ?, due_at = ? "
        f"OUTPUT {outputs}, deleted.due_at"
    )


def _bin2(text: str) -> bytes:
    """A sort key ordering strings as Latin1_General_100_BIN2 orders NVARCHAR values."""
    return text.encode("utf-16-be", "surrogatepass")


class MssqlStore(SqlStore):
    """A store on one SQL Server connection: the generic store plus one-statement claims."""

    session_id: Any = None
    """The server session (``@@SPID`` and its login time) the kit kills to simulate a crash."""

    def claim_runs(self, worker_id: str, lease: timedelta, limit: int = 1) -> list[RunClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        batch = min(limit, MAX_CLAIM_BATCH)

        def claim(cur: Any) -> list[RunClaim]:
            now = self._now_us(cur)
            expires = now + lease_us
            rows = self._exec(
                cur, claim_runs_sql(batch), (self.tenant_id, now, worker_id, expires, expires, now)
            ).fetchall()
            rows.sort(key=lambda r: (int(r[3]), _bin2(r[0])))
            at = from_micros(expires)
            return [RunClaim(r[0], worker_id, int(r[1]), at, int(r[2])) for r in rows]

        return self._write(claim)

    def claim_commands(
        self,
        worker_id: str,
        lease: timedelta,
        limit: int = 1,
        queues: Sequence[str] | None = None,
    ) -> list[CommandClaim]:
        lease_us, limit = v.check_claim(worker_id, lease, limit)
        batch = min(limit, MAX_CLAIM_BATCH)
        queue_list = v.check_queues(queues)
        if queue_list == []:
            return []

        def claim(cur: Any) -> list[CommandClaim]:
            now = self._now_us(cur)
            expires = now + lease_us
            sql = claim_commands_sql(batch, None if queue_list is None else len(queue_list))
            params = (self.tenant_id, now, *(queue_list or ()), worker_id, expires, expires)
            rows = [tuple(r) for r in self._exec(cur, sql, params).fetchall()]  # pyodbc Rows -> tuples
            rows.sort(key=lambda r: (int(r[-1]), int(r[0])))
            at = from_micros(expires)
            claims = []
            for row in rows:
                c = R.to_command(row[:-1])
                claims.append(
                    CommandClaim(c.command_id, c.run_id, worker_id, c.claim_generation, at, c.attempt,
                                 c.name, c.queue, c.input, c.operation_key)
                )
            return claims

        return self._write(claim)
