"""SQL Server adapter plumbing that needs no server: ODBC strings, error codes, imports.

* ``mssql+pyodbc://`` URLs become the ODBC connection strings Microsoft's
  driver and FreeTDS expect.
* Driver errors are classified: only 1205 and 3960 are retried.
* The adapter imports without pyodbc or libodbc.

Like the static proof, these run the real code against test doubles: they say
nothing about what a real server or driver does.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace
from urllib.parse import quote_plus

import pytest

from adapters._mssql.dialect import MssqlDialect
from adapters._mssql.odbc import OdbcTarget, error_facts
from adapters.mssql import MssqlBackend
from kit.contract import (
    BackendUnavailable,
    ConnectionLost,
    LockTimeout,
    StorageError,
    TransientError,
)
from kit.contract.outcomes import Outcome
from tests._mssql_world import CLAIM, ROOT, make_world, open_store
from tests._recording_dbapi import FakeDriverError, RecordingDatabase

URL = "mssql+pyodbc://sa:Secret;pw@db.example:14330/master?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes"


@pytest.fixture
def world() -> tuple[RecordingDatabase, SimpleNamespace]:
    return make_world()


# ======================================================================
# ODBC connection strings
# ======================================================================
def test_connection_string_for_microsoft_driver() -> None:
    target = OdbcTarget.from_url(URL)
    text = target.connection_string("ODBC Driver 18 for SQL Server", "kit_00ff", "kit:kit_00ff")
    assert text.startswith("DRIVER={ODBC Driver 18 for SQL Server};SERVER=db.example,14330;DATABASE=kit_00ff;")
    assert "PWD={Secret;pw}" in text and "TrustServerCertificate=yes" in text and "UID=sa" in text


def test_connection_string_for_freetds() -> None:
    target = OdbcTarget.from_url(URL.replace("ODBC+Driver+18+for+SQL+Server", "FreeTDS"))
    text = target.connection_string(target.choose_driver(list))
    assert "SERVER=db.example;PORT=14330;TDS_Version=7.4;DATABASE=master" in text
    assert "TrustServerCertificate" not in text


def test_odbc_connect_passthrough_and_driver_choice() -> None:
    raw = "DRIVER={FreeTDS};SERVER=h;PORT=1433;UID=u;PWD={a;b}};c};DATABASE=tempdb"

    target = OdbcTarget.from_url(f"mssql+pyodbc:///?odbc_connect={quote_plus(raw)}")
    assert target.driver == "FreeTDS" and target.database == "tempdb"
    assert target.attributes["PWD"] == "a;b};c"
    assert "PWD={a;b}};c}" in target.connection_string("FreeTDS", "kit_01")
    plain = OdbcTarget.from_url("mssql+pyodbc://sa:x@h/master")
    installed = ["SQLite3", "FreeTDS", "ODBC Driver 17 for SQL Server"]
    assert plain.choose_driver(lambda: installed) == "ODBC Driver 17 for SQL Server"
    with pytest.raises(BackendUnavailable, match="tdsodbc"):
        plain.choose_driver(lambda: ["SQLite3"])


# ======================================================================
# error classification: retry only what the server rolled back
# ======================================================================
def _error(state: str, message: str, native: int) -> FakeDriverError:
    return FakeDriverError(state, f"[{state}] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]{message} ({native}) (SQLExecDirectW)")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_error("40001", "Transaction (Process ID 57) was deadlocked on lock resources", 1205), TransientError),
        (_error("42000", "Snapshot isolation transaction aborted due to update conflict", 3960), TransientError),
        (_error("HYT00", "Lock request time out period exceeded.", 1222), LockTimeout),
        (_error("08S01", "TCP Provider: Error code 0x68", 10054), ConnectionLost),
        (_error("HY000", "Cannot continue the execution because the session is in the kill state.", 596), ConnectionLost),
        (FakeDriverError("Attempt to use a closed connection."), ConnectionLost),
        (_error("23000", "Violation of PRIMARY KEY constraint 'kit_runs_pk'.", 2627), StorageError),
        (_error("42000", "Incorrect syntax near 'x'.", 102), type(None)),
    ],
    ids=["deadlock", "snapshot-conflict", "lock-timeout", "link", "killed", "closed", "duplicate", "syntax"],
)
def test_errors_are_classified(error: FakeDriverError, kind: type) -> None:
    translated = MssqlDialect(driver_errors=(FakeDriverError,)).translate(error)
    assert type(translated) is kind or (kind is StorageError and type(translated) is StorageError)
    if kind is StorageError:
        assert not isinstance(translated, TransientError | ConnectionLost)


def test_error_facts_reads_every_diagnostic_record() -> None:
    facts = error_facts(FakeDriverError("40001", "[40001] a (1205) (SQLExecDirectW); [40001] b (3998) (SQLExecDirectW)"))
    assert facts.sqlstate == "40001" and facts.codes == {1205, 3998}


def test_deadlock_victim_is_retried_after_rollback(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """A 1205 rolls back and retries the operation; a lock timeout (1222) is not retried."""
    db, _ = world
    store = open_store(db)
    db.fail_once(r"^UPDATE kit_runs SET claim_expires_at", _error("40001", "deadlocked", 1205))
    db.doing("renew")
    assert store.renew_run_claim(CLAIM, timedelta(seconds=5)) is Outcome.RENEWED
    sent = [r.sql for r in db.statements("renew")]
    assert sent.count("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN TRANSACTION") == 2
    assert "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION" in sent
    db.fail_once(r"^UPDATE kit_runs SET claim_expires_at", _error("HYT00", "Lock request time out", 1222))
    db.doing("renew-timeout")
    with pytest.raises(LockTimeout) as info:
        store.renew_run_claim(CLAIM, timedelta(seconds=5))
    assert "LOCK_TIMEOUT" in str(info.value)
    begins = [r.sql for r in db.statements("renew-timeout") if "BEGIN TRANSACTION" in r.sql]
    assert len(begins) == 1, "a lock timeout must not be retried by the store"


def test_module_imports_without_pyodbc() -> None:
    """The adapter, its SQL and this proof load where pyodbc or libodbc.so.2 is missing."""
    code = "import sys, adapters.mssql, adapters._mssql; assert 'pyodbc' not in sys.modules; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_backend_is_registered_with_its_capabilities() -> None:
    from kit.backends import BUILTIN

    assert BUILTIN["mssql"].target == "adapters.mssql:discover" and BUILTIN["mssql"].extra == "mssql"
    declared = {c.value for c in MssqlBackend.capabilities.supported}
    assert {"skip_locked", "kill_session", "test_clock", "database_clock", "tenancy", "unit_of_work",
            "concurrent_connections", "statement_faults"} == declared
