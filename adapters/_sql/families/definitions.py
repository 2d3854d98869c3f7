"""Promise ``definitions``: insert-if-absent definitions, never overwritten."""

from __future__ import annotations

from typing import Any

from adapters._sql import rows as R
from adapters._sql.families._base import SqlPlumbing
from kit.contract import validation as v
from kit.contract.entities import (
    Definition,
)

__all__ = ["DefinitionSql"]


class DefinitionSql(SqlPlumbing):
    """Promise ``definitions``: insert-if-absent definitions, never overwritten."""

    def ensure_definition(self, name: str, version: str, digest: str, body: bytes) -> Definition:
        v.check_text("name", name, v.MAX_NAME)
        v.check_text("version", version, v.MAX_NAME)
        v.check_digest(digest, body)

        def ensure(cur: Any) -> Definition:
            now = self._now_us(cur)
            self.dialect.insert_if_absent(
                cur,
                "kit_definitions",
                ("tenant_id", "name", "version", "digest", "body", "created_at"),
                (self.tenant_id, name, version, digest, bytes(body), now),
            )
            found = self._definition(cur, name, version)
            assert found is not None, "insert-if-absent left no row"
            return found

        return self._write(ensure)

    def get_definition(self, name: str, version: str) -> Definition | None:
        return self._read_one(lambda cur: self._definition(cur, name, version))

    def list_definition_versions(self, name: str) -> list[Definition]:
        """Plain equality on the name, then an exact comparison and a code-point sort in Python: a
        dialect's collation may pad, fold or order by UTF-16 code units; the contract does none of it."""
        v.check_text("name", name, v.MAX_NAME)

        def versions(cur: Any) -> list[Definition]:
            rows = self._exec(
                cur, f"SELECT {R.DEFINITION_COLUMNS} FROM kit_definitions WHERE tenant_id = ? AND name = ?",
                (self.tenant_id, name),
            ).fetchall()
            found = [R.to_definition(row) for row in rows]
            return sorted((d for d in found if d.name == name), key=lambda d: d.version)

        return self._read_one(versions)
