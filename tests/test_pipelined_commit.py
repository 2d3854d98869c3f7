"""A decision's snapshot is read in one round trip and its commit's writes travel together (PostgreSQL's
pipeline mode, MySQL's multi-statements), in one transaction: a statement that fails half-way through
the pipelined writes leaves nothing behind, and the store goes on working."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from kit.contract import (
    Backend,
    ClockMode,
    CommandStatus,
    Decision,
    NewCommand,
    NewEvent,
    Outcome,
    RunStatus,
    Snapshot,
    Storage,
    StorageError,
    digest_of,
)
from kit.pytest_plugin import use_backend
from kit.runtime.ceiling import RecordingBackend

LEASE = timedelta(seconds=30)


@pytest.fixture(params=["postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from use_backend(request.param)


def _decision(snapshot: Snapshot) -> Decision:
    """Events, a command and the consumption of the run's finished command: every kind of write."""
    done = [c.command_id for c in snapshot.command_results]
    return Decision(
        RunStatus.BLOCKED,
        events=(NewEvent("step", operation_key=f"e{len(snapshot.history)}"), NewEvent("note")),
        commands=(NewCommand(f"c{len(snapshot.history)}", "work", {"n": 1}),),
        consume_commands=tuple(done),
    )


def _claimed_with_a_result(store: Storage) -> tuple[Any, Snapshot]:
    """A run whose first decision scheduled a command that completed: claimed again, its snapshot."""
    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    store.start_run("r", ref, {"i": 1})
    (claim,) = store.claim_runs("w", LEASE)
    snapshot = store.load_claimed(claim)
    assert isinstance(snapshot, Snapshot)
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    (work,) = store.claim_commands("cw", LEASE)
    store.complete_command(work, {"ok": True})
    (claim,) = store.claim_runs("w", LEASE)
    snapshot = store.load_claimed(claim)
    assert isinstance(snapshot, Snapshot) and snapshot.command_results
    return claim, snapshot


@pytest.fixture
def counted(server: Backend) -> Iterator[tuple[Storage, RecordingBackend]]:
    """A migrated store (test clock) on a fresh database of ``server``, dropped afterwards, whose round trips
    are counted."""
    recording = RecordingBackend(server)
    database = recording.provision()
    try:
        store = database.open("t", clock=ClockMode.TEST)
        try:
            store.migrate()
            yield store, recording
        finally:
            store.close()
    finally:
        recording.stop()
        database.drop()


def test_a_snapshot_takes_one_round_trip_and_a_commit_three(counted: tuple[Storage, RecordingBackend]) -> None:
    store, recording = counted
    claim, snapshot = _claimed_with_a_result(store)
    before = recording.round_trips
    assert isinstance(store.load_claimed(claim), Snapshot)
    read = recording.round_trips - before
    before = recording.round_trips
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    committed = recording.round_trips - before
    assert read <= 1, f"the snapshot took {read} round trips (its BEGIN, reads and COMMIT go in one)"
    assert committed <= 3, f"the commit took {committed} round trips (lock with its reads, writes, COMMIT)"


