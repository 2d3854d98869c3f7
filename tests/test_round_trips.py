"""Fewer round trips: where the driver can (``fold_begin``), a transaction's BEGIN travels with its
first statement (in one string, or one pipeline), and never after any statement of the transaction."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from kit.contract import Backend, ClockMode, digest_of
from kit.pytest_plugin import use_backend


@pytest.fixture(params=["postgres", "mysql", "sqlite"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _statements(backend: Backend, action: str) -> list[str]:
    database = backend.provision()
    seen: list[str] = []
    try:
        store = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
        try:
            store.migrate()
            seen.clear()
            if action == "claim":
                store.claim_runs("w1", timedelta(seconds=30), limit=1)
            else:
                store.get_run("run-1")
        finally:
            store.close()
    finally:
        database.drop()
    return [s for s in seen if s != "COMMITTED"]


def test_a_claim_opens_its_transaction_and_reads_the_clock_in_one_round_trip(backend: Backend) -> None:
    statements = _statements(backend, "claim")
    folds = _folds(backend)
    first = statements[0].upper()
    assert first.startswith(("BEGIN", "SET TRANSACTION", "START TRANSACTION")), statements
    if folds:
        assert "; " in first, f"the BEGIN was sent on its own: {statements[:2]}"
        assert "KIT_TEST_CLOCK" in first, f"the clock was not read in the claim's first round trip: {statements[:2]}"
    assert statements[-1] == "COMMIT"


def test_a_one_statement_read_is_one_round_trip_outside_any_transaction(backend: Backend) -> None:
    """Where the dialect folds, a read of one statement (get_run) is sent alone: no BEGIN, no COMMIT; one
    statement reads one consistent state. Elsewhere it still opens its transaction first."""
    statements = _statements(backend, "read")
    if _folds(backend):
        assert len(statements) == 1 and statements[0].upper().startswith("SELECT"), statements
    else:
        assert statements[0].upper().startswith(("BEGIN", "SET TRANSACTION", "START TRANSACTION")), statements
    assert any("kit_runs" in s for s in statements), statements


def test_a_read_that_asks_for_a_second_statement_runs_again_in_one_snapshot(backend: Backend) -> None:
    """A one-statement read whose code asks for a second statement after all (here an override of the run
    read that reads the clock first) is not left half outside a transaction: the second statement is never
    sent alone, and the read runs again, whole, inside one snapshot transaction."""
    database = backend.provision()
    seen: list[str] = []
    try:
        store: Any = database.open("t", clock=ClockMode.TEST, statement_hook=seen.append)
        try:
            store.migrate()
            ref = store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
            store.start_run("run-1", ref, {"n": 1})
            plain_run = type(store)._run

            def clock_then_run(cur: Any, run_id: str) -> Any:
                store._now_us(cur)
                return plain_run(store, cur, run_id)

            store._run = clock_then_run
            seen.clear()
            run = store.get_run("run-1")
        finally:
            store.close()
    finally:
        database.drop()
    assert run is not None and run.input == {"n": 1}
    statements = [s for s in seen if s != "COMMITTED"]
    assert statements[-1] == "COMMIT", statements
    opened = [i for i, s in enumerate(statements) if s.upper().startswith(("BEGIN", "SET TRANSACTION", "START"))]
    assert opened, f"the two-statement read never opened a transaction: {statements}"
    inside = " ; ".join(statements[opened[-1]:])
    assert "kit_test_clock" in inside and "kit_runs" in inside, f"not both statements in the snapshot: {statements}"
    assert not any("kit_runs" in s for s in statements[:opened[-1]]), f"the run was read outside it: {statements}"


def _folds(backend: Backend) -> bool:
    return bool(getattr(getattr(backend, "dialect", None), "fold_begin", False))


def test_resetting_a_shared_database_sends_its_writes_with_the_begin(backend: Backend) -> None:
    """Where the dialect folds, a reset between checks is two round trips: the BEGIN with every DELETE and the
    clock rewind, then the COMMIT (it was eight: each statement on its own). It still empties and rewinds."""
    from kit.runtime.ceiling import RecordingBackend

    if not hasattr(backend, "_connect"):
        pytest.skip("unsupported: no server connections to count round trips on")
    recording = RecordingBackend(backend)
    database: Any = backend.provision()
    try:
        store = database.open("t", clock=ClockMode.TEST)
        try:
            store.migrate()
            database.reset()  # opens the store it keeps for the next resets
            store.advance_test_clock(timedelta(seconds=5))
            start = store.now()
            store.ensure_definition("wf", "1", digest_of(b"wf"), b"wf")
            before = recording.round_trips
            database.reset()
            trips = recording.round_trips - before
            assert store.now() < start and store.get_definition("wf", "1") is None, "the reset left state behind"
        finally:
            store.close()
    finally:
        recording.stop()
        database.drop()
    if getattr(getattr(backend, "dialect", None), "fold_begin", False):
        assert trips == 2, f"a reset took {trips} round trips"


def test_an_open_claim_holds_no_lock_on_the_test_clock(backend: Backend) -> None:
    """Where claims lock rows, not the database (skip_locked), a claim reads the store clock without locking
    it: while one is parked at its COMMIT (its candidates locked), another store advances the test clock
    and reads its new value. A claim that read the clock with a locking read would hold the advance until
    the claim commits, or fail it on the lock wait timeout."""
    import threading

    from kit.contract import Capability
    from kit.faults import StatementFaults

    if Capability.SKIP_LOCKED not in backend.capabilities:
        pytest.skip("unsupported: the backend locks the whole database for a write (no skip_locked)")
    database = backend.provision()
    faults = StatementFaults()
    try:
        claimer = database.open("t", clock=ClockMode.TEST, statement_hook=faults)
        other = database.open("t", clock=ClockMode.TEST)
        try:
            claimer.migrate()
            ref = claimer.ensure_definition("wf", "1", digest_of(b"wf"), b"wf").ref
            claimer.start_run("run-1", ref)
            release, parked = threading.Event(), threading.Event()
            faults.park_commit(release, timeout=60.0, parked=parked)
            claims: list[Any] = []
            worker = threading.Thread(target=lambda: claims.extend(claimer.claim_runs("w", timedelta(seconds=30))))
            worker.start()
            try:
                assert parked.wait(30.0), "the claim never reached its COMMIT"
                before = other.now()
                after = other.advance_test_clock(timedelta(seconds=1))  # must not wait for the open claim
                assert after - before == timedelta(seconds=1) and worker.is_alive()
            finally:
                release.set()
                worker.join(60.0)
            assert [c.run_id for c in claims] == ["run-1"]
        finally:
            claimer.close()
            other.close()
    finally:
        database.drop()
