"""MySQL / MariaDB-specific guarantees the shared suite cannot observe.

Discovery, URL parsing and error translation need no server; the rest runs on
the discovered server (skipped as not-reachable without one, failed under
``KIT_REQUIRE_BACKENDS=mysql``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest

import adapters._mysql_connect as mc
import adapters.mysql as my
from kit.conformance import LEASE
from kit.contract import (
    Backend,
    BackendUnavailable,
    ConfigurationError,
    ConnectionLost,
    Database,
    SchemaError,
    StorageError,
    TransientError,
    digest_of,
)
from kit.faults import InjectedFault, StatementFaults
from kit.pytest_plugin import use_backend

UNREACHABLE = "mysql+pymysql://nobody:s3cret@127.0.0.1:1/"


@pytest.fixture
def nothing_reachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_MYSQL_URL", raising=False)
    monkeypatch.delenv("KIT_REQUIRE_BACKENDS", raising=False)
    monkeypatch.setattr(my, "LOCAL_URLS", (UNREACHABLE,))
    monkeypatch.setattr("kit.discovery.docker_engine", lambda: (False, "no Docker engine answers (test)"))


# ----------------------------------------------------------------------
# without a server
# ----------------------------------------------------------------------
def test_errors_are_translated_by_what_was_rolled_back() -> None:
    dialect = my.MysqlDialect()
    deadlock = dialect.translate(pymysql.err.OperationalError(1213, "Deadlock found"))
    assert isinstance(deadlock, TransientError) and not isinstance(deadlock, my.LockWaitTimeout)
    assert isinstance(dialect.translate(pymysql.err.OperationalError(1205, "Lock wait timeout")), my.LockWaitTimeout)
    for lost in (pymysql.err.OperationalError(2013, "Lost connection"), pymysql.err.OperationalError(2006, "gone"),
                 pymysql.err.OperationalError(1927, "Connection was killed"), pymysql.err.InterfaceError(0, "")):
        assert isinstance(dialect.translate(lost), ConnectionLost)
    assert dialect.translate(pymysql.err.IntegrityError(1062, "Duplicate entry")) is None


def test_url_becomes_pymysql_parameters() -> None:
    params = mc.connect_params("mysql+pymysql://u:p%40ss@/?unix_socket=/run/mysqld/mysqld.sock")
    assert (params["user"], params["password"], params["unix_socket"]) == ("u", "p@ss", "/run/mysqld/mysqld.sock")
    params = mc.connect_params("mariadb+pymysql://u@db.example:3307/x?ssl_ca=/ca.pem&ssl_verify_identity=true")
    assert (params["host"], params["port"], params["ssl_ca"], params["ssl_verify_identity"]) == (
        "db.example", 3307, "/ca.pem", True)
    assert mc.connect_params("mysql+pymysql://root@h/?ssl=true")["ssl"] == {"verify_mode": False}
    with pytest.raises(ConfigurationError, match="unsupported MySQL URL options"):
        mc.connect_params("mysql+pymysql://u:secret@h/?sslca=/x")
    with pytest.raises(ConfigurationError, match="not a mysql URL"):
        mc.connect_params("postgresql+psycopg://u:secret@h/db")


def test_tls_only_when_the_url_asks_for_it() -> None:
    """A URL without TLS options connects without TLS (PyMySQL otherwise negotiates TLS and builds a context
    on every connect); ``?ssl=true`` still gets TLS where the server offers it."""
    import os

    url = os.environ.get("KIT_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
    try:
        plain = mc.connect(mc.connect_params(url), None)
    except pymysql.err.OperationalError as exc:
        if "mysql" in os.environ.get("KIT_REQUIRE_BACKENDS", ""):
            raise
        pytest.skip(f"not-reachable: no MySQL/MariaDB at the default URL ({exc})")
    try:
        assert not plain.ssl and getattr(plain, "ctx", None) is None, "TLS was negotiated though the URL asked none"
    finally:
        plain.close()
    try:
        with_tls = mc.connect(mc.connect_params(url + ("&" if "?" in url else "?") + "ssl=true"), None)
    except pymysql.err.OperationalError as exc:  # a server without TLS refuses: proof TLS was asked for
        assert "SSL is required" in str(exc), exc
        return
    try:
        assert with_tls.ssl, "?ssl=true did not ask for TLS"
    finally:
        with_tls.close()


def test_servers_without_skip_locked_are_refused() -> None:
    with pytest.raises(BackendUnavailable, match="MariaDB >= 10.6"):
        mc._require_skip_locked("MariaDB 10.5.23", (10, 5, 23))
    with pytest.raises(BackendUnavailable, match="MySQL >= 8.0.1"):
        mc._require_skip_locked("MySQL 5.7.44", (5, 7, 44))
    mc._require_skip_locked("MariaDB 10.6.0", (10, 6, 0))
    mc._require_skip_locked("MySQL 8.0.1", (8, 0, 1))


def test_discovery_failure_names_all_three_ways(nothing_reachable: None) -> None:
    with pytest.raises(BackendUnavailable) as info:
        my.discover()
    message = str(info.value)
    for way in ("--url", "KIT_MYSQL_URL", "nothing answered locally", "testcontainers", "Docker engine"):
        assert way in message
    assert "s3cret" not in message and "***" in message


def test_unreachable_server_skips_unless_required(nothing_reachable: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="not-reachable"):
        next(use_backend("mysql"))
    monkeypatch.setenv("KIT_REQUIRE_BACKENDS", "postgres,mysql")
    with pytest.raises(pytest.fail.Exception, match="not-reachable"):
        next(use_backend("mysql"))


class _FakeContainer:
    def __init__(self, image: str, **kwargs: Any) -> None:
        self.image, self.kwargs = image, kwargs

    def start(self) -> _FakeContainer:
        if "broken" in self.image:
            raise RuntimeError("pull access denied")
        return self

    def stop(self) -> None:
        pass

    def get_connection_url(self) -> str:
        return "mysql+pymysql://root:pw@localhost:32768/test"


@pytest.mark.parametrize(("image", "suffix"), [("mysql:8.0", "?ssl=true"), ("mariadb:10.11", "")])
def test_testcontainers_server_is_started_as_root(monkeypatch: pytest.MonkeyPatch, image: str, suffix: str) -> None:
    monkeypatch.setattr("testcontainers.community.mysql.MySqlContainer", _FakeContainer)
    monkeypatch.setenv("KIT_MYSQL_IMAGE", image)
    url, container = mc.start_container()
    assert url == "mysql+pymysql://root:pw@localhost:32768/test" + suffix
    assert container.kwargs["username"] == "root" and container.kwargs["dialect"] == "pymysql"


def test_testcontainers_failure_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("testcontainers.community.mysql.MySqlContainer", _FakeContainer)
    monkeypatch.setenv("KIT_MYSQL_IMAGE", "broken:1")
    with pytest.raises(BackendUnavailable, match="could not start broken:1"):
        mc.start_container()


# ----------------------------------------------------------------------
# on a server
# ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    yield from use_backend("mysql")


@pytest.fixture
def database(backend: Backend) -> Iterator[Database]:
    db = backend.provision()
    try:
        yield db
    finally:
        db.drop()


@pytest.fixture
def open_store(database: Database) -> Iterator[Callable[..., Any]]:
    opened: list[Any] = []

    def open_(migrate: bool = True, **kwargs: Any) -> Any:
        store = database.open("t", **kwargs)
        opened.append(store)
        if migrate:
            store.migrate()
        return store

    yield open_
    for store in opened:
        store.close()


def _ref(store: Any) -> Any:
    return store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref


def test_sessions_count_matched_rows_in_utc_strict_read_committed(open_store: Callable[..., Any]) -> None:
    store = open_store()
    cur = store._conn.raw.cursor()
    cur.execute("SELECT @@session.time_zone, @@session.sql_mode, @@session.innodb_lock_wait_timeout")
    zone, mode, wait = cur.fetchone()
    assert zone == "+00:00" and "STRICT_ALL_TABLES" in mode and int(wait) == mc.LOCK_WAIT_TIMEOUT_S
    cur.execute("UPDATE kit_test_clock SET now_us = now_us WHERE id = 1")
    assert cur.rowcount == 1, "an UPDATE writing the stored value must count the row it matched (FOUND_ROWS)"


def test_trailing_spaces_keep_keys_distinct(open_store: Callable[..., Any]) -> None:
    """utf8mb4_bin is PAD SPACE ('k' = 'k '); VARBINARY keys are not."""
    store = open_store()
    ref = _ref(store)
    for run_id in ("k", "k ", "k  "):
        assert store.start_run(run_id, ref, idempotency_key=run_id).created
    assert [r.run_id for r in store.list_runs()] == ["k", "k ", "k  "]


def test_deep_and_huge_json_round_trips(open_store: Callable[..., Any]) -> None:
    """Nesting beyond MariaDB's JSON_VALID limit (32) and integers beyond 64 bits survive."""
    store = open_store()
    value = {"deep": json.loads("[" * 80 + "]" * 80), "big": 2**64 + 1, "huge": -(10**40), "f": 1.5e300}
    store.start_run("r", _ref(store), value)
    assert store.get_run("r").input == value


