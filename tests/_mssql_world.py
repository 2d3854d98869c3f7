"""The scripted world the SQL Server static tests run the real adapter code in.

Canned rows shaped like the adapter's tables, a script answering every
statement the store sends, a fake ``pyodbc`` module surface, and the check
that every recorded statement is valid, well-bound T-SQL (:mod:`tests._tsql`).
Syntax and call-site shape only: the answers are whatever this module says.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from adapters._mssql.dialect import MssqlDialect
from adapters._mssql.store import MssqlStore
from adapters._sql.store import SqlStore
from kit.clock import TEST_CLOCK_START, to_micros
from kit.connections import ConnectionFactory
from kit.contract import ClockMode, DefinitionRef, RunClaim, digest_of
from kit.migrate import load_dialect
from tests._recording_dbapi import Answer, FakeDriverError, RecordingDatabase
from tests._tsql import problems

__all__ = [
    "BODY", "CLAIM", "DIGEST", "MIGRATIONS", "NOW", "REF", "ROOT", "TENANT", "assert_tsql", "fake_pyodbc",
    "fresh_state", "make_world", "open_store", "run_row", "script",
]

NOW = to_micros(TEST_CLOCK_START)
LEASE_US = 30_000_000
TENANT = "tenant-a"
BODY = b"workflow v1"
DIGEST = digest_of(BODY)
MIGRATIONS = load_dialect("mssql")
ROOT = Path(__file__).resolve().parents[1]


# ======================================================================
# canned rows (column orders from adapters/_sql/rows.py)
# ======================================================================
def run_row(state: SimpleNamespace, run_id: str = "run-1") -> tuple[Any, ...]:
    return (
        run_id, TENANT, "wf", "1", DIGEST, state.status, state.revision, state.owner, state.generation,
        state.expires, None, False, False, None, "{}", "null", "null", None, NOW, NOW,
    )


def command_row(state: SimpleNamespace, command_id: int = 5) -> tuple[Any, ...]:
    return (
        command_id, "run-1", f"op-{command_id}", "do-work", "default", '{"n":1}', state.command_status,
        1, 3, NOW, "w1", 1, NOW + LEASE_US, "null", "null", False,
    )


SIGNAL_ROW = (3, "run-1", "go", '{"v":1}', "sig-1", "pending", None, NOW)
TIMER_ROW = (7, "run-1", "t-1", NOW, "fired")
EVENT_ROW = ("run-1", 1, "step", None, "{}", 1, NOW)
DEFINITION_ROW = ("wf", "1", DIGEST, BODY, NOW)


def script(db: RecordingDatabase, state: SimpleNamespace) -> None:
    """Plausible answers for every statement the store sends (later rules win)."""
    db.on(r"FROM kit_definitions", Answer([DEFINITION_ROW]))
    db.on(r"^SELECT run_id, tenant_id", lambda s, p: Answer([run_row(state)]))
    db.on(r"FROM kit_runs WHERE tenant_id = \? AND idempotency_key = \?", lambda s, p: Answer(list(state.by_key)))
    db.on(r"FROM kit_events", Answer([EVENT_ROW]))
    db.on(r"^SELECT command_id, run_id", lambda s, p: Answer([command_row(state)]))
    db.on(r"FROM kit_signals", Answer([SIGNAL_ROW]))
    db.on(r"FROM kit_signals WHERE tenant_id = \? AND run_id = \? AND dedup_key = \?",
          lambda s, p: Answer([SIGNAL_ROW] if state.signal_exists else []))
    db.on(r"FROM kit_timers", Answer([TIMER_ROW]))
    db.on(r"^SELECT timer_id, run_id FROM kit_timers", lambda s, p: _due_timer_once(state))
    db.on(r"^SELECT operation_key FROM", Answer([]))
    db.on(r"COALESCE\(MAX\(seq\), 0\)", Answer([(0,)]))
    db.on(r"^SELECT COUNT\(\*\) FROM kit_", lambda s, p: Answer([(len(p) - 2,)]))
    db.on(r"FROM kit_schema_migrations", lambda s, p: Answer(list(state.applied)))
    db.on(r"OBJECT_ID\(\?, N'U'\)", Answer([(1,)]))
    db.on(r"DECLARE @granted", Answer([(0,)]))
    db.on(r"^SELECT \(SELECT now_us|^SELECT DATEDIFF_BIG", Answer([(NOW,)]))
    db.on(r"^INSERT INTO kit_runs", lambda s, p: Answer(None, state.insert_rowcount))
    db.on(r"^INSERT INTO kit_signals", lambda s, p: (setattr(state, "signal_exists", True), Answer(None, 1))[1])
    # The generic two-statement claim (SqlStore on this dialect).
    db.on(r"^SELECT run_id, claim_generation, revision FROM kit_runs WITH", Answer([("run-1", 0, 0)]))
    db.on(r"^SELECT command_id FROM kit_commands WITH", Answer([(5,)]))
    # MssqlStore's one-statement claims: OUTPUT order is not promised, so answer shuffled.
    db.on(r"^WITH candidates AS .* FROM kit_runs",
          Answer([("run-b", 2, 0, NOW - 5), ("run-a", 1, 3, NOW - 5), ("0-early", 4, 1, NOW - 9)]))
    db.on(r"^WITH candidates AS .* FROM kit_commands",
          lambda s, p: Answer([(*command_row(state, 9), NOW - 1), (*command_row(state, 5), NOW - 1)]))


def _due_timer_once(state: SimpleNamespace) -> Answer:
    """One due timer, then none: the firer keeps searching until nothing is due."""
    rows = [] if state.timer_taken else [(7, "run-1")]
    state.timer_taken = True
    return Answer(rows)


def fresh_state() -> SimpleNamespace:
    return SimpleNamespace(
        status="running", revision=0, owner="w1", generation=1, expires=NOW + LEASE_US,
        command_status="claimed", applied=[], by_key=[], signal_exists=False, insert_rowcount=1,
        timer_taken=False,
    )


def make_world() -> tuple[RecordingDatabase, SimpleNamespace]:
    """A recording database scripted with plausible answers, and the state the script reads."""
    db, state = RecordingDatabase(), fresh_state()
    script(db, state)
    return db, state


def open_store(db: RecordingDatabase, cls: type[SqlStore] = MssqlStore, clock: ClockMode = ClockMode.TEST) -> Any:
    dialect = MssqlDialect(driver_errors=(FakeDriverError,))
    return cls(dialect, ConnectionFactory(db.connect), TENANT, clock, MIGRATIONS)


def assert_tsql(db: RecordingDatabase) -> None:
    found = []
    for r in db.log:
        for problem in problems(r.sql, r.params):
            found.append(f"[{r.operation}] {problem}\n    sql: {r.sql[:200]}\n    params: {r.params!r}"[:600])
    assert not found, "statements that are not valid, well-bound T-SQL:\n" + "\n".join(found)


CLAIM = RunClaim("run-1", "w1", 1, TEST_CLOCK_START + timedelta(seconds=30), 0)
REF = DefinitionRef("wf", "1", DIGEST)


def fake_pyodbc(db: RecordingDatabase, major: int = 16, can_create: int = 1) -> SimpleNamespace:
    """Just enough of pyodbc's module surface for the backend's plumbing, on the recording double."""
    db.on(r"SERVERPROPERTY", Answer([(major, f"{major}.0.4135.4", "Developer Edition (64-bit)", can_create)]))
    db.on(r"^SELECT DB_ID\(\?\)", Answer([(7,)]))
    db.on(r"^SELECT @@SPID", Answer([(53, "2030-01-02T03:04:05.123")]))
    alive = iter([1, 1, 0] * 10)
    db.on(r"^SELECT COUNT\(\*\) FROM sys.dm_exec_sessions", lambda s, p: Answer([(next(alive),)]))
    connects: list[str] = []

    def connect(text: str, autocommit: bool, timeout: int) -> Any:
        assert autocommit is True and timeout > 0
        connects.append(text)
        return db.connect()

    return SimpleNamespace(pooling=True, version="5.x-fake", drivers=lambda: ["FreeTDS"], connect=connect,
                           Error=FakeDriverError, connects=connects)
