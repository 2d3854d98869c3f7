"""PostgreSQL-specific guarantees the shared suite cannot observe.

Discovery and error translation need no server; the rest runs on the
discovered server (skipped as not-reachable without one, failed under
``KIT_REQUIRE_BACKENDS=postgres``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from adapters import postgres as pg
from adapters._postgres_connect import connect_params
from kit.conformance import LEASE
from kit.contract import (
    BackendUnavailable,
    ClockMode,
    ConfigurationError,
    ConnectionLost,
    Decision,
    LockTimeout,
    NewCommand,
    NewEvent,
    Outcome,
    RunStatus,
    StorageError,
    TransientError,
    digest_of,
)
from kit.pytest_plugin import use_backend

UNREACHABLE = "postgresql+psycopg://nobody:s3cret@127.0.0.1:1/nothing"


@pytest.fixture
def nothing_reachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_POSTGRES_URL", raising=False)
    monkeypatch.delenv("KIT_REQUIRE_BACKENDS", raising=False)
    monkeypatch.setattr(pg, "LOCAL_DEFAULTS", (UNREACHABLE,))
    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (False, "no Docker engine answers (test)"))


# ----------------------------------------------------------------------
# without a server
# ----------------------------------------------------------------------
def test_only_rolled_back_attempts_are_transient() -> None:
    dialect = pg.PostgresDialect()
    assert isinstance(dialect.translate(psycopg.errors.DeadlockDetected("x")), TransientError)
    assert isinstance(dialect.translate(psycopg.errors.SerializationFailure("x")), TransientError)
    lock = dialect.translate(psycopg.errors.LockNotAvailable("x"))
    assert type(lock) is LockTimeout and "lock wait timed out" in str(lock)
    assert isinstance(dialect.translate(psycopg.errors.AdminShutdown("x")), ConnectionLost)
    assert isinstance(dialect.translate(psycopg.OperationalError("server closed the connection")), ConnectionLost)
    assert dialect.translate(psycopg.errors.UniqueViolation("x")) is None


def test_url_becomes_libpq_parameters() -> None:
    params = connect_params("postgresql+psycopg://u:p%40ss@/db?host=/var/run/postgresql&sslmode=disable")
    assert params["host"] == "/var/run/postgresql" and params["password"] == "p@ss"
    assert (params["user"], params["dbname"], params["sslmode"]) == ("u", "db", "disable")
    with pytest.raises(ConfigurationError, match="not a postgres URL"):
        connect_params("mysql+pymysql://u:secret@h/db")


def test_discovery_failure_names_all_three_ways(nothing_reachable: None) -> None:
    with pytest.raises(BackendUnavailable) as info:
        pg.discover()
    message = str(info.value)
    for way in ("--url", "KIT_POSTGRES_URL", "nothing answered locally", "testcontainers", "Docker engine"):
        assert way in message
    assert "s3cret" not in message and "***" in message


def test_unreachable_server_skips_unless_required(nothing_reachable: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="not-reachable"):
        next(use_backend("postgres"))
    monkeypatch.setenv("KIT_REQUIRE_BACKENDS", "mysql,postgres")
    with pytest.raises(pytest.fail.Exception, match="not-reachable"):
        next(use_backend("postgres"))


# ----------------------------------------------------------------------
# on the server
# ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def backend() -> Iterator[pg.PostgresBackend]:
    for found in use_backend("postgres"):
        assert isinstance(found, pg.PostgresBackend)
        yield found


@pytest.fixture
def database(backend: pg.PostgresBackend) -> Iterator[Any]:
    db = backend.provision()
    yield db
    db.drop()


def _set_mark(backend: pg.PostgresBackend, namespace: str, mark: str | None) -> None:
    backend._with_admin(lambda cur: cur.execute(
        sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(namespace), sql.Literal(mark))
    ))


def test_testcontainers_is_the_third_way(backend: pg.PostgresBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing given or local and a Docker engine answering, discovery starts a container."""
    stopped: list[bool] = []

    class Container:
        def stop(self) -> None:
            stopped.append(True)

    monkeypatch.delenv("KIT_POSTGRES_URL", raising=False)
    monkeypatch.setattr(pg, "LOCAL_DEFAULTS", (UNREACHABLE,))
    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (True, "a Docker engine answers"))
    monkeypatch.setattr(pg, "_start_container", lambda: (backend.handle.url, Container()))
    found = pg.discover()
    assert found.handle.how == "testcontainers"
    found.close()
    assert stopped == [True]


