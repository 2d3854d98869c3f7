"""Static T-SQL checks: does a statement (or batch) parse as T-SQL, and is it shaped right?

What :func:`problems` checks, for one ``(sql, params)`` as a call site sent it:

1. every statement of the batch parses with sqlglot's ``tsql`` dialect, without
   falling back to an opaque ``Command`` (except the few pinned in
   :data:`PARSER_GAPS_PATTERN` and :data:`OPAQUE_OK`: valid T-SQL sqlglot cannot read);
2. no construct of another dialect appears (:data:`FOREIGN`): sqlglot is a
   lenient parser that also reads ``LIMIT`` or ``ON CONFLICT`` under ``tsql``;
3. the number of ``?`` placeholders, counted in the text and in the parse
   tree, equals the number of parameters bound;
4. every parameter is a type pyodbc binds unambiguously (str, int, bytes; never
   a float, bool or datetime the contract's integer-microsecond columns would
   silently convert);
5. a multi-statement batch that returns rows has no INSERT/UPDATE/DELETE before
   its SELECT (with NOCOUNT OFF such a count would hide the result set).

Syntax and shape only: nothing here says what a server does with the SQL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp

__all__ = ["FOREIGN", "OPAQUE_OK", "PARSER_GAPS_PATTERN", "problems", "split_batch"]

PARSER_GAPS_PATTERN = re.compile(r"SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
"""Valid T-SQL (SET TRANSACTION ISOLATION LEVEL, learn.microsoft.com) that sqlglot 30 refuses
("Unknown option ISOLATION" for SNAPSHOT only; READ COMMITTED parses): matched exactly instead."""

OPAQUE_OK = (
    # ALTER DATABASE ... SET <option> is parsed by sqlglot as an opaque Command; the
    # shapes the kit sends are pinned here, option by option.
    re.compile(
        r"ALTER DATABASE \[kit_[0-9a-f]+\] SET (ALLOW_SNAPSHOT_ISOLATION ON|READ_COMMITTED_SNAPSHOT OFF"
        r"|RECOVERY SIMPLE|COMPATIBILITY_LEVEL = 160|SINGLE_USER WITH ROLLBACK IMMEDIATE)"
    ),
)

FOREIGN: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "LIMIT (T-SQL: TOP or OFFSET/FETCH)": r"\bLIMIT\b",
        "ON CONFLICT": r"\bON\s+CONFLICT\b",
        "FOR UPDATE (T-SQL: table hints)": r"\bFOR\s+UPDATE\b",
        "SKIP LOCKED (T-SQL: READPAST)": r"\bSKIP\s+LOCKED\b",
        "RETURNING (T-SQL: OUTPUT)": r"\bRETURNING\b",
        "boolean literal": r"\b(TRUE|FALSE)\b",
        "|| concatenation": r"\|\|",
        "backtick quoting": r"`",
        "format placeholder": r"%s",
        "CREATE ... IF NOT EXISTS": r"\bCREATE\s+(TABLE|INDEX|UNIQUE\s+INDEX)\s+IF\s+NOT\s+EXISTS\b",
        "AUTOINCREMENT (T-SQL: IDENTITY)": r"\bAUTOINCREMENT\b",
        "BOOLEAN type (T-SQL: BIT)": r"\bBOOLEAN\b",
        ":: cast": r"::",
        "json_valid (T-SQL: ISJSON)": r"\bjson_valid\b",
        "ISJSON without VALUE (refuses scalar JSON)": r"\bISJSON\s*\(\s*[\w.]+\s*\)",
        "DATETIME (1/300 s; use DATETIME2 or BIGINT us)": r"\bDATETIME\b",
        "GETDATE (local, 1/300 s)": r"\bGETDATE\s*\(",
        "NOW()": r"\bNOW\s*\(",
        "BEGIN IMMEDIATE / START TRANSACTION": r"\b(BEGIN\s+IMMEDIATE|START\s+TRANSACTION)\b",
        "GO batch separator": r"(?m)^\s*GO\s*$",
        "ILIKE": r"\bILIKE\b",
        "SET NOCOUNT ON (zeroes the row counts the fences read)": r"\bSET\s+NOCOUNT\s+ON\b",
    }.items()
}

_STRING = re.compile(r"N?'(?:[^']|'')*'")
_COMMENT = re.compile(r"--[^\n]*")
_BINDABLE = (str, int, bytes, type(None))
_DML = re.compile(r"^\s*(WITH\b.*?\)\s*)?(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE | re.DOTALL)


def split_batch(sql: str) -> list[str]:
    """The statements of a batch, comments dropped (the kit's SQL has no ';' in literals)."""
    code = _COMMENT.sub("", sql)
    if ";" in "".join(_STRING.findall(code)):
        raise AssertionError(f"a ';' inside a string literal: cannot split {sql[:80]!r}")
    return [part.strip() for part in code.split(";") if part.strip()]


def _parse(statement: str) -> tuple[list[exp.Expression], str | None]:
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # a Command fallback is judged below, not logged
    try:
        return [t for t in sqlglot.parse(statement, read="tsql") if t is not None], None
    except sqlglot.errors.ParseError as exc:
        return [], str(exc).splitlines()[0]
    finally:
        logger.setLevel(level)


def problems(sql: str, params: Sequence[Any]) -> list[str]:
    """What is wrong with one call site's ``(sql, params)``; empty if nothing."""
    found: list[str] = []
    code = _STRING.sub("''", _COMMENT.sub("", sql))
    for name, pattern in FOREIGN.items():
        if pattern.search(code):
            found.append(f"not T-SQL: {name}")
    statements = split_batch(sql)
    placeholders, gaps = 0, 0
    for statement in statements:
        if PARSER_GAPS_PATTERN.fullmatch(statement):
            gaps += 1
            continue
        trees, error = _parse(statement)
        if error is not None:
            found.append(f"does not parse as T-SQL: {error}: {statement[:120]}")
            continue
        for tree in trees:
            if tree.find(exp.Command) is not None and not any(p.fullmatch(statement) for p in OPAQUE_OK):
                found.append(f"parsed only as an opaque command: {statement[:120]}")
            placeholders += len(list(tree.find_all(exp.Placeholder)))
    marks = code.count("?")
    if marks != len(params):
        found.append(f"{marks} '?' in the text but {len(params)} parameters")
    elif placeholders != len(params):
        found.append(f"{placeholders} placeholders in the parse tree but {len(params)} parameters")
    for i, value in enumerate(params):
        if isinstance(value, bool) or not isinstance(value, _BINDABLE):
            found.append(f"parameter {i + 1} is a {type(value).__name__}: bind str, int, bytes or None")
    if len(statements) > 1:
        selects = [i for i, s in enumerate(statements) if re.match(r"SELECT\b", s, re.IGNORECASE)]
        if selects and any(_DML.match(s) for s in statements[: selects[-1]]):
            found.append("a batch has DML before its SELECT: with NOCOUNT OFF its count hides the rows")
    return found
