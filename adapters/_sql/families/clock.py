"""The store clock: the server's own time, or the kit's single-row test clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from adapters._sql.families._base import SqlPlumbing
from kit.clock import TEST_CLOCK_START, from_micros, micros, to_micros

__all__ = ["ClockSql"]


class ClockSql(SqlPlumbing):
    """The store clock: the server's own time, or the kit's single-row test clock."""

    def now(self) -> datetime:
        return from_micros(self._read_one(self._now_us))

    def install_test_clock(self) -> None:
        """Create and seed the kit's test-clock table (test mode only; never in migrations)."""
        self._require_test_clock()

        def install(cur: Any) -> None:
            cur.execute(self.dialect.test_clock_ddl)
            self.dialect.insert_if_absent(cur, "kit_test_clock", ("id", "now_us"), (1, to_micros(TEST_CLOCK_START)))

        self._write(install)

    def set_test_clock(self, at: datetime) -> None:
        self._require_test_clock()
        us = to_micros(at)
        self._write(lambda cur: self._exec(cur, "UPDATE kit_test_clock SET now_us = ? WHERE id = 1", (us,)))

    def advance_test_clock(self, by: timedelta) -> datetime:
        self._require_test_clock()
        delta = micros(by)

        def advance(cur: Any) -> int:
            self._exec(cur, "UPDATE kit_test_clock SET now_us = now_us + ? WHERE id = 1", (delta,))
            return self._now_us(cur)

        return from_micros(self._write(advance))
