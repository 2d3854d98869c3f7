"""What can be proven about the SQL Server adapter without a SQL Server.

The real store code (``MssqlStore`` on ``MssqlDialect``, and the generic
``SqlStore`` on the same dialect) runs every Storage operation against a
recording DB-API double (:mod:`tests._recording_dbapi`) that answers from a
script; the backend's admin hooks and the migration file are driven the same
way. Every statement sent is then checked (:mod:`tests._tsql`): it parses as
T-SQL with sqlglot, uses no other dialect's constructs, and binds exactly as
many parameters as it has ``?`` placeholders, of types pyodbc binds plainly.

**This proves syntax and call-site shape only.** A mock proves nothing about
locking, fencing, atomicity, READPAST, isolation levels, error codes or what
SQL Server returns: those are proven only by the conformance suite against a
real server (``tests/test_conformance_mssql.py``, ``kit check mssql``,
``nox -s mssql``, ``.github/workflows/mssql.yml``).

Also here: discovery without a server (BackendUnavailable naming both ways,
ConfigurationError for malformed URLs, ``kit check mssql`` exiting 3 with one
line). ODBC connection strings, error classification and importing without
pyodbc are in ``tests/test_mssql_plumbing.py``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from adapters._mssql.dialect import SESSION_SETUP
from adapters._mssql.store import MAX_CLAIM_BATCH
from adapters._sql import rows as R
from adapters._sql.store import SqlStore
from adapters.mssql import PROBE_SQL, MssqlBackend, MssqlSession, admin_statements, discover
from kit.clock import TEST_CLOCK_START
from kit.contract import (
    BackendUnavailable,
    ClockMode,
    ConfigurationError,
    Decision,
    NewCommand,
    NewEvent,
    NewTimer,
    NotInTransaction,
    RunStatus,
    Storage,
)
from kit.contract.outcomes import Outcome
from kit.discovery import ServerHandle
from kit.migrate import load_dialect, split_statements
from tests._mssql_world import (
    BODY,
    CLAIM,
    DIGEST,
    MIGRATIONS,
    REF,
    assert_tsql,
    fake_pyodbc,
    fresh_state,
    make_world,
    open_store,
    run_row,
    script,
)
from tests._recording_dbapi import Answer, RecordingDatabase
from tests._tsql import problems


@pytest.fixture
def world() -> tuple[RecordingDatabase, SimpleNamespace]:
    return make_world()


# ======================================================================
# every Storage operation, through the real store code
# ======================================================================


def storage_operations() -> set[str]:
    return {n for n in dir(Storage) if not n.startswith("_") and callable(getattr(Storage, n))}


def drive_everything(db: RecordingDatabase, state: SimpleNamespace) -> set[str]:
    """Call every Storage operation, each down its main paths; return the names called."""
    called: set[str] = set()

    def do(store: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        db.doing(name)
        called.add(name)
        return getattr(store, name)(*args, **kwargs)

    store = open_store(db)
    db.doing("install_test_clock")
    store.install_test_clock()
    assert do(store, "migrate") == ["001_init"]
    state.applied = [(m.version, m.name, m.checksum) for m in MIGRATIONS]
    assert do(store, "migrate") == []
    do(store, "verify_schema")
    do(store, "set_test_clock", TEST_CLOCK_START)
    do(store, "advance_test_clock", timedelta(microseconds=1))
    assert do(store, "now") == TEST_CLOCK_START
    assert do(open_store(db, clock=ClockMode.DATABASE), "now") == TEST_CLOCK_START

    assert do(store, "ensure_definition", "wf", "1", DIGEST, BODY).digest == DIGEST
    assert do(store, "get_definition", "wf", "1") is not None
    assert [d.version for d in do(store, "list_definition_versions", "wf")] == ["1"]
    assert do(store, "start_run", "run-1", REF, {"x": 1}).created
    assert do(store, "start_run", "run-2", REF, None, idempotency_key="key-1").created
    state.insert_rowcount = 0
    state.by_key = [run_row(state)]
    assert not do(store, "start_run", "run-3", REF, idempotency_key="key-1").created
    state.insert_rowcount, state.by_key = 1, []
    assert do(store, "get_run", "run-1") is not None
    do(store, "list_runs", RunStatus.PENDING, "run-0", 50)
    do(store, "get_history", "run-1")
    do(store, "get_history", "run-1", 0, 10)

    claims = do(store, "claim_runs", "w1", timedelta(seconds=30), 5000)
    assert [c.run_id for c in claims] == ["0-early", "run-a", "run-b"]
    assert do(store, "renew_run_claim", CLAIM, timedelta(seconds=30)) is Outcome.RENEWED
    do(store, "load_claimed", CLAIM)
    decision = Decision(
        RunStatus.BLOCKED,
        events=(NewEvent("step", {"a": 1}, "op-e"), NewEvent("step2")),
        commands=(NewCommand("op-1", "do-work", {"n": 1}), NewCommand("op-2", "other", None, queue="q2")),
        timers=(NewTimer("t-1", delay=timedelta(seconds=5)), NewTimer("t-2", fire_at=TEST_CLOCK_START)),
        consume_signals=("3",), consume_commands=("5", "6"), consume_timers=("7",), cancel_timers=("8",),
        wake_at=TEST_CLOCK_START + timedelta(minutes=1),
    )
    assert do(store, "commit_decision", CLAIM, 0, decision) is Outcome.COMMITTED
    assert do(store, "commit_decision", CLAIM, 0, Decision(RunStatus.COMPLETED, output={"ok": True})) is Outcome.COMMITTED
    assert do(store, "release_run_claim", CLAIM) is Outcome.COMMITTED

    commands = do(store, "claim_commands", "w1", timedelta(seconds=30), 2, ["default", "q2"])
    assert [c.command_id for c in commands] == ["5", "9"]
    do(store, "claim_commands", "w1", timedelta(seconds=30))
    command = commands[0]
    assert do(store, "heartbeat_command", command, timedelta(seconds=30)) is Outcome.RENEWED
    assert do(store, "complete_command", command, {"done": True}) is Outcome.COMPLETED
    assert do(store, "fail_command", command, {"e": 1}, timedelta(seconds=2)) is Outcome.RETRY_SCHEDULED
    assert do(store, "fail_command", command, {"e": 2}, retryable=False) is Outcome.FAILED
    assert do(store, "get_command", "5") is not None
    do(store, "list_commands", "run-1")

    state.status = "blocked"
    assert do(store, "send_signal", "run-1", "go", {"v": 1}, "sig-1").created
    assert not do(store, "send_signal", "run-1", "go", {"v": 2}, "sig-1").created
    do(store, "list_signals", "run-1")
    assert do(store, "request_cancel", "run-1", "enough") is Outcome.COMMITTED
    assert len(do(store, "fire_due_timers", 10)) == 1
    do(store, "list_timers", "run-1")

    with pytest.raises(NotInTransaction):
        do(store, "lock_run", "run-1")
    with do(store, "transaction") as tx:
        tx.on_commit(lambda: None)
        assert do(store, "lock_run", "run-1") is not None
        do(store, "start_run", "run-4", REF)
    do(store, "close")
    return called


def test_every_storage_operation_sends_valid_well_bound_tsql(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """Every statement of every Storage operation parses as T-SQL and binds one parameter per '?'."""
    db, state = world
    called = drive_everything(db, state)
    missing = storage_operations() - called
    assert not missing, f"operations not exercised: {sorted(missing)}"
    assert len(db.log) > 150
    assert_tsql(db)


def test_generic_two_statement_claims_are_valid_tsql_on_this_dialect(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """The generic store's own claims (claim_hint + OFFSET/FETCH) are valid T-SQL too."""
    db, _ = world
    store = open_store(db, SqlStore)
    db.doing("generic claim_runs")
    assert [c.run_id for c in store.claim_runs("w1", timedelta(seconds=30), 3)] == ["run-1"]
    db.doing("generic claim_commands")
    assert [c.command_id for c in store.claim_commands("w1", timedelta(seconds=30), 3, ["default"])] == ["5"]
    sent = [r.sql for r in db.log]
    assert any("WITH (ROWLOCK, UPDLOCK, READPAST)" in s and "FETCH NEXT 3 ROWS ONLY" in s for s in sent)
    assert_tsql(db)


