"""Promise ``leases``: renewing and releasing a decision claim."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.entities import (
    RunClaim,
)
from kit.contract.outcomes import Outcome

__all__ = ["LeaseSql"]


class LeaseSql(SqlPlumbing):
    """Promise ``leases``: renewing and releasing a decision claim."""

    def renew_run_claim(self, claim: RunClaim, lease: timedelta) -> Outcome:
        lease_us = v.check_lease(lease)

        def renew(cur: Any) -> Outcome:
            run, now = self._locked_run_and_clock(cur, claim.run_id)
            refused = self._refuse_run(run, claim, now)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_runs SET claim_expires_at = ?, due_at = ?, updated_at = ? "
                "WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?",
                (now + lease_us, now + lease_us, now, self.tenant_id, claim.run_id, claim.generation),
            )
            return Outcome.RENEWED

        return self._write(renew)

    def release_run_claim(self, claim: RunClaim) -> Outcome:
        def release(cur: Any) -> Outcome:
            run, now = self._locked_run_and_clock(cur, claim.run_id)
            refused = self._refuse_run(run, claim, now)
            if refused:
                return refused
            self._exec(
                cur,
                "UPDATE kit_runs SET status = 'pending', claim_owner = NULL, claim_expires_at = NULL, "
                "wake_at = ?, due_at = ?, wakeup_pending = 0, updated_at = ? "
                "WHERE tenant_id = ? AND run_id = ? AND claim_generation = ?",
                (now, now, now, self.tenant_id, claim.run_id, claim.generation),
            )
            return Outcome.COMMITTED

        return self._write(release)