def test_claims_are_served_by_the_claim_index(open_store: Callable[..., Any]) -> None:
    store = open_store()
    ref = _ref(store)
    for i in range(50):
        store.start_run(f"r{i:02d}", ref)
    cur = store._conn.raw.cursor()
    cur.execute(
        "EXPLAIN SELECT run_id, claim_generation, revision FROM kit_runs WHERE tenant_id = 't' "
        "AND due_at <= 9000000000000000 ORDER BY due_at, run_id LIMIT 3 FOR UPDATE SKIP LOCKED"
    )
    names = [d[0] for d in cur.description]
    plan = dict(zip(names, cur.fetchone()))
    assert plan["key"] == "kit_runs_due" and "filesort" not in str(plan.get("Extra"))


def test_lock_wait_timeout_is_raised_once_and_leaves_nothing(open_store: Callable[..., Any]) -> None:
    holder, blocked, observer = open_store(), open_store(), open_store()
    ref = _ref(holder)
    holder.start_run("r", ref)
    claim = holder.claim_runs("w", LEASE)[0]
    blocked._conn.raw.cursor().execute("SET SESSION innodb_lock_wait_timeout = 1")
    release, locked = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.transaction():
            holder.lock_run("r")
            locked.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        with pytest.raises(my.LockWaitTimeout), blocked.transaction():
            blocked.start_run("written-before-the-wait", ref)
            blocked.renew_run_claim(claim, LEASE)
        assert time.monotonic() - started < 4, "a lock-wait timeout must not be retried inside the store"
        assert observer.get_run("written-before-the-wait") is None
    finally:
        release.set()
        thread.join(30)
    assert blocked.renew_run_claim(claim, LEASE).value == "renewed"