def test_claims_are_one_readpast_statement_capped_below_lock_escalation(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """A claim is one CTE UPDATE ... OUTPUT, pinned to its claim index with ROWLOCK, UPDLOCK,
    READPAST; its batch is capped below lock escalation."""
    db, _ = world
    store = open_store(db)
    db.doing("claim")
    store.claim_runs("w1", timedelta(seconds=30), limit=10_000)
    store.claim_commands("w1", timedelta(seconds=30), limit=10_000)
    claims = [r for r in db.log if r.sql.startswith("WITH candidates")]
    assert len(claims) == 2
    for r in claims:
        assert f"SELECT TOP ({MAX_CLAIM_BATCH}) " in r.sql
        assert re.search(r"WITH \(INDEX\(kit_(runs|commands)_due\), ROWLOCK, UPDLOCK, READPAST\)", r.sql)
        assert " OUTPUT inserted." in r.sql
        tree = sqlglot.parse_one(r.sql, read="tsql")
        assert isinstance(tree, exp.Update) and tree.args.get("with_") is not None
    assert MAX_CLAIM_BATCH * 3 < 5000


def test_claims_come_back_in_due_then_id_order(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """OUTPUT promises no order: claims are sorted by (old due_at, id), ids as BIN2 compares them."""
    db, _ = world
    store = open_store(db)
    claims = store.claim_runs("w2", timedelta(seconds=10), 3)
    assert [(c.run_id, c.generation, c.revision) for c in claims] == [("0-early", 4, 1), ("run-a", 1, 3), ("run-b", 2, 0)]
    assert {c.expires_at for c in claims} == {TEST_CLOCK_START + timedelta(seconds=10)}


def test_first_wins_insert_holds_a_range_lock_on_every_unique_key(world: tuple[RecordingDatabase, SimpleNamespace]) -> None:
    """insert_if_absent probes each non-NULL unique key WITH (UPDLOCK, HOLDLOCK) in the INSERT itself."""
    db, _ = world
    store = open_store(db)
    store.start_run("run-9", REF, idempotency_key="k")
    store.start_run("run-8", REF)
    inserts = [r for r in db.log if r.sql.startswith("INSERT INTO kit_runs")]
    assert inserts[0].sql.count("WITH (UPDLOCK, HOLDLOCK)") == 2  # run id and idempotency key
    assert inserts[1].sql.count("WITH (UPDLOCK, HOLDLOCK)") == 1  # no key: NULL never collides
    assert "NULL" in inserts[1].sql and None not in inserts[1].params
    assert_tsql(db)


def test_the_checker_rejects_what_it_must() -> None:
    """The T-SQL checker is not vacuous: other dialects' SQL and miscounted parameters fail it."""
    bad = {
        "SELECT a FROM t ORDER BY a LIMIT 5": (),
        "INSERT INTO t (a) VALUES (?) ON CONFLICT DO NOTHING": (1,),
        "SELECT a FROM t WHERE b = ? FOR UPDATE SKIP LOCKED": (1,),
        "UPDATE t SET a = 1 RETURNING a": (),
        "CREATE TABLE IF NOT EXISTS t (a INT)": (),
        "SELECT a FROM t WHERE b = TRUE": (),
        "SELEC a FROM t": (),
        "SELECT a FROM t WHERE b = ? AND c = ?": (1,),
        "SELECT a FROM t WHERE b = ?": (1.5,),
        "CREATE TABLE t (j NVARCHAR(MAX) CHECK (ISJSON(j) = 1))": (),
        "SET NOCOUNT ON": (),
        "UPDATE t SET a = 1; SELECT a FROM t": (),
        "ALTER DATABASE foo SET TRUSTWORTHY ON": (),
    }
    for sql, params in bad.items():
        assert problems(sql, params), f"the checker accepted {sql!r}"


# ======================================================================
# the migration file
# ======================================================================
def _tables(sql: str, dialect: str) -> dict[str, set[str]]:
    tables: dict[str, set[str]] = {}
    for tree in sqlglot.parse(sql, read=dialect):
        if isinstance(tree, exp.Create) and str(tree.args.get("kind")).upper() == "TABLE":
            schema = tree.this
            tables[schema.this.name] = {c.name for c in schema.expressions if isinstance(c, exp.ColumnDef)}
    return tables


def _indexes(sql: str) -> set[str]:
    return set(re.findall(r"CREATE (?:UNIQUE )?(?:NONCLUSTERED )?INDEX (\w+)", sql))


def test_migration_statements_split_and_parse_as_tsql() -> None:
    """001_init.sql splits (sqlparse, on ';') into whole statements that each parse as T-SQL."""
    (migration,) = MIGRATIONS
    statements = split_statements(migration.sql)
    heads = re.findall(r"(?m)^(CREATE|ALTER)\b", migration.sql)
    assert len(statements) == len(heads) == 16
    comments = "".join(re.findall(r"--[^\n]*", migration.sql))
    assert not set("'{}") & set(comments), "quotes or braces in comments: a driver could misread them"
    for statement in statements:
        assert "?" not in statement, "executed without parameters: a '?' could be read as a marker"
        assert ";" not in re.sub(r"--[^\n]*", "", statement), "a statement was split short"
        assert not problems(statement, ()), problems(statement, ())


def test_migration_has_the_same_tables_columns_and_indexes_as_sqlite() -> None:
    """The T-SQL schema declares exactly the SQLite schema's tables, columns and indexes."""
    mssql = MIGRATIONS[0].sql
    sqlite = load_dialect("sqlite")[0].sql
    assert _tables(mssql, "tsql") == _tables(sqlite, "sqlite")
    assert _indexes(mssql) == _indexes(sqlite)
    columns = set().union(*_tables(mssql, "tsql").values())
    for listed in (R.RUN_COLUMNS, R.EVENT_COLUMNS, R.COMMAND_COLUMNS, R.SIGNAL_COLUMNS, R.TIMER_COLUMNS, R.DEFINITION_COLUMNS):
        assert {c.strip() for c in listed.split(",")} <= columns


def test_migration_pins_the_sql_server_choices() -> None:
    """Binary collations on keys, ISJSON(..., VALUE), filtered unique keys, no page locks on claim tables."""
    sql = MIGRATIONS[0].sql
    for key in ("tenant_id", "run_id", "idempotency_key", "operation_key", "dedup_key", "claim_owner"):
        for line in (ln for ln in sql.splitlines() if re.match(rf"\s+{key}\s", ln)):
            assert "COLLATE Latin1_General_100_BIN2" in line, line
    json_columns = re.findall(r"(?m)^\s+(\w+)\s+NVARCHAR\(MAX\) NOT NULL CHECK \(ISJSON\((\w+), VALUE\) = 1\)", sql)
    json_in_sqlite = load_dialect("sqlite")[0].sql.count("json_valid(")
    assert len(json_columns) == json_in_sqlite == 8 and all(a == b for a, b in json_columns)
    assert re.search(r"kit_runs_idempotency ON kit_runs \(tenant_id, idempotency_key\)\s+WHERE idempotency_key IS NOT NULL", sql)
    assert re.search(r"kit_events_operation ON kit_events \(tenant_id, run_id, operation_key\)\s+WHERE operation_key IS NOT NULL", sql)
    assert sql.count("SET (LOCK_ESCALATION = DISABLE)") == 2
    code = re.sub(r"--[^\n]*", "", sql)
    assert "DATETIME" not in code and "ALLOW_PAGE_LOCKS = OFF" in code


# ======================================================================
# the backend's own SQL (admin connection, sessions, discovery probe)
# ======================================================================
URL = "mssql+pyodbc://sa:Secret;pw@db.example:14330/master?driver=ODBC+Driver+18+for+SQL+Server&TrustServerCertificate=yes"


@pytest.fixture
def backend() -> MssqlBackend:
    return MssqlBackend(ServerHandle("mssql", URL, "url"))


def test_admin_and_session_statements_are_valid_tsql(backend: MssqlBackend) -> None:
    """CREATE/DROP DATABASE, KILL, the session query and the probe parse as T-SQL."""
    db = RecordingDatabase()
    alive = iter([1, 1, 0])
    db.on(r"^SELECT DB_ID\(\?\)", Answer([(7,)]))
    db.on(r"^SELECT @@SPID", Answer([(53, "2030-01-02T03:04:05.123")]))
    db.on(r"^SELECT COUNT\(\*\) FROM sys.dm_exec_sessions", lambda s, p: Answer([(next(alive),)]))
    cursor = db.connect().cursor()
    backend._create_namespace(cursor, "kit_0a1b2c")
    backend._drop_namespace(cursor, "kit_0a1b2c")
    session = backend._session_id(db.connect())
    assert session == MssqlSession(53, "2030-01-02T03:04:05.123") and int(session) == 53
    backend._kill(cursor, session)
    for sql in (SESSION_SETUP, PROBE_SQL):
        cursor.execute(sql)
    sent = [r.sql for r in db.log]
    assert "CREATE DATABASE [kit_0a1b2c]" in sent and any(s.endswith("; DROP DATABASE [kit_0a1b2c]") for s in sent)
    assert "KILL 53" in sent
    assert_tsql(db)


def test_kill_never_touches_a_reused_spid(backend: MssqlBackend) -> None:
    """A session that is gone (its spid maybe reused) is not killed."""
    db = RecordingDatabase()
    db.on(r"sys.dm_exec_sessions", Answer([(0,)]))
    backend._kill(db.connect().cursor(), MssqlSession(53, "2030-01-02T03:04:05.123"))
    assert not any(r.sql.startswith("KILL") for r in db.log)


def test_namespaces_are_validated_before_interpolation(backend: MssqlBackend) -> None:
    for bad in ("master", "kit_", "kit_ABC", "kit_1]; DROP DATABASE x; --"):
        with pytest.raises(ConfigurationError):
            admin_statements(bad)


def test_whole_backend_lifecycle_on_the_double(monkeypatch: pytest.MonkeyPatch) -> None:
    """discover(url) -> provision -> open (session id, test clock) -> migrate -> kill -> drop -> close,
    through ServerBackend and the real hooks: every statement is valid, well-bound T-SQL."""
    db = RecordingDatabase()
    state = fresh_state()
    script(db, state)
    pyodbc = fake_pyodbc(db)
    monkeypatch.setattr("adapters.mssql.import_pyodbc", lambda: pyodbc)
    monkeypatch.delenv("KIT_MSSQL_URL", raising=False)
    backend = discover("mssql+pyodbc://sa:pw@db.example:1433/master?driver=FreeTDS")
    assert "SQL Server 16.0.4135.4" in backend.describe()
    database = backend.provision()
    store = database.open("tenant-a")
    assert store.session_id == MssqlSession(53, "2030-01-02T03:04:05.123")
    store.migrate()
    database.kill_session(store)
    store.close()
    database.drop()
    backend.close()
    assert all(text.startswith("DRIVER={FreeTDS};SERVER=db.example;PORT=1433;TDS_Version=7.4;")
               for text in pyodbc.connects)
    namespace = database.namespace
    assert any(f"DATABASE={namespace};APP=kit:{namespace}" in text for text in pyodbc.connects)
    sent = [r.sql for r in db.log]
    assert sent.count(SESSION_SETUP) == len(pyodbc.connects) - 1  # all but the probe's
    assert f"CREATE DATABASE [{namespace}]" in sent and "KILL 53" in sent
    assert_tsql(db)


@pytest.mark.parametrize(("major", "can_create", "needle"), [(15, 1, "2022"), (16, 0, "dbcreator")])
def test_probe_refuses_old_servers_and_weak_logins(monkeypatch: pytest.MonkeyPatch, major: int, can_create: int, needle: str) -> None:
    db = RecordingDatabase()
    monkeypatch.setattr("adapters.mssql.import_pyodbc", lambda: fake_pyodbc(db, major, can_create))
    monkeypatch.delenv("KIT_MSSQL_URL", raising=False)
    with pytest.raises(BackendUnavailable, match=needle):
        discover("mssql+pyodbc://sa:pw@db.example/master")


# ======================================================================
# discovery and the CLI without a server
# ======================================================================
@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_MSSQL_URL", raising=False)
    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (False, "no Docker engine answers (test)"))


def test_without_url_or_docker_discovery_names_both_ways(no_server: None) -> None:
    with pytest.raises(BackendUnavailable) as info:
        discover()
    message = str(info.value)
    assert "KIT_MSSQL_URL" in message and "Docker" in message and "testcontainers" in message
    assert "start a local server" not in message  # SQL Server has no local default


def test_without_url_a_missing_driver_is_named_too(no_server: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kit check mssql` with no server and no pyodbc says both: where a server comes from, and what to install."""
    import adapters.mssql

    def missing() -> None:
        raise BackendUnavailable("mssql", "the pyodbc package is not installed", "Install it with: pip install pyodbc")

    monkeypatch.setattr(adapters.mssql, "import_pyodbc", missing)
    with pytest.raises(BackendUnavailable) as info:
        discover()
    message = str(info.value)
    assert "KIT_MSSQL_URL" in message and "pyodbc" in message and "pip install pyodbc" in message


@pytest.mark.parametrize(
    "url",
    ["not a url", "mssql+pyodbc://sa:pw@host:notaport/db", "mssql+pymssql://sa:pw@host/db",
     "postgresql://u@h/db", "mssql+pyodbc://"],
)
def test_malformed_urls_are_configuration_errors(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_MSSQL_URL", raising=False)
    with pytest.raises(ConfigurationError) as info:
        discover(url)
    assert "pw" not in str(info.value).replace("pyodbc", "")


def test_kit_check_mssql_exits_3_with_one_line(no_server: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kit.cli import main

    monkeypatch.setenv("COLUMNS", "2000")  # Rich wraps at the terminal width; the message is one line
    assert main(["check", "mssql"]) == 3
    out = capsys.readouterr().err.strip()
    assert len(out.splitlines()) == 1, out
    assert "mssql is not reachable" in out and "KIT_MSSQL_URL" in out


def test_docker_without_a_driver_starts_no_container(no_server: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Docker but without pyodbc/ODBC, discovery says what to install before pulling any image."""
    def missing() -> Any:
        raise BackendUnavailable("mssql", "the pyodbc package is not installed", "Install it with: pip install pyodbc")

    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (True, "a Docker engine answers"))
    monkeypatch.setattr("adapters.mssql.import_pyodbc", missing)
    with pytest.raises(BackendUnavailable, match="pyodbc"):
        discover()
