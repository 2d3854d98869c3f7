"""Promise ``definitions``: insert-if-absent definitions, never overwritten."""

from __future__ import annotations

from typing import Any

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
        return self._read(lambda cur: self._definition(cur, name, version))