def test_deadlock_victim_is_transient_and_rolled_back(open_store: Callable[..., Any]) -> None:
    a, b, observer = open_store(), open_store(), open_store()
    ref = _ref(a)
    a.start_run("r1", ref)
    a.start_run("r2", ref)
    barrier = threading.Barrier(2)
    outcome: dict[str, BaseException | None] = {}

    def cross(store: Any, first: str, second: str, mark: str) -> None:
        try:
            with store.transaction():
                store.lock_run(first)
                store.start_run(mark, ref)
                barrier.wait(10)
                time.sleep(0.2)
                store.lock_run(second)
            outcome[mark] = None
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome[mark] = exc

    threads = [threading.Thread(target=cross, args=(a, "r1", "r2", "a")),
               threading.Thread(target=cross, args=(b, "r2", "r1", "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    victims = [m for m, exc in outcome.items() if exc is not None]
    assert len(victims) == 1 and isinstance(outcome[victims[0]], TransientError)
    assert observer.get_run(victims[0]) is None
    winner = "b" if victims == ["a"] else "a"
    assert observer.get_run(winner) is not None


def test_failed_rollback_closes_the_session_instead_of_committing_half(open_store: Callable[..., Any]) -> None:
    """START TRANSACTION commits an open transaction: a store whose ROLLBACK failed must not go on."""
    armed: list[bool] = []

    def fail_rollback(statement: str) -> None:
        if armed and statement.startswith("ROLLBACK"):
            raise InjectedFault("injected fault at ROLLBACK")

    store, observer = open_store(statement_hook=fail_rollback), open_store()
    ref = _ref(store)
    armed.append(True)
    with pytest.raises(StorageError), store.transaction():
        store.start_run("half", ref)
        store._exec(store._cur, "INSERT INTO kit_runs (tenant_id) VALUES (?)", ("t",))  # statement-level error
    armed.clear()
    with pytest.raises(ConnectionLost):
        store.start_run("next", ref)
    assert observer.get_run("half") is None and observer.get_run("next") is None


def test_migration_reruns_after_failing_at_any_statement(open_store: Callable[..., Any], backend: Backend) -> None:
    """DDL commits implicitly: a migration interrupted anywhere is completed by the next migrate()."""
    point = 0
    while True:
        point += 1
        db = backend.provision()
        try:
            faults = StatementFaults()
            store = db.open("t", statement_hook=faults)
            faults.fail_at(point)
            try:
                store.migrate()
            except StorageError:
                try:
                    db.open("t").verify_schema()
                    recorded = True  # the fault hit the final COMMIT: the record had landed (a lost ack)
                except SchemaError:
                    recorded = False
                again = db.open("t")
                assert again.migrate() == ([] if recorded else ["001_init"])
                again.verify_schema()
                continue
            store.verify_schema()  # no fault fired, or only at the final RELEASE_LOCK (ignored)
            break
        finally:
            db.drop()
    assert point > 8, f"migrate() went through only {point - 1} statements"


def test_a_session_is_set_up_in_one_round_trip_and_knows_its_server_id(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the handshake and PyMySQL's own SET NAMES, a connection's settings and its CONNECTION_ID() cost one
    round trip together (they were three), and the id kept is the one the server names."""
    sent: list[str] = []
    query = pymysql.connections.Connection.query

    def counting(self: Any, sql: Any, unbuffered: bool = False) -> Any:
        sent.append(sql if isinstance(sql, str) else sql.decode())
        return query(self, sql, unbuffered)

    monkeypatch.setattr(pymysql.connections.Connection, "query", counting)
    conn = mc.connect(mc.connect_params(backend.handle.url), None)  # type: ignore[attr-defined]
    try:
        assert len(sent) == 1, f"the session setup took {len(sent)} round trips: {sent}"
        monkeypatch.setattr(pymysql.connections.Connection, "query", query)
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID(), @@session.time_zone, @@session.lock_wait_timeout")
            server_id, zone, metadata_wait = cur.fetchone()
            cur.execute("SELECT @@session.tx_isolation" if "MariaDB" in mc.server_version(conn)[0]
                        else "SELECT @@session.transaction_isolation")
            isolation = cur.fetchone()[0]
        assert mc.session_id(conn) == server_id
        assert zone == "+00:00" and int(metadata_wait) == mc.METADATA_LOCK_WAIT_S
        assert isolation == "READ-COMMITTED"
    finally:
        conn.close()


def test_killed_session_is_connection_lost(open_store: Callable[..., Any], database: Database) -> None:
    store = open_store()
    database.kill_session(store)
    with pytest.raises(ConnectionLost):
        store.get_run("r")
    with pytest.raises(ConnectionLost, match="open a new store"):
        store.get_run("r")