def test_migrate_refuses_a_schema_without_the_kit_mark(backend: pg.PostgresBackend, database: Any) -> None:
    _set_mark(backend, database.namespace, None)
    store = database.open("t")
    try:
        with pytest.raises(ConfigurationError, match="refusing to migrate"):
            store.migrate()
        assert not store.dialect.table_exists(store._cur, "kit_runs")
        with pytest.raises(ConfigurationError, match="refusing to drop"):
            database.drop()
        _set_mark(backend, database.namespace, pg.SCHEMA_MARK)
        assert store.migrate() == ["001_init"]
    finally:
        store.close()


def test_sessions_live_in_their_schema_with_bounded_waits(database: Any) -> None:
    store = database.open("t")
    try:
        settings = {
            name: store._cur.execute(f"SELECT current_setting('{name}')").fetchone()[0]
            for name in ("search_path", "lock_timeout", "statement_timeout", "application_name")
        }
    finally:
        store.close()
    assert settings == {
        "search_path": database.namespace,
        "lock_timeout": "5s",
        "statement_timeout": "1min",
        "application_name": f"kit:{database.namespace}",
    }


def test_key_columns_compare_byte_exactly_and_json_is_jsonb(database: Any) -> None:
    store = database.open("t")
    try:
        store.migrate()
        columns = store._cur.execute(
            "SELECT table_name, column_name, data_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name LIKE 'kit\\_%' "
            "AND table_name NOT IN ('kit_schema_migrations', 'kit_test_clock')"
        ).fetchall()
    finally:
        store.close()
    text = [c for c in columns if c[2] == "text"]
    assert text and all(c[3] == "C" for c in text), [c for c in text if c[3] != "C"]
    json_columns = {(c[0], c[1]) for c in columns if c[2] == "jsonb"}
    assert ("kit_runs", "input") in json_columns and ("kit_signals", "payload") in json_columns


def test_jsonb_is_read_back_as_text(database: Any) -> None:
    store = database.open("t")
    try:
        store.migrate()
        body = b"wf"
        ref = store.ensure_definition("wf", "1", digest_of(body), body).ref
        store.start_run("r", ref, {"b": [1, 2.5], "a": "x"})
        raw = store._cur.execute("SELECT input FROM kit_runs").fetchone()[0]
        assert isinstance(raw, str) and store.get_run("r").input == {"a": "x", "b": [1, 2.5]}
    finally:
        store.close()


def test_claim_never_exceeds_its_limit_on_a_fresh_table(database: Any) -> None:
    """The claim's SKIP LOCKED subquery runs once; a rescanned one claims past the limit."""
    store = database.open("t")
    try:
        store.migrate()
        ref = store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
        ids = [f"run-{i:02d}" for i in range(60)]
        for run_id in reversed(ids):
            store.start_run(run_id, ref)
        claims = store.claim_runs("w", LEASE, limit=3)
        assert [c.run_id for c in claims] == sorted(ids)[:3]
        commands = store.claim_commands("w", LEASE, limit=3)
        assert commands == []
        assert len([r for r in store.list_runs(limit=100) if r.claim_owner == "w"]) == 3
    finally:
        store.close()


def test_killed_session_is_gone_and_reported_as_connection_lost(backend: pg.PostgresBackend, database: Any) -> None:
    victim, observer = database.open("t"), database.open("t")
    try:
        pid = victim.session_id
        assert pid is not None
        database.kill_session(victim)
        alive = observer._cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]
        assert alive == 0, "kill_session returned before the backend was gone"
        for _ in range(2):
            with pytest.raises(ConnectionLost):
                victim.get_run("r")
    finally:
        victim.close()
        observer.close()


