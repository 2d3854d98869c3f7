"""Promise ``signals``: an idempotent inbox per run."""

from __future__ import annotations

from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.entities import (
    JSON,
    Signal,
    SignalReceipt,
)
from kit.contract.outcomes import Outcome

__all__ = ["SignalSql"]


class SignalSql(SqlPlumbing):
    """Promise ``signals``: an idempotent inbox per run."""

    def send_signal(self, run_id: str, name: str, payload: JSON, dedup_key: str) -> SignalReceipt:
        v.check_text("run_id", run_id, v.MAX_RUN_ID)
        v.check_text("name", name, v.MAX_NAME)
        v.check_json("payload", payload)
        v.check_text("dedup_key", dedup_key, v.MAX_KEY)
        text = v.encode_json(payload)

        def send(cur: Any) -> SignalReceipt:
            """Where the dialect queues, three round trips: the run lock with the BEGIN, and queued after it
            the clock and the dedup lookup (run once the lock is granted); the INSERT, the wake-up and the
            read-back; the COMMIT."""
            with self._pipelined():
                locked = self._lock_run(cur, run_id)
                queued = self._pipelines()  # else nothing more is read for an unknown run
                if queued:
                    clock, existing = self._clock(cur), self._signal_by_key(cur, run_id, dedup_key)
            run = locked()
            if run is None:
                return SignalReceipt(Outcome.NOT_FOUND)
            if not queued:
                clock, existing = self._clock(cur), self._signal_by_key(cur, run_id, dedup_key)
            if existing is not None:
                return SignalReceipt(Outcome.DUPLICATE, existing)
            if run.status.terminal:
                return SignalReceipt(Outcome.TERMINAL)
            now = self._clock_value(clock.fetchone())
            with self._pipelined():
                self._exec(
                    cur,
                    "INSERT INTO kit_signals (tenant_id, run_id, name, payload, dedup_key, status, consumed_revision, "
                    "sent_at) VALUES (?, ?, ?, ?, ?, 'pending', NULL, ?)",
                    (self.tenant_id, run_id, name, text, dedup_key, now),
                )
                self._make_runnable(cur, run, now)
                signal = self._signal_by_key(cur, run_id, dedup_key)
            return SignalReceipt(Outcome.COMMITTED, signal)

        return self._write(send)

    def _signal_by_key(self, cur: Any, run_id: str, dedup_key: str) -> Signal | None:
        row = self._exec(
            cur,
            f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? AND dedup_key = ?",
            (self.tenant_id, run_id, dedup_key),
        ).fetchone()
        return None if row is None else R.to_signal(row)

    def list_signals(self, run_id: str) -> list[Signal]:
        return self._read_one(lambda cur: [R.to_signal(r) for r in self._exec(
            cur,
            f"SELECT {R.SIGNAL_COLUMNS} FROM kit_signals WHERE tenant_id = ? AND run_id = ? ORDER BY signal_id",
            (self.tenant_id, run_id),
        ).fetchall()])
