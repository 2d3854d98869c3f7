"""Promise ``timers``: durable timers fired once at their store-clock instant."""

from __future__ import annotations

from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.entities import (
    Timer,
)

__all__ = ["TimerSql"]


class TimerSql(SqlPlumbing):
    """Promise ``timers``: durable timers fired once at their store-clock instant."""

    def fire_due_timers(self, limit: int = 100) -> list[Timer]:
        v.check_limit(limit)

        def fire(cur: Any) -> list[Timer]:
            now = self._now_us(cur)
            fired: list[int] = []
            lost: list[int] = []
            while len(fired) < limit:
                # Candidates are read without locks; one lost to a concurrent firer is skipped
                # and the search goes on, so a firer returns fewer than `limit` only when
                # fewer timers are due.
                skip = f" AND timer_id NOT IN {self._in(lost)}" if lost else ""
                due = self._exec(
                    cur,
                    self.dialect.limit(
                        "SELECT timer_id, run_id FROM kit_timers WHERE tenant_id = ? AND status = 'scheduled' "
                        f"AND fire_at <= ?{skip} ORDER BY fire_at, timer_id",
                        limit - len(fired),
                    ),
                    (self.tenant_id, now, *lost),
                ).fetchall()
                if not due:
                    break
                for timer_id, run_id in due:
                    run = self._locked_run(cur, run_id)  # the run first: the one lock order
                    changed = self._exec(
                        cur,
                        "UPDATE kit_timers SET status = 'fired' WHERE tenant_id = ? AND timer_id = ? "
                        "AND status = 'scheduled' AND fire_at <= ?",
                        (self.tenant_id, timer_id, now),
                    ).rowcount
                    if changed != 1:
                        lost.append(int(timer_id))  # a concurrent firer (or a terminal commit) got there first
                        continue
                    if run is not None:
                        self._make_runnable(cur, run, now)
                    fired.append(int(timer_id))
            if not fired:
                return []
            rows = self._exec(
                cur,
                f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND timer_id IN {self._in(fired)}",
                (self.tenant_id, *fired),
            ).fetchall()
            by_id = {int(r[0]): R.to_timer(r) for r in rows}
            return [by_id[i] for i in fired]

        return self._write(fire)

    def list_timers(self, run_id: str) -> list[Timer]:
        return self._read_one(lambda cur: [R.to_timer(r) for r in self._exec(
            cur,
            f"SELECT {R.TIMER_COLUMNS} FROM kit_timers WHERE tenant_id = ? AND run_id = ? ORDER BY timer_id",
            (self.tenant_id, run_id),
        ).fetchall()])