def test_a_blocked_lock_wait_errors_after_lock_timeout(database: Any) -> None:
    holder, waiter = database.open("t"), database.open("t")
    try:
        holder.migrate()
        ref = holder.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
        holder.start_run("r", ref)
        with holder.transaction():
            holder.lock_run("r")
            started = time.monotonic()
            with pytest.raises(StorageError, match="lock wait timed out") as info, waiter.transaction():
                waiter.lock_run("r")
            waited = time.monotonic() - started
        assert isinstance(info.value, LockTimeout) and not isinstance(info.value, ConnectionLost)
        assert pg.LOCK_TIMEOUT_MS / 1000 - 0.5 < waited < pg.LOCK_TIMEOUT_MS / 1000 + 5
        assert waiter.get_run("r") is not None  # the waiter's session is still usable
    finally:
        holder.close()
        waiter.close()


@pytest.mark.parametrize("what", ["runs", "commands"])
def test_a_claim_reads_the_store_clock_inside_its_one_statement(database: Any, what: str) -> None:
    """A claim is its BEGIN and one statement (the store clock read inside it), then its COMMIT; the lease
    it hands out is measured on that clock (here moved 7 s on before the claim)."""
    seen: list[str] = []
    store = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
    try:
        store.migrate()
        ref = store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
        store.start_run("r", ref)
        if what == "commands":
            run_claim = store.claim_runs("w", LEASE)[0]
            store.commit_decision(run_claim, run_claim.revision,
                                  Decision(RunStatus.PENDING, commands=(NewCommand("op", "c", {}),)))
        store.advance_test_clock(timedelta(seconds=7))
        now = store.now()
        seen.clear()
        claims = store.claim_runs("w", LEASE) if what == "runs" else store.claim_commands("w", LEASE)
        sent = [s for s in seen if s != "COMMITTED"]
        assert len(claims) == 1 and claims[0].expires_at == now + LEASE, claims
        assert len(sent) == 2 and sent[1] == "COMMIT", sent
        assert sent[0].startswith("BEGIN") and "kit_test_clock" in sent[0], sent
    finally:
        store.close()


SQL_LOOKING = (
    "it's", "''", "a'; DELETE FROM kit_runs; --", "%s", "%%", "%", "?", "$1", "$$q$$", "/* c */", "\\", "\\x00",
    "E'\\n'", ":name", "; COMMIT", "\u00e9'\U0001f600",
)
"""Text that an adapter splicing values into SQL would break, shorten or run: quotes, placeholders of every
paramstyle, statement separators, comment and dollar-quote markers, backslash escapes."""


def test_values_sent_in_a_batch_are_stored_verbatim(database: Any) -> None:
    """Batched statements carry their values quoted in client-side: every key and payload that looks like SQL
    is stored and read back exactly, each key distinct (``%%`` is not ``%``), and nothing else ran."""
    store = database.open("t", clock=ClockMode.TEST)
    try:
        store.migrate()
        ref = store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
        for i, text in enumerate(SQL_LOOKING):
            assert store.start_run(text, ref, {"text": text, "i": i}, idempotency_key=f"k{text}").created
        assert sorted(r.run_id for r in store.list_runs(limit=100)) == sorted(SQL_LOOKING)
        for i, text in enumerate(SQL_LOOKING):
            run = store.get_run(text)
            assert run is not None and run.input == {"text": text, "i": i}, (text, run)
        claim = next(c for c in store.claim_runs("w", LEASE, limit=len(SQL_LOOKING)) if c.run_id == "it's")
        decision = Decision(
            RunStatus.BLOCKED,
            events=tuple(NewEvent(text, {text: text}, operation_key=text) for text in SQL_LOOKING),
            commands=tuple(NewCommand(text, text, {"in": text}, queue=text) for text in SQL_LOOKING),
        )
        assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
        history = store.get_history("it's")
        assert [(e.kind, e.payload, e.operation_key) for e in history] == [(t, {t: t}, t) for t in SQL_LOOKING]
        commands = store.list_commands("it's")
        assert [(c.operation_key, c.name, c.queue, c.input) for c in commands] == [
            (t, t, t, {"in": t}) for t in SQL_LOOKING
        ]
        assert len(store.list_runs(limit=100)) == len(SQL_LOOKING), "a value ran as SQL"
    finally:
        store.close()
