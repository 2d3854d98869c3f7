"""Schema lifecycle (promise ``schema_checksums``): numbered migrations under a lock, verification, reset."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from adapters._sql.families._base import CORE_TABLES, SqlPlumbing
from kit.clock import TEST_CLOCK_START, to_micros
from kit.contract.errors import (
    InvalidArgument,
)
from kit.migrate import AppliedMigration, pending, split_statements, verify

__all__ = ["SchemaSql"]


class SchemaSql(SqlPlumbing):
    """Schema lifecycle (promise ``schema_checksums``): numbered migrations under a lock, verification, reset."""

    def migrate(self) -> list[str]:
        if self._depth:
            raise InvalidArgument("migrate() cannot run inside a transaction(): call it on its own")
        applied_names: list[str] = []
        if self.dialect.ddl_is_transactional:
            def run_all(cur: Any) -> None:
                self.dialect.lock_migrations(cur)
                applied_names.extend(self._apply_pending(cur))

            self._write(run_all)
            return applied_names
        # DDL commits implicitly: hold a session lock and apply one file per transaction.
        self._check_open()
        try:
            self.dialect.lock_migrations(self._cur)
        except self.dialect.driver_errors as exc:
            raise self._translate(exc) from exc
        try:
            while True:
                step = self._write(lambda cur: self._apply_pending(cur, only_first=True))
                if not step:
                    return applied_names
                applied_names.extend(step)
        finally:
            with contextlib.suppress(Exception):  # the lock dies with the session anyway
                self.dialect.unlock_migrations(self._cur)

    def _apply_pending(self, cur: Any, only_first: bool = False) -> list[str]:
        cur.execute(self.dialect.migrations_table_ddl)
        todo = pending(self._applied(cur), self.migrations)
        if only_first:
            todo = todo[:1]
        names = []
        for m in todo:
            for statement in split_statements(m.sql):
                cur.execute(statement)
            self._exec(
                cur,
                "INSERT INTO kit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
                (m.version, m.name, m.checksum, self._wall_us()),
            )
            names.append(f"{m.version:03d}_{m.name}")
        return names

    def _wall_us(self) -> int:
        return time.time_ns() // 1000

    def _applied(self, cur: Any) -> list[AppliedMigration]:
        rows = self._exec(cur, "SELECT version, name, checksum FROM kit_schema_migrations ORDER BY version").fetchall()
        return [AppliedMigration(int(r[0]), r[1], r[2]) for r in rows]

    def verify_schema(self) -> None:
        def check(cur: Any) -> None:
            if not self.dialect.table_exists(cur, "kit_schema_migrations"):
                verify(None, self.migrations)
            verify(self._applied(cur), self.migrations)
            missing = [t for t in CORE_TABLES if not self.dialect.table_exists(cur, t)]
            if missing:
                from kit.contract.errors import SchemaError

                raise SchemaError(
                    "partial",
                    f"the schema is partly applied: tables {missing} are missing although every "
                    "migration is recorded; restore them from the migration files",
                )

        self._read(check)

    def empty_all_tables(self) -> None:
        """Delete every row of every tenant from the kit's tables (schema kept) and rewind the test clock.

        For reusing one kit-owned database between test cases; never call it on data you keep.
        """
        self._require_test_clock()

        def empty(cur: Any) -> None:
            with self._pipelined():  # with the BEGIN, in one round trip where the dialect queues; then the COMMIT
                for table in reversed(CORE_TABLES):
                    self._exec(cur, f"DELETE FROM {table}")
                self._exec(cur, "UPDATE kit_test_clock SET now_us = ? WHERE id = 1", (to_micros(TEST_CLOCK_START),))

        self._write(empty)
