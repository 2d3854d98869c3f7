"""Numbered plain-SQL migrations: loading, checksums, and the verdict of ``verify_schema``.

A dialect's migrations are files ``NNN_name.sql`` under ``migrations/<dialect>/``
(shipped inside the distribution). Applying them is each adapter's job; deciding
what is missing, newer or tampered is done here, once, for every adapter.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sqlparse.engine import FilterStack
from sqlparse.tokens import Comment

from kit.contract.errors import ConfigurationError, SchemaError
from kit.contract.protocol import MigrationSpec

__all__ = [
    "AppliedMigration",
    "Migration",
    "load_dialect",
    "load_directory",
    "pending",
    "split_statements",
    "verify",
]

_FILE = re.compile(r"(\d{3,})_([A-Za-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """sha256 of the file with line endings normalised, so a checkout's CRLF is not tampering."""
        return hashlib.sha256(self.sql.replace("\r\n", "\n").encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class AppliedMigration:
    version: int
    name: str
    checksum: str


def load_directory(path: Path | str) -> list[Migration]:
    """Every ``NNN_name.sql`` in ``path``, ordered by number."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigurationError(f"migrations folder {folder} does not exist: pass an existing folder")
    return _collect((p.name, p.read_text(encoding="utf-8")) for p in folder.iterdir())


def load_dialect(dialect: str) -> list[Migration]:
    """The migrations shipped for ``dialect`` (``sqlite``, ``postgres``, ``mysql``, ``mssql``): read once per
    process (every store opened reads them; shipped files do not change under a running kit), a new list
    each call."""
    return list(_shipped(dialect))


@functools.lru_cache(maxsize=16)
def _shipped(dialect: str) -> tuple[Migration, ...]:
    root = resources.files("migrations").joinpath(dialect)
    if not root.is_dir():
        raise ConfigurationError(f"no migrations are shipped for dialect {dialect!r}")
    return tuple(_collect((p.name, p.read_text(encoding="utf-8")) for p in root.iterdir()))


def _collect(files: Iterable[tuple[str, str]]) -> list[Migration]:
    found: dict[int, Migration] = {}
    for filename, text in files:
        match = _FILE.fullmatch(filename)
        if not match:
            continue
        version = int(match.group(1))
        if version in found:
            raise ConfigurationError(
                f"two migrations are numbered {version}: renumber one of them"
            )
        found[version] = Migration(version, match.group(2), text)
    return [found[v] for v in sorted(found)]


def split_statements(sql: str) -> list[str]:
    """The statements of a migration file, comments-only fragments dropped."""
    return list(_split_cached(sql))


@functools.lru_cache(maxsize=128)
def _split_cached(sql: str) -> tuple[str, ...]:
    # One lexing pass (what sqlparse.split runs), each statement judged on its own tokens: asking
    # sqlparse.format(strip_comments=True) of every statement lexed it again, 0.1 s of every process
    # that migrates (a quarter of that now).
    statements = []
    for statement in FilterStack().run(sql):  # type: ignore[no-untyped-call]
        if any(not token.is_whitespace and token.ttype not in Comment for token in statement.flatten()):
            statements.append(str(statement).strip().rstrip(";").strip())
    return tuple(statements)


def pending(applied: Iterable[AppliedMigration], available: Sequence[MigrationSpec]) -> list[MigrationSpec]:
    """Migrations in ``available`` not yet recorded, in order."""
    done = {a.version for a in applied}
    return [m for m in available if m.version not in done]


def verify(applied: Sequence[AppliedMigration] | None, available: Sequence[MigrationSpec]) -> None:
    """Raise :class:`SchemaError` unless exactly ``available`` is applied, unchanged.

    ``applied`` is ``None`` when the migrations table itself does not exist.
    """
    if applied is None or not applied:
        raise SchemaError(
            "absent",
            "the kit schema is absent (no migrations recorded): run migrate() first",
        )
    by_version = {a.version: a for a in applied}
    code = {m.version: m for m in available}
    newer = sorted(set(by_version) - set(code))
    if newer:
        raise SchemaError(
            "newer",
            f"the database has migrations {newer} that this code does not know: "
            "upgrade the code (the schema is newer than it)",
        )
    for version, migration in code.items():
        record = by_version.get(version)
        if record is not None and record.checksum != migration.checksum:
            raise SchemaError(
                "tampered",
                f"migration {version:03d}_{migration.name} was changed after it was applied "
                f"(checksum {record.checksum[:12]}... recorded, {migration.checksum[:12]}... now): "
                "restore the original file and add a new numbered migration instead",
            )
    missing = sorted(set(code) - set(by_version))
    if missing:
        raise SchemaError(
            "partial",
            f"the schema is partly applied: migrations {missing} are missing: run migrate()",
        )
