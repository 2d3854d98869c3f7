"""A SQLite writer blocked by another waits one bounded busy timeout, then names what held the lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import adapters.sqlite as sqlite_adapter
from adapters.sqlite import SqliteBackend
from kit.contract import ClockMode, Database, LockTimeout, Storage, digest_of


@pytest.fixture
def database() -> Iterator[Database]:
    db = SqliteBackend().provision()
    try:
        yield db
    finally:
        db.drop()


def _open(database: Database, hook: list[str] | None = None) -> Storage:
    store = database.open("tenant-a", clock=ClockMode.TEST,
                          statement_hook=None if hook is None else hook.append)
    store.migrate()
    return store


def test_a_write_beside_an_open_unit_on_the_same_thread_is_refused_at_once_naming_the_holder(
    database: Database,
) -> None:
    holder, other = _open(database), _open(database)
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    with holder.transaction():
        holder.start_run("mine", ref)
        with pytest.raises(LockTimeout) as refused:
            other.start_run("other", ref)
    message = str(refused.value)
    assert "same thread" in message and "tenant-a" in message and "transaction()" in message
    assert other.start_run("other", ref).created  # the lock is free again once the unit ends


def test_a_blocked_writer_waits_one_busy_timeout_and_names_the_holding_thread(
    database: Database, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sqlite_adapter, "BUSY_TIMEOUT_S", 0.2)  # read when a connection opens
    statements: list[str] = []
    holder, waiter = _open(database), _open(database, statements)
    ref = holder.ensure_definition("wf", "1", digest_of(b"x"), b"x").ref
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.transaction():
            holder.start_run("mine", ref)
            entered.set()
            release.wait(60)

    thread = threading.Thread(target=hold, name="holding-thread", daemon=True)
    thread.start()
    assert entered.wait(60)
    statements.clear()
    try:
        with pytest.raises(LockTimeout) as refused:
            waiter.start_run("other", ref)
    finally:
        release.set()
        thread.join(60)
    assert "holding-thread" in str(refused.value) and "transaction()" in str(refused.value)
    attempts = [s for s in statements if s.strip().upper().startswith("BEGIN IMMEDIATE")]
    assert len(attempts) == 1, f"the writer tried {len(attempts)} times: the wait budget must be spent once"
