"""Promise ``cancel_requests``: a cancel request marks the run and wakes it."""

from __future__ import annotations

from typing import Any

from adapters._sql.families._base import SqlPlumbing
from kit.contract.errors import (
    InvalidArgument,
)
from kit.contract.outcomes import Outcome

__all__ = ["CancelSql"]


class CancelSql(SqlPlumbing):
    """Promise ``cancel_requests``: a cancel request marks the run and wakes it."""

    def request_cancel(self, run_id: str, reason: str | None = None) -> Outcome:
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument("reason must be a str or None")

        def cancel(cur: Any) -> Outcome:
            run = self._locked_run(cur, run_id)
            if run is None:
                return Outcome.NOT_FOUND
            if run.status.terminal:
                return Outcome.TERMINAL
            if run.cancel_requested:
                return Outcome.DUPLICATE
            now = self._now_us(cur)
            self._exec(
                cur,
                "UPDATE kit_runs SET cancel_requested = 1, cancel_reason = ? WHERE tenant_id = ? AND run_id = ?",
                (reason, self.tenant_id, run_id),
            )
            self._make_runnable(cur, run, now)
            return Outcome.COMMITTED

        return self._write(cancel)