class _FailingWrite:
    """A statement hook-free way to make one pipelined write fail on the server: the command INSERT names
    a column that does not exist, so the server rejects it after the event INSERTs queued before it."""

    @staticmethod
    def install(store: Any) -> None:
        original = store._exec

        def failing(cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
            if sql.startswith("INSERT INTO kit_commands"):
                sql = sql.replace("INSERT INTO kit_commands (tenant_id,", "INSERT INTO kit_commands (no_such_column,")
            return original(cur, sql, params)

        store._exec = failing

    @staticmethod
    def remove(store: Any) -> None:
        del store._exec


def test_a_write_failing_half_way_through_the_pipeline_leaves_nothing(
    counted: tuple[Storage, RecordingBackend],
) -> None:
    store, _ = counted
    claim, snapshot = _claimed_with_a_result(store)
    before = store.export_state()
    _FailingWrite.install(store)
    with pytest.raises(StorageError):
        store.commit_decision(claim, claim.revision, _decision(snapshot))
    _FailingWrite.remove(store)
    assert store.export_state() == before, "a commit that failed half-way left rows behind"
    assert store.commit_decision(claim, claim.revision, _decision(snapshot)) is Outcome.COMMITTED
    history = store.get_history("r")
    assert [e.seq for e in history] == list(range(1, len(history) + 1))


def test_a_start_and_a_signal_queue_their_reads_and_writes(counted: tuple[Storage, RecordingBackend]) -> None:
    """A start reads the clock with the definition (four round trips: BEGIN with both, the INSERT, the
    read-back, the COMMIT; it was five); a signal queues the clock and its dedup lookup behind the run lock
    and sends its INSERT, wake-up and read-back together (three: it was seven). What they store is
    unchanged."""
    store, recording = counted
    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    before = recording.round_trips
    started = store.start_run("r", ref, {"i": 1})
    start_trips = recording.round_trips - before
    before = recording.round_trips
    receipt = store.send_signal("r", "go", {"n": 2}, "k1")
    signal_trips = recording.round_trips - before
    assert start_trips <= 4, f"the start took {start_trips} round trips"
    assert signal_trips <= 3, f"the signal took {signal_trips} round trips"
    assert started.created and started.run.input == {"i": 1}
    assert receipt.outcome is Outcome.COMMITTED and receipt.signal is not None
    assert receipt.signal.payload == {"n": 2} and receipt.signal.sent_at == store.now()
    assert store.send_signal("r", "go", {"n": 3}, "k1").outcome is Outcome.DUPLICATE
    assert [s.payload for s in store.list_signals("r")] == [{"n": 2}]
    run = store.get_run("r")
    assert run is not None and run.created_at == started.run.created_at == store.now()


def test_fenced_writes_queue_their_clock_behind_their_locks(counted: tuple[Storage, RecordingBackend]) -> None:
    """A completion, a failure, a heartbeat, a lease renewal, a release and a cancel each take three round
    trips: their locks with the BEGIN and the clock queued behind them; their writes together; the COMMIT
    (a completion took six, a renewal four). What they store is what they stored before."""
    store, recording = counted

    def trips(operation: Any) -> tuple[Any, int]:
        before = recording.round_trips
        answer = operation()
        return answer, recording.round_trips - before

    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    store.start_run("r", ref, {"i": 1})
    (claim,) = store.claim_runs("w", LEASE)
    decision = Decision(RunStatus.BLOCKED, commands=(NewCommand("c1", "work"), NewCommand("c2", "work")))
    assert store.commit_decision(claim, claim.revision, decision) is Outcome.COMMITTED
    first, second = store.claim_commands("cw", LEASE, limit=2)
    counted_trips = {}
    answer, counted_trips["heartbeat"] = trips(lambda: store.heartbeat_command(first, LEASE * 2))
    assert answer is Outcome.RENEWED
    answer, counted_trips["complete"] = trips(lambda: store.complete_command(first, {"ok": 1}))
    assert answer is Outcome.COMPLETED
    answer, counted_trips["fail"] = trips(lambda: store.fail_command(second, {"no": 2}, retryable=False))
    assert answer is Outcome.FAILED
    (claim,) = store.claim_runs("w", LEASE)
    answer, counted_trips["renew"] = trips(lambda: store.renew_run_claim(claim, LEASE * 2))
    assert answer is Outcome.RENEWED
    answer, counted_trips["release"] = trips(lambda: store.release_run_claim(claim))
    assert answer is Outcome.COMMITTED
    answer, counted_trips["cancel"] = trips(lambda: store.request_cancel("r", "stop"))
    assert answer is Outcome.COMMITTED
    assert all(n <= 3 for n in counted_trips.values()), f"round trips per operation: {counted_trips}"
    now = store.now()
    done = {c.operation_key: c for c in store.list_commands("r")}
    assert done["c1"].status is CommandStatus.COMPLETED and done["c1"].result == {"ok": 1}
    assert done["c2"].status is CommandStatus.FAILED and done["c2"].error == {"no": 2}
    run = store.get_run("r")
    assert run is not None and run.status is RunStatus.PENDING and run.cancel_requested
    assert run.claim_owner is None and run.wake_at == now


class _Boom(Exception):
    pass


def test_a_snapshot_read_inside_a_unit_of_work_commits_nothing_of_it(counted: tuple[Storage, RecordingBackend]) -> None:
    """A snapshot joined into an open transaction() must not send its own COMMIT: the unit's earlier writes
    roll back with it. (Its COMMIT travels with its reads only when the snapshot is a transaction of its own.)"""
    store, _ = counted
    claim, _snapshot = _claimed_with_a_result(store)
    ref = store.ensure_definition("wf", "1", digest_of(b"b"), b"b").ref
    with pytest.raises(_Boom), store.transaction():
        store.start_run("inside", ref, {})
        assert isinstance(store.load_claimed(claim), Snapshot)
        raise _Boom()
    assert store.get_run("inside") is None, "a snapshot inside a unit of work committed the unit's writes"
    assert isinstance(store.load_claimed(claim), Snapshot) and store.get_run("r") is not None


def test_a_state_export_is_one_round_trip(counted: tuple[Storage, RecordingBackend]) -> None:
    """export_state (read after every step of a fault machine) sends its BEGIN, five queries and COMMIT in
    one round trip (it took six), and shows what the individual reads show."""
    store, recording = counted
    _claimed_with_a_result(store)
    before = recording.round_trips
    state = store.export_state()  # type: ignore[attr-defined]
    assert recording.round_trips - before <= 1, f"the export took {recording.round_trips - before} round trips"
    assert list(state) == ["r"] and state["r"]["history"] and state["r"]["commands"]
    before = recording.round_trips
    assert store.export_state(["nobody"]) == {}  # type: ignore[attr-defined]
    assert recording.round_trips - before <= 1
