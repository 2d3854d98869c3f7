"""How a seeded bug is declared: a broken backend and the checks that must catch it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kit.contract import Backend
from kit.migrate import Migration

__all__ = ["SeededBug", "rewrite_migrations", "rewrite_sql"]


@dataclass(frozen=True)
class SeededBug:
    """A broken adapter and what must catch it.

    ``caught_by`` lists check ids of which at least one must fail; ``keyword``
    narrows the suite run to the areas that matter, to keep the kit's own tests
    fast (``nox -s mutants`` runs every bug against the whole suite).
    """

    name: str
    description: str
    make_backend: Callable[[], Backend]
    caught_by: tuple[str, ...]
    keyword: str | None = None
    backend: str = "sqlite"


def rewrite_sql(store_cls: type, rewrites: Mapping[str, str], name: str) -> type:
    """A store subclass whose statements have ``old`` text replaced by ``new`` before they run.

    Every ``old`` must occur in the adapter's SQL; a rewrite that never matches
    would be a bug that was never seeded, so it raises.
    """

    class Rewritten(store_cls):  # type: ignore[valid-type, misc]
        _rewrites: ClassVar[dict[str, str]] = dict(rewrites)
        _matched: ClassVar[set[str]] = set()

        def _exec(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
            for old, new in self._rewrites.items():
                if old in sql:
                    sql = sql.replace(old, new)
                    type(self)._matched.add(old)
            return super()._exec(cur, sql, params)

    Rewritten.__name__ = Rewritten.__qualname__ = name
    return Rewritten


def rewrite_migrations(migrations: Sequence[Migration], pattern: str, replacement: str) -> list[Migration]:
    """The migrations with ``pattern`` (a regex) replaced; it must match somewhere."""
    out, hits = [], 0
    for m in migrations:
        sql, n = re.subn(pattern, replacement, m.sql)
        hits += n
        out.append(Migration(m.version, m.name, sql))
    if not hits:
        raise AssertionError(f"seeded migration change {pattern!r} matched nothing")
    return out
