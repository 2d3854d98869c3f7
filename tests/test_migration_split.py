"""A migration file is cut into exactly the statements sqlparse's own splitter and comment stripper find:
``split_statements`` lexes once, and must agree with splitting and then stripping comments of each piece."""

from __future__ import annotations

from importlib import resources

import pytest
import sqlparse

from kit.migrate import split_statements

_EDGES = [
    "-- only a comment\n",
    "/* only a block comment */",
    "SELECT 1; -- a comment after it\n",
    "SELECT '--not a comment'; SELECT '/* nor this */';",
    "CREATE TABLE t (a int) -- note\n;\n\n-- closing words\n",
    "SELECT 1;\n/* many\nlines */\nSELECT 2",
    "INSERT INTO t VALUES ('a;b'); ;; \n",
    "",
]


def _by_format(sql: str) -> list[str]:
    """What the kit did before: split, then run sqlparse's comment stripper over every piece."""
    return [raw.strip().rstrip(";").strip() for raw in sqlparse.split(sql)
            if sqlparse.format(raw, strip_comments=True).strip()]


def _migration_files() -> list[str]:
    root = resources.files("migrations")
    return sorted(f"{d.name}/{f.name}" for d in root.iterdir() if d.is_dir() and d.name != "__pycache__"
                  for f in d.iterdir() if f.name.endswith(".sql"))


@pytest.mark.parametrize("name", _migration_files())
def test_every_shipped_migration_splits_as_sqlparse_does(name: str) -> None:
    text = resources.files("migrations").joinpath(name).read_text(encoding="utf-8")
    statements = split_statements(text)
    assert statements, f"{name} has no statement"
    assert statements == _by_format(text)


@pytest.mark.parametrize("sql", _EDGES)
def test_comments_and_empty_pieces_split_as_sqlparse_does(sql: str) -> None:
    assert split_statements(sql) == _by_format(sql)
