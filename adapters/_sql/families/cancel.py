"""Promise ``cancel_requests``: a cancel request marks the run and wakes it."""

from __future__ import annotations

from typing import Any

from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.outcomes import Outcome

__all__ = ["CancelSql"]


class CancelSql(SqlPlumbing):
    """Promise ``cancel_requests``: a cancel request marks the run and wakes it."""

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_optional_text("reason", reason, v.MAX_REASON)

        def cancel(cur: Any) -> Outcome:
            if self._pipelines():  # the clock queued behind the lock: no round trip of its own
                run, now = self._locked_run_and_clock(cur, run_id)
            else:  # nothing more is read for a cancel that is refused
                run, now = self._locked_run(cur, run_id), None
            if run is None:
                return Outcome.NOT_FOUND
            if run.status.terminal:
                return Outcome.TERMINAL
            if run.cancel_requested:
                return Outcome.DUPLICATE
            if now is None:
                now = self._now_us(cur)
            with self._pipelined():  # the mark and the wake-up: one round trip where the dialect queues
                self._exec(
                    cur,
                    "UPDATE kit_runs SET cancel_requested = 1, cancel_reason = ? WHERE tenant_id = ? AND run_id = ?",
                    (reason, self.tenant_id, run_id),
                )
                self._make_runnable(cur, run, now)
            return Outcome.COMMITTED

        return self._write(cancel)
